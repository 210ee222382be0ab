"""The room core's configuration, randomness and in-memory state (plain data, no behaviour beyond queries)."""

from __future__ import annotations

import enum
import random
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from server.core.events import Send
from server.core.records import (
    GhostRecord,
    MemberRecord,
    PlayerRecord,
    RaceRecord,
    RacerInfo,
    RoomRecord,
)
from shared import protocol as p
from shared.engine import BLOCKED_BUDGET, PLAYING, Game
from shared.fairplay import new_salt, random_deal


@dataclass(frozen=True, slots=True)
class CoreConfig:
    countdown_ms: int = 3000
    # The daily deal (docs/daily.md): on or off (plot-server --daily, on there; off for an embedded
    # server, plot practice, and tests that do not ask for it: its day clock prepares each day's
    # deal in the worker pool), a day's length from the Unix epoch (--day-seconds), each attempt's
    # time limit, and how often the day's board is read for its watchers.
    daily: bool = False
    day_seconds: int = 86400
    daily_time_limit_s: int = 1800
    daily_poll_ms: int = 1000
    grace_ms: int = 60_000  # a racer disconnected this long forfeits (resigned)
    member_grace_ms: int = 120_000  # a disconnected lobby (or results) racer is removed after this
    # A disconnected spectator holds nothing worth keeping (no ready mark, no game): its seat goes
    # at once, so closed pages stop counting; one that comes back joins again. (A watching host
    # holds the room: it has member_grace_ms, like a racer in the lobby.)
    spectator_grace_ms: int = 0
    lobby_idle_ms: int = 30 * 60_000  # a lobby (or finished room) nobody touches closes after this
    # The room's leaderboard tick, and the racers' rate: at most ~10 leaderboards per second per room.
    leaderboard_interval_ms: int = 100
    # Spectators (plot watch, the web page): by default as often as racers, so a move reaches a
    # spectator within the 200-ms p99 target (at 5 Hz the coalescing alone takes up to 200 ms:
    # docs/benchmarks.md, "Leaderboard rates"); a host with large audiences lowers it with
    # --spectator-hz, the same changes coalesced over several ticks (docs/protocol.md, "Who gets what").
    spectator_leaderboard_interval_ms: int = 100
    # Between them only the rows whose shown figures changed go out (partial); a whole one at
    # least this often while the race moves, so a client that missed a partial one catches up.
    leaderboard_full_ms: int = 5000
    boards_interval_ms: int = 250  # live spectator boards, when the room allows them
    # A spectator coming or going changes only the spectator count others see: that snapshot is
    # coalesced, at most one per room per interval (latest wins), so n joins do not cost n² entries.
    spectators_interval_ms: int = 100
    max_rooms: int = 1000
    room_ttl_s: float = 24 * 3600  # rooms, logs and results vanish from the store this long after use
    # States the blocked check may spend per move on the event loop (shared.engine.BLOCKED_BUDGET);
    # a position it cannot decide goes to the shell's worker process (CheckBlocked).
    blocked_budget: int | None = BLOCKED_BUDGET
    # A move whose write failed gets a definite answer this long after the first failure at the
    # latest: played, or move_rejected store_unavailable (docs/protocol.md, section 5).
    store_outage_ms: int = 10_000
    retry_first_ms: int = 50  # the first retry of a failed write waits this long; each next one twice as long ...
    retry_max_ms: int = 2000  # ... up to this
    # Moves a racer may have queued behind the one being written (its head). A client that sends
    # ahead of its answers fills the queue; a move past it is answered `busy` at once, with
    # retry_ms=queue_retry_ms (one value, not spread: one client's refused moves come back in
    # the order sent), and nothing queued is touched. 0: no bound (the message rate's alone).
    max_queued_moves: int = 32
    queue_retry_ms: int = 250
    # A move that arrives while the shell's append pipeline is backed up (ClientEvent.load) is
    # answered `busy` with retry_ms spread over half to one and a half times this, so that the
    # moves refused in one turn do not all come back in one turn.
    busy_retry_ms: int = 250
    # A player made by hello alone is kept this long in the store, until it joins a room (then the
    # store's own player lifetime applies): identity churn alone must not grow the store.
    new_player_ttl_s: float = 3600.0
    # Several nodes on one store (docs/scaling.md, "Several nodes"): a member's presence comes from
    # the stored record (the node holding its connection keeps it there), not from this node's
    # connections; other nodes' changes arrive as RoomChanged and RemoteMoves.
    shared_rooms: bool = False
    node_id: str = ""  # several nodes: this node's name, recorded with the members connected to it
    # Chat (docs/protocol.md, "Chat"): the lines a room keeps for joiners, and each player's rate:
    # at most chat_burst lines in any chat_window_ms. A room takes at most chat_room_per_s lines in
    # any second whoever says them: each line is a save of the room's record (docs/store.md).
    chat_history: int = 50
    chat_burst: int = 5
    chat_window_ms: int = 10_000
    chat_room_per_s: int = 10


