"""The daily deal's part of the store interface (docs/daily.md, "Storage"; docs/store.md).

A day is a record (deal, salt, commitment, bounds) written once by compare-and-set, a board (a
sorted set of profiles by a packed score, so its order is the ranking: docs/rules.md, "Race
ranking"), each profile's row (the figures the board shows) and, once final, its record (the
moves); a profile's daily standing is a hash of counters with its history beside it. On Redis
Cluster a day's keys share the tag ``{dN}`` (one slot holds a day) and a profile's share
``{pID}``; the standing board is one key of its own. Every write here is idempotent, so a retry
after an unknown outcome is harmless.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import msgspec


def check_bytes(kind: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{kind} must be bytes, not {type(value).__name__}")
    return value


def check_count(kind: str, value: object) -> int:
    """A whole number, 0 or more (a day, an offset)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{kind} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{kind} must be 0 or more, not {value}")
    return value


# Past a profile's last day played by more than one day, its streak is broken.
STREAK_GAP = 1


class DailyFinish(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt's final result, for :meth:`DailyStore.daily_finish`."""

    day: int
    profile_id: str
    name: str  # the profile's name when it finished (the standing board shows the latest)
    score: float  # the board's packed score (server/core/daily_rules.py, ``board_score``)
    row: bytes  # the row the board shows (opaque)
    record: bytes  # the attempt's moves (opaque), revealed with the day
    won: bool
    cards: int
    elapsed_ms: int
    points: int  # what the day adds to the standing board


class DailyStats(msgspec.Struct, kw_only=True):
    """A profile's daily counters (a hash per profile)."""

    name: str = ""
    days_played: int = 0
    days_won: int = 0
    streak: int = 0  # days in a row with a finished attempt, up to last_day
    best_streak: int = 0
    last_day: int = -1
    best_ms: int = -1  # the fastest win (-1: none yet)
    best_cards: int = 0
    points: int = 0


def apply_finish(stats: DailyStats, finish: DailyFinish) -> DailyStats:
    """The counters after ``finish`` (a day not counted yet): the rule both stores follow (the
    Redis one in Lua, checked against this by the contract suite)."""
    streak = stats.streak + 1 if stats.last_day == finish.day - STREAK_GAP else 1
    best_ms = stats.best_ms
    if finish.won and (best_ms < 0 or finish.elapsed_ms < best_ms):
        best_ms = finish.elapsed_ms
    return DailyStats(
        name=finish.name,
        days_played=stats.days_played + 1,
        days_won=stats.days_won + (1 if finish.won else 0),
        streak=streak,
        best_streak=max(stats.best_streak, streak),
        last_day=max(stats.last_day, finish.day),
        best_ms=best_ms,
        best_cards=max(stats.best_cards, finish.cards),
        points=stats.points + finish.points,
    )


class DailyStore(abc.ABC):
    """The daily deal's store calls. All may raise StoreUnavailable."""

    @abc.abstractmethod
    async def create_day(self, day: int, data: bytes) -> bytes:
        """Store the day's record if it has none (compare-and-set): the record the store holds
        afterwards, this one or the one another node stored first."""

    @abc.abstractmethod
    async def get_day(self, day: int) -> bytes | None: ...

    @abc.abstractmethod
    async def daily_progress(self, day: int, profile_id: str, score: float, row: bytes) -> bool:
        """Put an attempt's live row on the day's board (the first one adds it). False, and nothing
        written, once its result is final."""

    @abc.abstractmethod
    async def daily_finish(self, finish: DailyFinish) -> bool:
        """The attempt's final row and record on the day's board, then the profile's counters
        (:func:`apply_finish`), history and standing points. True if this call made it final;
        False if it was final already (then the profile's side is completed if a crash left it
        undone, never counted twice)."""

    @abc.abstractmethod
    async def daily_board(self, day: int, offset: int, count: int) -> tuple[list[tuple[str, bytes]], int]:
        """The board's rows from rank ``offset`` (0-based), at most ``count``, best first, as
        (profile id, row); and how many attempts it holds."""

    @abc.abstractmethod
    async def daily_entry(self, day: int, profile_id: str) -> tuple[bytes, int, bool] | None:
        """One profile's row on a day's board: (row, 0-based rank, final), or None."""

    @abc.abstractmethod
    async def daily_live(self, day: int) -> int:
        """Attempts of the day on the board whose result is not final yet."""

    @abc.abstractmethod
    async def daily_records(self, day: int, profile_ids: Sequence[str]) -> list[bytes | None]:
        """The final records of these profiles' attempts (None: none, or not final)."""

    @abc.abstractmethod
    async def daily_stats(self, profile_id: str) -> DailyStats | None:
        """A profile's counters (None: it never finished a daily attempt)."""

    @abc.abstractmethod
    async def daily_history(self, profile_id: str, count: int) -> list[tuple[int, bytes]]:
        """Its last ``count`` days finished, newest first, as (day, row)."""

    @abc.abstractmethod
    async def daily_standing(self, offset: int, count: int) -> tuple[list[tuple[str, int]], int]:
        """The standing board from ``offset``: (profile id, points), most points first (ties by
        profile id); and how many profiles it holds."""
