"""The wire protocol between ``plot`` clients and ``plot-server``: every message, declared once.

Frames are binary WebSocket messages, each one MessagePack map with a ``"type"`` field naming
the message (msgspec tagged unions). docs/protocol.md describes every message for people
writing clients in other languages; keep the two in step. Unknown fields are ignored (so a
newer peer may add optional fields); unknown types, missing or wrong-typed fields are errors.

Pure: no I/O, no clock. Both sides import this module.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

# The daily deal's messages live in shared/daily_protocol.py; they join the unions below.
from shared.daily_protocol import Daily as Daily
from shared.daily_protocol import DailyBoard as DailyBoard
from shared.daily_protocol import DailyDay as DailyDay
from shared.daily_protocol import DailyResult as DailyResult
from shared.daily_protocol import DailyRow as DailyRow
from shared.daily_protocol import GetBoard as GetBoard
from shared.daily_protocol import GetPlayer as GetPlayer
from shared.daily_protocol import GetStanding as GetStanding
from shared.daily_protocol import PlayerProfile as PlayerProfile
from shared.daily_protocol import Standing as Standing
from shared.daily_protocol import StandingRow as StandingRow
from shared.daily_protocol import WatchDaily as WatchDaily
from shared.deal import MAX_DEAL
from shared.engine import PileChange, View, apply_changes, view_check

# Ghosts (docs/ghosts.md) live in shared/ghost_protocol.py; these stay importable from here.
from shared.ghost_protocol import BAD_GHOST as BAD_GHOST
from shared.ghost_protocol import GHOST_CHUNK_MAX as GHOST_CHUNK_MAX
from shared.ghost_protocol import GHOST_ENTRIES_MAX as GHOST_ENTRIES_MAX
from shared.ghost_protocol import GHOST_PACE_MS as GHOST_PACE_MS
from shared.ghost_protocol import GHOST_PREFIX as GHOST_PREFIX
from shared.ghost_protocol import GHOST_WRONG_DEAL as GHOST_WRONG_DEAL
from shared.ghost_protocol import MAX_GHOSTS as MAX_GHOSTS
from shared.ghost_protocol import AddGhost as AddGhost
from shared.ghost_protocol import GhostEntry as GhostEntry
from shared.ghost_protocol import RemoveGhost as RemoveGhost

# Profiles and ratings (docs/players.md) live in shared/identity.py; these stay importable from here.
from shared.identity import BAD_IDENTITY as BAD_IDENTITY
from shared.identity import CLAIM_LIMIT as CLAIM_LIMIT
from shared.identity import IDENTITY_ERROR_CODES
from shared.identity import NAME_CLAIMED as NAME_CLAIMED
from shared.identity import NOT_CLAIMED as NOT_CLAIMED
from shared.identity import RENAME_TOO_SOON as RENAME_TOO_SOON
from shared.identity import Claim as Claim
from shared.identity import Claimed as Claimed
from shared.identity import GetRating as GetRating
from shared.identity import GetRatings as GetRatings
from shared.identity import RatedRace as RatedRace
from shared.identity import Rating as Rating
from shared.identity import RatingBoard as RatingBoard
from shared.identity import RatingChange as RatingChange
from shared.identity import RatingHistory as RatingHistory
from shared.identity import RatingRow as RatingRow
from shared.identity import Rename as Rename

# The name rule lives in shared/names.py; these stay importable from here.
from shared.names import NAME_CHARS_MAX as NAME_CHARS_MAX
from shared.names import NAME_MAX as NAME_MAX
from shared.names import check_name as check_name

# 2: small move acknowledgements (changes and a check value, docs/protocol.md), and sync.
PROTOCOL_VERSION: Final = 2

# ---------------------------------------------------------------- error codes (stable strings)

MALFORMED: Final = "malformed"  # not MessagePack, or not a map
UNKNOWN_TYPE: Final = "unknown_type"  # no "type" field, or a type this server does not know
BAD_FIELD: Final = "bad_field"  # a field missing, of the wrong type or out of range (message names it)
WRONG_PHASE: Final = "wrong_phase"  # not now: hello first, a move before the race, joining twice...
NOT_HOST: Final = "not_host"  # only the room's host may do that
NOT_READY: Final = "not_ready"  # start while a racer is not ready
NOT_IN_ROOM: Final = "not_in_room"  # a room action outside any room
ILLEGAL_MOVE: Final = "illegal_move"  # the engine refused the move (reason says why)
UNKNOWN_ROOM: Final = "unknown_room"  # no room with that code
UNKNOWN_PLAYER: Final = "unknown_player"  # kick: no such member in this room
ROOM_FULL: Final = "room_full"  # every racer seat is taken
BOTS_NOT_ALLOWED: Final = "bots_not_allowed"  # a bot tried to race in a room that refuses bots
BAD_TOKEN: Final = "bad_token"  # hello with a resume token the server does not know
RATE_LIMITED: Final = "rate_limited"  # too many messages per second (the connection is closed, 1008)
UNSUPPORTED_VERSION: Final = "unsupported_version"  # hello with another protocol version (then closed, 1002)
NAME_INVALID: Final = "name_invalid"  # display name empty, too long, or with control characters
NAME_TAKEN: Final = "name_taken"  # join: another member of the room shows the same name (or one that looks it)
STORE_UNAVAILABLE: Final = "store_unavailable"  # the store did not answer: nothing happened, retry later
BUSY: Final = "busy"  # the server's store writes are backed up: the move was not played, resend it later
SERVER_FULL: Final = "server_full"  # the server's connection or room limit is reached
NO_WINNABLE_DEAL: Final = "no_winnable_deal"  # winnable_only: no deal proved winnable in the server's budget
SERVER_BUSY: Final = "server_busy"  # winnable_only: the deal-search queue is full; start again shortly
INTERNAL: Final = "internal"  # a server bug; nothing happened
SUPERSEDED: Final = "superseded"  # a newer connection resumed this player: this one is closed (4001)
MUTED: Final = "muted"  # chat: the host muted you in this room
CHAT_LIMITED: Final = "chat_limited"  # chat: too many lines in a short time (the connection stays open)
# The daily deal (docs/daily.md).
DAILY_DONE: Final = "daily_done"  # daily: today's ranked attempt is used (a finished player may replay unranked)
DAY_OVER: Final = "day_over"  # daily: that day has ended; attempts are for today only
NOT_YOUR_RECORD: Final = "not_your_record"  # a record or attempt that belongs to another player
NO_BOARDS: Final = "no_boards"  # a spectator of the daily board never sees anyone's board
NO_DAY: Final = "no_day"  # daily: the server has no record of that day (never played, or not yet committed)

ERROR_CODES: Final[tuple[str, ...]] = (
    MALFORMED,
    UNKNOWN_TYPE,
    BAD_FIELD,
    WRONG_PHASE,
    NOT_HOST,
    NOT_READY,
    NOT_IN_ROOM,
    ILLEGAL_MOVE,
    UNKNOWN_ROOM,
    UNKNOWN_PLAYER,
    ROOM_FULL,
    BOTS_NOT_ALLOWED,
    BAD_TOKEN,
    RATE_LIMITED,
    UNSUPPORTED_VERSION,
    NAME_INVALID,
    NAME_TAKEN,
    STORE_UNAVAILABLE,
    BUSY,
    SERVER_FULL,
    NO_WINNABLE_DEAL,
    SERVER_BUSY,
    INTERNAL,
    SUPERSEDED,
    MUTED,
    CHAT_LIMITED,
    BAD_GHOST,
    GHOST_WRONG_DEAL,
    DAILY_DONE,
    DAY_OVER,
    NOT_YOUR_RECORD,
    NO_BOARDS,
    NO_DAY,
    *IDENTITY_ERROR_CODES,
)

CLOSE_SUPERSEDED: Final = 4001  # close code: a newer connection resumed the same player

# ---------------------------------------------------------------- names, codes, limits

ROOM_CODE_ALPHABET: Final = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"  # no 0/O, 1/I/L: unambiguous read aloud
ROOM_CODE_LENGTH: Final = 5
MAX_RACERS_MIN: Final = 2
MAX_RACERS_MAX: Final = 16
MAX_SPECTATOR_DELAY: Final = 3600
TIME_LIMIT_MIN: Final = 10
TIME_LIMIT_MAX: Final = 24 * 3600

# Chat (docs/protocol.md, "Chat"). A line is at most CHAT_MAX characters once trimmed; a frame's
# text field may carry up to CHAT_FRAME_MAX (past that the frame is refused as malformed field),
# so that a line a little too long is told its own limit.
CHAT_MAX: Final = 200
CHAT_FRAME_MAX: Final = 4 * CHAT_MAX
# Who hears a spectator's line while a race is on (countdown and racing): RoomOptions.spectator_chat.
CHAT_ALWAYS: Final = "always"  # everyone, racers too
CHAT_OUTSIDE_RACE: Final = "outside_race"  # spectators only during a race; everyone otherwise (default)
# A line's audience: everyone in the room, or only its spectators (kept from the racers).
TO_ALL: Final = "all"
TO_SPECTATORS: Final = "spectators"

# Phases of a room. "dealing": the host started a winnable_only room's race and the server is
# finding a deal the solver proves winnable; the countdown follows (or, failing that, the lobby).
LOBBY: Final = "lobby"
DEALING: Final = "dealing"
COUNTDOWN: Final = "countdown"
RACING: Final = "racing"
RESULTS: Final = "results"

# Roles in a room.
RACER: Final = "racer"
SPECTATOR: Final = "spectator"

# Leaderboard status of a racer whose game was still going when the race ended (time limit,
# host ended it). The others are the engine's: playing, won, blocked, resigned.
STOPPED: Final = "stopped"


def check_chat(text: str) -> str | None:
    """None if ``text`` (trimmed) is a chat line the server takes, else the reason it is not: at
    least one visible character, at most CHAT_MAX characters, no control, escape or invisible
    format characters (the zero-width joiner of emoji sequences aside), so that no line can paint
    on a terminal or hide text."""
    text = text.strip()
    if not text:
        return "a chat line needs at least one visible character"
    if len(text) > CHAT_MAX:
        return f"a chat line has at most {CHAT_MAX} characters (this one has {len(text)})"
    for ch in text:
        if not ch.isprintable() and ch != "\u200d":
            return f"a chat line may not contain control or invisible characters (found U+{ord(ch):04X})"
    return None


def normalize_room_code(text: str) -> str:
    """How a person types a code -> the code: upper case, spaces and dashes dropped."""
    return "".join(ch for ch in text.upper() if ch not in " -_")


def is_room_code(code: str) -> bool:
    return len(code) == ROOM_CODE_LENGTH and all(ch in ROOM_CODE_ALPHABET for ch in code)


# ---------------------------------------------------------------- shared structures

# MessagePack integers stop at 2**64 - 1 (= MAX_DEAL), so ge=0 is the whole range check.
DealNumber = Annotated[int, msgspec.Meta(ge=0)]
assert MAX_DEAL == 2**64 - 1
MoveId = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class RoomOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What ``create_room`` may set. Every field is optional."""

    deal: DealNumber | None = None  # a chosen deal: the room is then marked chosen_deal everywhere
    max_racers: Annotated[int, msgspec.Meta(ge=MAX_RACERS_MIN, le=MAX_RACERS_MAX)] = 8
    undo: bool = True
    # "after": spectators see boards only once the race is over (leak-proof, the default);
    # a number of seconds: live boards delayed by that much, and the room is not leak-proof.
    spectator_boards: Literal["after"] | Annotated[int, msgspec.Meta(ge=0, le=MAX_SPECTATOR_DELAY)] = "after"
    private: bool = False  # private rooms are joined by code only, never listed
    time_limit: Annotated[int, msgspec.Meta(ge=TIME_LIMIT_MIN, le=TIME_LIMIT_MAX)] | None = None  # seconds
    bots_allowed: bool = True
    # Every race's deal is one the solver proves winnable (a random deal, searched by the server
    # before the countdown). Excludes ``deal``: a chosen deal is never searched.
    winnable_only: bool = False
    # Spectators' chat during a race: "outside_race" keeps it from the racers while a race is on
    # (countdown, racing), so nobody watching can coach them; "always" lets racers read it too.
    spectator_chat: Literal["outside_race", "always"] = "outside_race"
    # Rated races change the claimed racers' ratings (docs/players.md): True rated, False casual,
    # None (the default) rated when every racer is claimed and at least two are (bots never are).
    rated: bool | None = None