class Entropy:
    """Where the core's randomness comes from (tests inject a seeded one). Cryptographic by default."""

    def room_code(self) -> str:
        return "".join(secrets.choice(p.ROOM_CODE_ALPHABET) for _ in range(p.ROOM_CODE_LENGTH))

    def deal(self) -> int:
        return random_deal()

    def salt(self) -> str:
        return new_salt()

    def player_id(self) -> str:
        return "p" + secrets.token_hex(8)

    def token(self) -> str:
        return secrets.token_urlsafe(24)  # 192 bits

    def spread(self, n: int) -> int:
        """An index below ``n`` that spreads retries (nothing secret rides on it: not cryptographic)."""
        return random.randrange(n)


@dataclass(slots=True)
class PlayerState:
    player_id: str
    name: str
    bot: bool
    token_hash: str
    room: str | None = None
    conns: set[int] = field(default_factory=set)
    created_ms: int = 0
    chat_times: deque[int] = field(default_factory=deque)  # when its recent chat lines were taken (ms)
    profile_id: str | None = None  # bound to this profile: ``name`` is its claimed name (docs/players.md)

    def record(self) -> PlayerRecord:
        return PlayerRecord(
            player_id=self.player_id,
            name=self.name,
            bot=self.bot,
            room=self.room,
            created_ms=self.created_ms,
            profile_id=self.profile_id,
        )

    def racer_record(self, node: str, *, ready: bool) -> MemberRecord:
        """This player as a new racer of a room held on ``node``."""
        return MemberRecord(
            player_id=self.player_id,
            name=self.name,
            bot=self.bot,
            role=p.RACER,
            ready=ready,
            token_hash=self.token_hash,
            node=node,
            profile_id=self.profile_id,
        )


@dataclass(slots=True)
class MemberState:
    player_id: str
    name: str
    bot: bool
    role: str
    ready: bool
    token_hash: str
    left_ms: int | None = None
    node: str = ""  # several nodes: the node holding its connection, while connected
    claim: int = 0  # several nodes: its seat's claim count (MemberRecord.claim)
    muted: bool = False  # the host muted its chat
    profile_id: str | None = None  # a claimed player's profile (its name shows the claimed mark)


@dataclass(slots=True)
class PendingMove:
    id: int | None  # None: a server-made entry (forfeit, leaving, kicked)
    move: str
    conn: int | None


class LogState(enum.Enum):
    """Where a racer's write-ahead log stands. One entry at a time is decided, the *head*: queued
    moves behind it wait, in order, since moves are positional (``waste>t3`` means whatever card
    is on the waste then). See :data:`LOG_TRANSITIONS` and docs/architecture.md."""

    IDLE = "idle"  # no head: the next queued move is checked and written
    WRITING = "writing"  # the head's append is in flight
    REREADING = "rereading"  # the head's outcome is unknown or the log moved: the log is re-read
    RETRYING = "retrying"  # the head is not in the log: written again at ``retry_at`` (back-off)
    OUTAGE = "outage"  # the log could not be re-read by ``give_up_at``: moves are answered store_unavailable

    # Members are singletons: hash by identity. Enum's own __hash__ is Python code (hash of the name),
    # and every write-ahead step looks the state up in LOG_TRANSITIONS.
    __hash__ = object.__hash__


# The members as module names, for the move path: on Python 3.11 a member read through its class
# (``LogState.IDLE``) goes through EnumType's ``__getattr__`` hook, about 150 ns against 30.
LOG_IDLE: Final = LogState.IDLE
LOG_WRITING: Final = LogState.WRITING
LOG_REREADING: Final = LogState.REREADING
LOG_RETRYING: Final = LogState.RETRYING
LOG_OUTAGE: Final = LogState.OUTAGE

