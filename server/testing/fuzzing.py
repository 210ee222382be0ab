"""A fuzzing driver for the frame decoder and the room core.

Frames go through the real :func:`shared.protocol.decode_client` and the real
:class:`~server.core.ServerCore`, from several fake connections (connection ids, no sockets);
the core's effects are carried out against a real :class:`~server.store.memory.MemoryStore`, as
the real shell does (moves appended before they are acknowledged, logs reloaded, rooms saved, every
store read the core asks for: token lookups, room loads, room lists). After every frame three
invariants are checked, and a fourth at the end of each episode:

1. no exception escapes the decoder, the core or the effects;
2. every racer's in-memory game (position, entries, times, move ids, status) equals the
   replay of its stored log (:func:`shared.engine.replay`);
3. no message sent to a client carries hidden information: no card its recipient may not
   see (stock order, buried reserve cards, another racer's board), no deal number or salt of
   a race before its results, no resume token to another connection;
4. every move gets exactly one answer (docs/protocol.md): at the end of an episode (every held
   store answer released, a minute of timers fired), no move sent on a connection still open is
   without its move_ok, move_rejected or error.

Everything is deterministic given a seed: the frames, the fake clock, the core's entropy and the
store faults. A campaign runs in *episodes* (a fresh store and core each, seeded from the
campaign seed and the episode number), so a failure at frame ``i`` is reproduced by running
that episode alone (:func:`run_campaign` with ``start_frame``).

The effect execution lives in one small class, :class:`EffectRunner`: the real shell's dispatch
(server/shell/executor.py) with the in-process connections and wakes of the test shell
(:class:`~server.testing.shell.InProcessExecutor`), and the store's part on a MemoryStore with faults.
The frame generator is :class:`FrameGenerator` (a seeded ``random.Random``: fast enough for 10^6
frames in minutes); tests/test_fuzz.py adds hypothesis-generated frames through
:meth:`FuzzDriver.feed`.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, TypeVar

import msgspec

from server.core.events import (
    BlockedChecked,
    CheckBlocked,
    ClaimProfile,
    ClientEvent,
    CloseConnection,
    Connected,
    CreateRoomRecord,
    DealFound,
    Disconnected,
    Effect,
    Event,
    ExpireRoom,
    FindDeal,
    HelloEvent,
    KeepCommand,
    ListRooms,
    LoadRoom,
    LogReloaded,
    LookupProfile,
    LookupToken,
    MovePersisted,
    MovePersistFailed,
    Note,
    PersistMove,
    PlayerRegistered,
    ProfileLooked,
    RateRace,
    RatingsRead,
    ReadBack,
    ReadRatings,
    RegisterFailed,
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
    SetListed,
    TokenLooked,
)
from server.core.machine import CoreConfig, Entropy, ServerCore
from server.core.records import (
    LogEntry,
    PlayerRecord,
    RoomRecord,
    decode_entry,
    decode_player,
    decode_room,
    encode_record,
    hash_token,
    open_race_of,
)
from server.core.state import RacerState
from server.shell import profile_ops
from server.shell.room_versions import (
    Drop,
    Lost,
    Probe,
    ProbeStep,
    Recreate,
    RefusedStep,
    RoomVersions,
    SaveStep,
    Write,
)
from server.store.base import AppendResult
from server.store.memory import MemoryStore
from server.testing.shell import InProcessExecutor
from shared import protocol as p
from shared.cards import CARD_COUNT
from shared.engine import BLOCKED, BLOCKED_BUDGET, PLAYING, RESIGN, UNDO, Game, View, replay

T = TypeVar("T")

START_MS: Final = 1_800_000_000_000  # the fake clock's start (server ms since the epoch)
MAX_FRAME: Final = 4096  # ServerConfig.max_frame: larger frames close the connection (1009)
LIST_LIMIT: Final = 100  # ServerConfig.list_limit: rooms in one room list
EVENTS_PER_FRAME_LIMIT: Final = 20_000  # more events than this for one frame: the core is looping


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (every MemoryStore method) to its result, without a loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coro.close()
    raise RuntimeError("the store suspended: the fuzzing driver needs a store that never awaits")


def fuzz_config(blocked_budget: int | None = BLOCKED_BUDGET) -> CoreConfig:
    """Short timers, so that countdowns, forfeits, grace periods and idle lobbies happen within an
    episode. A tiny ``blocked_budget`` sends most empty-stock positions to the exact check
    (CheckBlocked, answered later), the path a live server takes only for hard positions."""
    return CoreConfig(
        blocked_budget=blocked_budget,
        countdown_ms=1000,
        grace_ms=5000,
        member_grace_ms=10_000,
        lobby_idle_ms=120_000,
        max_rooms=40,
        room_ttl_s=6 * 3600,
        daily=True,
    )


class FuzzEntropy(Entropy):
    """Seeded randomness for the core. Deals are at least 2**32, so the leak scan can spot them
    anywhere in a frame (a MessagePack uint64, or their decimal or hex text)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def room_code(self) -> str:
        # A small code space, so that taken codes (CreateRoomFailed, taken=True) happen too.
        return "".join(self.rng.choice(p.ROOM_CODE_ALPHABET[:4]) for _ in range(p.ROOM_CODE_LENGTH))

    def deal(self) -> int:
        return self.rng.randrange(2**32, 2**64)

    def salt(self) -> str:
        return f"{self.rng.getrandbits(256):064x}"

    def player_id(self) -> str:
        return f"p{self.rng.getrandbits(64):016x}"

    def token(self) -> str:
        return f"t{self.rng.getrandbits(192):048x}"


# ---------------------------------------------------------------- failures and statistics


@dataclass
class FuzzFailure:
    """One broken invariant, with what it takes to reproduce it."""

    seed: int
    episode: int
    frame: int  # campaign-wide index of the frame after which the invariant broke
    kind: str  # exception | leak | replay | protocol | livelock
    detail: str
    frame_hex: str = ""
    conn: int | None = None
    stack: str = ""
    options: str = ""  # bench/fuzz.py options of the campaign beyond the seed (" --room-ttl 90")

    def reproducer(self) -> str:
        where = f"--seed {self.seed} --frames {self.frame + 1} --start-frame {self.frame}"
        return f"bench/fuzz.py {where}{self.options} --verbose"

    def describe(self) -> str:
        lines = [
            f"{self.kind} after frame {self.frame} (seed {self.seed}, episode {self.episode}, conn {self.conn})",
            f"  {self.detail}",
        ]
        if self.frame_hex:
            shown = self.frame_hex if len(self.frame_hex) <= 400 else self.frame_hex[:400] + "..."
            lines.append(f"  frame ({len(self.frame_hex) // 2} bytes): {shown}")
        lines.append(f"  reproduce: {self.reproducer()}")
        if self.stack:
            lines.append("  " + self.stack.rstrip().replace("\n", "\n  "))
        return "\n".join(lines)


@dataclass
class FuzzStats:
    frames: int = 0
    events: int = 0
    messages_out: int = 0
    views_checked: int = 0
    replays_checked: int = 0
    full_replays: int = 0
    counts: Counter[str] = field(default_factory=Counter)

    def merge(self, other: FuzzStats) -> None:
        self.frames += other.frames
        self.events += other.events
        self.messages_out += other.messages_out
        self.views_checked += other.views_checked
        self.replays_checked += other.replays_checked
        self.full_replays += other.full_replays
        self.counts.update(other.counts)


# ---------------------------------------------------------------- effect execution (the shell's part)


@dataclass
class StoreFaults:
    """How often the store misbehaves (per call, 0..1), seeded by the runner's generator."""

    append_lost: float = 0.0  # the store does not answer; nothing was written
    append_uncertain: float = 0.0  # the entry was written, but the answer is lost
    append_foreign: float = 0.0  # another process appended this very entry first (a conflict)
    register_fails: float = 0.0
    create_fails: float = 0.0
    read_fails: float = 0.0  # a token lookup, room load or room list gets no answer (failed=True)
    defer: float = 0.0  # a reply from the store is held back and arrives some frames later
    blocked_unknown: float = 0.0  # the worker's exact blocked check fails (None)
    no_deal: float = 0.0  # no winnable deal found within the budget


Deliver = Callable[[int | None, str | None, p.ServerMessage], None]