class RoomRules(msgspec.Struct, kw_only=True):
    """A room's options as shown to clients: everything but the deal number."""

    max_racers: int
    undo: bool
    spectator_boards: str | int
    private: bool
    time_limit: int | None
    bots_allowed: bool
    winnable_only: bool
    spectator_chat: str = CHAT_OUTSIDE_RACE
    rated: bool | None = None  # RoomOptions.rated


class Member(msgspec.Struct, kw_only=True):
    player_id: str
    name: str
    role: str  # "racer" | "spectator"
    ready: bool
    bot: bool
    connected: bool
    muted: bool = False  # the host muted this member's chat
    claimed: bool = False  # the name is a claimed one (a profile's: docs/players.md)


class RoomSummary(msgspec.Struct, kw_only=True):
    code: str
    host_name: str
    phase: str
    racers: int
    max_racers: int
    spectators: int
    undo: bool
    chosen_deal: bool
    leak_proof: bool
    bots_allowed: bool
    time_limit: int | None
    winnable_only: bool = False


class LeaderboardRow(msgspec.Struct, kw_only=True):
    player_id: str
    name: str
    bot: bool
    cards: int  # cards on the foundations (1..104)
    moves: int  # accepted entries in the racer's log (moves, undos, resign)
    status: str  # playing | won | blocked | resigned | stopped
    elapsed_ms: int  # time of the racer's last accepted entry, from the start signal
    rank: int  # 1-based, docs/rules.md, "Race ranking"
    connected: bool
    # A ghost's row (docs/ghosts.md): its rank is 1 + the live racers ahead of it (a ghost never
    # takes a live racer's place); it comes before the live racer of the same rank.
    ghost: bool = False
    claimed: bool = False  # the name is a claimed one


