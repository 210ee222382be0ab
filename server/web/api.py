"""The daily deal's JSON API on the web port (docs/daily.md, "The JSON API"), cached per node.

    GET /api/daily               today: the day as committed and its board
    GET /api/daily/N             day N (a past day, once revealed: deal, salt, every record)
    GET /api/daily/YYYY-MM-DD    the same by date (24-hour days only)
    GET /api/players/NAME        a claimed player's standing, streaks, bests and history
    GET /api/board               the all-days standing board
    ?offset=K                    board rows from rank K + 1 (100 a page)

The answers are the protocol's structs (shared/daily_protocol.py) as JSON, built by the same
pure functions as the game port's (server/core/daily.py, daily_rules.py): what is hidden there is
hidden here. Each answer is kept ``ttl_s`` (1 s) per node, and readers of one path that miss
together share one read of the store, so a thousand readers cost about one read a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote

import msgspec

from server.core.daily import profile_message, standing_message
from server.core.daily_events import ReadBoard, ReadProfile, ReadStanding
from server.core.daily_rules import board_message, day_message, day_of, day_of_date
from server.shell import daily_io
from server.store.base import Store

JSON = "application/json"
MAX_OFFSET = 10**7

_json = msgspec.json.Encoder()


@dataclass(slots=True)
class ApiStats:
    answered: int = 0
    store_reads: int = 0  # answers built from the store (cache misses)


@dataclass
class DailyApi:
    store: Store
    day_seconds: int = 86400
    ttl_s: float = 1.0
    share: bool = True  # readers of one path that miss together share one read (False: a read each)
    clock_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    stats: ApiStats = field(default_factory=ApiStats)
    _cache: dict[str, tuple[float, int, bytes]] = field(default_factory=dict)
    _pending: dict[str, asyncio.Future[tuple[int, bytes]]] = field(default_factory=dict)

    @staticmethod
    def handles(path: str) -> bool:
        return path == "/api/board" or path == "/api/daily" or path.startswith(("/api/daily/", "/api/players/"))

    async def answer(self, target: str) -> tuple[int, bytes]:
        """(HTTP status, JSON body) for a GET of ``target`` (a path with its query)."""
        self.stats.answered += 1
        now = time.monotonic()
        hit = self._cache.get(target)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        pending = self._pending.get(target) if self.share else None
        if pending is not None:
            return await asyncio.shield(pending)
        if not self.share:
            self.stats.store_reads += 1
            return await self._build(target)
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[target] = future
        try:
            self.stats.store_reads += 1
            status, body = await self._build(target)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[target] = (time.monotonic() + self.ttl_s, status, body)
            future.set_result((status, body))
            return status, body
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._pending[target]

    async def _build(self, target: str) -> tuple[int, bytes]:
        path, _, query = target.partition("?")
        params = parse_qs(query)
        try:
            offset = int(params.get("offset", ["0"])[0])
        except ValueError:
            return error(400, "bad_field", "offset must be a whole number")
        if not 0 <= offset <= MAX_OFFSET:
            return error(400, "bad_field", f"offset must be 0 to {MAX_OFFSET}")
        now = self.clock_ms()
        if path == "/api/board":
            standing = await daily_io.read_standing(self.store, ReadStanding(0, offset), now)
            if standing.failed:
                return error(503, "store_unavailable", "the store did not answer: try again")
            return 200, _json.encode(standing_message(standing))
        if path.startswith("/api/players/"):
            name = unquote(path[len("/api/players/") :])
            read = await daily_io.read_profile(self.store, ReadProfile(0, name), now)
            if read.failed:
                return error(503, "store_unavailable", "the store did not answer: try again")
            if read.profile is None:
                return error(404, "unknown_player", f"nobody has claimed the name {name!r}")
            return 200, _json.encode(profile_message(read, self.day_seconds))
        today = day_of(now, self.day_seconds)
        if path == "/api/daily":
            day: int | None = today
        else:
            text = path[len("/api/daily/") :]
            day = int(text) if text.isdigit() and len(text) < 12 else day_of_date(text, self.day_seconds)
        if day is None:
            return error(404, "no_day", "a day is its number, or YYYY-MM-DD with 24-hour days")
        if day > today:
            return error(404, "no_day", f"day {day} has not begun: today is day {today}")
        board = await daily_io.read_board(self.store, ReadBoard(0, day, offset, records=day < today), now)
        if board.failed:
            return error(503, "store_unavailable", "the store did not answer: try again")
        if board.record is None:
            return error(404, "no_day", f"there is no record of day {day}")
        message = board_message(
            board.record, self.day_seconds, board.rows, board.total, offset, board.live, board.records, now
        )
        return 200, _json.encode({"day": day_message(board.record, self.day_seconds, now), "board": message})


def error(status: int, code: str, message: str) -> tuple[int, bytes]:
    return status, _json.encode({"error": code, "message": message})


ApiAnswer = Callable[[str], Awaitable[tuple[int, bytes]]]
