"""What the server keeps in the store: players, rooms, move-log entries (msgspec MessagePack).

The store holds these as opaque bytes; the schema lives here. A room record holds everything a
fresh process needs to rebuild the room (with the racers' move logs): nothing that matters lives
only in one process's memory.
"""

from __future__ import annotations

import hashlib

import msgspec

from shared.identity import RatedRace, Rating, RatingChange
from shared.protocol import COUNTDOWN, RACING, ChatLine, RoomOptions


class PlayerRecord(msgspec.Struct, kw_only=True):
    player_id: str
    name: str
    bot: bool = False
    room: str | None = None  # the room this player is a member of, for resumption
    created_ms: int = 0
    profile_id: str | None = None  # the profile (claimed name) this player is bound to, if any


class MemberRecord(msgspec.Struct, kw_only=True):
    player_id: str
    name: str
    bot: bool
    role: str
    ready: bool
    token_hash: str  # lets any process update this member's player record (put_player needs it)
    left_ms: int | None = None  # disconnected since (server ms), None while connected
    node: str = ""  # several nodes: the node holding its connection (its death makes the member away)
    claim: int = 0  # several nodes: +1 at each resume that moves it or brings it back; the highest holds the seat
    muted: bool = False  # the host muted this member's chat
    profile_id: str | None = None  # a claimed player's profile


class RacerInfo(msgspec.Struct, kw_only=True):
    player_id: str
    name: str
    bot: bool
    token_hash: str
    profile_id: str | None = None  # a claimed racer's profile (its rating changes in a rated race)


class GhostRecord(msgspec.Struct, kw_only=True):
    """A ghost (docs/ghosts.md): a recorded game of the room's deal, raced on its move times. Part
    of the room record, so any node rebuilds it: its progress is a function of the race's clock."""

    player_id: str  # "ghost:..."
    name: str
    undo: bool
    moves: list[str]
    times: list[int]  # race time (ms from the start signal) of each entry, non-decreasing
    timed: bool  # false: the record had no times (paced evenly, GHOST_PACE_MS an entry)
    # The record's end as the engine decided it when the ghost was added (a racer's: as its race
    # ended): shown once its last entry is, a still-playing one as stopped in the results.
    status: str


class RaceRecord(msgspec.Struct, kw_only=True):
    number: int
    deal: int
    salt: str
    commitment: str
    chosen_deal: bool
    undo: bool
    starts_at: int  # server ms of the start signal
    ends_at: int | None  # server ms, with a time limit
    racers: list[RacerInfo]  # in seat order; a racer who left stays here (the ranking keeps them)
    ended_at: int | None = None  # set when the race is over (results)
    # Set with ended_at: each racer's log length the results count. Several nodes: the save that
    # ends the race lands only if the logs hold exactly these (Store.save_room's ``logs``).
    log_lengths: dict[str, int] | None = None
    ghosts: list[GhostRecord] = msgspec.field(default_factory=list)  # racing beside the racers
    rated: bool = False  # decided at the start (docs/players.md, "Which races are rated")
    ratings: dict[str, RatingChange] = msgspec.field(default_factory=dict)  # player id -> change, once applied


class RoomRecord(msgspec.Struct, kw_only=True):
    code: str
    options: RoomOptions
    host: str
    phase: str
    version: int
    race_number: int  # the current or next race
    members: list[MemberRecord]
    race: RaceRecord | None
    pending_deal: int | None  # chosen deal for the next race (None: drawn at random at the start)
    created_ms: int
    last_activity_ms: int
    closed: bool = False  # closed for good: never loaded again (its results stay until it expires)
    # The room's last chat lines (CoreConfig.chat_history at most), oldest first: a joiner, a
    # resumer and a rebuilt room see them, and other nodes learn new lines with the record.
    chat: list[ChatLine] = msgspec.field(default_factory=list)
    # The ghosts the next race takes (the host's, or the last race's racers after a ghost rematch).
    ghosts: list[GhostRecord] = msgspec.field(default_factory=list)


class ProfileRecord(msgspec.Struct, kw_only=True):
    """A claimed name bound to a secret (docs/players.md). Never expires. The store indexes it by
    the secret's SHA-256 and by its name key (shared/names.py's ``name_key``); the daily deal's
    figures live in keys of their own, never here, so the two never race on one value."""

    profile_id: str
    name: str
    name_key: str
    created_ms: int
    renamed_ms: int | None = None
    # The name's other look-alike keys (shared/identity.py's ``claim_keys``), held with name_key.
    also_keys: list[str] = msgspec.field(default_factory=list)
    # Keys of names this profile held before, each (key, until ms): reserved for it alone until then.
    previous: list[tuple[str, int]] = msgspec.field(default_factory=list)
    rating: Rating | None = None  # None: never rated
    history: list[RatedRace] = msgspec.field(default_factory=list)  # newest first (RATING_HISTORY_MAX)


class LogEntry(msgspec.Struct, array_like=True):
    """One accepted entry of a racer's move log: the move text, when the server accepted it
    (ms from the start signal) and the client's move id (None for server-made entries, such as
    a forfeit's resign)."""

    move: str
    t_ms: int
    id: int | None = None


_encoder = msgspec.msgpack.Encoder()
_player_decoder = msgspec.msgpack.Decoder(PlayerRecord)
_room_decoder = msgspec.msgpack.Decoder(RoomRecord)
_entry_decoder = msgspec.msgpack.Decoder(LogEntry)
_profile_decoder = msgspec.msgpack.Decoder(ProfileRecord)


def encode_record(record: PlayerRecord | RoomRecord | LogEntry | ProfileRecord) -> bytes:
    return _encoder.encode(record)


def decode_player(data: bytes) -> PlayerRecord:
    return _player_decoder.decode(data)


def decode_room(data: bytes) -> RoomRecord:
    return _room_decoder.decode(data)


def decode_entry(data: bytes) -> LogEntry:
    return _entry_decoder.decode(data)


def decode_profile(data: bytes) -> ProfileRecord:
    return _profile_decoder.decode(data)


def hash_token(token: str) -> str:
    """The store keeps only this SHA-256 (hex) of a resume token, never the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def open_race_of(record: RoomRecord) -> int | None:
    """The race whose move logs may take entries while this record is the stored one: the
    current race from its countdown until its results (None in the lobby, while dealing, after)."""
    race = record.race
    if race is None or race.ended_at is not None or record.phase not in (COUNTDOWN, RACING):
        return None
    return race.number
