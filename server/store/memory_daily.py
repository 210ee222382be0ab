"""The embedded store's daily deal (server/store/daily.py): dicts, and a sorted list per day.

Each call runs without awaiting, so it is atomic under asyncio, as the Redis scripts are.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from server.store.base import check_identifier, is_identifier
from server.store.daily import DailyFinish, DailyStats, DailyStore, apply_finish, check_bytes, check_count


@dataclass
class _Day:
    order: list[tuple[float, str]] = field(default_factory=list)  # (score, profile id), sorted
    scores: dict[str, float] = field(default_factory=dict)
    rows: dict[str, bytes] = field(default_factory=dict)
    records: dict[str, bytes] = field(default_factory=dict)  # present: final


class MemoryDaily(DailyStore):
    """Mixed into MemoryStore."""

    def __init__(self) -> None:
        self._days: dict[int, bytes] = {}
        self._boards: dict[int, _Day] = {}
        self._stats: dict[str, DailyStats] = {}
        self._history: dict[str, dict[int, bytes]] = {}
        self._standing: dict[str, int] = {}

    def _board(self, day: int) -> _Day:
        return self._boards.setdefault(check_count("day", day), _Day())

    @staticmethod
    def _place(board: _Day, profile_id: str, score: float) -> None:
        old = board.scores.get(profile_id)
        if old is not None:
            board.order.pop(bisect.bisect_left(board.order, (old, profile_id)))
        board.scores[profile_id] = score
        bisect.insort(board.order, (score, profile_id))

    async def create_day(self, day: int, data: bytes) -> bytes:
        check_count("day", day)
        return self._days.setdefault(day, check_bytes("day data", data))

    async def get_day(self, day: int) -> bytes | None:
        return self._days.get(day)

    async def daily_progress(self, day: int, profile_id: str, score: float, row: bytes) -> bool:
        check_identifier("profile id", profile_id)
        check_bytes("row", row)
        board = self._board(day)
        if profile_id in board.records:
            return False
        self._place(board, profile_id, float(score))
        board.rows[profile_id] = row
        return True

    async def daily_finish(self, finish: DailyFinish) -> bool:
        check_identifier("profile id", finish.profile_id)
        check_bytes("row", finish.row)
        check_bytes("record", finish.record)
        board = self._board(finish.day)
        fresh = finish.profile_id not in board.records
        if fresh:
            self._place(board, finish.profile_id, float(finish.score))
            board.rows[finish.profile_id] = finish.row
            board.records[finish.profile_id] = finish.record
        history = self._history.setdefault(finish.profile_id, {})
        if finish.day not in history:
            stats = apply_finish(self._stats.get(finish.profile_id, DailyStats()), finish)
            self._stats[finish.profile_id] = stats
            history[finish.day] = board.rows[finish.profile_id]
            self._standing[finish.profile_id] = stats.points
        return fresh

    async def daily_board(self, day: int, offset: int, count: int) -> tuple[list[tuple[str, bytes]], int]:
        board = self._boards.get(day)
        if board is None:
            return [], 0
        page = board.order[max(0, offset) : max(0, offset) + max(0, count)]
        return [(pid, board.rows[pid]) for _score, pid in page], len(board.order)

    async def daily_entry(self, day: int, profile_id: str) -> tuple[bytes, int, bool] | None:
        board = self._boards.get(day)
        if board is None or profile_id not in board.scores:
            return None
        rank = bisect.bisect_left(board.order, (board.scores[profile_id], profile_id))
        return board.rows[profile_id], rank, profile_id in board.records

    async def daily_live(self, day: int) -> int:
        board = self._boards.get(day)
        return 0 if board is None else len(board.scores) - len(board.records)

    async def daily_records(self, day: int, profile_ids: Sequence[str]) -> list[bytes | None]:
        board = self._boards.get(day)
        return [None if board is None else board.records.get(pid) for pid in profile_ids]

    async def daily_stats(self, profile_id: str) -> DailyStats | None:
        if not is_identifier(profile_id):
            return None
        return self._stats.get(profile_id)

    async def daily_history(self, profile_id: str, count: int) -> list[tuple[int, bytes]]:
        history = self._history.get(profile_id, {})
        return [(day, history[day]) for day in sorted(history, reverse=True)[: max(0, count)]]

    async def daily_standing(self, offset: int, count: int) -> tuple[list[tuple[str, int]], int]:
        ranked = sorted(self._standing.items(), key=lambda item: (-item[1], item[0]))
        return ranked[max(0, offset) : max(0, offset) + max(0, count)], len(ranked)
