"""The daily deal's in-memory state in the core (plain data; server/core/daily.py decides)."""

from __future__ import annotations

from dataclasses import dataclass, field

from server.core.daily_rules import DayRecord
from shared import protocol as p


@dataclass(slots=True)
class DailyState:
    days: dict[int, DayRecord] = field(default_factory=dict)  # today's and tomorrow's records, once known
    loading: set[int] = field(default_factory=set)  # days whose record is being read or created
    searching: set[int] = field(default_factory=set)  # days whose deal the solver is finding
    waiting: dict[int, list[tuple[int, p.Daily]]] = field(default_factory=dict)  # (conn, daily) per day
    watchers: set[int] = field(default_factory=set)  # connections following today's board
    watch_day: int = -1  # the day the watchers were last told of (daily_day)
    watch_last: bytes = b""  # the last board frame they got (the next goes only if it differs)
    watch_reading: bool = False  # their board is being read
    wake_at: int | None = None  # the DailyTick asked for
    posted: dict[str, tuple[int, str, int]] = field(default_factory=dict)  # attempt -> figures last put
