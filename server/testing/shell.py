"""The test shell: carries out the core's effects synchronously, in process, for tests.

It carries effects out through the real shell's own dispatch (server/shell/executor.py), so the
two cannot drift apart: both answer every effect the core emits. The store here is a set of dicts
that answers a write at once unless a test holds it back (``hold_persists``) or makes it fail
(``store_down``). Each test then reads as a session: hello, create, join, ready, start, moves,
results.

:class:`InProcessExecutor` is the connections' and timers' part that this shell and the fuzzer's
runner (server/testing/fuzzing.py) share; the store's part is each one's own.
"""

from __future__ import annotations

import abc
import random
from collections import defaultdict
from collections.abc import Coroutine
from typing import Any

import msgspec

from server.core import CoreConfig, Entropy, ServerCore
from server.core.events import (
    Bind,
    CheckBlocked,
    ClaimProfile,
    ClientEvent,
    CloseConnection,
    Connected,
    CreateRoomRecord,
    DailyTick,
    Disconnected,
    DropRoom,
    Effect,
    Event,
    ExpireRoom,
    FindDeal,
    HelloEvent,
    KeepCommand,
    LeaderboardTick,
    ListRooms,
    LoadRoom,
    LookupProfile,
    LookupToken,
    MovePersisted,
    MovePersistFailed,
    Note,
    PersistMove,
    PlayerRegistered,
    RateRace,
    ReadBack,
    ReadRatings,
    RegisterPlayer,
    ReloadLog,
    RenameProfile,
    Reply,
    RoomCreated,
    RoomCreateFailed,
    RoomLoaded,
    RoomSaved,
    RoomsListed,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Tick,
    TokenLooked,
    Wake,
    WakeLeaderboards,
)
from server.core.records import LogEntry, PlayerRecord, RoomRecord
from server.shell import profile_ops
from server.shell.executor import EffectExecutor
from server.store.memory import MemoryStore
from server.testing.daily_target import InProcessDaily
from shared import protocol as p

DEAL = 4242


class SeededEntropy(Entropy):
    def __init__(self, seed: int = 1, deal: int = DEAL) -> None:
        self.rng = random.Random(seed)
        self.fixed_deal = deal
        self.codes: list[str] = []

    def room_code(self) -> str:
        if self.codes:
            return self.codes.pop(0)
        return "".join(self.rng.choice(p.ROOM_CODE_ALPHABET) for _ in range(5))

    def deal(self) -> int:
        return self.fixed_deal

    def salt(self) -> str:
        return f"{self.rng.getrandbits(256):064x}"

    def player_id(self) -> str:
        return f"p{self.rng.getrandbits(32):08x}"

    def token(self) -> str:
        return f"t{self.rng.getrandbits(128):032x}"

    def spread(self, n: int) -> int:
        return self.rng.randrange(n)


