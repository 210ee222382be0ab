"""The daily deal's store and JSON API at 100,000 players in a day (docs/benchmarks.md, "The daily deal").

    .venv/bin/python bench/daily_bench.py [--players 100000] [--writers 64] [--reads 2000] [--api-seconds 5]

Starts its own redis-server on a free 127.0.0.1 port with no disk (tests/redis_fixture.py), then:

- submit: ``--players`` attempts of one day, each first put live (``daily_progress``, its start)
  then finished (``daily_finish``: the day's row and record, the profile's counters and history,
  the standing board), from ``--writers`` tasks, as the server's nodes send them; the latency of
  each call (p50, p99) and the calls per second;
- memory: Redis's ``used_memory`` grown per player-day, and what each key family holds
  (``MEMORY USAGE``): the day's board, rows and records, a profile's counters and history;
- read: ``--reads`` reads of the full day's board as the server makes them (``daily_io.read_board``:
  a page of 100 rows at a random rank, the count, the live count, the asker's own row and rank),
  and of a past day's page with its records (the reveal), p50 and p99;
- api: the JSON API's GET /api/daily/N answered per second by one web server (this process) to
  64 client connections in another process, with the 1-second cache and without it (a store read
  per request), for ``--api-seconds`` each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import cpu_name
from redis_fixture import RedisServer, raw_command  # test helpers, found through the path above

from server.core.daily_events import ReadBoard
from server.core.daily_rules import DailyRowRecord, DayRecord, board_score, encode, points
from server.shell import daily_io
from server.store.daily import DailyFinish
from server.store.redis import RedisStore
from server.web import WebConfig, WebServer
from server.web.api import DailyApi
from shared.fairplay import commitment

DAY = 20424  # 2025-12-02 (a past day: its records are revealed)
DAY_SECONDS = 86400


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def attempt(i: int, rng: random.Random) -> tuple[str, bytes, float, DailyFinish]:
    profile = f"pf{i:016x}"
    moves = [
        rng.choice(("stock>waste", "waste>t3", "t1>f0", "t4>t7", "reserve>f2")) for _ in range(rng.randint(120, 320))
    ]
    won = rng.random() < 0.3
    cards = 104 if won else rng.randint(10, 103)
    elapsed = rng.randint(120_000, 1_800_000)
    status = "won" if won else rng.choice(("blocked", "resigned", "stopped"))
    row = DailyRowRecord(f"player{i}", True, status, cards, len(moves), elapsed, elapsed - 1000, f"p{i:015x}")
    live = DailyRowRecord(f"player{i}", True, "playing", 0, 0, 0, 0, f"p{i:015x}")
    score = board_score(status, cards, elapsed, elapsed - 1000)
    finish = DailyFinish(
        day=DAY,
        profile_id=profile,
        name=row.name,
        score=score,
        row=encode(row),
        record=encode(moves),
        won=won,
        cards=cards,
        elapsed_ms=elapsed,
        points=points(status, cards, elapsed, 1800),
    )
    return profile, encode(live), board_score("playing", 0, 0, 0), finish


async def submit(store: RedisStore, players: int, writers: int) -> dict[str, object]:
    rng = random.Random(1)
    work = [attempt(i, rng) for i in range(players)]
    progress: list[float] = []
    finish: list[float] = []
    queue = iter(work)

    async def writer() -> None:
        for profile, live, live_score, done in queue:
            started = time.perf_counter()
            await store.daily_progress(DAY, profile, live_score, live)
            progress.append(time.perf_counter() - started)
            started = time.perf_counter()
            await store.daily_finish(done)
            finish.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    seconds = time.perf_counter() - started
    p50, p99 = quantiles(progress)
    f50, f99 = quantiles(finish)
    return {
        "players": players,
        "seconds": round(seconds, 1),
        "attempts_per_s": round(players / seconds),
        "progress_ms": {"p50": round(p50 * 1000, 3), "p99": round(p99 * 1000, 3)},
        "finish_ms": {"p50": round(f50 * 1000, 3), "p99": round(f99 * 1000, 3)},
    }


def memory(port: int, store: RedisStore, players: int, before: int) -> dict[str, object]:
    def used() -> int:
        info = raw_command(port, "INFO", "memory")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return int(next(line.split(":")[1] for line in text.splitlines() if line.startswith("used_memory:")))

    def usage(key: str) -> int:
        got = raw_command(port, "MEMORY", "USAGE", key, "SAMPLES", "0")
        return int(got) if isinstance(got, int) else 0

    board, rows, records = store.day_keys(DAY)
    stats, history = store.profile_keys("pf0000000000000001")
    per = {
        "board_zset": usage(board) / players,
        "rows_hash": usage(rows) / players,
        "records_hash": usage(records) / players,
        "standing_zset": usage(store.standing_key) / players,
        "profile_stats_hash": usage(stats),
        "profile_history_zset": usage(history),
    }
    return {
        "used_memory_per_player_day": round((used() - before) / players),
        "by_key_per_player_day": {k: round(v) for k, v in per.items()},
    }


async def reads(store: RedisStore, players: int, count: int) -> dict[str, object]:
    rng = random.Random(2)
    live: list[float] = []
    revealed: list[float] = []
    for _ in range(count):
        effect = ReadBoard(None, DAY, rng.randrange(0, players - 100), profile_id=f"pf{rng.randrange(players):016x}")
        started = time.perf_counter()
        await daily_io.read_board(store, effect, 0)
        live.append(time.perf_counter() - started)
        effect = ReadBoard(None, DAY, rng.randrange(0, players - 100), records=True)
        started = time.perf_counter()
        await daily_io.read_board(store, effect, 0)
        revealed.append(time.perf_counter() - started)
    (l50, l99), (r50, r99) = quantiles(live), quantiles(revealed)
    return {
        "board_page_ms": {"p50": round(l50 * 1000, 3), "p99": round(l99 * 1000, 3)},
        "revealed_page_with_records_ms": {"p50": round(r50 * 1000, 3), "p99": round(r99 * 1000, 3)},
    }


CLIENT = r"""
import asyncio, sys, time
port, path, seconds, conns = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
done = 0
async def one(deadline):
    global done
    while time.monotonic() < deadline:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        body = await reader.read()
        writer.close()
        if body.startswith(b"HTTP/1.1 200"):
            done += 1