# What may follow what, and why. Anything else is a bug (the core raises, and the room is rebuilt).
LOG_TRANSITIONS: dict[LogState, frozenset[LogState]] = {
    # a queued move passed its checks / another node's entries left a gap (several nodes: re-read)
    LogState.IDLE: frozenset({LogState.WRITING, LogState.REREADING}),
    LogState.WRITING: frozenset({LogState.IDLE, LogState.REREADING}),  # stored / uncertain, conflict, unplayable
    LogState.REREADING: frozenset({LogState.IDLE, LogState.RETRYING, LogState.OUTAGE}),  # landed / not / no answer
    LogState.RETRYING: frozenset({LogState.WRITING, LogState.IDLE}),  # back-off over / refused, given up, race over
    LogState.OUTAGE: frozenset({LogState.IDLE}),  # the log was read at last: the racer is resynchronised
}


# A racer's write-ahead state, cheaply (no game): state, head, head_length, head_t, attempts,
# last_failure, retry_at, give_up_at, queue. None: idle with nothing queued (the common case).
LogSnapshot = tuple[
    "LogState", "PendingMove | None", int, int, int, "str | None", "int | None", "int | None", tuple["PendingMove", ...]
]


@dataclass(slots=True)
class RacerState:
    info: RacerInfo
    game: Game
    times: list[int] = field(default_factory=list)  # accept time (ms from start) of each entry
    log_length: int = 0  # entries in the store's log (== len(game.entries) unless a stored entry was unreadable)
    ids: dict[int, int] = field(default_factory=dict)  # client move id -> seq it got
    id_moves: dict[int, str] = field(default_factory=dict)  # client move id -> the move applied under it
    pending_ids: dict[int, str] = field(default_factory=dict)  # ids queued or at the head -> their move
    queue: deque[PendingMove] = field(default_factory=deque)
    state: LogState = LogState.IDLE
    head: PendingMove | None = None  # the entry being decided (WRITING, REREADING, RETRYING)
    head_length: int = 0  # the log length its append expects
    head_t: int = 0  # its accept time (ms from the start)
    checked: tuple[int, int] | None = None  # a plain move head's piles, as checked (every head is played once stored)
    checked_at: int = 0  # the game's entries when it was checked: played unchecked only on that position
    attempts: int = 0  # failed writes of the head so far (the back-off grows with them)
    last_failure: str | None = None  # why its last write failed: uncertain, conflict
    retry_at: int | None = None  # RETRYING: when the head is written again
    give_up_at: int | None = None  # from the head's first failure: a definite answer by then
    cards_ms: int = 0  # time of the entry that last changed the foundation count (docs/rules.md, Race ranking)
    forfeit_at: int | None = None
    delayed: Game | None = None  # spectators' delayed board (rooms that allow live boards)
    delayed_n: int = 0
    blocked_asked: int | None = None  # entries of the position whose exact blocked check is in flight
    blocked_at: int | None = None  # entries of a position the exact check found blocked
    # Several nodes: connections whose board waits for this racer's log to be re-read (its seat
    # moved here, and this node's copy may lag the store by entries still on their way over pub/sub).
    boards_owed: list[int] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return self.state is not LOG_IDLE or bool(self.queue)

    @property
    def settled(self) -> bool:
        """The in-memory game matches the store's log: nothing written, in doubt or unread."""
        return self.state is LOG_IDLE or self.state is LOG_RETRYING

    def log_snapshot(self) -> LogSnapshot | None:
        if self.state is LOG_IDLE and not self.queue:
            return None
        return (
            self.state,
            self.head,
            self.head_length,
            self.head_t,
            self.attempts,
            self.last_failure,
            self.retry_at,
            self.give_up_at,
            tuple(self.queue),
        )

    def restore_log(self, snapshot: LogSnapshot | None) -> None:
        """Put a snapshot's write-ahead state on this racer (rebuilt from the log: its game is the log's)."""
        if snapshot is None:
            return
        (state, head, self.head_length, self.head_t, self.attempts, self.last_failure, self.retry_at,
         self.give_up_at, queue) = snapshot  # fmt: skip
        self.state, self.head = state, head
        self.queue = deque(queue)
        self.pending_ids = {q.id: q.move for q in queue if q.id is not None}
        if head is not None and head.id is not None:
            self.pending_ids[head.id] = head.move

    def move_to(self, state: LogState) -> None:
        if state not in LOG_TRANSITIONS[self.state]:
            change = f"{self.state.value} -> {state.value}"
            raise RuntimeError(f"racer {self.info.player_id}: log state {change} is not allowed")
        self.state = state