class InProcessExecutor(InProcessDaily, EffectExecutor):
    """The connections' and timers' part of the dispatch for the in-process targets (:class:`Shell`
    and the fuzzer's runner); the store's part is each target's own.

    ``live_conns`` are open (:meth:`conn_opened`, :meth:`conn_ended`, which the owner calls as
    sockets open and end); ``conns_of`` binds each player to its open connections, in binding
    order. A Reply or Bind for a connection that has ended is dropped, as the real shell drops
    them; a Send goes to every connection bound to each player. ``wakes`` holds each room's next
    wake-up (the owner fires them as Tick events), ``leaderboard_wake`` the node's shared
    leaderboard tick (a LeaderboardTick): :meth:`next_wake`."""

    def __init__(self) -> None:
        self.daily_store = MemoryStore()
        self.live_conns: set[int] = set()
        self.conns_of: dict[str, list[int]] = {}
        self.wakes: dict[str, int] = {}
        self.leaderboard_wake: int | None = None

    # -------------------------------------------------------------- connections

    def conn_opened(self, conn: int) -> None:
        self.live_conns.add(conn)

    def conn_ended(self, conn: int) -> None:
        """The socket ended: nothing more is delivered to it."""
        self.live_conns.discard(conn)
        self.unbind(conn)

    def unbind(self, conn: int) -> None:
        for pid in [pid for pid, conns in self.conns_of.items() if conn in conns]:
            self.conns_of[pid].remove(conn)
            if not self.conns_of[pid]:
                del self.conns_of[pid]

    def reply_to_conn(self, effect: Reply) -> None:
        if effect.conn in self.live_conns:
            self.deliver(effect.conn, None, effect.message)

    def send_to_players(self, effect: Send) -> None:
        for pid in effect.players:
            for conn in self.conns_of.get(pid, ()):
                self.deliver(conn, pid, effect.message)

    def bind(self, effect: Bind) -> None:
        if effect.conn in self.live_conns:
            conns = self.conns_of.setdefault(effect.player_id, [])
            if effect.conn not in conns:
                conns.append(effect.conn)

    # -------------------------------------------------------------- timers

    def wake(self, effect: Wake) -> None:
        if effect.at_ms is None:
            self.wakes.pop(effect.code, None)
        else:
            self.wakes[effect.code] = effect.at_ms

    def wake_leaderboards(self, effect: WakeLeaderboards) -> None:
        self.leaderboard_wake = effect.at_ms

    def drop_room(self, effect: DropRoom) -> None:
        self.wakes.pop(effect.code, None)

    def next_wake(self, until: int, clock: int) -> Tick | LeaderboardTick | DailyTick | None:
        """The earliest wake due by ``until``, taken off the schedule, as the event that fires it at
        its time (``clock``, the owner's, if later). At one time a room's own deadlines come first."""
        due = [(at, 0, code) for code, at in self.wakes.items() if at <= until]
        if self.leaderboard_wake is not None and self.leaderboard_wake <= until:
            due.append((self.leaderboard_wake, 1, ""))
        if self.daily_wake is not None and self.daily_wake <= until:
            due.append((self.daily_wake, 2, ""))
        if not due:
            return None
        at, shared, code = min(due)
        at = max(at, clock)
        if shared == 2:
            self.daily_wake = None
            return DailyTick(at)
        if shared:
            self.leaderboard_wake = None
            return LeaderboardTick(at)
        del self.wakes[code]
        return Tick(code, at)

    @abc.abstractmethod
    def deliver(self, conn: int, player_id: str | None, message: p.ServerMessage) -> None:
        """A message to an open connection (``player_id``: whom a Send addressed, None for a Reply)."""


