"""The test shell: carries out the core's effects synchronously, in process, for tests.

It is part of the package (not of tests/) so that the tests and the real shell (server/app.py)
cannot drift apart: both answer every effect the core emits, and the store here is a set of
dicts that answers a write at once unless a test holds it back (``hold_persists``) or makes it
fail (``fail_persists``). Each test then reads as a session: hello, create, join, ready, start,
moves, results.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import assert_never

import msgspec

from server.core import CoreConfig, Entropy, ServerCore
from server.core.events import (
    Bind,
    CheckBlocked,
    ClientEvent,
    CloseConnection,
    Connected,
    CreateRoomRecord,
    Disconnected,
    DropRoom,
    Effect,
    Event,
    ExpireRoom,
    FindDeal,
    HelloEvent,
    ListRooms,
    LoadRoom,
    LookupToken,
    MovePersisted,
    MovePersistFailed,
    Note,
    PersistMove,
    PlayerRegistered,
    RegisterPlayer,
    ReloadLog,
    Reply,
    RoomCreated,
    RoomCreateFailed,
    RoomLoaded,
    RoomsListed,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Tick,
    TokenLooked,
    Wake,
)
from server.core.records import LogEntry, PlayerRecord, RoomRecord
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


class Shell:
    """Carries out effects synchronously: an in-memory store, delivery into per-connection inboxes.

    It handles every effect the core emits (``assert_never`` makes mypy check that, as it does for
    server/app.py). Store failures are the tests' to make: ``hold_persists`` keeps move writes
    back (``held``, ``release``), ``reloads`` records log re-reads (a test answers them with
    LogReloaded), ``hold_loads`` keeps room loads back, ``store_down`` fails token lookups, room
    loads and room listings."""

    def __init__(self, config: CoreConfig | None = None, entropy: Entropy | None = None) -> None:
        self.config = config or CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000)
        self.core = ServerCore(self.config, entropy or SeededEntropy())
        self.now = 1_700_000_000_000
        self.inbox: dict[int, list[p.ServerMessage]] = defaultdict(list)
        self.conns_of: dict[str, set[int]] = defaultdict(set)
        self.players: dict[str, PlayerRecord] = {}
        self.player_ttls: dict[str, float | None] = {}  # player id -> the lifetime of its last write
        self.tokens: dict[str, str] = {}  # token hash -> player id
        self.rooms: dict[str, RoomRecord] = {}
        self.listed: dict[str, None] = {}  # listed room codes, oldest first
        self.logs: dict[tuple[str, int, str], list[LogEntry]] = defaultdict(list)
        self.wakes: dict[str, int] = {}
        self.hold_persists = False
        self.held: list[PersistMove] = []
        self.reloads: list[ReloadLog] = []
        self.hold_loads = False
        self.held_loads: list[LoadRoom] = []
        self.store_down = False
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
        effects = self.core.handle(event)
        self.effects.extend(effects)
        self.apply(effects)
        return effects

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.execute(effect)

    def execute(self, effect: Effect) -> None:
        if isinstance(effect, Reply):
            self.inbox[effect.conn].append(self._board(effect.conn, effect.message))
        elif isinstance(effect, Send):
            for pid in effect.players:
                for conn in self.conns_of[pid]:
                    self.inbox[conn].append(self._board(conn, effect.message))
        elif isinstance(effect, Bind):
            self.conns_of[effect.player_id].add(effect.conn)
        elif isinstance(effect, CloseConnection):
            # As server/app.py: unbound at once, closed, and then the socket's end is an event.
            self.closed[effect.conn] = (effect.code, effect.reason)
            for conns in self.conns_of.values():
                conns.discard(effect.conn)
            self.run(Disconnected(effect.conn, self.now))
        elif isinstance(effect, RegisterPlayer):
            self.players[effect.record.player_id] = effect.record
            self.player_ttls[effect.record.player_id] = effect.ttl_s
            self.tokens[effect.token_hash] = effect.record.player_id
            self.run(PlayerRegistered(effect.conn, effect.record, effect.token_hash, effect.token, self.now))
        elif isinstance(effect, SavePlayer):
            self.players[effect.record.player_id] = effect.record
            self.player_ttls[effect.record.player_id] = effect.ttl_s
        elif isinstance(effect, CreateRoomRecord):
            if effect.record.code in self.rooms:
                self.run(RoomCreateFailed(effect.conn, effect.record, True, self.now))
            else:
                self.rooms[effect.record.code] = effect.record
                self.run(RoomCreated(effect.conn, effect.record, self.now))
        elif isinstance(effect, SaveRoom):
            self.rooms[effect.code] = effect.record
        elif isinstance(effect, SetListed):
            if effect.listed:
                self.listed[effect.code] = None
            else:
                self.listed.pop(effect.code, None)
        elif isinstance(effect, PersistMove):
            if self.hold_persists:
                self.held.append(effect)
            else:
                self.persist(effect)
        elif isinstance(effect, ReloadLog):
            self.reloads.append(effect)
        elif isinstance(effect, LookupToken):
            owner = self.tokens.get(effect.token_hash)
            record = self.players.get(owner) if owner is not None else None
            self.run(TokenLooked(effect.conn, effect.token_hash, record, self.now, failed=self.store_down))
        elif isinstance(effect, LoadRoom):
            if self.hold_loads:
                self.held_loads.append(effect)
            else:
                self.load(effect.code)
        elif isinstance(effect, ListRooms):
            if self.store_down:
                self.run(RoomsListed(effect.conn, [], {}, self.now, failed=True))
            else:
                codes = list(self.listed)
                records = {c: self.rooms[c] for c in codes if c in self.rooms and not self.core.has_room(c)}
                self.run(RoomsListed(effect.conn, codes, records, self.now))
        elif isinstance(effect, Wake):
            if effect.at_ms is None:
                self.wakes.pop(effect.code, None)
            else:
                self.wakes[effect.code] = effect.at_ms
        elif isinstance(effect, DropRoom):
            self.wakes.pop(effect.code, None)
        elif isinstance(effect, Note | ExpireRoom | FindDeal | CheckBlocked):
            pass  # log lines, store expiry, worker-process jobs: tests answer FindDeal/CheckBlocked themselves
        else:
            assert_never(effect)

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
        while True:
            due = [(at, code) for code, at in self.wakes.items() if at <= target]
            if not due:
                break
            at, code = min(due)
            del self.wakes[code]
            self.now = max(self.now, at)
            self.run(Tick(code, self.now))
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
    assert shell.core.rooms[code].phase == p.RACING
    return conns, code


def pid(shell: Shell, conn: int) -> str:
    """The player id a connection was welcomed with."""
    return shell.welcome(conn).player_id
