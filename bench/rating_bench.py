"""The cost of a rating update (docs/players.md, "Ratings"; docs/benchmarks.md, "Ratings"): what
the end of a rated race costs the server.

    .venv/bin/python bench/rating_bench.py [--racers 2 4 8 16] [--races 200] [--json FILE]

Two figures for each field size (racers, all claimed):

- ``compute_us``: openskill's Plackett-Luce update of the whole field (server/core/ratings.py's
  ``rate_race``), CPU on the event loop's thread, per race (median of ``--races``).
- ``apply_ms``: the whole application as a node does it (server/shell/profile_ops.py's
  ``rate_race_profiles``: each profile read, the update computed, each profile written by
  compare-and-set with its board score), per race, on the in-memory store and on a real
  redis-server on loopback (started here, tests/redis_fixture.py); ``round_trips``: the store
  calls of one race (2 per racer when no write is refused).

Prints JSON (``--json FILE`` too), with the CPU it ran on (bench/machine_info.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_info import cpu_name  # bench/machine_info.py
from redis_fixture import RedisServer  # test helpers, found through the path above

from server.core.events import RateRace
from server.core.ratings import RatedRacer, rate_race
from server.core.records import ProfileRecord, encode_record
from server.shell.profile_ops import rate_race_profiles
from server.store.base import Store
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared.identity import Rating


class Counting:
    """Counts a store's calls (each one round trip on Redis)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, operation: str, seconds: float, failed: bool) -> None:
        self.calls += 1


def field_of(size: int, race: int) -> tuple[RatedRacer, ...]:
    return tuple(RatedRacer(f"p{race}-{i}", f"pf{i}", i + 1) for i in range(size))


def compute_us(size: int, races: int) -> float:
    ratings: dict[str, Rating | None] = {f"pf{i}": Rating(mu=20.0 + i, sigma=5.0, races=3) for i in range(size)}
    samples = []
    for race in range(races):
        racers = field_of(size, race)
        started = time.perf_counter()
        rate_race(racers, ratings)
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


async def seed(store: Store, size: int) -> None:
    for i in range(size):
        record = ProfileRecord(profile_id=f"pf{i}", name=f"Racer {i}", name_key=f"racer {i}", created_ms=0)
        await store.create_profile(f"pf{i}", f"{i:064x}", record.name_key, encode_record(record))


async def apply_ms(store: Store, size: int, races: int) -> tuple[float, float]:
    """Median ms per race, and store calls per race."""
    await seed(store, size)
    counter = Counting()
    store.observer = counter
    samples = []
    for race in range(races):
        effect = RateRace("BENCH", race + 1, race, field_of(size, race))
        started = time.perf_counter()
        rated = await rate_race_profiles(store, effect, lambda: 0)
        samples.append((time.perf_counter() - started) * 1e3)
        assert not rated.failed and len(rated.ratings) == size
    store.observer = None
    return statistics.median(samples), counter.calls / races


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--racers", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--races", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    redis = RedisServer()
    redis.start()
    try:
        for size in args.racers:
            memory_ms, _ = await apply_ms(MemoryStore(), size, args.races)
            redis.flushall()
            store = RedisStore(redis.url)
            try:
                redis_ms, trips = await apply_ms(store, size, args.races)
            finally:
                await store.close()
            rows.append(
                {
                    "racers": size,
                    "compute_us": round(compute_us(size, args.races), 1),
                    "apply_ms_memory": round(memory_ms, 3),
                    "apply_ms_redis": round(redis_ms, 3),
                    "round_trips_redis": trips,
                }
            )
    finally:
        redis.stop()
    report = {"races": args.races, "rows": rows, "cpu": cpu_name(), "python": sys.version.split()[0]}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