@dataclass(slots=True)
class Loading:
    """A room being read from the store (LoadRoom), and what waits for it."""

    joins: list[tuple[int, p.Join]] = field(default_factory=list)  # connection, its join
    dailies: list[tuple[int, p.Daily]] = field(default_factory=list)  # connection, its daily (server/core/daily.py)
    resumes: list[tuple[int, PlayerRecord, str]] = field(default_factory=list)  # connection, player, token
    rebuild: str | None = None  # why it was dropped from memory (then its members are resynchronised)
    members: list[str] = field(default_factory=list)  # members when dropped (told if the store has nothing)
    racers: dict[str, LogSnapshot | None] = field(default_factory=dict)  # write-ahead state carried over
    answered: set[str] = field(default_factory=set)  # racers whose write was answered meanwhile
    version_floor: int = 0  # the rebuilt room's version is at least this (clients never go back)
    # Several nodes, a read-back (rebuild "remote"): the copy's phase and race, and its racers' log
    # lengths, before it. Members who had them are sent only the new room (not their board again)
    # when these did not change.
    shown: tuple[str, int] | None = None
    lengths: dict[str, int] = field(default_factory=dict)


class Audience(enum.Enum):
    """Who a leaderboard feed goes to: each audience gets the race's leaderboard at its own rate."""

    RACERS = "racers"
    SPECTATORS = "spectators"


@dataclass(slots=True)
class LeaderboardFeed:
    """One audience's coalesced leaderboard of a race: what it was last sent and when."""

    # When its last frame went out: the next one no sooner than its audience's interval later. A
    # change after a quiet spell therefore goes out with the room's next tick, not a whole
    # (slower) interval later.
    sent_ms: int = 0
    # A tick saw changes this feed was not due to send yet (spectators between their frames).
    behind: bool = False
    full_ms: int = 0  # when its last whole leaderboard went out
    stale: bool = False  # rows went out partly, or not at all: moves and times shown lag behind
    # Each racer's figures as last sent (cards, status, rank, connected): a row goes again only
    # when they change (docs/protocol.md, "leaderboard"). Empty: the next one is whole.
    sent: dict[str, tuple[int, str, int, bool]] = field(default_factory=dict)

    def reset(self, now: int) -> None:
        """Nobody of this audience is in the room: nothing is sent, and the next one is whole
        (the rows a newcomer holds are then not judged against rows nobody received). It counts
        as a whole one sent now, so moves that leave it stale wake the room once per
        ``leaderboard_full_ms`` at most, not once each."""
        self.behind = False
        self.stale = False
        self.full_ms = now
        self.sent.clear()


@dataclass(slots=True)
class GhostState:
    """A ghost in a race (docs/ghosts.md): its record's entries played on ``game`` as their times
    come (the core's deadline table wakes the room for the next), nothing else."""

    record: GhostRecord
    game: Game
    shown: int = 0  # entries played so far (those whose time has come)
    cards_ms: int = 0  # time of the shown entry that last changed the foundation count
    delayed: Game | None = None  # spectators' delayed board (rooms that allow live boards)
    delayed_n: int = 0

    @property
    def elapsed_ms(self) -> int:
        return self.record.times[self.shown - 1] if self.shown else 0

    @property
    def next_ms(self) -> int | None:
        """Race time of the next entry to show, None once every entry is shown."""
        times = self.record.times
        return times[self.shown] if self.shown < len(times) else None

    @property
    def status(self) -> str:
        """The status its row shows: the game's; the record's end once its last entry is shown."""
        if self.shown == len(self.record.moves) and self.game.status == PLAYING:
            return self.record.status
        return self.game.status


