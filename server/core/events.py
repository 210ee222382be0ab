"""The room core's inputs (events) and outputs (effects). Times are server ms since the epoch.

Frozen msgspec structs, not frozen dataclasses: a frozen dataclass is built field by field through
``object.__setattr__`` (0.5 µs for five fields against 0.1 µs), and a move makes five of these
(docs/benchmarks.md, "The move path at saturation")."""

from __future__ import annotations

from typing import Literal

import msgspec

from server.core.daily_events import BoardRead as BoardRead
from server.core.daily_events import CreateDay as CreateDay
from server.core.daily_events import DailyDealFound as DailyDealFound

# The daily deal's events and effects live in server/core/daily_events.py; they join the unions here.
from server.core.daily_events import DailyTick as DailyTick
from server.core.daily_events import DayLoaded as DayLoaded
from server.core.daily_events import FindDailyDeal as FindDailyDeal
from server.core.daily_events import FinishDaily as FinishDaily
from server.core.daily_events import LoadDay as LoadDay
from server.core.daily_events import ProfileRead as ProfileRead
from server.core.daily_events import PutDailyRow as PutDailyRow
from server.core.daily_events import ReadBoard as ReadBoard
from server.core.daily_events import ReadProfile as ReadProfile
from server.core.daily_events import ReadStanding as ReadStanding
from server.core.daily_events import StandingRead as StandingRead
from server.core.daily_events import WakeDaily as WakeDaily
from server.core.ratings import RatedRacer
from server.core.records import LogEntry, PlayerRecord, ProfileRecord, RoomRecord
from shared.identity import RatingChange, RatingRow
from shared.protocol import ClientMessage, Hello, ServerMessage

# ---------------------------------------------------------------- events (shell -> core)


class Connected(msgspec.Struct, frozen=True):
    conn: int
    now: int


class HelloEvent(msgspec.Struct, frozen=True):
    """A hello, as decoded. A resume token is looked up through the LookupToken effect."""

    conn: int
    msg: Hello
    now: int


class TokenLooked(msgspec.Struct, frozen=True):
    """The answer to LookupToken: the player the token resumes (None: no such player), or
    ``failed`` (the store did not answer)."""

    conn: int
    token_hash: str
    record: PlayerRecord | None
    now: int
    failed: bool = False


class RoomLoaded(msgspec.Struct, frozen=True):
    """The answer to LoadRoom: the stored record (None: no such room) with every racer's move log
    of its current race, or ``failed`` (the store did not answer)."""

    code: str
    record: RoomRecord | None
    logs: dict[str, list[LogEntry]]
    now: int
    failed: bool = False


class RoomsListed(msgspec.Struct, frozen=True):
    """The answer to ListRooms: the listed codes, oldest first, and the stored records of the
    rooms among them that the core did not hold when the shell asked (``ServerCore.has_room``)."""

    conn: int
    codes: list[str]
    records: dict[str, RoomRecord]
    now: int
    failed: bool = False


class PlayerRegistered(msgspec.Struct, frozen=True):
    conn: int
    record: PlayerRecord
    token_hash: str
    token: str
    now: int


class RegisterFailed(msgspec.Struct, frozen=True):
    conn: int
    now: int


class ClientEvent(msgspec.Struct, frozen=True):
    """Any client message but hello, already decoded and validated for shape."""

    conn: int
    msg: ClientMessage
    now: int
    # A move's only: the append pipeline's condition as the shell found it on the message's arrival
    # (server/shell/appends.py): "store", its writes are backed up; "loop", this turn of the event
    # loop has taken on its share of moves; None, neither. The core answers such a move busy.
    load: str | None = None


class RoomCreated(msgspec.Struct, frozen=True):
    conn: int
    record: RoomRecord
    now: int


class RoomCreateFailed(msgspec.Struct, frozen=True):
    conn: int
    record: RoomRecord
    taken: bool  # True: the code exists already (try another); False: the store is unavailable
    now: int


class RoomSaved(msgspec.Struct, frozen=True):
    """A save of the room has landed (and what waited for it went out), a record in this phase and
    race: a race's start waits for its record's. Several nodes: its members have been shown this
    phase and race (``Loading.shown``)."""

    code: str
    phase: str
    race: int
    now: int


class MovePersisted(msgspec.Struct, frozen=True):
    code: str
    race: int
    player_id: str
    length: int  # log length after the append
    now: int


class MovePersistFailed(msgspec.Struct, frozen=True):
    code: str
    race: int
    player_id: str
    # uncertain: StoreUnavailable, the outcome is unknown (the log is re-read before anything else
    # is decided for this racer); conflict: the log length did not match (re-read it); gone: the
    # room or race is not in the store (never retried: the room is rebuilt from the store).
    reason: Literal["uncertain", "conflict", "gone"]
    now: int