PACE_AFTER_MS: Final = 10_000  # a pace over less race time than this says little: none is shown


def pace(cards: int, elapsed_ms: int) -> float | None:
    """Cards home per minute of race time (a typing race's words per minute): ``cards`` over
    ``elapsed_ms``, the time of the racer's last accepted entry. None before PACE_AFTER_MS."""
    if elapsed_ms < PACE_AFTER_MS:
        return None
    return cards * 60_000 / elapsed_ms


class ChatLine(msgspec.Struct, kw_only=True):
    """One line of room chat: text only, never a board or any game state."""

    seq: int  # the room's line number: 1, 2, ... (a client keeps lines in this order, once each)
    player_id: str
    name: str  # the sender's name as the room shows it
    role: str  # racer | spectator, when the line was said
    text: str  # at most CHAT_MAX characters, no control characters
    at: int  # server ms
    audience: str = TO_ALL  # all | spectators (a spectator's line kept from the racers during a race)
    claimed: bool = False  # the sender's name is a claimed one (docs/players.md)


def row_order(row: LeaderboardRow) -> tuple[int, bool]:
    """Where a row goes in a leaderboard: by rank, a ghost before the live racer of its rank."""
    return (row.rank, not row.ghost)


class GameRecord(msgspec.Struct, kw_only=True):
    """A game record (docs/rules.md, "Piles, what a player sees, and moves"): replayable with ``plot verify``."""

    deal: DealNumber
    moves: list[str]
    undo: bool = True


