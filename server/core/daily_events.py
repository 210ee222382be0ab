"""The daily deal's events and effects (docs/daily.md), joined into server/core/events.py's
``Event`` and ``Effect`` unions. Times are server ms since the epoch."""

from __future__ import annotations

import msgspec

from server.core.daily_rules import DayRecord
from server.core.records import ProfileRecord

# ---------------------------------------------------------------- events (shell -> core)


class DailyTick(msgspec.Struct, frozen=True):
    """The node's day clock (``WakeDaily``): prepare the next day's record when due, roll over,
    poll the day's board for its watchers."""

    now: int


class DayLoaded(msgspec.Struct, frozen=True):
    """The answer to LoadDay or CreateDay: the day's record as stored (None: none yet), or
    ``failed`` (the store did not answer)."""

    day: int
    record: DayRecord | None
    now: int
    failed: bool = False


class DailyDealFound(msgspec.Struct, frozen=True):
    """The answer to FindDailyDeal: a deal the solver proved winnable (None: none within the
    budget, or the search queue was full; ``detail`` says why)."""

    day: int
    deal: int | None
    now: int
    detail: str = ""


class BoardRead(msgspec.Struct, frozen=True):
    """The answer to ReadBoard: the rows (profile id, stored row) from ``offset``, how many in all,
    how many are not final, the records of these rows when asked, the asker's own entry (profile
    id, row, 0-based rank)."""

    conn: int | None  # None: for the day's watchers (or ``player_id``)
    day: int
    record: DayRecord | None  # the day's record (None: no such day)
    rows: list[tuple[str, bytes]]
    total: int
    offset: int
    live: int
    records: list[bytes | None] | None
    now: int
    you: tuple[str, bytes, int] | None = None
    player_id: str | None = None
    failed: bool = False


class ProfileRead(msgspec.Struct, frozen=True):
    """The answer to ReadProfile: the profile of that name (None: no such claimed name), its daily
    counters and its last days, as (day, stored row, final rank, attempts that day)."""

    conn: int
    name: str
    profile: ProfileRecord | None
    stats: tuple[int, ...] | None  # DailyStats's fields in order (server/store/daily.py)
    history: list[tuple[int, bytes, int, int]]
    now: int
    failed: bool = False


class StandingRead(msgspec.Struct, frozen=True):
    """The answer to ReadStanding: (profile id, name, points, days played, days won, best streak)."""

    conn: int
    rows: list[tuple[str, str, int, int, int, int]]
    total: int
    offset: int
    now: int
    failed: bool = False


# ---------------------------------------------------------------- effects (core -> shell)


class WakeDaily(msgspec.Struct, frozen=True):
    """Hand the core DailyTick at ``at_ms`` (replaces any earlier one)."""

    at_ms: int | None


class LoadDay(msgspec.Struct, frozen=True):
    """Read the day's record, then hand the core DayLoaded."""

    day: int


class FindDailyDeal(msgspec.Struct, frozen=True):
    """Find a random deal the solver proves winnable for the day (in the worker pool, never on the
    event loop), then hand the core DailyDealFound."""

    day: int


class CreateDay(msgspec.Struct, frozen=True):
    """Store the day's record unless it has one (compare-and-set, whichever node first), then hand
    the core DayLoaded with the record the store holds."""

    record: DayRecord


class PutDailyRow(msgspec.Struct, frozen=True):
    """Write-behind: an attempt's live row on the day's board (never over a final one)."""

    day: int
    profile_id: str
    score: float
    row: bytes


class FinishDaily(msgspec.Struct, frozen=True):
    """An attempt's final result on the day's board and the profile's standing (the store's
    ``daily_finish``, retried until it answers: it is idempotent); then ``then`` is carried out."""

    day: int
    profile_id: str
    name: str
    score: float
    row: bytes
    record: bytes
    won: bool
    cards: int
    elapsed_ms: int
    points: int
    then: ReadBoard | None = None


class ReadBoard(msgspec.Struct, frozen=True):
    """Read a day's board from rank ``offset`` (and the records of those rows, ``records``), and
    the entry of ``profile_id``, then hand the core BoardRead."""

    conn: int | None  # None: for the day's watchers (or ``player_id``)
    day: int
    offset: int = 0
    records: bool = False
    profile_id: str | None = None
    player_id: str | None = None  # the answer goes to this player's connections


class ReadProfile(msgspec.Struct, frozen=True):
    """Find the claimed name, read its profile, daily counters and history, then hand the core
    ProfileRead."""

    conn: int
    name: str


class ReadStanding(msgspec.Struct, frozen=True):
    conn: int
    offset: int
