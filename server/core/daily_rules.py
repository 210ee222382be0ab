"""The daily deal's rules as pure functions (docs/daily.md): the day clock, the day's record, the
board's packed score, the standing board's points, attempt room codes, and what a board shows
(the reveal). Used by the core (server/core/daily.py) and by the JSON API (server/web/api.py), so
both answer alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import msgspec

from shared import protocol as p
from shared.daily_protocol import BOARD_PAGE
from shared.engine import WON

TOTAL_CARDS = 104
RANKED_PREFIX = "d"  # d<day>.<profile id>: a profile's ranked attempt of a day (one per day)
REPLAY_PREFIX = "r"  # r<day>.<profile id>.<n>: an unranked replay


class DayRecord(msgspec.Struct, kw_only=True):
    """A day as committed before it began (the store's ``create_day``): its deal and salt stay
    on the server until the reveal."""

    day: int
    deal: int
    salt: str
    commitment: str
    starts_at: int  # server ms
    ends_at: int
    time_limit_s: int
    created_ms: int


class DailyRowRecord(msgspec.Struct, array_like=True):
    """A row as the store keeps it (compact: a day may have 100,000)."""

    name: str
    claimed: bool
    status: str
    cards: int
    moves: int
    elapsed_ms: int
    cards_ms: int  # when the count was last reached (the ranking's tie-break)
    player_id: str = ""  # the player whose connection plays it (never shown)


_encoder = msgspec.msgpack.Encoder()
_day_decoder = msgspec.msgpack.Decoder(DayRecord)
_row_decoder = msgspec.msgpack.Decoder(DailyRowRecord)
_moves_decoder = msgspec.msgpack.Decoder(list[str])


def encode(value: DayRecord | DailyRowRecord | list[str]) -> bytes:
    return _encoder.encode(value)


def decode_day(data: bytes) -> DayRecord:
    return _day_decoder.decode(data)


def decode_row(data: bytes) -> DailyRowRecord:
    return _row_decoder.decode(data)


def decode_moves(data: bytes) -> list[str]:
    return _moves_decoder.decode(data)


# ---------------------------------------------------------------- the clock


def day_of(now_ms: int, day_seconds: int) -> int:
    """Day N is [N * day_seconds, (N + 1) * day_seconds) seconds from the Unix epoch."""
    return max(0, now_ms) // (day_seconds * 1000)


def day_start(day: int, day_seconds: int) -> int:
    return day * day_seconds * 1000


def day_date(day: int, day_seconds: int) -> str:
    """The UTC date of the day's start (with 86400-second days, the day's own date)."""
    return dt.datetime.fromtimestamp(day * day_seconds, tz=dt.UTC).date().isoformat()


def day_of_date(text: str, day_seconds: int) -> int | None:
    """YYYY-MM-DD -> its day number (24-hour days only; None otherwise or if not a date)."""
    if day_seconds != 86400:
        return None
    try:
        date = dt.date.fromisoformat(text)
    except ValueError:
        return None
    if len(text) != 10:
        return None
    return (date - dt.date(1970, 1, 1)).days


def prepare_at(day: int, day_seconds: int) -> int:
    """When a node starts preparing day ``day``'s record (finding its deal): half the previous
    day in, at most an hour before it begins."""
    lead = min(day_seconds * 1000 // 2, 3600_000)
    return day_start(day, day_seconds) - lead


def day_message(record: DayRecord, day_seconds: int, now: int) -> p.DailyDay:
    return p.DailyDay(
        day=record.day,
        date=day_date(record.day, day_seconds),
        starts_at=record.starts_at,
        ends_at=record.ends_at,
        commitment=record.commitment,
        time_limit_s=record.time_limit_s,
        server_time=now,
    )


# ---------------------------------------------------------------- attempts


def attempt_code(day: int, profile_id: str) -> str:
    return f"{RANKED_PREFIX}{day}.{profile_id}"


def replay_code(day: int, profile_id: str, n: str) -> str:
    return f"{REPLAY_PREFIX}{day}.{profile_id}.{n}"


def daily_room(code: str) -> tuple[str, int, str] | None:
    """A daily room's (kind, day, profile id): kind "ranked" or "replay"; None for other rooms
    (their codes are five letters: never a dot)."""
    if "." not in code or code[:1] not in (RANKED_PREFIX, REPLAY_PREFIX):
        return None
    head, _, rest = code.partition(".")
    if not head[1:].isdigit():
        return None
    if code[0] == RANKED_PREFIX:
        return "ranked", int(head[1:]), rest
    profile, _, _n = rest.rpartition(".")
    return "replay", int(head[1:]), profile


# ---------------------------------------------------------------- the board


def board_score(status: str, cards: int, elapsed_ms: int, cards_ms: int) -> float:
    """The day's sorted-set score: ascending order is docs/rules.md's "Race ranking" (winners
    by the time of their winning move, then most cards, ties to who reached the count first),
    packed in a double's 53 exact bits: [class 1 bit][(104 - cards) 7 bits][ms 40 bits]."""
    ms = min(max(0, elapsed_ms if status == WON else cards_ms), 2**40 - 1)
    if status == WON:
        return float(ms)
    return float(2**47 + (TOTAL_CARDS - max(0, min(TOTAL_CARDS, cards))) * 2**40 + ms)