# ---------------------------------------------------------------- client -> server


class Hello(msgspec.Struct, tag="hello", tag_field="type", kw_only=True):
    v: int
    name: str
    token: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    bot: bool = False
    # The client's identity secret for this server (docs/players.md): the player is bound to the
    # profile it claimed, and shows the claimed name (``name`` is then ignored).
    identity: Annotated[str, msgspec.Meta(max_length=128)] | None = None


class CreateRoom(msgspec.Struct, tag="create_room", tag_field="type", kw_only=True):
    options: RoomOptions = msgspec.field(default_factory=RoomOptions)


class Join(msgspec.Struct, tag="join", tag_field="type", kw_only=True):
    code: Annotated[str, msgspec.Meta(max_length=32)]
    role: Literal["racer", "spectator"] = "racer"


class Leave(msgspec.Struct, tag="leave", tag_field="type", kw_only=True):
    pass


class ListRooms(msgspec.Struct, tag="list_rooms", tag_field="type", kw_only=True):
    pass


class Ready(msgspec.Struct, tag="ready", tag_field="type", kw_only=True):
    ready: bool = True


class Start(msgspec.Struct, tag="start", tag_field="type", kw_only=True):
    pass


class Kick(msgspec.Struct, tag="kick", tag_field="type", kw_only=True):
    player_id: Annotated[str, msgspec.Meta(max_length=64)]


