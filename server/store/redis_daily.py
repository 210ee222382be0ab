"""The Redis store's daily deal (server/store/daily.py; keys in docs/store.md, "The daily deal").

A day's keys share the hash tag ``{dN}`` (on a cluster one slot, one master, holds the whole
day): its record (a string, set once), its board (a sorted set of profile ids by packed score:
the ranking is the set's order), its rows and its final records (hashes by profile id). A
profile's counters (a hash) and history (a sorted set by day) share ``{pID}``. The standing
board is one sorted set. Each compare-and-set is one Lua script, one round trip; a finish is two
scripts (the day's slot, then the profile's) and a ZADD, each idempotent, so a retry after an
unknown outcome completes it without counting a day twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from server.store.base import check_identifier, is_identifier
from server.store.daily import DailyFinish, DailyStats, DailyStore, check_bytes, check_count

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.commands.core import AsyncScript

CREATE_DAY = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

# KEYS: board, rows, records. ARGV: profile, score, row.
PROGRESS = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

# KEYS: board, rows, records. ARGV: profile, score, row, record. Returns {fresh, the final row}.
FINISH_DAY = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {0, redis.call('HGET', KEYS[2], ARGV[1])}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
return {1, ARGV[3]}
"""

# KEYS: stats, history. ARGV: day, name, won, cards, elapsed, points, row. The rule of
# server/store/daily.py's apply_finish; a day already in the history changes nothing. Returns points.
FINISH_PROFILE = """
local day = tonumber(ARGV[1])
if redis.call('ZCOUNT', KEYS[2], day, day) > 0 then
  return tonumber(redis.call('HGET', KEYS[1], 'points') or '0')
end
local function get(field, default)
  local v = redis.call('HGET', KEYS[1], field)
  if v then return tonumber(v) end
  return default
end
local last = get('last_day', -1)
local streak = 1
if last == day - 1 then streak = get('streak', 0) + 1 end
local best_ms = get('best_ms', -1)
local won = ARGV[3] == '1'
local elapsed = tonumber(ARGV[5])
if won and (best_ms < 0 or elapsed < best_ms) then best_ms = elapsed end
local points = get('points', 0) + tonumber(ARGV[6])
local last_day = last
if day > last_day then last_day = day end
local won_days = get('days_won', 0)
if won then won_days = won_days + 1 end
redis.call('HSET', KEYS[1],
  'name', ARGV[2],
  'days_played', get('days_played', 0) + 1,
  'days_won', won_days,
  'streak', streak,
  'best_streak', math.max(get('best_streak', 0), streak),
  'last_day', last_day,
  'best_ms', best_ms,
  'best_cards', math.max(get('best_cards', 0), tonumber(ARGV[4])),
  'points', points)
redis.call('ZADD', KEYS[2], day, ARGV[7])
return points
"""

STAT_FIELDS = ("days_played", "days_won", "streak", "best_streak", "last_day", "best_ms", "best_cards", "points")


