"""Redis CPU per move: RedisStore on one Redis against RedisStore on a three-master Redis Cluster.

    .venv/bin/python bench/cluster_bench.py [--runs 3] [--rooms 64] [--racers 4] [--moves 20] [--batch 32]

Starts its own redis-server (or valkey-server) and its own three-master cluster on free 127.0.0.1
ports, no disk (tests/redis_fixture.py, tests/redis_cluster_fixture.py). Each run appends the same
workload through each store in turn: ``--rooms`` rooms of ``--racers`` racers, ``--moves`` real log
entries each, sent the way the server sends them, by group commit (``append_moves`` batches of
``--batch`` entries from different rooms, 4 batches in flight, as the server's defaults allow).
Every result is checked to be APPENDED.

Per store it reports appends/s, the Redis CPU per append (user + system seconds from INFO cpu,
summed over the cluster's masters) and this process's CPU per append (the client side: RedisStore,
redis-py, the cluster client's routing). Medians over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from machine_info import cpu_name
from redis_cluster_fixture import LocalRedisCluster  # test helpers, found through the path above
from redis_fixture import RedisServer

from server.core.records import LogEntry, encode_record
from server.store import RedisStore
from server.store.base import AppendRequest, AppendResult

IN_FLIGHT = 4  # the server's append_batches_in_flight


def redis_cpu_seconds(servers: Sequence[RedisServer]) -> float:
    total = 0.0
    for server in servers:
        info = server.command("INFO", "cpu")
        assert isinstance(info, bytes)
        fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
        total += float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])
    return total


def requests(rooms: int, racers: int, moves: int, run: int) -> list[AppendRequest]:
    """Move-major order: move n of every racer of every room, then move n + 1, as a race interleaves them."""
    work = []
    for move in range(moves):
        entry = encode_record(LogEntry(move="t3>f0", t_ms=1_500 * move, id=move + 1))
        for room in range(rooms):
            for racer in range(racers):
                work.append(AppendRequest(f"R{run}x{room}", 0, f"p{racer}", move, entry))
    return work


async def measure(url: str, servers: Sequence[RedisServer], args: argparse.Namespace, run: int) -> dict[str, float]:
    store = RedisStore(url, namespace="bench")
    try:
        for room in range(args.rooms):
            assert await store.create_room(f"R{run}x{room}", b"room", open_race=0)
        await store.append_moves([AppendRequest(f"R{run}x0", 0, "warm", 0, b"w")])  # scripts loaded everywhere
        work = requests(args.rooms, args.racers, args.moves, run)
        batches = [work[start : start + args.batch] for start in range(0, len(work), args.batch)]
        # A batch holds at most one entry per log (batch <= rooms x racers), and a log's next entry
        # goes only after its previous one landed: batches run in order, IN_FLIGHT at a time per wave.
        if args.batch > args.rooms * args.racers:
            raise SystemExit("--batch must be at most --rooms x --racers")
        cpu_before, redis_before, started = time.process_time(), redis_cpu_seconds(servers), time.perf_counter()
        per_move = len(batches) // args.moves
        for move in range(args.moves):
            wave = batches[move * per_move : (move + 1) * per_move]
            for start in range(0, len(wave), IN_FLIGHT):
                results = await asyncio.gather(*(store.append_moves(b) for b in wave[start : start + IN_FLIGHT]))
                for result in results:
                    if any(r != AppendResult.APPENDED for r in result):
                        raise RuntimeError(f"an append did not land: {result}")
        elapsed = time.perf_counter() - started
        client_cpu, redis_cpu = time.process_time() - cpu_before, redis_cpu_seconds(servers) - redis_before
    finally:
        await store.close()
    count = len(work)
    return {
        "appends_per_s": count / elapsed,
        "redis_cpu_us_per_append": redis_cpu / count * 1e6,
        "client_cpu_us_per_append": client_cpu / count * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rooms", type=int, default=64)
    parser.add_argument("--racers", type=int, default=4)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="entries per append_moves batch (group commit)")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args()
    if (args.rooms * args.racers) % args.batch:
        raise SystemExit("--rooms x --racers must be a multiple of --batch (whole batches per move)")
    figures: dict[str, list[dict[str, float]]] = {"one redis": [], "cluster (3 masters)": []}
    with RedisServer() as single, LocalRedisCluster() as cluster:
        for run in range(args.runs):
            figures["one redis"].append(asyncio.run(measure(single.url, [single], args, run)))
            figures["cluster (3 masters)"].append(asyncio.run(measure(cluster.url, cluster.nodes, args, run)))
    print(f"{cpu_name()}; {args.rooms} rooms x {args.racers} racers x {args.moves} moves, batches of {args.batch}, "
          f"{IN_FLIGHT} in flight; medians of {args.runs} runs")  # fmt: skip
    print(f"{'store':<22}{'appends/s':>12}{'Redis CPU µs/append':>22}{'client CPU µs/append':>23}")
    medians = {}
    for name, runs in figures.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        medians[name] = median
        print(
            f"{name:<22}{median['appends_per_s']:>12,.0f}{median['redis_cpu_us_per_append']:>22.1f}"
            f"{median['client_cpu_us_per_append']:>23.1f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": figures, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