def points(status: str, cards: int, elapsed_ms: int, time_limit_s: int) -> int:
    """What a finished attempt adds to the standing board (docs/daily.md, "The standing board"):
    a card home is a point, a win 100 more, and a win up to 100 more by its speed (the share of
    the time limit left)."""
    total = max(0, min(TOTAL_CARDS, cards))
    if status == WON:
        limit = max(1, time_limit_s * 1000)
        total += 100 + max(0, 100 * (limit - elapsed_ms) // limit)
    return total


def row_of(record: DailyRowRecord, profile_id: str, rank: int) -> p.DailyRow:
    return p.DailyRow(
        name=record.name,
        claimed=record.claimed,
        profile_id=profile_id,
        status=record.status,
        cards=record.cards,
        moves=record.moves,
        elapsed_ms=record.elapsed_ms,
        rank=rank,
    )


def revealed(record: DayRecord, live: int, now: int) -> bool:
    """A day is revealed (its deal, salt and every record) once it has ended and every attempt of
    it is over: at once when none is running, and at the latest one time limit after its end
    (an attempt started at its last moment has ended by then)."""
    if now < record.ends_at:
        return False
    return live <= 0 or now >= record.ends_at + record.time_limit_s * 1000


def board_message(
    record: DayRecord,
    day_seconds: int,
    rows: Sequence[tuple[str, bytes]],
    total: int,
    offset: int,
    live: int,
    records: Sequence[bytes | None] | None,
    now: int,
    you: tuple[str, bytes, int] | None = None,
) -> p.DailyBoard:
    """A day's board frame: ``rows`` (profile id, stored row) from rank ``offset``; the deal, salt
    and these rows' records only when :func:`revealed` (``records`` read for them, in order)."""
    shown = [row_of(decode_row(data), pid, offset + i + 1) for i, (pid, data) in enumerate(rows[:BOARD_PAGE])]
    final = revealed(record, live, now)
    message = p.DailyBoard(
        day=record.day,
        rows=shown,
        final=final,
        total=total,
        offset=offset,
        date=day_date(record.day, day_seconds),
        commitment=record.commitment,
    )
    if final:
        message.deal = record.deal
        message.salt = record.salt
        message.records = {}
        for row, data in zip(shown, records or (), strict=False):
            if data is not None:
                message.records[row.name] = decode_moves(data)
    if you is not None and all(row.profile_id != you[0] for row in shown):
        message.you = row_of(decode_row(you[1]), you[0], you[2] + 1)
    return message