def _bytes(value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class RedisDaily(DailyStore):
    """Mixed into RedisStore, which provides the client and its error handling."""

    namespace: str
    _redis: Redis | RedisCluster
    if TYPE_CHECKING:

        def _talking(self, operation: str) -> AbstractAsyncContextManager[None]: ...

    def _register_daily(self) -> None:
        register = self._redis.register_script
        self._create_day: AsyncScript = register(CREATE_DAY)
        self._progress: AsyncScript = register(PROGRESS)
        self._finish_day: AsyncScript = register(FINISH_DAY)
        self._finish_profile: AsyncScript = register(FINISH_PROFILE)

    # Keys ------------------------------------------------------------------

    def day_key(self, day: int) -> str:
        return f"{self.namespace}:day:{{d{day}}}"

    def day_keys(self, day: int) -> list[str]:
        """The day's board, rows and records: one slot."""
        tag = f"{{d{day}}}"
        return [f"{self.namespace}:dboard:{tag}", f"{self.namespace}:drows:{tag}", f"{self.namespace}:drecs:{tag}"]

    def profile_keys(self, profile_id: str) -> list[str]:
        tag = f"{{p{profile_id}}}"
        return [f"{self.namespace}:dstats:{tag}", f"{self.namespace}:dhist:{tag}"]

    @property
    def standing_key(self) -> str:
        return f"{self.namespace}:dstanding"

    # Calls -----------------------------------------------------------------

    async def create_day(self, day: int, data: bytes) -> bytes:
        check_count("day", day)
        check_bytes("day data", data)
        async with self._talking("create_day"):
            stored = await self._create_day(keys=[self.day_key(day)], args=[data])
        return _bytes(stored)

    async def get_day(self, day: int) -> bytes | None:
        check_count("day", day)
        async with self._talking("get_day"):
            stored = await self._redis.get(self.day_key(day))
        return None if stored is None else _bytes(stored)

    async def daily_progress(self, day: int, profile_id: str, score: float, row: bytes) -> bool:
        check_count("day", day)
        check_identifier("profile id", profile_id)
        check_bytes("row", row)
        async with self._talking("daily_progress"):
            done = await self._progress(keys=self.day_keys(day), args=[profile_id, repr(float(score)), row])
        return bool(done == 1)

    async def daily_finish(self, finish: DailyFinish) -> bool:
        check_count("day", finish.day)
        check_identifier("profile id", finish.profile_id)
        check_bytes("row", finish.row)
        check_bytes("record", finish.record)
        args: list[Any] = [finish.profile_id, repr(float(finish.score)), finish.row, finish.record]
        async with self._talking("daily_finish"):
            fresh, row = await self._finish_day(keys=self.day_keys(finish.day), args=args)
            points = await self._finish_profile(
                keys=self.profile_keys(finish.profile_id),
                args=[
                    finish.day,
                    finish.name,
                    1 if finish.won else 0,
                    finish.cards,
                    finish.elapsed_ms,
                    finish.points,
                    str(finish.day).encode() + b":" + _bytes(row),
                ],
            )
            # Scores are the points negated: ZRANGE's order is then most points first, ties by profile id.
            await self._redis.zadd(self.standing_key, {finish.profile_id: -int(points)})
        return bool(fresh == 1)

    async def daily_board(self, day: int, offset: int, count: int) -> tuple[list[tuple[str, bytes]], int]:
        check_count("day", day)
        board, rows, _records = self.day_keys(day)
        if count <= 0:
            async with self._talking("daily_board"):
                return [], int(await self._redis.zcard(board))
        async with self._talking("daily_board"):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zrange(board, max(0, offset), max(0, offset) + count - 1)
                pipe.zcard(board)
                ids, total = await pipe.execute()
            names = [_bytes(pid).decode() for pid in ids]
            found = await self._redis.hmget(rows, names) if names else []
        return [(pid, _bytes(row)) for pid, row in zip(names, found, strict=True) if row is not None], int(total)

    async def daily_entry(self, day: int, profile_id: str) -> tuple[bytes, int, bool] | None:
        check_count("day", day)
        if not is_identifier(profile_id):
            return None
        board, rows, records = self.day_keys(day)
        async with self._talking("daily_entry"), self._redis.pipeline(transaction=False) as pipe:
            pipe.zrank(board, profile_id)
            pipe.hget(rows, profile_id)
            pipe.hexists(records, profile_id)
            rank, row, final = await pipe.execute()
        if rank is None or row is None:
            return None
        return _bytes(row), int(rank), bool(final)

    async def daily_live(self, day: int) -> int:
        check_count("day", day)
        board, _rows, records = self.day_keys(day)
        async with self._talking("daily_live"), self._redis.pipeline(transaction=False) as pipe:
            pipe.zcard(board)
            pipe.hlen(records)
            total, final = await pipe.execute()
        return int(total) - int(final)

    async def daily_records(self, day: int, profile_ids: Sequence[str]) -> list[bytes | None]:
        check_count("day", day)
        wanted = [pid for pid in profile_ids if is_identifier(pid)]
        if not wanted:
            return [None for _ in profile_ids]
        async with self._talking("daily_records"):
            found = await self._redis.hmget(self.day_keys(day)[2], wanted)
        by_id = {pid: None if rec is None else _bytes(rec) for pid, rec in zip(wanted, found, strict=True)}
        return [by_id.get(pid) for pid in profile_ids]

    async def daily_stats(self, profile_id: str) -> DailyStats | None:
        if not is_identifier(profile_id):
            return None
        async with self._talking("daily_stats"):
            found = await self._redis.hgetall(self.profile_keys(profile_id)[0])
        if not found:
            return None
        fields = {_bytes(k).decode(): _bytes(v).decode() for k, v in found.items()}
        stats = DailyStats(name=fields.get("name", ""))
        for name in STAT_FIELDS:
            if name in fields:
                setattr(stats, name, int(float(fields[name])))
        return stats

    async def daily_history(self, profile_id: str, count: int) -> list[tuple[int, bytes]]:
        if not is_identifier(profile_id) or count <= 0:
            return []
        async with self._talking("daily_history"):
            found = await self._redis.zrevrange(self.profile_keys(profile_id)[1], 0, count - 1)
        out: list[tuple[int, bytes]] = []
        for member in found:
            day, _, row = _bytes(member).partition(b":")
            out.append((int(day), row))
        return out

    async def daily_standing(self, offset: int, count: int) -> tuple[list[tuple[str, int]], int]:
        if count <= 0:
            return [], 0
        async with self._talking("daily_standing"), self._redis.pipeline(transaction=False) as pipe:
            pipe.zrange(self.standing_key, max(0, offset), max(0, offset) + count - 1, withscores=True)
            pipe.zcard(self.standing_key)
            found, total = await pipe.execute()
        return [(_bytes(pid).decode(), -int(score)) for pid, score in found], int(total)
