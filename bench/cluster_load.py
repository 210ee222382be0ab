"""Acknowledgement latency of a real plot-server on one Redis against on a three-master Redis Cluster.

    .venv/bin/python bench/cluster_load.py [--racers 1000] [--pace 2] [--duration 10] [--runs 2]

Starts a redis-server and a three-master cluster (tests/redis_fixture.py,
tests/redis_cluster_fixture.py; loopback, no disk), then for each run and each store a fresh
``plot-server --redis URL`` and ``bench/loadgen.py server`` against it (paced racers, rooms of 8).
The two stores alternate run by run so drift on a shared machine hits them alike. Prints and
optionally writes (``--json``) loadgen's figures per run: moves/s, errors, ack latency.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_cluster_fixture import LocalRedisCluster  # test helpers, found through the path above
from redis_fixture import RedisServer, free_port
from support import server_environment, wait_healthy

ROOT = Path(__file__).resolve().parent.parent


def one_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    env = server_environment()
    command = [sys.executable, "-m", "server.cli", "--port", str(port), "--redis", url, "--countdown", "0.1",
               "--max-connections", str(args.racers + 100), "--log-level", "warning",
               "--max-conns-per-address", "0", "--hellos-per-minute", "0", "--rooms-per-minute", "0",
               "--answer-bytes-per-address", "0"]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_healthy(server, port)
        load = [sys.executable, str(ROOT / "bench" / "loadgen.py"), "server", "--url", f"ws://127.0.0.1:{port}",
                "--racers", str(args.racers), "--pace", str(args.pace), "--duration", str(args.duration),
                "--warmup", str(args.warmup)]  # fmt: skip
        done = subprocess.run(load, capture_output=True, text=True, timeout=args.duration * 10 + 120)
        if done.returncode != 0:
            raise RuntimeError(f"loadgen failed: {done.stderr[-2000:]}")
        figures: dict[str, Any] = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
        return figures
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--racers", type=int, default=1000)
    parser.add_argument("--pace", type=float, default=2.0, help="moves per second per racer")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", default="", help="also write every run's figures to this file")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"one redis": [], "cluster (3 masters)": []}
    with RedisServer() as single, LocalRedisCluster() as cluster:
        for _run in range(args.runs):
            for name, url in (("one redis", single.url), ("cluster (3 masters)", cluster.url)):
                figures = one_run(url, args)
                results[name].append(figures)
                ack = figures["ack_latency_ms"]
                print(f"{name:<22} moves/s {figures['moves_per_second']:>8,.1f}  errors {figures['errors']}  "
                      f"rejected {figures['rejected']}  ack p50 {ack['p50']} ms  p99 {ack['p99']} ms  "
                      f"max {ack['max']} ms", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": results}, indent=1))


if __name__ == "__main__":
    main()