class EndRace(msgspec.Struct, tag="end_race", tag_field="type", kw_only=True):
    pass


class Rematch(msgspec.Struct, tag="rematch", tag_field="type", kw_only=True):
    deal: DealNumber | None = None  # a chosen deal for the next race; default: a fresh random one
    # The same deal again, the last race's racers as ghosts (their games on their times). Excludes deal.
    ghosts: bool = False


class Move(msgspec.Struct, tag="move", tag_field="type", kw_only=True):
    id: MoveId  # the client's move id: unique per racer per race; a retry with the same id is never applied twice
    move: Annotated[str, msgspec.Meta(max_length=32)]  # "waste>t3", "stock>waste", "undo", "resign"


class Chat(msgspec.Struct, tag="chat", tag_field="type", kw_only=True):
    """A line of chat to the room (racers and spectators alike)."""

    text: Annotated[str, msgspec.Meta(max_length=CHAT_FRAME_MAX)]


class Mute(msgspec.Struct, tag="mute", tag_field="type", kw_only=True):
    """Host only: mute (or unmute) a member's chat."""

    player_id: Annotated[str, msgspec.Meta(max_length=64)]
    muted: bool = True


class Ping(msgspec.Struct, tag="ping", tag_field="type", kw_only=True):
    t: int | None = None  # echoed back in pong


class Sync(msgspec.Struct, tag="sync", tag_field="type", kw_only=True):
    """A racer whose board diverged (a check value that does not match) asks for its whole board:
    answered with a ``race_start`` snapshot."""


ClientMessage = (
    Hello
    | CreateRoom
    | Join
    | Leave
    | ListRooms
    | Ready
    | Start
    | Kick
    | EndRace
    | Rematch
    | Move
    | Ping
    | Sync
    | Chat
    | Mute
    | AddGhost
    | RemoveGhost
    | Daily
    | WatchDaily
    | GetBoard
    | GetPlayer
    | GetStanding
    | Claim
    | Rename
    | GetRatings
    | GetRating
)

CLIENT_TYPES: Final[tuple[str, ...]] = (
    "hello",
    "create_room",
    "join",
    "leave",
    "list_rooms",
    "ready",
    "start",
    "kick",
    "end_race",
    "rematch",
    "move",
    "ping",
    "sync",
    "chat",
    "mute",
    "add_ghost",
    "remove_ghost",
    "daily",
    "watch_daily",
    "get_board",
    "get_player",
    "get_standing",
    "claim",
    "rename",
    "get_ratings",
    "get_rating",
)

# ---------------------------------------------------------------- server -> client


class Welcome(msgspec.Struct, tag="welcome", tag_field="type", kw_only=True):
    player_id: str
    token: str  # keep it secret: it resumes this identity, seat and game
    name: str
    server_time: int  # ms since the Unix epoch
    v: int = PROTOCOL_VERSION
    resumed: bool = False
    room: str | None = None  # the room this player is in (resumed), if any
    profile: str | None = None  # the profile id this player is bound to (a claimed name), if any
    claimed: bool = False  # ``name`` is a claimed one


class Error(msgspec.Struct, tag="error", tag_field="type", kw_only=True):
    code: str
    message: str
    ref: str | None = None  # the type of the message that caused it, when known
    id: int | None = None  # the client's move id, when the error answers a move


class Room(msgspec.Struct, tag="room", tag_field="type", kw_only=True):
    code: str
    version: int  # grows with every change of the room; a newer snapshot replaces an older one
    host: str  # player id
    phase: str  # lobby | dealing | countdown | racing | results
    race: int  # race number in this room: 1 for the first, +1 per rematch
    rules: RoomRules
    chosen_deal: bool
    leak_proof: bool
    # The racers, the host and the recipient itself (whatever its role), in seat order: never
    # every spectator, so a snapshot stays small however many watch (only the count is sent).
    members: list[Member]
    starts_at: int | None = None  # countdown/racing: when the race starts (server ms)
    ends_at: int | None = None  # racing with a time limit: when it ends (server ms)
    spectators: int = 0  # spectators in the room, the recipient included if it watches
    ghosts: list[GhostEntry] = msgspec.field(default_factory=list)  # racing beside the racers next race


