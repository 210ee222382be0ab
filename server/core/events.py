"""The room core's inputs (events) and outputs (effects). Times are server ms since the epoch."""

from __future__ import annotations

from dataclasses import dataclass

from server.core.records import LogEntry, PlayerRecord, RoomRecord
from shared.protocol import ClientMessage, Hello, ServerMessage

# ---------------------------------------------------------------- events (shell -> core)


@dataclass(frozen=True, slots=True)
class Connected:
    conn: int
    now: int


@dataclass(frozen=True, slots=True)
class HelloEvent:
    """A hello. The shell has already looked the token up: ``resume`` is that player's record
    (None for a new player); ``token_unknown`` says a token was given but matched no player."""

    conn: int
    msg: Hello
    now: int
    resume: PlayerRecord | None = None
    token_unknown: bool = False


@dataclass(frozen=True, slots=True)
class PlayerRegistered:
    conn: int
    record: PlayerRecord
    token_hash: str
    token: str
    now: int


@dataclass(frozen=True, slots=True)
class RegisterFailed:
    conn: int
    now: int


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """Any client message but hello, already decoded and validated for shape."""

    conn: int
    msg: ClientMessage
    now: int


@dataclass(frozen=True, slots=True)
class RoomCreated:
    conn: int
    record: RoomRecord
    now: int


@dataclass(frozen=True, slots=True)
class RoomCreateFailed:
    conn: int
    record: RoomRecord
    taken: bool  # True: the code exists already (try another); False: the store is unavailable
    now: int


@dataclass(frozen=True, slots=True)
class MovePersisted:
    code: str
    race: int
    player_id: str
    length: int  # log length after the append
    now: int


@dataclass(frozen=True, slots=True)
class MovePersistFailed:
    code: str
    race: int
    player_id: str
    conflict: bool  # True: the log length did not match (reload it); False: store unavailable
    now: int


@dataclass(frozen=True, slots=True)
class LogReloaded:
    code: str
    race: int
    player_id: str
    entries: list[LogEntry]
    now: int


@dataclass(frozen=True, slots=True)
class Tick:
    code: str
    now: int


@dataclass(frozen=True, slots=True)
class Disconnected:
    conn: int
    now: int


@dataclass(frozen=True, slots=True)
class DealFound:
    """The answer to FindDeal: a deal the solver proved winnable, or None (``detail`` says why)."""

    code: str
    race: int
    search: int
    deal: int | None
    now: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class BlockedChecked:
    """The answer to CheckBlocked: is the racer's position after its first ``length`` entries
    blocked (the exact check)? None: the check failed (its worker died, the server is stopping)."""

    code: str
    race: int
    player_id: str
    length: int
    blocked: bool | None
    now: int


Event = (
    Connected
    | HelloEvent
    | PlayerRegistered
    | RegisterFailed
    | ClientEvent
    | RoomCreated
    | RoomCreateFailed
    | MovePersisted
    | MovePersistFailed
    | LogReloaded
    | Tick
    | Disconnected
    | DealFound
    | BlockedChecked
)

# ---------------------------------------------------------------- effects (core -> shell)


@dataclass(frozen=True, slots=True)
class Reply:
    """Send to one connection."""

    conn: int
    message: ServerMessage


@dataclass(frozen=True, slots=True)
class Send:
    """Send to every connection of these players (the fan-out). ``droppable`` messages (progress
    that a newer one replaces) are skipped for connections whose write buffer is over the limit."""

    players: tuple[str, ...]
    message: ServerMessage
    droppable: bool = False


@dataclass(frozen=True, slots=True)
class Bind:
    """From now on this connection speaks for this player."""

    conn: int
    player_id: str


@dataclass(frozen=True, slots=True)
class RegisterPlayer:
    """Store a new player, then hand the core PlayerRegistered (or RegisterFailed)."""

    conn: int
    record: PlayerRecord
    token_hash: str
    token: str


@dataclass(frozen=True, slots=True)
class SavePlayer:
    """Write-behind: the latest record of a player wins."""

    record: PlayerRecord
    token_hash: str


@dataclass(frozen=True, slots=True)
class CreateRoomRecord:
    """Store a new room (fails if the code is taken), then hand the core RoomCreated/RoomCreateFailed."""

    conn: int
    record: RoomRecord


@dataclass(frozen=True, slots=True)
class SaveRoom:
    """Write-behind with compare-and-set: the latest record of a room wins."""

    code: str
    record: RoomRecord


@dataclass(frozen=True, slots=True)
class SetListed:
    code: str
    listed: bool


@dataclass(frozen=True, slots=True)
class ExpireRoom:
    code: str
    seconds: float | None


@dataclass(frozen=True, slots=True)
class PersistMove:
    """Append ``entry`` to the (room, race, player) log if it holds ``expected_length`` entries,
    then hand the core MovePersisted or MovePersistFailed. Never acknowledged before that."""

    code: str
    race: int
    player_id: str
    expected_length: int
    entry: LogEntry


@dataclass(frozen=True, slots=True)
class ReloadLog:
    code: str
    race: int
    player_id: str


@dataclass(frozen=True, slots=True)
class Wake:
    """Hand the core Tick(code) at ``at_ms`` (replaces any earlier wake of this room; None: none)."""

    code: str
    at_ms: int | None


@dataclass(frozen=True, slots=True)
class DropRoom:
    """The core forgot this room (closed or emptied): drop its timer."""

    code: str


@dataclass(frozen=True, slots=True)
class FindDeal:
    """Find a random deal the solver proves winnable for this room's race (away from the event
    loop: the search is CPU-bound), then hand the core DealFound with the same ``search``."""

    code: str
    race: int
    search: int


@dataclass(frozen=True, slots=True)
class CheckBlocked:
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


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth a structured log line (the core has no logger: it is pure)."""

    event: str
    fields: dict[str, object]


Effect = (
    Note
    | Reply
    | Send
    | Bind
    | RegisterPlayer
    | SavePlayer
    | CreateRoomRecord
    | SaveRoom
    | SetListed
    | ExpireRoom
    | PersistMove
    | ReloadLog
    | Wake
    | DropRoom
    | FindDeal
    | CheckBlocked
)