@dataclass(slots=True)
class RaceState:
    record: RaceRecord
    racers: dict[str, RacerState]
    lb_dirty: bool = True  # a figure a leaderboard shows may have changed since the room's last tick
    # Its record (deal, salt) is not stored yet (no RoomSaved of it): the start waits for it, so that
    # no race_start carrying its commitment reaches anyone before the store holds what it commits to.
    unstored: bool = False
    lb_checked_ms: int = 0  # the room's last leaderboard tick (at most one per leaderboard_interval_ms)
    racers_feed: LeaderboardFeed = field(default_factory=LeaderboardFeed)
    spectators_feed: LeaderboardFeed = field(default_factory=LeaderboardFeed)
    boards_last_ms: int = 0
    ending: bool = False
    final_rows: list[p.LeaderboardRow] | None = None
    members: dict[str, MemberState] | None = None  # the room's (several nodes: presence is theirs)
    finished: set[str] = field(default_factory=set)  # racers whose game's end was announced (finished)
    ghosts: dict[str, GhostState] = field(default_factory=dict)  # racing beside the racers (docs/ghosts.md)

    @property
    def total_entries(self) -> int:
        """The leaderboard's version: the racers' accepted entries and the ghosts' shown ones."""
        return sum(r.log_length for r in self.racers.values()) + sum(g.shown for g in self.ghosts.values())


@dataclass(slots=True)
class RoomState:
    code: str
    options: p.RoomOptions
    host: str
    phase: str
    version: int
    race_number: int
    members: dict[str, MemberState]
    race: RaceState | None
    pending_deal: int | None
    created_ms: int
    last_activity_ms: int
    wake_at: int | None = None
    needs_save: bool = False
    search: int = 0  # the deal search in flight (phase dealing), 0: none
    snapshot_dirty: bool = False  # members have not yet seen the latest spectator count
    snapshot_last_ms: int = 0  # when the last coalesced snapshot went out
    # Messages for the room's next save to carry (SaveRoom.then): sent once it has landed.
    after_save: list[Send] = field(default_factory=list)
    # Several nodes: the phase and race its members were last shown (a landed save, RoomSaved, or
    # a read-back's snapshots); None: not known, so a read-back sends everyone a fresh snapshot.
    shown: tuple[str, int] | None = None
    chat: list[p.ChatLine] = field(default_factory=list)  # the last lines, oldest first (RoomRecord.chat)
    chat_times: deque[int] = field(default_factory=deque)  # when the room took its lines of the last second
    ghosts: list[GhostRecord] = field(default_factory=list)  # the next race's (RoomRecord.ghosts)
    # A ghost's record arriving in several add_ghost frames (not stored: lost with the room's
    # memory, when the last frame is refused as out of step and the host sends it again).
    ghost_upload: GhostRecord | None = None

    @property
    def leak_proof(self) -> bool:
        return self.options.spectator_boards == "after"

    @property
    def boards_delay_ms(self) -> int | None:
        delay = self.options.spectator_boards
        return None if isinstance(delay, str) else delay * 1000

    @property
    def chosen_deal(self) -> bool:
        if self.race is not None:
            return self.race.record.chosen_deal
        return self.pending_deal is not None

    def racer_ids(self) -> list[str]:
        return [m.player_id for m in self.members.values() if m.role == p.RACER]

    def spectator_ids(self) -> tuple[str, ...]:
        return self.audience_ids(Audience.SPECTATORS)

    def audience_ids(self, audience: Audience) -> tuple[str, ...]:
        role = p.RACER if audience is Audience.RACERS else p.SPECTATOR
        return tuple(m.player_id for m in self.members.values() if m.role == role)

    def member_ids(self) -> tuple[str, ...]:
        return tuple(self.members)


def rules_of(options: p.RoomOptions) -> p.RoomRules:
    return p.RoomRules(
        max_racers=options.max_racers,
        undo=options.undo,
        spectator_boards=options.spectator_boards,
        private=options.private,
        time_limit=options.time_limit,
        bots_allowed=options.bots_allowed,
        winnable_only=options.winnable_only,
        spectator_chat=options.spectator_chat,
        rated=options.rated,
    )


def summary_from_record(record: RoomRecord) -> p.RoomSummary:
    """A room list line from a stored room (for rooms this process has not loaded)."""
    host = next((m.name for m in record.members if m.player_id == record.host), "?")
    chosen = record.race.chosen_deal if record.race is not None else record.pending_deal is not None
    return p.RoomSummary(
        code=record.code,
        host_name=host,
        phase=record.phase,
        racers=sum(1 for m in record.members if m.role == p.RACER),
        max_racers=record.options.max_racers,
        spectators=sum(1 for m in record.members if m.role == p.SPECTATOR),
        undo=record.options.undo,
        chosen_deal=chosen,
        leak_proof=record.options.spectator_boards == "after",
        bots_allowed=record.options.bots_allowed,
        time_limit=record.options.time_limit,
        winnable_only=record.options.winnable_only,
    )