class RoomList(msgspec.Struct, tag="room_list", tag_field="type", kw_only=True):
    rooms: list[RoomSummary]


class Left(msgspec.Struct, tag="left", tag_field="type", kw_only=True):
    room: str


class Kicked(msgspec.Struct, tag="kicked", tag_field="type", kw_only=True):
    room: str
    reason: str  # "host" (the host kicked you) | "idle" (the lobby expired unused)


class Countdown(msgspec.Struct, tag="countdown", tag_field="type", kw_only=True):
    race: int
    starts_at: int  # server ms
    server_time: int


class RaceStart(msgspec.Struct, tag="race_start", tag_field="type", kw_only=True):
    """The race is on: sent at the start signal, and again as a fresh snapshot (resume, late spectator)."""

    race: int
    commitment: str  # docs/rules.md, "Fair play": sha256("the-plot:<deal>:<salt>"), revealed in results
    chosen_deal: bool
    started_at: int  # server ms
    ends_at: int | None  # server ms, when there is a time limit
    undo: bool
    server_time: int
    view: View | None  # the racer's own board; None for spectators
    seq: int  # entries in the racer's log (0 at the start)
    view_hash: str | None
    check: int | None = None  # the board's check value (docs/protocol.md); None for spectators


class MoveOk(msgspec.Struct, tag="move_ok", tag_field="type", kw_only=True, omit_defaults=True):
    """A move stored and played. Small (docs/protocol.md, "Small acknowledgements"): what the move
    changed on the board the previous acknowledgement (or snapshot) left, not the whole board;
    fields at their default are left out of the frame. ``view`` (the whole board) only when the
    change is not from the previous entry: a duplicate, or a move found stored after a re-read."""

    id: int
    seq: int  # entries in the racer's log after this move (the board's entries)
    t_ms: int  # when the server accepted the move, from the start signal
    check: int  # the check value of the board at ``seq`` (docs/protocol.md, "The check value")
    changes: list[PileChange] = msgspec.field(default_factory=list)  # [pile, keep, cards]
    stock: int | None = None  # the stock's count, when it changed
    reserve: tuple[int, int | None] | None = None  # the reserve's (count, top), when it changed
    status: str | None = None  # the game's status, when it is no longer playing
    view: View | None = None  # the whole board at ``seq`` (then no changes)
    duplicate: bool = False  # this id had been applied already; view/seq are the current ones

    def board_after(self, view: View) -> View:
        """The board this acknowledgement describes, from ``view`` (the board at ``seq - 1``)."""
        if self.view is not None:
            return self.view
        return apply_changes(view, self.changes, self.stock, self.reserve, self.status)


class MoveRejected(msgspec.Struct, tag="move_rejected", tag_field="type", kw_only=True):
    id: int
    code: str  # illegal_move | wrong_phase | store_unavailable | busy
    reason: str


class Leaderboard(msgspec.Struct, tag="leaderboard", tag_field="type", kw_only=True, omit_defaults=True):
    race: int
    version: int  # total accepted entries of the race: a higher version is newer (latest wins)
    racers: list[LeaderboardRow]  # in rank order
    # True: only the rows whose cards, status, rank or connection changed (merge them by player
    # id into the rows you hold); left out (false): every racer's row (docs/protocol.md).
    partial: bool = False

    def merged_into(self, held: Leaderboard | None) -> Leaderboard | None:
        """The leaderboard to show after this one arrives, given the one held (None: ignore it:
        an older version of this race, or a partial one with nothing to merge it into)."""
        same_race = held is not None and held.race == self.race
        if held is not None and same_race and self.version < held.version:
            return None
        if not self.partial:
            return self
        if held is None or not same_race:
            return None
        rows = {row.player_id: row for row in held.racers}
        rows.update((row.player_id, row) for row in self.racers)
        racers = sorted(rows.values(), key=row_order)
        return Leaderboard(race=self.race, version=max(self.version, held.version), racers=racers)


class Boards(msgspec.Struct, tag="boards", tag_field="type", kw_only=True):
    """Live boards for spectators of a room that allows them, ``delay_ms`` behind the race."""

    race: int
    delay_ms: int
    as_of_ms: int  # race time (from the start signal) the boards show
    boards: dict[str, View]  # player id -> board