async def main():
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(one(deadline) for _ in range(conns)))
asyncio.run(main())
print(done)
"""


async def api_rate(store: RedisStore, seconds: float, ttl_s: float) -> dict[str, object]:
    api = DailyApi(store, day_seconds=DAY_SECONDS, ttl_s=ttl_s, share=ttl_s > 0)
    web = WebServer(
        WebConfig(host="127.0.0.1", port=0, max_clients=512, conns_per_address=0), game_port=lambda: 1, api=api
    )
    await web.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLIENT, str(web.port), f"/api/daily/{DAY}", str(seconds), "64",
            stdout=subprocess.PIPE,
        )  # fmt: skip
        out, _ = await proc.communicate()
        answered = int(out.decode().strip() or 0)
    finally:
        await web.stop()
    return {
        "cache_ttl_s": ttl_s,
        "answers_per_s": round(answered / seconds),
        "store_reads_per_s": round(api.stats.store_reads / seconds, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--api-seconds", type=float, default=5.0)
    args = parser.parse_args()
    with RedisServer() as redis:
        assert redis.port is not None
        store = RedisStore(redis.url, max_connections=args.writers + 8)
        record = DayRecord(
            day=DAY,
            deal=7,
            salt="s" * 64,
            commitment=commitment(7, "s" * 64),
            starts_at=DAY * DAY_SECONDS * 1000,
            ends_at=(DAY + 1) * DAY_SECONDS * 1000,
            time_limit_s=1800,
            created_ms=0,
        )
        await store.create_day(DAY, encode(record))
        info = raw_command(redis.port, "INFO", "memory")
        text = info.decode() if isinstance(info, bytes) else str(info)
        before = int(next(line.split(":")[1] for line in text.splitlines() if line.startswith("used_memory:")))
        result: dict[str, object] = {"machine": cpu_name()}
        result["submit"] = await submit(store, args.players, args.writers)
        result["memory"] = memory(redis.port, store, args.players, before)
        result["read"] = await reads(store, args.players, args.reads)
        result["api_cached"] = await api_rate(store, args.api_seconds, 1.0)
        result["api_uncached"] = await api_rate(store, args.api_seconds, 0.0)
        await store.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