class LogReloaded(msgspec.Struct, frozen=True):
    code: str
    race: int
    player_id: str
    entries: list[LogEntry]
    now: int


class Tick(msgspec.Struct, frozen=True):
    """The room's wake-up (``Wake``): its deadlines due by now fire (its leaderboard's are not in
    them: ``LeaderboardTick``)."""

    code: str
    now: int


class LeaderboardTick(msgspec.Struct, frozen=True):
    """The node's shared leaderboard tick (``WakeLeaderboards``): the leaderboard of every room
    due by now, in one event (one timer, one event per tick for all of the node's rooms, not one
    per room)."""

    now: int


class Disconnected(msgspec.Struct, frozen=True):
    conn: int
    now: int


class DealFound(msgspec.Struct, frozen=True):
    """The answer to FindDeal: a deal the solver proved winnable, or None (``detail`` says why)."""

    code: str
    race: int
    search: int
    deal: int | None
    now: int
    detail: str = ""
    busy: bool = False  # no search ran: the server's search queue was full


class BlockedChecked(msgspec.Struct, frozen=True):
    """The answer to CheckBlocked: is the racer's position after its first ``length`` entries
    blocked (the exact check)? None: the check failed (its worker died, the server is stopping)."""

    code: str
    race: int
    player_id: str
    length: int
    blocked: bool | None
    now: int


class RoomChanged(msgspec.Struct, frozen=True):
    """Several nodes on one store (``CoreConfig.shared_rooms``): another node committed a change to
    a room this node holds, or this node's own save lost the compare-and-set. The room as the store
    has it now (the record, None if it is gone, and the current race's move logs) replaces this
    node's copy; racers' write-ahead state is carried over and local members get fresh snapshots.
    ``replay``: this node's room commands the store does not hold yet (their save lost the
    compare-and-set, or was made on the old copy): handled again, in order, on the new copy.
    ``starts``: racers whose log was read from this index on (the entries before it are the ones
    this node's copy held when the read began), not from the start."""

    code: str
    record: RoomRecord | None
    logs: dict[str, list[LogEntry]]
    now: int
    replay: tuple[ClientEvent, ...] = ()
    starts: dict[str, int] = msgspec.field(default_factory=dict)


class RoomStale(msgspec.Struct, frozen=True):
    """Several nodes: the store may hold a newer copy of a room (another node announced a version,
    notices were lost, or this node's save lost the compare-and-set). A room held here is read
    back (ReadBack); ``first``: before the room's queued writes."""

    code: str
    now: int
    first: bool = False


class NodesGone(msgspec.Struct, frozen=True):
    """Several nodes: these nodes stopped renewing their liveness in the store (killed, or cut off
    from Redis). Members the rooms record as connected to them are away from now on."""

    nodes: frozenset[str]
    now: int


class RemoteMoves(msgspec.Struct, frozen=True):
    """Several nodes: entries another node appended to a racer's log (it holds the racer's
    connection), starting at index ``start``. Applied to this node's copy of the racer's game if
    they follow on from it; a gap re-reads the log."""

    code: str
    race: int
    player_id: str
    start: int
    entries: list[LogEntry]
    now: int


class RemoteBatch(msgspec.Struct, frozen=True):
    """Several nodes: what one read of the subscription brought of other nodes' stored entries,
    as runs (each a racer's entries that follow on from each other, one RemoteMoves), in one
    event: the core's per-event work (the error state's snapshot, each touched room's deadline
    table and wake-up) is done once per read, not once per racer. Should a handler raise, every
    room of the batch is rebuilt from the store (the error state)."""

    runs: tuple[RemoteMoves, ...]
    now: int


class ProfileLooked(msgspec.Struct, frozen=True):
    """The answer to LookupProfile: the profile the hello's secret is bound to (None: no such
    profile), or ``failed`` (the store did not answer)."""

    conn: int
    record: ProfileRecord | None
    now: int
    failed: bool = False


class ProfileClaimed(msgspec.Struct, frozen=True):
    """The answer to ClaimProfile. ``created``: the profile is stored; ``taken``: the name (or a
    look-alike) is another profile's, or the secret is bound already (``existing``: its profile);
    ``failed``: the store did not answer (the claim may have landed: claiming again with the same
    secret and name answers ``existing``)."""

    conn: int
    record: ProfileRecord
    outcome: Literal["created", "taken", "failed"]
    now: int
    existing: ProfileRecord | None = None


class ProfileRenamed(msgspec.Struct, frozen=True):
    """The answer to RenameProfile: ``record`` is the profile as stored after it (renamed), or as
    read. ``refused``: the core's rule said no (``code`` and ``reason``: too soon, the same name);
    ``taken``: the new name is another's; ``gone``: no such profile; ``failed``: no answer."""

    conn: int
    outcome: Literal["renamed", "refused", "taken", "gone", "failed"]
    record: ProfileRecord | None
    now: int
    code: str = ""
    reason: str = ""


