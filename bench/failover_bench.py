"""A Redis Cluster master's failover under a race, and what ``--redis-replicas-ack`` costs
(docs/cluster.md, "A master's failure").

    .venv/bin/python bench/failover_bench.py [--runs 3] [--cases coordinated:0,coordinated:1,kill:1]
        [--batches 200] [--json FILE]

Starts a Redis Cluster of three masters with a replica each (tests/redis_cluster_fixture.py:
loopback, no disk, ``cluster-node-timeout`` 1 s). Each case runs tests/failover_scenarios.py's
race: two real ``plot-server --multi-node`` nodes, two racers (one on each) playing a move every
50 ms, the room's master failed over mid-race (``coordinated``: CLUSTER FAILOVER to its replica;
``kill``: SIGKILL, the replica promoted by the cluster, the dead master restarted as its
replica once it is) with the servers on ``--redis-replicas-ack N``. Timed: from the failover's
start to the replica answering as master, and each racer's longest wait for an acknowledgement
across it (from its last ack before to its first after: the outage a racer feels). The cases
alternate run by run. Then the cost of WAIT itself: ``append_moves`` batches of 16 entries (one
per room) through RedisStore with replicas_ack 0 and 1, alternating batch by batch, timed each,
on the cluster (where replicas_ack also takes the store's own per-master pipeline instead of the
cluster client's) and on one Redis with one replica (the same path, WAIT added or not).
Prints a table; ``--json FILE`` writes every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from failover_scenarios import failover_race  # test helpers, found through the path above
from machine_info import cpu_name
from redis_cluster_fixture import LocalRedisCluster
from redis_fixture import RedisServer, ReplicaServer

from server.store.base import AppendRequest, AppendResult, StoreUnavailable
from server.store.redis import RedisStore


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_redis_cost(batches: int) -> dict[str, Any]:
    """``wait_cost`` on one Redis with one replica: there both settings take the same path (one
    packed EVALSHA per batch), WAIT added or not, so the difference is WAIT's alone."""
    with RedisServer() as master:
        master.command("CONFIG", "SET", "repl-diskless-sync-delay", "0")
        with ReplicaServer(master) as replica:
            try:
                return asyncio.run(wait_cost(master.url, batches))
            except TimeoutError:
                raise RuntimeError(f"the replica never confirmed a write: {replica.log_tail()}") from None


async def wait_cost(url: str, batches: int, rooms: int = 16) -> dict[str, Any]:
    """Each setting's append_moves time per batch of ``rooms`` entries, alternating batch by batch."""
    stores = {0: RedisStore(url), 1: RedisStore(url, replicas_ack=1)}
    times: dict[int, list[float]] = {0: [], 1: []}
    try:
        codes = [f"COST{n:02d}" for n in range(rooms)]
        for code in codes:
            assert await stores[0].create_room(code, b"room", open_race=1)
        deadline = time.monotonic() + 15
        while True:  # until the replica confirms (once its master counts it online)
            try:
                await stores[1].load_moves(codes[0], 1, "p1")
                break
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise TimeoutError from None
                await asyncio.sleep(0.05)
        lengths = dict.fromkeys(codes, 0)
        for n in range(batches * 2):
            setting = n % 2
            batch = [AppendRequest(code, 1, "p1", lengths[code], b"x" * 40) for code in codes]
            began = time.perf_counter()
            results = await stores[setting].append_moves(batch)
            times[setting].append((time.perf_counter() - began) * 1000)
            assert results == [AppendResult.APPENDED] * rooms, results
            for code in codes:
                lengths[code] += 1
    finally:
        for store in stores.values():
            await store.close()
    return {
        str(setting): {
            "batch_ms_p50": round(median(values), 3),
            "batch_ms_p99": round(percentile(values, 0.99), 3),
            "batches": len(values),
        }
        for setting, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="coordinated:0,coordinated:1,kill:1", help="how:replicas_ack,...")
    parser.add_argument("--batches", type=int, default=200, help="append_moves batches per setting (0: none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cases = [(how, int(ack)) for how, ack in (case.split(":") for case in args.cases.split(","))]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {f"{how} ack={ack}": [] for how, ack in cases}
    with LocalRedisCluster(replicas=1, node_timeout_ms=1000, full_coverage=False) as cluster:
        for run in range(args.runs):
            order = cases if run % 2 == 0 else cases[::-1]
            for how, ack in order:
                cluster.wait_replicated()
                cluster.flushall()
                outcome = asyncio.run(failover_race(cluster, how=how, replicas_ack=ack))
                lost = {
                    label: sorted(set(acked) - set(outcome["logs"][label])) for label, acked in outcome["acked"].items()
                }
                runs[f"{how} ack={ack}"].append(
                    {
                        "promoted_ms": round(outcome["promoted_s"] * 1000, 1),
                        "longest_wait_ms": {k: round(v * 1000, 1) for k, v in outcome["longest_wait_s"].items()},
                        "acknowledged_lost": lost,
                        "rejected": outcome["rejected"],
                        "node_warnings": outcome["warnings"],
                        "ack_ms_p50_before": round(median([ms for v in outcome["ack_ms"].values() for ms in v]), 2),
                    }
                )
                print(f"run {run + 1} {how} ack={ack}: {runs[f'{how} ack={ack}'][-1]}", flush=True)
        cluster.wait_replicated()
        cluster.flushall()
        cost = {"cluster": asyncio.run(wait_cost(cluster.url, args.batches))} if args.batches else {}
    if args.batches:
        cost["one redis"] = one_redis_cost(args.batches)
    figures: dict[str, Any] = {
        "started": started,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "wait_cost": cost,
    }
    print(f"\n{started}, {cpu_name()}, load {figures['load_before']} -> {figures['load_after']}")
    print("| case | promoted (ms, median) | longest wait for an ack (ms, median of racers' maxima) | lost acks |")
    print("|---|---|---|---|")
    for name, results in runs.items():
        promoted = median([r["promoted_ms"] for r in results])
        waits = median([max(r["longest_wait_ms"].values()) for r in results])
        lost_count = sum(len(ids) for r in results for ids in r["acknowledged_lost"].values())
        print(f"| {name} | {promoted:.0f} | {waits:.0f} | {lost_count} |")
    for where, settings in cost.items():
        for setting, result in settings.items():
            print(f"{where}: append_moves, 16 entries, replicas_ack={setting}: {result}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