class Results(msgspec.Struct, tag="results", tag_field="type", kw_only=True):
    race: int
    ranking: list[str]  # player ids, first place first
    racers: list[LeaderboardRow]  # the final leaderboard
    deal: DealNumber
    salt: str
    commitment: str
    chosen_deal: bool
    records: dict[str, GameRecord]  # player id -> game record
    # player id -> the race time (ms from the start signal) each entry of that record was accepted,
    # in order (a later addition to version 1: results without it carry no move times)
    times: dict[str, list[int]] = msgspec.field(default_factory=dict)
    # The race's ghosts (docs/ghosts.md), never in ranking or racers: each one's final row (its
    # whole record's result, ranked against the racers' final rows), record and move times.
    ghosts: list[LeaderboardRow] = msgspec.field(default_factory=list)
    ghost_records: dict[str, GameRecord] = msgspec.field(default_factory=dict)
    ghost_times: dict[str, list[int]] = msgspec.field(default_factory=dict)
    rated: bool = False  # the race changes ratings (docs/players.md): ``ratings`` follow in a later results
    ratings: dict[str, RatingChange] = msgspec.field(default_factory=dict)  # player id -> change (rated only)


class ChatSaid(msgspec.Struct, tag="chat", tag_field="type", kw_only=True):
    """A line of chat, to everyone it is for (its sender too)."""

    room: str
    line: ChatLine


class ChatHistory(msgspec.Struct, tag="chat_history", tag_field="type", kw_only=True):
    """The room's recent lines (at most the last 50) the recipient may read, oldest first: sent
    on joining and resuming a seat. It replaces what the client holds for that room."""

    room: str
    lines: list[ChatLine]


class Finished(msgspec.Struct, tag="finished", tag_field="type", kw_only=True):
    """A racer's game is over (won, blocked or resigned), as it happens: to everyone in the room.
    ``place`` is the racer's rank then: final for a winner, for the others as it stands (a racer
    still playing may pass them)."""

    race: int
    player_id: str
    name: str
    status: str  # won | blocked | resigned
    place: int  # 1-based
    cards: int
    elapsed_ms: int  # race time of the racer's last entry
    final: bool = False  # the place can no longer change (a winner's, or announced as the race ended)


class Pong(msgspec.Struct, tag="pong", tag_field="type", kw_only=True):
    t: int | None
    server_time: int


class Shutdown(msgspec.Struct, tag="shutdown", tag_field="type", kw_only=True):
    reason: str
    retry_after_ms: int | None = None


ServerMessage = (
    Welcome
    | Error
    | Room
    | RoomList
    | Left
    | Kicked
    | Countdown
    | RaceStart
    | MoveOk
    | MoveRejected
    | Leaderboard
    | Boards
    | Results
    | Pong
    | Shutdown
    | ChatSaid
    | ChatHistory
    | Finished
    | DailyDay
    | DailyBoard
    | PlayerProfile
    | Standing
    | Claimed
    | RatingBoard
    | RatingHistory
)

SERVER_TYPES: Final[tuple[str, ...]] = (
    "welcome",
    "error",
    "room",
    "room_list",
    "left",
    "kicked",
    "countdown",
    "race_start",
    "move_ok",
    "move_rejected",
    "leaderboard",
    "boards",
    "results",
    "pong",
    "shutdown",
    "chat",
    "chat_history",
    "finished",
    "daily_day",
    "daily_board",
    "player_profile",
    "standing",
    "claimed",
    "rating_board",
    "rating_history",
)

# ---------------------------------------------------------------- a client's board (v2)


class BoardKeeper:
    """A racer's board as a version-2 client keeps it (docs/protocol.md, "Small acknowledgements"):
    the whole board from ``race_start``, then each ``move_ok``'s changes, checked against its check
    value. ``move_ok`` answers None when the board has diverged (a missing entry, a change that does
    not fit, a check value that does not match): the client then sends ``sync``."""

    def __init__(self) -> None:
        self.seq: int | None = None
        self.view: View | None = None

    def race_start(self, msg: RaceStart) -> None:
        self.seq, self.view = (msg.seq, msg.view) if msg.view is not None else (None, None)

    def move_ok(self, msg: MoveOk) -> View | None:
        if msg.view is not None:
            view = msg.view
        elif self.view is None or self.seq is None or msg.seq != self.seq + 1:
            return None
        else:
            try:
                view = apply_changes(self.view, msg.changes, msg.stock, msg.reserve, msg.status)
            except ValueError:
                return None
        if view_check(view) != msg.check:
            return None
        self.seq, self.view = msg.seq, view
        return view