class RaceRated(msgspec.Struct, frozen=True):
    """The answer to RateRace: each rated racer's change (player id -> change), as stored in its
    profile; ``failed``: the store did not answer (no change is shown)."""

    code: str
    race: int
    ratings: dict[str, RatingChange]
    now: int
    failed: bool = False


class RatingsRead(msgspec.Struct, frozen=True):
    """The answer to ReadRatings: the board's rows, or the profile asked for (None: no such name)."""

    conn: int
    now: int
    board: list[RatingRow] | None = None
    profile: ProfileRecord | None = None
    failed: bool = False


Event = (
    Connected
    | HelloEvent
    | TokenLooked
    | RoomLoaded
    | RoomsListed
    | PlayerRegistered
    | RegisterFailed
    | ClientEvent
    | RoomCreated
    | RoomCreateFailed
    | MovePersisted
    | MovePersistFailed
    | LogReloaded
    | Tick
    | LeaderboardTick
    | Disconnected
    | DealFound
    | BlockedChecked
    | RoomChanged
    | RoomSaved
    | RoomStale
    | RemoteMoves
    | RemoteBatch
    | NodesGone
    | DailyTick
    | DayLoaded
    | DailyDealFound
    | BoardRead
    | ProfileRead
    | StandingRead
    | ProfileLooked
    | ProfileClaimed
    | ProfileRenamed
    | RaceRated
    | RatingsRead
)

# ---------------------------------------------------------------- effects (core -> shell)


class Reply(msgspec.Struct, frozen=True):
    """Send to one connection."""

    conn: int
    message: ServerMessage
    frame: bytes | None = None  # ``message`` encoded already (the busy answers: encoded once, not per refusal)


class Send(msgspec.Struct, frozen=True):
    """Send to every connection of these players (the fan-out). ``droppable`` messages (progress
    that a newer one replaces) are skipped for connections whose write buffer is over the limit."""

    players: tuple[str, ...]
    message: ServerMessage
    droppable: bool = False


class Bind(msgspec.Struct, frozen=True):
    """From now on this connection speaks for this player."""

    conn: int
    player_id: str


class CloseConnection(msgspec.Struct, frozen=True):
    """Close this connection with a WebSocket close ``code`` and ``reason``, after the frames
    already sent to it. The core has forgotten it already: the Disconnected that follows is a
    no-op, and nothing more is sent to it."""

    conn: int
    code: int
    reason: str


class RegisterPlayer(msgspec.Struct, frozen=True):
    """Store a new player, then hand the core PlayerRegistered (or RegisterFailed). ``ttl_s``: its
    store lifetime (a player made by hello alone is kept briefly until it joins a room)."""

    conn: int
    record: PlayerRecord
    token_hash: str
    token: str
    ttl_s: float | None = None


class SavePlayer(msgspec.Struct, frozen=True):
    """Write-behind: the latest record of a player wins. ``ttl_s`` None: the store's player lifetime."""

    record: PlayerRecord
    token_hash: str
    ttl_s: float | None = None


class LookupToken(msgspec.Struct, frozen=True):
    """Find the player this token hash resumes, then hand the core TokenLooked."""

    conn: int
    token_hash: str


class LoadRoom(msgspec.Struct, frozen=True):
    """Read a room's record and its current race's move logs, then hand the core RoomLoaded
    (retrying with back-off while the store does not answer, unless ``once``)."""

    code: str
    once: bool = True


class ListRooms(msgspec.Struct, frozen=True):
    """Read the listed room codes (and the records of rooms the core does not hold), then hand the
    core RoomsListed."""

    conn: int


class CreateRoomRecord(msgspec.Struct, frozen=True):
    """Store a new room (fails if the code is taken), then hand the core RoomCreated/RoomCreateFailed."""

    conn: int
    record: RoomRecord


class SaveRoom(msgspec.Struct, frozen=True):
    """Write-behind with compare-and-set: the latest record of a room wins. ``then``: messages that
    go out only once this save (or a later one of the same room that replaced it) has landed, never
    before (a race's results); dropped if it loses the compare-and-set or is made stale by a
    read-back, whose rebuild sends the stored room's own instead."""

    code: str
    record: RoomRecord
    then: tuple[Send, ...] = ()


class SetListed(msgspec.Struct, frozen=True):
    code: str
    listed: bool


class ExpireRoom(msgspec.Struct, frozen=True):
    """The stored room expires ``seconds`` from now (None: never; a room live in the core)."""

    code: str
    seconds: float | None