class Shell(InProcessExecutor):
    """Carries out effects synchronously: an in-memory store, delivery into per-connection inboxes.

    It handles every effect the core emits (through :class:`EffectExecutor`'s dispatch, which ends
    in ``assert_never``). Store failures are the tests' to make:
    ``hold_persists`` keeps move writes back (``held``, ``release``), ``reloads`` records log
    re-reads (a test answers them with LogReloaded), ``hold_loads`` keeps room loads back,
    ``store_down`` fails token lookups, room loads and room listings; ``hold_saves`` keeps room
    saves back (``held_saves``, ``land_saves``)."""

    def __init__(self, config: CoreConfig | None = None, entropy: Entropy | None = None) -> None:
        super().__init__()
        self.config = config or CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000)
        self.core = ServerCore(self.config, entropy or SeededEntropy())
        self.now = 1_700_000_000_000
        self.inbox: dict[int, list[p.ServerMessage]] = defaultdict(list)
        self.players: dict[str, PlayerRecord] = {}
        self.player_ttls: dict[str, float | None] = {}  # player id -> the lifetime of its last write
        self.tokens: dict[str, str] = {}  # token hash -> player id
        self.rooms: dict[str, RoomRecord] = {}
        self.listed: dict[str, None] = {}  # listed room codes, oldest first
        self.logs: dict[tuple[str, int, str], list[LogEntry]] = defaultdict(list)
        self.hold_persists = False
        self.held: list[PersistMove] = []
        self.reloads: list[ReloadLog] = []
        self.read_backs: list[ReadBack] = []
        self.hold_loads = False
        self.held_loads: list[LoadRoom] = []
        self.hold_saves = False  # room saves wait in ``held_saves`` until land_saves() (or a test drops them)
        self.held_saves: list[SaveRoom] = []
        self._to_land: list[SaveRoom] = []
        self._landing = False
        self.store_down = False
        self.profile_store = MemoryStore()  # profiles and ratings (the real store steps run on it)
        self.dropped: list[int] = []  # droppable frames counted
        self.closed: dict[int, tuple[int, str]] = {}  # conn -> the close code and reason the core asked for
        self._next_conn = 0
        self.effects: list[Effect] = []
        self.leaderboards: dict[int, p.Leaderboard] = {}  # conn -> its leaderboard, partial ones merged
        self.boards: dict[int, p.BoardKeeper] = defaultdict(p.BoardKeeper)  # conn -> its board, as a client keeps it

    def _board(self, conn: int, message: p.ServerMessage) -> p.ServerMessage:
        """Keep each connection's board as a v2 client does (race_start, then each move_ok's
        changes), assert that it matches every move_ok's check value, and hand tests the move_ok
        with its ``view`` filled in (the board after the move), so they can read the board."""
        if isinstance(message, p.Leaderboard):
            merged = message.merged_into(self.leaderboards.get(conn))
            if merged is not None:
                self.leaderboards[conn] = merged
        if isinstance(message, p.RaceStart):
            self.boards[conn].race_start(message)
        elif isinstance(message, p.MoveOk):
            view = self.boards[conn].move_ok(message)
            assert view is not None, f"conn {conn}: the board diverged at {message!r}"
            return msgspec.structs.replace(message, view=view)
        return message

    # -------------------------------------------------------------- plumbing

    def run(self, event: Event) -> list[Effect]:
        if isinstance(event, Connected):
            self.conn_opened(event.conn)
        elif isinstance(event, Disconnected):
            self.conn_ended(event.conn)
        effects = self.core.handle(event)
        self.effects.extend(effects)
        self.apply(effects)
        if not self._landing:  # the outermost event lands the saves its effects queued, in order
            self._landing = True
            try:
                while self._to_land:
                    self.land_save(self._to_land.pop(0))
            finally:
                self._landing = False
        return effects

    def daily_answer(self, event: Event) -> None:
        self.run(event)

    def daily_now(self) -> int:
        return self.now

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.execute(effect)

    def deliver(self, conn: int, player_id: str | None, message: p.ServerMessage) -> None:
        self.inbox[conn].append(self._board(conn, message))

    def close_connection(self, effect: CloseConnection) -> None:
        # As the real shell: unbound at once, closed, and then the socket's end is an event.
        self.closed[effect.conn] = (effect.code, effect.reason)
        self.unbind(effect.conn)
        self.run(Disconnected(effect.conn, self.now))

    def register_player(self, effect: RegisterPlayer) -> None:
        self.players[effect.record.player_id] = effect.record
        self.player_ttls[effect.record.player_id] = effect.ttl_s
        self.tokens[effect.token_hash] = effect.record.player_id
        self.run(PlayerRegistered(effect.conn, effect.record, effect.token_hash, effect.token, self.now))

    def save_player(self, effect: SavePlayer) -> None:
        self.players[effect.record.player_id] = effect.record
        self.player_ttls[effect.record.player_id] = effect.ttl_s

    def create_room(self, effect: CreateRoomRecord) -> None:
        if effect.record.code in self.rooms:
            self.run(RoomCreateFailed(effect.conn, effect.record, True, self.now))
        else:
            self.rooms[effect.record.code] = effect.record
            self.run(RoomCreated(effect.conn, effect.record, self.now))

    def save_room(self, effect: SaveRoom) -> None:
        """A save lands once every effect of the event that made it is carried out (as a store
        write lands after the event that queued it), unless ``hold_saves`` keeps it back."""
        if self.hold_saves:
            self.held_saves.append(effect)
        else:
            self._to_land.append(effect)

    def land_save(self, effect: SaveRoom) -> None:
        """The save lands: stored, then what waited for it goes out (as the real shell does)."""
        self.rooms[effect.code] = effect.record
        self.apply(list(effect.then))
        record = effect.record
        self.run(RoomSaved(effect.code, record.phase, record.race_number, self.now))

    def land_saves(self) -> None:
        held, self.held_saves = self.held_saves, []
        for effect in held:
            self.land_save(effect)

    def set_listed(self, effect: SetListed) -> None:
        if effect.listed:
            self.listed[effect.code] = None
        else:
            self.listed.pop(effect.code, None)

    def persist_move(self, effect: PersistMove) -> None:
        if self.hold_persists:
            self.held.append(effect)
        else:
            self.persist(effect)

    def reload_log(self, effect: ReloadLog) -> None:
        self.reloads.append(effect)  # a test answers it with LogReloaded

    def lookup_token(self, effect: LookupToken) -> None:
        owner = self.tokens.get(effect.token_hash)
        record = self.players.get(owner) if owner is not None else None
        self.run(TokenLooked(effect.conn, effect.token_hash, record, self.now, failed=self.store_down))

    def load_room(self, effect: LoadRoom) -> None:
        if self.hold_loads:
            self.held_loads.append(effect)
        else:
            self.load(effect.code)

    def list_rooms(self, effect: ListRooms) -> None:
        if self.store_down:
            self.run(RoomsListed(effect.conn, [], {}, self.now, failed=True))
        else:
            codes = list(self.listed)
            records = {c: self.rooms[c] for c in codes if c in self.rooms and not self.core.has_room(c)}
            self.run(RoomsListed(effect.conn, codes, records, self.now))

    def expire_room(self, effect: ExpireRoom) -> None:
        pass  # the dicts keep everything

    def find_deal(self, effect: FindDeal) -> None:
        pass  # a worker-process job: tests answer it themselves (DealFound)

    def check_blocked(self, effect: CheckBlocked) -> None:
        pass  # a worker-process job: tests answer it themselves (BlockedChecked)

    def note(self, effect: Note) -> None:
        pass  # a log line: tests read it from ``effects``

    def read_back(self, effect: ReadBack) -> None:
        self.read_backs.append(effect)  # several nodes: a test answers it with RoomChanged

    def keep_command(self, effect: KeepCommand) -> None:
        pass  # several nodes: a test hands RoomChanged its replay itself

    # Profiles and ratings: the real store steps (server/shell/profile_ops.py) on an in-memory store.

    def _profile_step(self, steps: Coroutine[Any, Any, Event]) -> None:
        try:
            steps.send(None)
        except StopIteration as stop:
            self.run(stop.value)
            return
        steps.close()
        raise RuntimeError("the in-memory store suspended")

    def _clock(self) -> int:
        return self.now

    def lookup_profile(self, effect: LookupProfile) -> None:
        self._profile_step(profile_ops.lookup_profile(self.profile_store, effect, self._clock))

    def claim_profile(self, effect: ClaimProfile) -> None:
        self._profile_step(profile_ops.claim_profile(self.profile_store, effect, self._clock))

    def rename_profile(self, effect: RenameProfile) -> None:
        self._profile_step(profile_ops.rename_profile(self.profile_store, effect, self._clock))

    def rate_race(self, effect: RateRace) -> None:
        self._profile_step(profile_ops.rate_race_profiles(self.profile_store, effect, self._clock))

    def read_ratings(self, effect: ReadRatings) -> None:
        self._profile_step(profile_ops.read_ratings(self.profile_store, effect, self._clock))

    def load(self, code: str) -> None:
        """Answer a LoadRoom from the store's dicts."""
        if self.store_down:
            self.run(RoomLoaded(code, None, {}, self.now, failed=True))
            return
        record = self.rooms.get(code)
        logs: dict[str, list[LogEntry]] = {}
        if record is not None and record.race is not None:
            race = record.race
            logs = {r.player_id: list(self.logs[(code, race.number, r.player_id)]) for r in race.racers}
        self.run(RoomLoaded(code, record, logs, self.now))

    def persist(self, effect: PersistMove) -> None:
        if effect.code not in self.rooms:
            self.run(MovePersistFailed(effect.code, effect.race, effect.player_id, "gone", self.now))
            return
        log = self.logs[(effect.code, effect.race, effect.player_id)]
        if len(log) != effect.expected_length:
            self.run(MovePersistFailed(effect.code, effect.race, effect.player_id, "conflict", self.now))
            return
        log.append(effect.entry)
        self.run(MovePersisted(effect.code, effect.race, effect.player_id, len(log), self.now))

    def release(self) -> None:
        held, self.held = self.held, []
        for effect in held:
            self.persist(effect)

    def advance(self, ms: int) -> None:
        """Let time pass, firing room wakes in order, as the shell's timers would."""
        target = self.now + ms
        while (wake := self.next_wake(target, self.now)) is not None:
            self.now = wake.now
            self.run(wake)
        self.now = target

    # -------------------------------------------------------------- client actions

    def connect(self) -> int:
        self._next_conn += 1
        self.run(Connected(self._next_conn, self.now))
        return self._next_conn

    def hello(
        self, name: str = "Ann", *, bot: bool = False, token: str | None = None, v: int = p.PROTOCOL_VERSION
    ) -> int:
        conn = self.connect()
        self.say_hello(conn, name, bot=bot, token=token, v=v)
        return conn

    def say_hello(
        self, conn: int, name: str, *, bot: bool = False, token: str | None = None, v: int = p.PROTOCOL_VERSION
    ) -> None:
        self.run(HelloEvent(conn, p.Hello(v=v, name=name, token=token, bot=bot), self.now))

    def send(self, conn: int, msg: p.ClientMessage) -> list[Effect]:
        return self.run(ClientEvent(conn, msg, self.now))

    def disconnect(self, conn: int) -> None:
        self.run(Disconnected(conn, self.now))

    def take(self, conn: int) -> list[p.ServerMessage]:
        got, self.inbox[conn] = self.inbox[conn], []
        return got

    def last(self, conn: int, kind: type[p.ServerMessage]) -> p.ServerMessage:
        for msg in reversed(self.inbox[conn]):
            if isinstance(msg, kind):
                return msg
        raise AssertionError(f"no {kind.__name__} in {[p.message_type(m) for m in self.inbox[conn]]}")

    def welcome(self, conn: int) -> p.Welcome:
        msg = self.last(conn, p.Welcome)
        assert isinstance(msg, p.Welcome)
        return msg

    def room(self, conn: int) -> p.Room:
        msg = self.last(conn, p.Room)
        assert isinstance(msg, p.Room)
        return msg

    def error(self, conn: int) -> p.Error:
        msg = self.inbox[conn][-1]
        assert isinstance(msg, p.Error), msg
        return msg

    def move(self, conn: int, move_id: int, move: str) -> p.ServerMessage:
        self.send(conn, p.Move(id=move_id, move=move))
        return self.inbox[conn][-1]


def lobby(shell: Shell, names: tuple[str, ...] = ("Ann", "Bob", "Cy"), **options: object) -> tuple[list[int], str]:
    conns = [shell.hello(name) for name in names]
    shell.send(conns[0], p.CreateRoom(options=p.RoomOptions(**options)))  # type: ignore[arg-type]
    code = shell.room(conns[0]).code
    for conn in conns[1:]:
        shell.send(conn, p.Join(code=code))
        shell.send(conn, p.Ready(ready=True))
    return conns, code


def racing(shell: Shell, names: tuple[str, ...] = ("Ann", "Bob", "Cy"), **options: object) -> tuple[list[int], str]:
    conns, code = lobby(shell, names, **options)
    shell.send(conns[0], p.Start())
    shell.advance(shell.config.countdown_ms)
    summary = shell.core.summary(code)
    assert summary is not None and summary.phase == p.RACING
    return conns, code


def pid(shell: Shell, conn: int) -> str:
    """The player id a connection was welcomed with."""
    return shell.welcome(conn).player_id