# ---------------------------------------------------------------- encode / decode


class ProtocolError(ValueError):
    """A frame that is not a valid message: ``code`` is one of the error codes, ``message`` says why."""

    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ref = ref

    def to_message(self) -> Error:
        return Error(code=self.code, message=self.message, ref=self.ref)


_encoder: Final = msgspec.msgpack.Encoder()
_client_decoder: Final = msgspec.msgpack.Decoder(ClientMessage)
_server_decoder: Final = msgspec.msgpack.Decoder(ServerMessage)
_any_decoder: Final = msgspec.msgpack.Decoder()


def encode(message: ServerMessage | ClientMessage) -> bytes:
    """One message -> the bytes of one binary frame."""
    return _encoder.encode(message)


# msgspec gives up past ~1000 nested arrays or maps (RecursionError): 1 KB of frame, under the size limit.
TOO_DEEP: Final = "the frame is not valid MessagePack: nested too deeply"


def _classify(data: bytes, exc: msgspec.ValidationError, known: tuple[str, ...], side: str) -> ProtocolError:
    """Turn msgspec's validation error into our code and a message that names the field."""
    try:
        raw = _any_decoder.decode(data)
    except msgspec.DecodeError:
        return ProtocolError(MALFORMED, "the frame is not valid MessagePack")
    except RecursionError:
        return ProtocolError(MALFORMED, TOO_DEEP)
    if not isinstance(raw, dict):
        return ProtocolError(MALFORMED, f"a message is a MessagePack map, not {type(raw).__name__}")
    kind = raw.get("type")
    if kind is None:
        return ProtocolError(UNKNOWN_TYPE, "the message has no 'type' field")
    if not isinstance(kind, str) or kind not in known:
        return ProtocolError(
            UNKNOWN_TYPE,
            f"unknown message type {kind!r}: a {side} sends one of {', '.join(known)}",
        )
    text = str(exc)
    detail, _, where = text.partition(" - at `$")
    field = where.rstrip("`").lstrip(".")
    unknown = "Object contains unknown field `"
    if detail.startswith(unknown):
        name = detail[len(unknown) :].rstrip("`")
        return ProtocolError(
            BAD_FIELD, f"field {(field + '.' if field else '') + name!r} of {kind}: unknown field", ref=kind
        )
    if field:
        return ProtocolError(BAD_FIELD, f"field {field!r} of {kind}: {detail}", ref=kind)
    missing = "Object missing required field `"
    if detail.startswith(missing):
        name = detail[len(missing) :].rstrip("`")
        return ProtocolError(BAD_FIELD, f"field {name!r} of {kind}: missing", ref=kind)
    return ProtocolError(BAD_FIELD, f"{kind}: {detail}", ref=kind)


def decode_client(data: bytes) -> ClientMessage:
    """One frame from a client -> a typed message, or ProtocolError (malformed, unknown_type, bad_field)."""
    try:
        return _client_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _classify(data, exc, CLIENT_TYPES, "client") from None
    except msgspec.DecodeError:
        raise ProtocolError(MALFORMED, "the frame is not valid MessagePack") from None
    except RecursionError:
        raise ProtocolError(MALFORMED, TOO_DEEP) from None


def decode_server(data: bytes) -> ServerMessage:
    """One frame from the server -> a typed message, or ProtocolError."""
    try:
        return _server_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _classify(data, exc, SERVER_TYPES, "server") from None
    except msgspec.DecodeError:
        raise ProtocolError(MALFORMED, "the frame is not valid MessagePack") from None
    except RecursionError:
        raise ProtocolError(MALFORMED, TOO_DEEP) from None


def message_type(message: ServerMessage | ClientMessage) -> str:
    """The wire ``type`` of a message."""
    tag = type(message).__struct_config__.tag
    assert isinstance(tag, str)
    return tag