class PersistMove(msgspec.Struct, frozen=True):
    """Append ``entry`` to the (room, race, player) log if it holds ``expected_length`` entries,
    then hand the core MovePersisted or MovePersistFailed. Never acknowledged before that."""

    code: str
    race: int
    player_id: str
    expected_length: int
    entry: LogEntry


class ReloadLog(msgspec.Struct, frozen=True):
    code: str
    race: int
    player_id: str


class Wake(msgspec.Struct, frozen=True):
    """Hand the core Tick(code) at ``at_ms`` (replaces any earlier wake of this room; None: none)."""

    code: str
    at_ms: int | None


class WakeLeaderboards(msgspec.Struct, frozen=True):
    """Hand the core LeaderboardTick at ``at_ms`` (replaces any earlier one; None: none). One for
    the whole node: the earliest leaderboard due of any room."""

    at_ms: int | None


class DropRoom(msgspec.Struct, frozen=True):
    """The core forgot this room (closed or emptied): drop its timer."""

    code: str


class FindDeal(msgspec.Struct, frozen=True):
    """Find a random deal the solver proves winnable for this room's race (away from the event
    loop: the search is CPU-bound), then hand the core DealFound with the same ``search``."""

    code: str
    race: int
    search: int


class CheckBlocked(msgspec.Struct, frozen=True):
    """The budgeted blocked check could not decide a racer's position: run the exact check on
    this game record (deal, the first ``length`` entries, undo) away from the event loop (it
    may take seconds), then hand the core BlockedChecked with the same room, race, player and
    length."""

    code: str
    race: int
    player_id: str
    length: int
    deal: int
    entries: tuple[str, ...]
    undo: bool


class ReadBack(msgspec.Struct, frozen=True):
    """Several nodes: read the room back from the store, then hand the core RoomChanged (in the
    room's queue of writes: after them, or before them with ``first``). ``race`` and ``lengths``:
    this node's copy's current race, and each racer's log length in it where a read of that race's
    log may start (racers whose copy lines up with the log; the others are read whole)."""

    code: str
    race: int | None
    lengths: dict[str, int]
    first: bool = False


class KeepCommand(msgspec.Struct, frozen=True):
    """Several nodes: this client command changed these rooms; keep it until a save of each has
    landed (a read-back before that handles it again on the store's copy: RoomChanged.replay)."""

    codes: tuple[str, ...]
    event: ClientEvent


class LookupProfile(msgspec.Struct, frozen=True):
    """Find the profile bound to this secret hash, then hand the core ProfileLooked."""

    conn: int
    secret_hash: str


class ClaimProfile(msgspec.Struct, frozen=True):
    """Store a new profile under its name key and secret hash (Store.create_profile), then hand the
    core ProfileClaimed (when refused, with the profile the secret is bound to, if any)."""

    conn: int
    secret_hash: str
    record: ProfileRecord


class RenameProfile(msgspec.Struct, frozen=True):
    """Rename a profile to ``name``: read it, ask server/core/profiles.py's ``plan_rename``
    whether and how (the core's rule), store it by compare-and-set (read again on a refused
    version), then hand the core ProfileRenamed."""

    conn: int
    profile_id: str
    name: str


class RateRace(msgspec.Struct, frozen=True):
    """Apply a rated race to its racers' profiles (server/core/ratings.py decides each change;
    compare-and-set per profile, recomputed on a refused version), then hand the core RaceRated."""

    code: str
    race: int
    ended_at: int
    racers: tuple[RatedRacer, ...]


class ReadRatings(msgspec.Struct, frozen=True):
    """Read the rating board (``limit`` rows) or, with ``name_key`` or ``profile_id``, one
    profile; then hand the core RatingsRead."""

    conn: int
    limit: int = 0
    name_key: str | None = None
    profile_id: str | None = None


class Note(msgspec.Struct, frozen=True):
    """Something worth a structured log line (the core has no logger: it is pure)."""

    event: str
    fields: dict[str, object]
    level: Literal["info", "warning", "error"] = "info"


Effect = (
    Note
    | Reply
    | Send
    | Bind
    | CloseConnection
    | RegisterPlayer
    | SavePlayer
    | CreateRoomRecord
    | LookupToken
    | LoadRoom
    | ListRooms
    | SaveRoom
    | SetListed
    | ExpireRoom
    | PersistMove
    | ReloadLog
    | Wake
    | WakeLeaderboards
    | DropRoom
    | FindDeal
    | CheckBlocked
    | ReadBack
    | KeepCommand
    | WakeDaily
    | LoadDay
    | FindDailyDeal
    | CreateDay
    | PutDailyRow
    | FinishDaily
    | ReadBoard
    | ReadProfile
    | ReadStanding
    | LookupProfile
    | ClaimProfile
    | RenameProfile
    | RateRace
    | ReadRatings
)