class EffectRunner(InProcessExecutor):
    """Carries out the core's effects against a MemoryStore, the way the real shell does.

    The dispatch is the real shell's; the connections (``live_conns``, ``conns_of``) and the wakes
    are the test shell's (:class:`~server.testing.shell.InProcessExecutor`); the store's part is here, with its
    faults. Follow-up events (a move persisted, a log reloaded, a deal found...) are queued on
    ``events``; the driver hands them to the core. Store answers may be held back (``held``) and
    released later, in any order, as concurrent tasks would finish. Outgoing messages go to
    ``on_message(conn, player_id, message)``: a Reply to one connection, a Send to every
    connection bound to each player."""

    def __init__(self, store: MemoryStore, rng: random.Random, faults: StoreFaults, on_message: Deliver) -> None:
        super().__init__()
        self.store = store
        self.rng = rng
        self.faults = faults
        self.on_message = on_message
        self.events: deque[Event] = deque()
        self.held: list[Callable[[], None]] = []
        self.notes: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # store outcomes worth a figure (rooms loaded, gone appends)
        self.now = START_MS
        # The driver's hook for a CloseConnection: the connection ends as if the socket closed.
        self.on_close: Callable[[int], None] = lambda conn: None
        self.core: ServerCore | None = None  # the core whose effects these are (set by the driver)
        self.expiries: dict[str, tuple[int, int]] = {}  # room -> when its stored record expires, its race then
        self.versions = RoomVersions()  # the room saves' compare-and-set bookkeeping, the shell's own

    # -------------------------------------------------------------- helpers

    def daily_answer(self, event: Event) -> None:
        self.events.append(event)

    def daily_now(self) -> int:
        return self.now

    def _fault(self, name: str) -> bool:
        """Does the store misbehave this way now? (``name``: a StoreFaults field; counted.)"""
        chance: float = getattr(self.faults, name)
        if chance > 0 and self.rng.random() < chance:
            self.notes[f"fault:{name}"] += 1
            return True
        return False

    def _later(self, work: Callable[[], None]) -> None:
        """Run now, or hold it back (a slow store answer) if the dice say so."""
        if self._fault("defer"):
            self.held.append(work)
        else:
            work()

    def release(self, count: int) -> None:
        """Let up to ``count`` held answers arrive, in random order."""
        for _ in range(min(count, len(self.held))):
            work = self.held.pop(self.rng.randrange(len(self.held)))
            work()

    # -------------------------------------------------------------- effects

    def execute_all(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            self.execute(effect)

    def deliver(self, conn: int, player_id: str | None, message: p.ServerMessage) -> None:
        self.on_message(conn, player_id, message)

    def close_connection(self, effect: CloseConnection) -> None:
        self.counts[f"closed:{effect.code}"] += 1
        if effect.conn in self.live_conns:
            self.on_close(effect.conn)

    def persist_move(self, effect: PersistMove) -> None:
        self._later(partial(self._persist, effect))

    def save_room(self, effect: SaveRoom) -> None:
        self._save_room(effect)

    def note(self, effect: Note) -> None:
        self.notes[effect.event] += 1

    def save_player(self, effect: SavePlayer) -> None:
        record = encode_record(effect.record)
        run_now(self.store.put_player(effect.record.player_id, effect.token_hash, record, effect.ttl_s))

    def _profile_step(self, steps: Callable[[], Coroutine[Any, Any, Event]]) -> None:
        """A profile effect's store steps (server/shell/profile_ops.py), now or held back."""
        self._later(lambda: self.events.append(run_now(steps())))

    def _clock(self) -> int:
        return self.now

    def lookup_profile(self, effect: LookupProfile) -> None:
        if self._fault("read_fails"):
            self.events.append(ProfileLooked(effect.conn, None, self.now, failed=True))
            return
        self._profile_step(lambda: profile_ops.lookup_profile(self.store, effect, self._clock))

    def claim_profile(self, effect: ClaimProfile) -> None:
        self._profile_step(lambda: profile_ops.claim_profile(self.store, effect, self._clock))

    def rename_profile(self, effect: RenameProfile) -> None:
        self._profile_step(lambda: profile_ops.rename_profile(self.store, effect, self._clock))

    def rate_race(self, effect: RateRace) -> None:
        self._profile_step(lambda: profile_ops.rate_race_profiles(self.store, effect, self._clock))

    def read_ratings(self, effect: ReadRatings) -> None:
        if self._fault("read_fails"):
            self.events.append(RatingsRead(effect.conn, self.now, failed=True))
            return
        self._profile_step(lambda: profile_ops.read_ratings(self.store, effect, self._clock))

    def register_player(self, effect: RegisterPlayer) -> None:
        self._later(partial(self._register, effect))

    def create_room(self, effect: CreateRoomRecord) -> None:
        self._later(partial(self._create_room, effect))

    def set_listed(self, effect: SetListed) -> None:
        run_now(self.store.set_listed(effect.code, effect.listed))

    def expire_room(self, effect: ExpireRoom) -> None:
        run_now(self.store.expire_room(effect.code, effect.seconds))
        self._expiring(effect.code, effect.seconds)

    def reload_log(self, effect: ReloadLog) -> None:
        self._later(partial(self._reload, effect))

    def find_deal(self, effect: FindDeal) -> None:
        self._later(partial(self._find_deal, effect))

    def check_blocked(self, effect: CheckBlocked) -> None:
        self._later(partial(self._check_blocked, effect))

    def lookup_token(self, effect: LookupToken) -> None:
        self._later(partial(self._lookup_token, effect))

    def load_room(self, effect: LoadRoom) -> None:
        self._later(partial(self._load_room, effect))

    def list_rooms(self, effect: ListRooms) -> None:
        self._later(partial(self._list_rooms, effect))

    def read_back(self, effect: ReadBack) -> None:
        raise AssertionError(f"one node: no read-back is ever asked for ({effect!r})")

    def keep_command(self, effect: KeepCommand) -> None:
        raise AssertionError(f"one node: no command is kept for a read-back ({effect!r})")

    def _expiring(self, code: str, seconds: float | None) -> None:
        room = self.core.rooms.get(code) if self.core is not None else None
        if seconds is None or room is None or room.race is None:
            self.expiries.pop(code, None)
        else:
            self.expiries[code] = (self.now + math.ceil(seconds * 1000), room.race.record.number)

    def forgotten(self, now_ms: int) -> frozenset[tuple[str, int]]:
        """(room, race) of the finished races whose stored room has expired by ``now_ms``."""
        return frozenset((code, race) for code, (at, race) in self.expiries.items() if at <= now_ms)

    def _persist(self, effect: PersistMove) -> None:
        code, race, pid = effect.code, effect.race, effect.player_id
        entry = encode_record(effect.entry)
        if self._fault("append_lost"):
            self.events.append(MovePersistFailed(code, race, pid, "uncertain", self.now))
            return
        if self._fault("append_foreign"):
            # Another process (the same player's other connection) wrote this very entry first.
            run_now(self.store.append_move(code, race, pid, effect.expected_length, entry))
        result = run_now(self.store.append_move(code, race, pid, effect.expected_length, entry))
        if result is AppendResult.APPENDED:
            if self._fault("append_uncertain"):
                self.events.append(MovePersistFailed(code, race, pid, "uncertain", self.now))
            else:
                self.events.append(MovePersisted(code, race, pid, effect.expected_length + 1, self.now))
        elif result is AppendResult.NO_SUCH_RACE:
            self.counts["appends_gone"] += 1
            self.events.append(MovePersistFailed(code, race, pid, "gone", self.now))
        else:
            self.events.append(MovePersistFailed(code, race, pid, "conflict", self.now))

    def _lookup_token(self, effect: LookupToken) -> None:
        """As the shell's reads: the player record a resume token names."""
        if self._fault("read_fails"):
            self.events.append(TokenLooked(effect.conn, effect.token_hash, None, self.now, failed=True))
            return
        record: PlayerRecord | None = None
        player_id = run_now(self.store.player_by_token(effect.token_hash))
        data = run_now(self.store.get_player(player_id)) if player_id is not None else None
        if data is not None:
            try:
                record = decode_player(data)
            except msgspec.DecodeError:
                record = None
        self.events.append(TokenLooked(effect.conn, effect.token_hash, record, self.now))

    def _load_room(self, effect: LoadRoom) -> None:
        """As the shell's reads: a room's record and its current race's logs. A load that
        the shell retries until the store answers (``once`` False) never fails here."""
        code = effect.code
        if effect.once and self._fault("read_fails"):
            self.events.append(RoomLoaded(code, None, {}, self.now, failed=True))
            return
        record = self._read_room(code)
        logs: dict[str, list[LogEntry]] = {}
        if record is not None and record.race is not None and record.members and not record.closed:
            for racer in record.race.racers:
                raw = run_now(self.store.load_moves(code, record.race.number, racer.player_id))
                logs[racer.player_id] = decode_entries(raw)
        if record is not None:
            self.counts["rooms_loaded"] += 1
            stored = run_now(self.store.load_room(code))
            if stored is not None and self.core is not None and not self.core.has_room(code):
                self.versions.loaded(code, stored[1])
        self.events.append(RoomLoaded(code, record, logs, self.now))

    def _list_rooms(self, effect: ListRooms) -> None:
        """As the shell's reads: the listed codes, and the records of rooms the core does not hold."""
        if self._fault("read_fails"):
            self.events.append(RoomsListed(effect.conn, [], {}, self.now, failed=True))
            return
        codes: list[str] = []
        records: dict[str, RoomRecord] = {}
        for code in run_now(self.store.listed_rooms()):
            if len(codes) >= LIST_LIMIT:
                break
            if self.core is not None and self.core.has_room(code):
                codes.append(code)
                continue
            record = self._read_room(code)
            if record is not None and record.members and not record.closed:
                codes.append(code)
                records[code] = record
        self.events.append(RoomsListed(effect.conn, codes, records, self.now))

    def _read_room(self, code: str) -> RoomRecord | None:
        loaded = run_now(self.store.load_room(code))
        if loaded is None:
            return None
        try:
            return decode_room(loaded[0])
        except msgspec.DecodeError:
            return None

    def _reload(self, effect: ReloadLog) -> None:
        raw = run_now(self.store.load_moves(effect.code, effect.race, effect.player_id))
        entries = decode_entries(raw)
        self.events.append(LogReloaded(effect.code, effect.race, effect.player_id, entries, self.now))

    def _register(self, effect: RegisterPlayer) -> None:
        if self._fault("register_fails"):
            self.events.append(RegisterFailed(effect.conn, self.now))
            return
        data = encode_record(effect.record)
        run_now(self.store.put_player(effect.record.player_id, effect.token_hash, data, effect.ttl_s))
        self.events.append(PlayerRegistered(effect.conn, effect.record, effect.token_hash, effect.token, self.now))

    def _create_room(self, effect: CreateRoomRecord) -> None:
        if self._fault("create_fails"):
            self.events.append(RoomCreateFailed(effect.conn, effect.record, False, self.now))
            return
        record = effect.record
        created = run_now(self.store.create_room(record.code, encode_record(record), open_race=open_race_of(record)))
        if created:
            self.versions.created(record.code)
            self.events.append(RoomCreated(effect.conn, effect.record, self.now))
        else:
            self.events.append(RoomCreateFailed(effect.conn, effect.record, True, self.now))

    def _save_room(self, effect: SaveRoom) -> None:
        """Compare-and-set on the version the shell's own bookkeeping (RoomVersions) expects, and
        what it decides when the save is refused or the room has vanished, as the shell's room writes."""
        code, record = effect.code, effect.record
        data = encode_record(record)
        race = open_race_of(record)
        versions = self.versions
        step: SaveStep | ProbeStep | RefusedStep = versions.begin_save(code, versions.epoch(code))
        if isinstance(step, Probe):
            step = versions.probed(code, run_now(self.store.load_room(code)))
        landed = False
        if isinstance(step, Write):
            new = run_now(self.store.save_room(code, data, step.version, open_race=race))
            if new is not None:
                versions.save_landed(code, new, 0)
                landed = True
            else:
                step = versions.refused(code, step.version, run_now(self.store.load_room(code)))
        if isinstance(step, Recreate):
            # Expired under us while in use: stored afresh (as the shell does).
            if run_now(self.store.create_room(code, data, open_race=race)):
                versions.created(code)
                if not record.options.private and record.members:
                    run_now(self.store.set_listed(code, True))
                landed = True
            else:
                step = versions.recreate_refused(code)
        if isinstance(step, Drop | Lost):
            self.counts[f"save_{'dropped' if isinstance(step, Drop) else 'lost'}"] += 1
        if landed:  # what waited for the save goes out once it has landed (as the real shell does)
            self.execute_all(effect.then)
            record = effect.record
            self.events.append(RoomSaved(effect.code, record.phase, record.race_number, self.now))

    def _find_deal(self, effect: FindDeal) -> None:
        deal = None if self._fault("no_deal") else self.rng.randrange(2**32, 2**64)
        detail = "" if deal is not None else "fuzz: no deal"
        self.events.append(DealFound(effect.code, effect.race, effect.search, deal, self.now, detail))

    def _check_blocked(self, effect: CheckBlocked) -> None:
        blocked: bool | None = None
        if not self._fault("blocked_unknown"):
            game, _ = replay(effect.deal, list(effect.entries[: effect.length]), undo=effect.undo)
            blocked = game.status == BLOCKED
        self.events.append(BlockedChecked(effect.code, effect.race, effect.player_id, effect.length, blocked, self.now))


def decode_entries(raw: list[bytes]) -> list[LogEntry]:
    """Stored entries, as the shell's reads decode them (an unreadable one keeps its place as "?")."""
    entries: list[LogEntry] = []
    for item in raw:
        try:
            entries.append(decode_entry(item))
        except msgspec.DecodeError:
            entries.append(LogEntry(move="?", t_ms=0))
    return entries


# ---------------------------------------------------------------- the invariants


def visible_cards(game: Game) -> set[int]:
    """Every card a racer of this game has seen: all but the stock and the buried reserve."""
    hidden = set(game.stock)
    hidden.update(game.reserve[:-1])
    return set(range(CARD_COUNT)) - hidden


@dataclass
class _Replayed:
    """The incremental replay of one stored log: the entries decoded so far and the game after them."""

    raw_count: int
    entries: list[LogEntry]
    game: Game
    ok: bool


class Invariants:
    """The checks run on every message out and after every frame. Violations are strings."""

    def __init__(self, core: ServerCore, store: MemoryStore) -> None:
        self.core = core
        self.store = store
        self.violations: list[str] = []
        self._replays: dict[tuple[str, int, str], _Replayed] = {}
        self._needles: list[tuple[bytes, str]] | None = None
        self.views_checked = 0
        self.replays_checked = 0
        self.full_replays = 0

    def reset_core(self, core: ServerCore) -> None:
        self.core = core
        self._needles = None

    # -------------------------------------------------------------- messages out

    def secrets_changed(self) -> None:
        self._needles = None

    def _secret_needles(self) -> list[tuple[bytes, str]]:
        """Byte strings that must not appear in any frame: the deal (as a MessagePack uint64, in
        decimal and in hex) and the salt of every race not yet revealed."""
        if self._needles is None:
            needles: list[tuple[bytes, str]] = []
            for room in self.core.rooms.values():
                race = room.race
                if race is None or room.phase not in (p.COUNTDOWN, p.RACING) or race.record.chosen_deal:
                    continue
                deal, salt = race.record.deal, race.record.salt
                what = f"room {room.code} race {race.record.number}"
                if deal >= 2**32:
                    needles.append((b"\xcf" + deal.to_bytes(8, "big"), f"the deal number of {what}"))
                needles.append((str(deal).encode(), f"the deal number (decimal) of {what}"))
                needles.append((f"{deal:x}".encode(), f"the deal number (hex) of {what}"))
                needles.append((salt.encode(), f"the salt of {what}"))
            self._needles = needles
        return self._needles

    def check_message(self, conn: int | None, player_id: str | None, message: p.ServerMessage) -> None:
        """One message about to go to a client (``player_id``: the Send's addressee, if it was one)."""
        kind = p.message_type(message)
        frame = p.encode(message)
        try:
            p.decode_server(frame)
        except p.ProtocolError as exc:
            self.violations.append(f"protocol: a {kind} the protocol does not accept: {exc.message}")
        if isinstance(message, p.Error) and message.code not in p.ERROR_CODES:
            self.violations.append(f"protocol: error code {message.code!r} is not one of the protocol's")
        for needle, what in self._secret_needles():
            if needle in frame:
                self.violations.append(f"leak: {what} in a {kind} to conn {conn} before the results")
        recipient = player_id if player_id is not None else self.core.conns.get(conn) if conn is not None else None
        if isinstance(message, p.Welcome):
            bound = self.core.conns.get(conn) if conn is not None else None
            player = self.core.players.get(message.player_id)
            if player_id is not None or bound != message.player_id:
                self.violations.append(f"leak: a welcome (resume token) of {message.player_id} to conn {conn}")
            elif player is not None and player.token_hash != hash_token(message.token):
                self.violations.append(f"protocol: the welcome to {message.player_id} carries a token not its own")
        elif isinstance(message, p.RaceStart | p.MoveOk) and message.view is not None:
            self._check_own_view(kind, recipient, message.view)
        elif isinstance(message, p.MoveOk):
            self._check_changes(recipient, message)
        elif isinstance(message, p.Boards):
            self._check_boards(recipient, message)
        # The state is checked as it is after the event: a room may have closed since (a tick
        # that removes members and then closes the idle room sends snapshots first), so only a
        # recipient now in another room, or in this one in another phase, is wrong.
        elif isinstance(message, p.Results):
            room = self._room_of(recipient)
            if room is not None and room.phase != p.RESULTS:
                self.violations.append(f"state: results to {recipient} while its room is in {room.phase}")
        elif isinstance(message, p.Room) and player_id is not None:
            player = self.core.players.get(player_id)
            if player is not None and player.room is not None and player.room != message.code:
                self.violations.append(f"state: a snapshot of room {message.code} to {player_id}, in {player.room}")

    def _room_of(self, player_id: str | None) -> Any:
        player = self.core.players.get(player_id) if player_id is not None else None
        return None if player is None or player.room is None else self.core.rooms.get(player.room)

    def _check_own_view(self, kind: str, recipient: str | None, view: View) -> None:
        """A board for a racer: its own game's, showing no card that game keeps hidden. Its own
        race is usually in its room's, but a racer who left mid-race still gets the answers to
        the moves it sent before leaving, so every race it is in counts."""
        self.views_checked += 1
        games: list[Game] = []
        room = self._room_of(recipient)
        for candidate in (room, *self.core.rooms.values()):
            race = None if candidate is None else candidate.race
            racer = None if race is None or recipient is None else race.racers.get(recipient)
            if racer is not None:
                games.append(racer.game)
        if not games:
            self.violations.append(f"leak: a board in a {kind} to {recipient}, who is not racing")
            return
        shown = (view.stock, view.waste, view.reserve_top, view.reserve_count, view.foundations, view.tableau)
        for game in games:
            own = game.view()
            if shown == (own.stock, own.waste, own.reserve_top, own.reserve_count, own.foundations, own.tableau):
                hidden = set(view.cards()) - visible_cards(game)
                if hidden:
                    self.violations.append(f"leak: hidden cards {sorted(hidden)} in a {kind} to {recipient}")
                return
        hidden = set(view.cards()) - visible_cards(games[0])
        if hidden:
            self.violations.append(f"leak: hidden cards {sorted(hidden)} in a {kind} to {recipient}")
        else:
            self.violations.append(f"leak: the board in a {kind} to {recipient} is not its own game's")

    def _check_changes(self, recipient: str | None, message: p.MoveOk) -> None:
        """A small acknowledgement shows only cards its racer's own game shows (never a stock card
        or a buried reserve card)."""
        self.views_checked += 1
        shown = {card for _, _, cards in message.changes for card in cards}
        if message.reserve is not None and message.reserve[1] is not None:
            shown.add(message.reserve[1])
        games = [
            racer.game
            for room in self.core.rooms.values()
            if room.race is not None and recipient is not None
            for racer in (room.race.racers.get(recipient),)
            if racer is not None
        ]
        if not games:
            self.violations.append(f"leak: a move_ok to {recipient}, who is not racing")
            return
        if all(shown - visible_cards(game) for game in games):
            hidden = sorted(shown - visible_cards(games[0]))
            self.violations.append(f"leak: hidden cards {hidden} in a move_ok's changes to {recipient}")

    def _check_boards(self, recipient: str | None, message: p.Boards) -> None:
        room = self._room_of(recipient)
        if room is None or room.race is None:
            self.violations.append(f"leak: boards to {recipient}, who is in no racing room")
            return
        member = room.members.get(recipient)
        if room.leak_proof:
            self.violations.append(f"leak: live boards to {recipient} in leak-proof room {room.code}")
        if member is None or member.role != p.SPECTATOR:
            self.violations.append(f"leak: live boards to {recipient}, who is not a spectator of {room.code}")
        for pid, view in message.boards.items():
            self.views_checked += 1
            racer = room.race.racers.get(pid)
            ghost = room.race.ghosts.get(pid)  # a ghost's board goes where the racers' do (docs/ghosts.md)
            if racer is None and ghost is None:
                self.violations.append(f"leak: a board of {pid}, who is not racing in {room.code}")
                continue
            game = racer.game if racer is not None else ghost.game if ghost is not None else None
            assert game is not None
            hidden = set(view.cards()) - visible_cards(game)
            if hidden:
                self.violations.append(f"leak: hidden cards {sorted(hidden)} of {pid}'s board to {recipient}")

    # -------------------------------------------------------------- one player, one room

    def check_members(self) -> None:
        """Every member of a room this core holds, if it knows the player, has that room as its
        room: a player is in one room at a time (else it gets the frames of two)."""
        for code, room in self.core.rooms.items():
            for pid in room.members:
                player = self.core.players.get(pid)
                if player is not None and player.room != code:
                    self.violations.append(f"state: {pid} is a member of room {code} but in room {player.room}")

    # -------------------------------------------------------------- racers against their logs

    def check_racers(self, full: bool = False, forgotten: frozenset[tuple[str, int]] = frozenset()) -> None:
        """Every racer with no write in flight: its game equals the replay of its stored log.
        ``full``: replay every log from scratch with :func:`shared.engine.replay` (else incrementally).
        ``forgotten``: (room, race) of finished races whose stored room has expired since (the
        room TTL runs from the results), and whose logs the store may no longer hold."""
        live: set[tuple[str, int, str]] = set()
        for code, room in self.core.rooms.items():
            race = room.race
            if race is None:
                continue
            if room.phase == p.RESULTS and (code, race.record.number) in forgotten:
                continue  # its expiry ran from its results: the store may have forgotten its logs
            for pid, racer in race.racers.items():
                key = (code, race.record.number, pid)
                live.add(key)
                if not racer.settled:
                    continue  # a write, a re-read or an outage under way: the log may be one ahead
                self._check_racer(key, racer, race.record.deal, race.record.undo, full)
        for key in [k for k in self._replays if k not in live]:
            del self._replays[key]

    def _check_racer(self, key: tuple[str, int, str], racer: RacerState, deal: int, undo: bool, full: bool) -> None:
        code, race_no, pid = key
        raw = run_now(self.store.load_moves(code, race_no, pid))
        memo = self._replays.get(key)
        unchanged = (
            memo is not None
            and not full
            and memo.raw_count == len(raw) == racer.log_length == len(racer.game.entries)
            and racer.game.status == memo.game.status
        )
        if unchanged:
            return  # nothing appended, nothing played since the last check
        self.replays_checked += 1
        if memo is None or memo.raw_count > len(raw) or full:
            memo = _Replayed(0, [], Game(deal, undo=undo, blocked_budget=None), True)
            self._replays[key] = memo
        for item in raw[memo.raw_count :]:
            entry = decode_entries([item])[0]
            memo.entries.append(entry)
            if memo.ok:
                try:
                    memo.game.play(entry.move, check_blocked=False)
                except ValueError:
                    memo.ok = False
        memo.raw_count = len(raw)
        where = f"racer {pid} of room {code} race {race_no}"
        if not memo.ok:
            self.violations.append(f"replay: the stored log of {where} holds an illegal entry")
            return
        if full:
            self.full_replays += 1
            game, result = replay(deal, [e.move for e in memo.entries], undo=undo)
            if not result.ok:
                self.violations.append(f"replay: engine.replay refuses the stored log of {where}: {result.error}")
                return
            replayed_status = game.status
            replayed_key = game.state_key()
        else:
            settled = memo.game.copy()
            settled.settle_status()
            replayed_status = settled.status
            replayed_key = settled.state_key()
        live = racer.game
        problems: list[str] = []
        if racer.log_length != len(memo.entries):
            problems.append(f"log length {racer.log_length} in memory, {len(memo.entries)} stored")
        if live.entries != [e.move for e in memo.entries]:
            problems.append("the entries differ")
        if racer.times != [e.t_ms for e in memo.entries]:
            problems.append("the entry times differ")
        ids = {e.id: i + 1 for i, e in enumerate(memo.entries) if e.id is not None}
        if racer.ids != ids:
            problems.append("the move ids differ")
        if live.state_key()[:-1] != replayed_key[:-1]:
            problems.append("the positions differ")
        pending_blocked = live.status == PLAYING and live.blocked_pending and replayed_status == BLOCKED
        if live.status != replayed_status and not pending_blocked:
            problems.append(f"status {live.status} in memory, {replayed_status} replayed")
        if problems:
            self.violations.append(f"replay: {where} is not the replay of its log: " + "; ".join(problems))


# ---------------------------------------------------------------- frames

# Chat lines, fine and refused (too long, control characters, blank).
CHAT_TEXTS: Final[tuple[str, ...]] = ("gl hf", "waste>t3 ♥", "北京 🍀", "x" * (p.CHAT_MAX + 1), "\x1b[2J", "   ", "gg")
NASTY_VALUES: Final[tuple[object, ...]] = (
    None,
    True,
    0,
    -1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -(2**63),
    1.5,
    math.nan,
    math.inf,
    "",
    " ",
    "\x00",
    "\x1b[2J",
    "\u202e\u200b",
    "A" * 25,
    "x" * 2000,
    "waste>t99",
    "t0>t0",
    "f0>t1",
    "stock>waste",
    "undo",
    "resign",
    b"\x00\xff",
    [],
    [1, [2, [3]]],
    {},
    {"type": "ping"},
    msgspec.msgpack.Ext(1, b"\x00"),
)

# MessagePack bytes worth planting: never-used 0xc1, huge container/string lengths, 64-bit ints,
# extension types, nil, map/array headers.
NASTY_BYTES: Final[tuple[bytes, ...]] = (
    b"\xc1",
    b"\xc0",
    b"\xdb\xff\xff\xff\xff",
    b"\xdd\xff\xff\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xc7\x05\xff",
    b"\xd4\xff\x00",
    b"\x81",
    b"\x9f",
    b"\xa4type",
)

# Identity secrets the fake clients share (claims, hellos bound to them) and names they claim,
# look-alikes among them (Cyrillic А, full-width letters).
FUZZ_SECRETS: Final = tuple(ch * 43 for ch in "abcd") + ("short",)
CLAIM_NAMES: Final = ("Ann", "Аnn", "ＡＮＮ", "Bob", "Zed", "")

PILES: Final = ("stock", "waste", "reserve", *(f"f{i}" for i in range(8)), *(f"t{i}" for i in range(12)))


@dataclass
class Slot:
    """One fake client: its current connection (None: not connected), who it is, what it knows."""

    conn: int | None = None
    player_id: str | None = None
    token: str | None = None
    next_move_id: int = 1
    sent: list[int] = field(default_factory=list)  # recent move ids, for retries


class FrameGenerator:
    """Seeded frames of every client message type: valid ones steering the rooms through whole
    races, valid ones with adversarial field values, and byte-level mutations of valid ones."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.recent: deque[bytes] = deque(maxlen=32)  # valid frames, for splicing
        self.tokens: list[str] = []  # every resume token handed out so far

    def frame(self, slot: Slot, core: ServerCore, codes: list[str]) -> tuple[bytes, str]:
        """The next frame for ``slot`` and how it was made (for the statistics)."""
        rng = self.rng
        message = self._message(slot, core, codes)
        roll = rng.random()
        if roll < 0.70:
            data, how = msgspec.msgpack.encode(message), "valid"
            self.recent.append(data)
        elif roll < 0.85:
            data, how = msgspec.msgpack.encode(self._adversarial(message)), "fields"
        else:
            data, how = self._mutate(msgspec.msgpack.encode(message)), "bytes"
        return data, how

    # -------------------------------------------------------------- valid messages

    def _message(self, slot: Slot, core: ServerCore, codes: list[str]) -> dict[str, object]:
        rng = self.rng
        pid = slot.player_id if slot.conn is not None and core.conns.get(slot.conn) else None
        if pid is None:
            return self._hello(slot)
        player = core.players.get(pid)
        room = core.rooms.get(player.room) if player is not None and player.room is not None else None
        if room is None:
            lobbies = any(r.phase == p.LOBBY for r in core.rooms.values())
            kind = rng.choices(
                (
                    "create_room",
                    "join",
                    "list_rooms",
                    "ping",
                    "hello",
                    "ready",
                    "move",
                    "leave",
                    "claim",
                    "rename",
                    "get_ratings",
                    "get_rating",
                    "daily",
                    "watch_daily",
                    "get_board",
                    "get_player",
                    "get_standing",
                ),
                (10 if lobbies else 40, 60, 5, 3, 2, 2, 2, 1, 4, 3, 2, 2, 6, 2, 3, 3, 2),
            )[0]
        else:
            member = room.members.get(pid)
            racing = room.phase == p.RACING and room.race is not None and pid in room.race.racers
            if racing:
                kind = rng.choices(
                    ("move", "ping", "leave", "end_race", "join", "kick", "chat"), (300, 3, 0.3, 0.3, 2, 0.3, 2)
                )[0]
            elif room.phase == p.LOBBY:
                host = room.host == pid
                ready = member is not None and member.ready
                crowd = len(room.racer_ids()) >= 2  # a host alone mostly waits for others to join
                starting = (30 if crowd else 3) if host else 2
                kind = rng.choices(
                    (
                        "ready",
                        "start",
                        "leave",
                        "kick",
                        "join",
                        "create_room",
                        "move",
                        "end_race",
                        "chat",
                        "mute",
                        "add_ghost",
                        "remove_ghost",
                    ),
                    (20 if not ready else 3, starting, 2, 3 if host else 1, 4, 1, 2, 1, 3, 1, 2 if host else 0.3, 0.5),
                )[0]
            elif room.phase == p.RESULTS:
                kind = rng.choices(
                    (
                        "rematch",
                        "leave",
                        "join",
                        "move",
                        "ping",
                        "chat",
                        "rename",
                        "claim",
                        "get_rating",
                        "get_ratings",
                        "daily",
                    ),
                    (30, 4, 3, 3, 1, 3, 1, 1, 1, 1, 3),
                )[0]
            else:  # countdown, dealing, or watching a race
                end = 2 if room.phase != p.RACING else 0.2
                kind = rng.choices(
                    ("ping", "move", "end_race", "join", "leave", "ready", "chat"), (10, 10, end, 2, 1, 2, 4)
                )[0]
        return self._build(kind, slot, core, codes, pid)

    def _hello(self, slot: Slot) -> dict[str, object]:
        rng = self.rng
        hello: dict[str, object] = {
            "type": "hello",
            "v": p.PROTOCOL_VERSION,
            "name": rng.choice(("Ann", "Bob", "Cy", "Dee", "Éa")),
        }
        if self.tokens and rng.random() < 0.05:
            hello["token"] = rng.choice(self.tokens)  # another client's seat: one player, two connections
        elif slot.token is not None and rng.random() < 0.6:
            hello["token"] = slot.token
        elif rng.random() < 0.05:
            hello["token"] = f"t{rng.getrandbits(64):x}"
        if rng.random() < 0.1:
            hello["bot"] = True
        if rng.random() < 0.3:  # a claimed player (once one of these secrets has claimed a name)
            hello["identity"] = rng.choice(FUZZ_SECRETS)
        return hello

    def _build(self, kind: str, slot: Slot, core: ServerCore, codes: list[str], pid: str) -> dict[str, object]:
        rng = self.rng
        msg: dict[str, object] = {"type": kind}
        if kind == "hello":
            return self._hello(slot)
        if kind == "create_room":
            options: dict[str, object] = {}
            if rng.random() < 0.3:
                options["deal"] = rng.choice((rng.randrange(2**64), rng.randrange(100), 4242))
            if rng.random() < 0.4:
                options["max_racers"] = rng.randint(2, 4)
            if rng.random() < 0.3:
                options["undo"] = rng.random() < 0.5
            if rng.random() < 0.3:
                options["spectator_boards"] = rng.choice(("after", 0, 1, 5))
            if rng.random() < 0.2:
                options["private"] = True
            if rng.random() < 0.2:
                options["time_limit"] = rng.choice((10, 60, 600))
            if rng.random() < 0.1:
                options["bots_allowed"] = False
            if rng.random() < 0.15:
                options["winnable_only"] = True
            if rng.random() < 0.2:
                options["rated"] = rng.choice((True, False))
            msg["options"] = options
        elif kind == "join":
            lobbies = [c for c, r in core.rooms.items() if r.phase == p.LOBBY]
            if lobbies and rng.random() < 0.6:
                code = rng.choice(lobbies)  # most joins land: races with several racers
            elif codes and rng.random() < 0.9:
                code = rng.choice(codes)
            else:
                code = "".join(rng.choices("ABCD2345", k=5))
            if rng.random() < 0.1:
                code = code.lower()[:3] + "-" + code[3:]
            msg["code"] = code
            msg["role"] = "racer" if rng.random() < 0.7 else "spectator"
        elif kind == "ready":
            msg["ready"] = rng.random() < 0.9
        elif kind in ("claim", "rename"):
            msg["name"] = rng.choice(CLAIM_NAMES)
            if kind == "claim":
                msg["identity"] = rng.choice(FUZZ_SECRETS)
        elif kind == "get_ratings" and rng.random() < 0.5:
            msg["limit"] = rng.randint(1, 100)
        elif kind == "get_rating" and rng.random() < 0.7:
            msg["name"] = rng.choice(CLAIM_NAMES)
        elif kind == "get_player":
            msg["name"] = rng.choice((*CLAIM_NAMES, "nobody"))
        elif kind == "daily":  # the daily deal: today's attempt, a replay, another day
            if rng.random() < 0.3:
                msg["replay"] = True
            if rng.random() < 0.1:
                msg["day"] = rng.choice((0, 2**40))
        elif kind == "watch_daily" and rng.random() < 0.2:
            msg["watch"] = False
        elif kind == "get_board":
            if rng.random() < 0.5:
                msg["day"] = rng.choice((0, 2**40, START_MS // 86_400_000, START_MS // 86_400_000 - 1))
            if rng.random() < 0.1:
                msg["boards"] = True
        elif kind == "get_standing" and rng.random() < 0.2:
            msg["offset"] = rng.randrange(50)
        elif kind == "chat":
            msg["text"] = rng.choice(CHAT_TEXTS)
        elif kind in ("kick", "mute"):
            if kind == "mute" and rng.random() < 0.3:
                msg["muted"] = False
            player = core.players.get(pid)
            room = core.rooms.get(player.room) if player is not None and player.room is not None else None
            others = [m for m in room.members if m != pid] if room is not None else []
            msg["player_id"] = rng.choice(others) if others and rng.random() < 0.8 else rng.choice((pid, "p0"))
        elif kind == "rematch":
            if rng.random() < 0.2:
                msg["deal"] = rng.randrange(2**64)
            if rng.random() < 0.3:
                msg["ghosts"] = True  # the last race's racers as ghosts (with a deal: refused)
        elif kind in ("add_ghost", "remove_ghost"):
            self._ghost(msg, core, pid)
        elif kind == "move":
            msg["id"], msg["move"] = self._move(slot, core, pid)
        elif kind == "ping" and rng.random() < 0.5:
            msg["t"] = rng.randrange(-(2**63), 2**63)
        return msg

    def _ghost(self, msg: dict[str, object], core: ServerCore, pid: str) -> None:
        """An add_ghost (a short record of the room's deal, now and then of another, illegal, with
        times that go back, or a part out of step) or a remove_ghost (a ghost of the room, or none)."""
        rng = self.rng
        player = core.players.get(pid)
        room = core.rooms.get(player.room) if player is not None and player.room is not None else None
        if msg["type"] == "remove_ghost":
            ghosts = [g.player_id for g in room.ghosts] if room is not None else []
            msg["player_id"] = rng.choice(ghosts) if ghosts and rng.random() < 0.8 else "ghost:p0"
            return
        deal = room.pending_deal if room is not None and room.pending_deal is not None else 4242
        if rng.random() < 0.1:
            deal = rng.randrange(2**64)
        game = Game(deal)
        moves: list[str] = []
        for _ in range(rng.randint(1, 12)):
            legal = [m for m in game.legal_moves() if m not in (UNDO, RESIGN)]
            if not legal:
                break
            move = rng.choice(legal)
            game.play(move, check_blocked=False)
            moves.append(move)
        if rng.random() < 0.1:
            moves.append(f"{rng.choice(PILES)}>{rng.choice(PILES)}")  # most likely illegal
        msg.update(name=rng.choice(("Past", "Best", "Éa")), deal=deal, moves=moves)
        if rng.random() < 0.7:
            times = sorted(rng.randrange(0, 20_000) for _ in moves)
            if rng.random() < 0.1:
                times.reverse()  # backwards: refused
            msg["times"] = times
        if rng.random() < 0.1:
            msg["more"] = True
        if rng.random() < 0.1:
            msg["offset"] = rng.randint(1, 20)

    def _move(self, slot: Slot, core: ServerCore, pid: str) -> tuple[int, str]:
        rng = self.rng
        if slot.sent and rng.random() < 0.05:
            return rng.choice(slot.sent), "stock>waste"  # a retry of a sent id
        move_id = slot.next_move_id
        slot.next_move_id += 1
        slot.sent.append(move_id)
        del slot.sent[:-8]
        player = core.players.get(pid)
        room = core.rooms.get(player.room) if player is not None and player.room is not None else None
        racer = room.race.racers.get(pid) if room is not None and room.race is not None else None
        roll = rng.random()
        if racer is not None and roll < 0.85:
            legal = racer.game.legal_moves()
            if legal:
                # Foundations first, the stock often: games get deep (an empty stock, blocked checks).
                up = [m for m in legal if ">f" in m]
                if up and rng.random() < 0.6:
                    return move_id, rng.choice(up)
                if legal[0] == "stock>waste" and rng.random() < 0.4:
                    return move_id, legal[0]
                return move_id, rng.choice(legal)
        if roll < 0.90:
            return move_id, UNDO
        if roll < 0.901:
            return move_id, RESIGN
        return move_id, f"{rng.choice(PILES)}>{rng.choice(PILES)}"

    # -------------------------------------------------------------- adversarial values

    def _adversarial(self, message: dict[str, object]) -> object:
        rng = self.rng
        msg: dict[object, object] = {key: value for key, value in message.items()}
        roll = rng.random()
        keys = [k for k in msg if k != "type"]
        if roll < 0.4 and keys:
            msg[rng.choice(keys)] = rng.choice(NASTY_VALUES)
        elif roll < 0.5:
            msg["type"] = rng.choice((*p.CLIENT_TYPES, *p.SERVER_TYPES, "", 7, None, "HELLO", "move "))
        elif roll < 0.6:
            msg[rng.choice(("extra", "options", "id", "v", "x" * 40, 1, None))] = rng.choice(NASTY_VALUES)
        elif roll < 0.7 and keys:
            del msg[rng.choice(keys)]
        elif roll < 0.75:
            msg.pop("type", None)
        elif roll < 0.8:
            return rng.choice(([msg], "hello", 42, None, [[["type"]]], list(msg.items())))
        elif roll < 0.9 and isinstance(msg.get("options"), dict):
            options = dict(msg["options"])  # type: ignore[call-overload]
            options[rng.choice(("deal", "max_racers", "spectator_boards", "time_limit", "winnable_only", "x"))] = (
                rng.choice(NASTY_VALUES)
            )
            msg["options"] = options
        else:
            depth = rng.choice((10, 100, 500, 800))  # deeper ones: byte mutation (the encoder stops at ~1000)
            nested: object = rng.choice(NASTY_VALUES)
            for _ in range(depth):
                nested = [nested]
            msg[rng.choice((*keys, "deep"))] = nested
        return msg

    # -------------------------------------------------------------- byte mutations

    def _mutate(self, data: bytes) -> bytes:
        rng = self.rng
        buf = bytearray(data)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            op = rng.randrange(9)
            if op == 0 and buf:  # bit flips
                for _ in range(rng.randint(1, 4)):
                    i = rng.randrange(len(buf))
                    buf[i] ^= 1 << rng.randrange(8)
            elif op == 1 and buf:  # truncation
                del buf[rng.randrange(len(buf)) :]
            elif op == 2 and self.recent:  # splice with another valid frame
                other = rng.choice(self.recent)
                cut, at = rng.randrange(len(buf) + 1), rng.randrange(len(other) + 1)
                buf = buf[:cut] + other[at:]
            elif op == 3:  # plant a nasty marker
                at = rng.randrange(len(buf) + 1)
                buf[at:at] = rng.choice(NASTY_BYTES)
            elif op == 4 and buf:  # overwrite a byte
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            elif op == 5:  # deep nesting
                depth = rng.choice((50, 500, 1200, 3000))
                buf = bytearray(rng.choice((b"\x91", b"\x81\xa1k")) * depth + bytes(buf or b"\xc0"))
            elif op == 6 and buf:  # repeat a chunk
                i = rng.randrange(len(buf))
                j = min(len(buf), i + rng.randint(1, 16))
                buf[j:j] = buf[i:j] * rng.randint(1, 20)
            elif op == 7:  # random bytes
                buf = bytearray(rng.randbytes(rng.randint(0, 40)))
            elif op == 8:  # a huge int in place of a small one
                at = rng.randrange(len(buf) + 1)
                buf[at:at] = rng.choice((b"\xcf", b"\xd3")) + rng.randbytes(8)
        return bytes(buf[: MAX_FRAME + 64])


# ---------------------------------------------------------------- the driver


class FuzzDriver:
    """One world (a store, a core, a few fake connections) fed frame after frame.

    :meth:`step` generates and feeds one frame; :meth:`feed` feeds a given frame (hypothesis
    uses it). Both return the violations that frame caused (empty if none)."""

    def __init__(
        self,
        seed: int | str,
        *,
        slots: int = 6,
        faults: StoreFaults | None = None,
        core_factory: Callable[[CoreConfig, Entropy], ServerCore] = ServerCore,
        restart_chance: float = 0.0003,
        full_replay_every: int = 500,
        first_frame: int = 0,
        room_ttl_s: float | None = None,
    ) -> None:
        self.rng = random.Random(f"fuzz:{seed}")
        self.clock_ms = START_MS
        self.store = MemoryStore(clock=lambda: self.clock_ms / 1000)
        self.faults = faults if faults is not None else default_faults()
        self.core_factory = core_factory
        # Half the worlds decide blocked positions as a live server does; the others leave most
        # of them to the exact check, answered later (CheckBlocked, BlockedChecked).
        self.config = fuzz_config(BLOCKED_BUDGET if self.rng.random() < 0.5 else 2)
        if room_ttl_s is not None:
            self.config = dataclasses.replace(self.config, room_ttl_s=room_ttl_s)
        self.entropy = FuzzEntropy(random.Random(f"entropy:{seed}"))
        self.core = core_factory(self.config, self.entropy)
        self.runner = self._new_runner()
        self.invariants = Invariants(self.core, self.store)
        self.generator = FrameGenerator(random.Random(f"frames:{seed}"))
        self.slots = [Slot() for _ in range(slots)]
        self.codes: list[str] = []
        self.restart_chance = restart_chance
        self.full_replay_every = full_replay_every
        self._next_conn = 0
        self.frames = 0
        self.first_frame = first_frame  # the campaign index of this world's first frame (for traces)
        self.events = 0
        self.messages_out = 0
        self.counts: Counter[str] = Counter()
        self.trace: list[str] | None = None  # set to a list to record what happens (reproducers)
        self.last_frame = b""
        self.last_conn: int | None = None
        # (connection, move id) -> the frame that sent it, until that connection gets its answer
        # (move_ok, move_rejected, or an error with its id): every move gets one (docs/protocol.md).
        self.unanswered: dict[tuple[int, int], int] = {}

    def _new_runner(self) -> EffectRunner:
        runner = EffectRunner(self.store, random.Random(self.rng.random()), self.faults, self._deliver)
        runner.now = self.clock_ms
        runner.core = self.core
        runner.on_close = self._closed_by_server
        return runner

    # -------------------------------------------------------------- delivery

    def _deliver(self, conn: int | None, player_id: str | None, message: p.ServerMessage) -> None:
        self.messages_out += 1
        kind = p.message_type(message)
        self.counts[f"out:{kind}"] += 1
        if isinstance(message, p.Error):
            self.counts[f"error:{message.code}"] += 1
        self.invariants.check_message(conn, player_id, message)
        if conn is not None and isinstance(message, p.MoveOk | p.MoveRejected | p.Error):
            self._answered(conn, message.id)
        if self.trace is not None:
            self.trace.append(f"  -> conn {conn} ({player_id}): {kind} {_short(message)}")
        slot = next((s for s in self.slots if s.conn == conn), None) if conn is not None else None
        if isinstance(message, p.Welcome) and slot is not None:
            slot.player_id, slot.token = message.player_id, message.token
            if message.token not in self.generator.tokens:
                self.generator.tokens.append(message.token)
        elif isinstance(message, p.Room) and message.code not in self.codes:
            self.codes.append(message.code)
            del self.codes[:-30]

    def _answered(self, conn: int, move_id: int | None) -> None:
        if move_id is not None and self.unanswered.pop((conn, move_id), None) is not None:
            self.counts["moves_answered"] += 1

    # -------------------------------------------------------------- events

    def dispatch(self, event: Event) -> None:
        """Hand one event to the core, carry out its effects, and then every follow-up event."""
        queue = self.runner.events
        queue.append(event)
        handled = 0
        while queue:
            ev = queue.popleft()
            handled += 1
            if handled > EVENTS_PER_FRAME_LIMIT:
                queue.clear()
                raise _Livelock(f"more than {EVENTS_PER_FRAME_LIMIT} events for one frame (last: {ev!r:.300})")
            self.runner.now = self.clock_ms
            if self.trace is not None:
                self.trace.append(f"  event {type(ev).__name__}")
            effects = self.core.handle(ev)
            self.events += 1
            self.invariants.secrets_changed()
            self.runner.execute_all(effects)

    def _connect(self, slot: Slot) -> None:
        self._next_conn += 1
        slot.conn = self._next_conn
        self.runner.conn_opened(slot.conn)
        self.dispatch(Connected(slot.conn, self.clock_ms))

    def _disconnect_conn(self, conn: int) -> None:
        slot = next((s for s in self.slots if s.conn == conn), None)
        if slot is None:
            return
        slot.conn = None
        self.runner.conn_ended(conn)
        self.unanswered = {key: at for key, at in self.unanswered.items() if key[0] != conn}
        self.runner.events.append(Disconnected(conn, self.clock_ms))

    def _closed_by_server(self, conn: int) -> None:
        """A CloseConnection (a newer connection resumed the player): the socket ends, its slot
        connects afresh with its next frame."""
        if any(s.conn == conn for s in self.slots):
            self._disconnect_conn(conn)
            return
        self.runner.conn_ended(conn)
        self.unanswered = {key: at for key, at in self.unanswered.items() if key[0] != conn}
        self.runner.events.append(Disconnected(conn, self.clock_ms))

    def advance(self, ms: int) -> None:
        """Let time pass, firing the rooms' wakes in order, as the shell's timers would."""
        target = self.clock_ms + ms
        while (wake := self.runner.next_wake(target, self.clock_ms)) is not None:
            self.clock_ms = wake.now
            self.counts["ticks"] += 1
            self.dispatch(wake)
        self.clock_ms = target

    def _restart(self) -> None:
        """The server process dies and a new one starts on the same store: every connection
        drops, every store answer in flight is lost, rooms are rebuilt from the store on demand."""
        self.counts["restarts"] += 1
        self.core = self.core_factory(self.config, self.entropy)
        old = self.runner
        self.runner = self._new_runner()
        self.runner.notes, self.runner.counts = old.notes, old.counts  # the campaign's figures go on
        self.runner.expiries = old.expiries  # the store's expiries outlive the process
        self.invariants.reset_core(self.core)
        self.unanswered.clear()  # every connection dropped with the process
        for slot in self.slots:
            slot.conn = None

    # -------------------------------------------------------------- the shell's frame handling

    def _on_frame(self, conn: int, frame: bytes) -> None:
        if len(frame) > MAX_FRAME:
            self.counts["frame_too_big"] += 1  # the WebSocket layer closes the connection (1009)
            self._disconnect_conn(conn)
            self.dispatch_pending()
            return
        try:
            msg = p.decode_client(frame)
        except p.ProtocolError as exc:
            self.counts[f"decode:{exc.code}"] += 1
            self.runner.execute(Reply(conn, exc.to_message()))
            return
        self.counts[f"in:{p.message_type(msg)}"] += 1
        if isinstance(msg, p.Move):
            self.unanswered.setdefault((conn, msg.id), self.first_frame + self.frames - 1)
        # A resume, a join of a room not in memory and a room list are read from the store
        # through the core's effects (LookupToken, LoadRoom, ListRooms), like every store read.
        if isinstance(msg, p.Hello):
            self.dispatch(HelloEvent(conn, msg, self.clock_ms))
        else:
            self.dispatch(ClientEvent(conn, msg, self.clock_ms))

    def dispatch_pending(self) -> None:
        queue = list(self.runner.events)
        self.runner.events.clear()
        for event in queue:
            self.dispatch(event)

    # -------------------------------------------------------------- one frame

    def _between_frames(self) -> None:
        """What happens between two frames: time passes, slow store answers arrive,
        connections drop and come back, sometimes the whole server restarts."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.80:
            ms = rng.randrange(0, 50)
        elif roll < 0.98:
            ms = rng.randrange(50, 1000)
        elif roll < 0.998:
            ms = rng.randrange(1000, 15_000)  # forfeits, countdowns, time limits
        else:
            ms = rng.randrange(15_000, 200_000)  # grace periods, idle lobbies
        self.advance(ms)
        if self.runner.held and rng.random() < 0.5:
            self.runner.release(rng.randint(1, 3))
            self.dispatch_pending()
        if rng.random() < 0.0015:
            slot = rng.choice(self.slots)
            if slot.conn is not None:
                self.counts["disconnects"] += 1
                self._disconnect_conn(slot.conn)
                self.dispatch_pending()
        if rng.random() < self.restart_chance:
            self._restart()

    def step(self) -> list[str]:
        """Generate one frame for a random connection, feed it, check the invariants."""
        self._between_frames()
        slot = self.rng.choice(self.slots)
        racing = [s for s in self.slots if s.conn is not None and self._racing(s)]
        if racing and self.rng.random() < 0.5:
            slot = self.rng.choice(racing)  # racers get more frames: games get deep
        if slot.conn is None:
            self._connect(slot)
        assert slot.conn is not None
        frame, how = self.generator.frame(slot, self.core, self.codes)
        self.counts[f"frames:{how}"] += 1
        return self.feed(slot.conn, frame)

    def _racing(self, slot: Slot) -> bool:
        player = self.core.players.get(slot.player_id) if slot.player_id is not None else None
        room = self.core.rooms.get(player.room) if player is not None and player.room is not None else None
        return (
            room is not None and room.phase == p.RACING and room.race is not None and slot.player_id in room.race.racers
        )

    def feed(self, conn: int, frame: bytes) -> list[str]:
        """Feed one frame from ``conn`` (connected first if it is new), then check the invariants."""
        if conn not in self.runner.live_conns:
            slot = next((s for s in self.slots if s.conn is None), None)
            if slot is not None:
                slot.conn = conn
            self._next_conn = max(self._next_conn, conn)
            self.runner.conn_opened(conn)
            self.dispatch(Connected(conn, self.clock_ms))
        self.frames += 1
        self.last_frame, self.last_conn = frame, conn
        if self.trace is not None:
            self.trace.append(f"frame {self.first_frame + self.frames - 1} from conn {conn}: {frame.hex()}")
        self._on_frame(conn, frame)
        forgotten = self.runner.forgotten(self.clock_ms)
        self.invariants.check_racers(full=self.frames % self.full_replay_every == 0, forgotten=forgotten)
        self.invariants.check_members()
        found, self.invariants.violations = self.invariants.violations, []
        return list(dict.fromkeys(found))  # one message to two connections breaks it once

    def finish(self) -> list[str]:
        """Let every held store answer arrive and every timer fire, then check every log from scratch."""
        self._settle()
        # A minute more (past store_outage_ms and every back-off): every move sent has its answer.
        for _ in range(60):
            self.advance(1000)
            self._settle()
        for (conn, move_id), frame in sorted(self.unanswered.items(), key=lambda item: item[1]):
            if conn in self.runner.live_conns:
                self.invariants.violations.append(
                    f"answer: move id {move_id} sent by conn {conn} in frame {frame} was never answered"
                )
        self.invariants.check_racers(full=True, forgotten=self.runner.forgotten(self.clock_ms))
        found, self.invariants.violations = self.invariants.violations, []
        return found

    def _settle(self) -> None:
        for _ in range(100):
            if not self.runner.held:
                break
            self.runner.release(len(self.runner.held))
            self.dispatch_pending()

    def stats(self) -> FuzzStats:
        counts = Counter(self.counts)
        counts.update(self.runner.counts)
        for note, n in self.runner.notes.items():
            counts[note if note.startswith("fault:") else f"note:{note}"] += n
        return FuzzStats(
            frames=self.frames,
            events=self.events,
            messages_out=self.messages_out,
            views_checked=self.invariants.views_checked,
            replays_checked=self.invariants.replays_checked,
            full_replays=self.invariants.full_replays,
            counts=counts,
        )


class _Livelock(Exception):
    pass


def stress_faults() -> StoreFaults:
    """Five times the default failure rates and many more late answers (``--stress``)."""
    return StoreFaults(
        append_lost=0.05,
        append_uncertain=0.05,
        append_foreign=0.05,
        register_fails=0.05,
        create_fails=0.05,
        read_fails=0.05,
        defer=0.3,
        blocked_unknown=0.2,
        no_deal=0.3,
    )


def default_faults() -> StoreFaults:
    return StoreFaults(
        append_lost=0.01,
        append_uncertain=0.01,
        append_foreign=0.01,
        register_fails=0.01,
        create_fails=0.01,
        read_fails=0.01,
        defer=0.08,
        blocked_unknown=0.05,
        no_deal=0.2,
    )


def _short(message: p.ServerMessage) -> str:
    text = repr(message)
    return text if len(text) <= 160 else text[:157] + "..."


# ---------------------------------------------------------------- campaigns


@dataclass
class CampaignResult:
    seed: int
    frames: int
    seconds: float
    failures: list[FuzzFailure]
    stats: FuzzStats

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def run_campaign(
    frames: int,
    seed: int,
    *,
    episode_frames: int = 5000,
    start_frame: int = 0,
    max_failures: int = 10,
    core_factory: Callable[[CoreConfig, Entropy], ServerCore] = ServerCore,
    faults: StoreFaults | None = None,
    full_replay_every: int = 500,
    room_ttl_s: float | None = None,
    stress: bool = False,
    progress: Callable[[int, float], None] | None = None,
    trace: Callable[[str], None] | None = None,
) -> CampaignResult:
    """Frames ``start_frame`` .. ``frames - 1`` of the campaign ``seed``, in episodes of
    ``episode_frames`` (each a fresh world). Starting mid-episode replays that episode from its
    start, silently, so the frame at ``start_frame`` is exactly the one a full run fed.
    ``room_ttl_s``: how long the store keeps a room after its last use (the core's setting;
    default: 6 h, longer than any episode's fake time). ``stress``: ten clients, the store's
    failures five times as often (:func:`stress_faults`), a restart every ~500 frames."""
    failures: list[FuzzFailure] = []
    stats = FuzzStats()
    started = time.perf_counter()
    episode = start_frame // episode_frames
    options = ("" if room_ttl_s is None else f" --room-ttl {room_ttl_s:g}") + (" --stress" if stress else "")
    if stress and faults is None:
        faults = stress_faults()
    fed = 0

    def fail(index: int, violation: str, frame_hex: str = "", conn: int | None = None, stack: str = "") -> None:
        kind = violation.split(":", 1)[0]
        failures.append(FuzzFailure(seed, episode, index, kind, violation, frame_hex, conn, stack, options))

    while episode * episode_frames < frames and len(failures) < max_failures:
        first = episode * episode_frames
        last = min(frames, first + episode_frames)
        driver = FuzzDriver(
            f"{seed}:{episode}",
            core_factory=core_factory,
            faults=faults,
            full_replay_every=full_replay_every,
            first_frame=first,
            room_ttl_s=room_ttl_s,
            slots=10 if stress else 6,
            restart_chance=0.002 if stress else 0.0003,
        )
        broken = False
        for index in range(first, last):
            if trace is not None and index >= start_frame:
                driver.trace = []
            found: list[str] = []
            try:
                found = driver.step()
            except _Livelock as exc:
                found = [f"livelock: {exc}"]
            except Exception as exc:
                fail(index, f"exception: {type(exc).__name__}: {exc}", _last_frame(driver), driver.last_conn,
                     traceback.format_exc())  # fmt: skip
                broken = True
            if trace is not None and driver.trace is not None:
                for line in driver.trace:
                    trace(line)
                driver.trace = None
            for violation in found:
                fail(index, violation, _last_frame(driver), driver.last_conn)
                broken = True
            if index >= start_frame:
                fed += 1
            if progress is not None and index % 10_000 == 0 and index:
                progress(index, time.perf_counter() - started)
            if broken or len(failures) >= max_failures:
                break  # the world is in an unknown state: the next episode starts afresh
        if not broken:
            try:
                for violation in driver.finish():
                    fail(last - 1, violation)
            except _Livelock as exc:
                fail(last - 1, f"livelock: {exc}")
            except Exception as exc:
                fail(last - 1, f"exception: {type(exc).__name__}: {exc}", stack=traceback.format_exc())
        stats.merge(driver.stats())
        episode += 1
    stats.frames = fed
    return CampaignResult(seed, fed, time.perf_counter() - started, failures, stats)


def _last_frame(driver: FuzzDriver) -> str:
    return driver.last_frame.hex()
