"""Where a move's microseconds go in the race server: a profile of the move path you can rerun.

    .venv/bin/python bench/profile_move.py                       # both stores, py-spy, 1,000 racers x 2 moves/s
    .venv/bin/python bench/profile_move.py --store redis --racers 200 --pace 5 --duration 10
    .venv/bin/python bench/profile_move.py --saturation            # 64 racers as fast as acks come (--pace 0)
    .venv/bin/python bench/profile_move.py --saturation --workload home-undo   # a card home and undone, each move
    .venv/bin/python bench/profile_move.py --profiler cprofile   # no py-spy needed (in the server process)
    .venv/bin/python bench/profile_move.py --top 25              # also the 25 hottest functions

For each store (memory; redis: a fresh local redis-server) it starts the real plot-server as its own
process on a free loopback port, pinned to core 0 as ``bench/run_load.py`` does, and drives a paced
load with ``bench/loadgen.py`` (racers in rooms of 8 racing real games, pinned to core 1; with
``--saturation``, 64 racers each sending its next move as soon as the last one is answered, as
``bench/run_load.py saturation`` does; ``--workload home-undo``: each racer sends a card home and undoes
it, move after move, as ``bench/run_load.py --workload home-undo`` does). Over the
generator's measured window it profiles the server:

- ``py-spy`` (default; the bench extra installs it): samples the server's stacks from outside at
  ``--rate`` Hz, on-CPU samples only, so the server runs at its normal speed; time spent in C (msgspec,
  hiredis, uvloop writes, hashlib) counts to the Python function that called it;
- ``cprofile``: the server process runs under cProfile, switched on and off at the window marks
  (SIGUSR1/SIGUSR2); exact call counts, but the profiler's own cost inflates every figure (Python
  calls more than C), so compare its shares, not its microseconds, with py-spy's.

Each sample (py-spy) or function's own time (cProfile; a built-in's goes to its caller's part)
is put in one part of the move path by the innermost frame that names one (``classify``): websockets
framing, decode, core, engine, encode, store, fan-out, shell (the rest of the shell: server/app.py,
or the package server/shell/ where the shell is split into parts), event loop and I/O, other. The
table divides each part's time by the moves the server accepted in the window and sets the total
beside the server's CPU per move read from /proc over the same window; a second table splits the
core, the shell and the engine by file (``--files``).
Loopback only. Prints the tables; ``--json FILE`` also writes the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import run_load
from machine_info import cpu_name
from support import server_environment  # a test helper: run_load puts tests/ on the path

PARTS = [
    "websockets framing: reading",
    "websockets framing: writing",
    "decode",
    "core",
    "engine",
    "encode",
    "store",
    "fan-out",
    "shell",
    "event loop and I/O",
    "other",
]

# Modules whose frames never decide a part: the part is their caller's (asyncio plumbing called by
# redis-py is the store's; a task started by the shell is the shell's).
TRANSPARENT = (
    "/asyncio/",
    "contextlib.py",
    "typing.py",
    "enum.py",
    "functools.py",
    "abc.py",
    "dataclasses.py",
    "/collections/",
    "weakref.py",
    "/logging/",  # websockets' debug calls are websockets' time
    "_weakrefset.py",
    "<frozen",
    "<string>",  # dataclass-made __init__: the caller's time
    "~",  # cProfile's built-ins
    "<built-in",
    "<method",
)
EVENT_LOOP = ("/uvloop/", "selectors.py", "socket.py", "ssl.py", "runners.py", "threading.py")
# websockets functions that build or write outgoing frames (send, send_data, send_binary, send_frame...).
WEBSOCKETS_WRITING = {"broadcast", "serialize", "data_to_send", "write", "writelines", "write_frame"}
# The fan-out: the files that choose connections and check their buffers, and, in a shell still in one
# file (server/app.py), the functions of it that do.
FAN_OUT_FILES = ("server/fanout.py", "server/shell/delivery.py")
FAN_OUT = {"_deliver", "_cut", "_conns_of", "_reply", "publish"}
SHELL_FILES = ("server/app.py", "server/cli.py")
SHELL_PACKAGE = "server/shell/"
ENGINE = ("shared/engine.py", "shared/cards.py", "shared/deal.py", "shared/solver.py")
STORE = ("server/store/", "/redis/", "/hiredis/", "/valkey/", "/async_timeout/")


def part_of_frame(function: str, filename: str) -> str | None:
    """The part one frame names, or None when the frame is plumbing whose caller decides."""
    # py-spy names files relative to their sys.path entry ("websockets/frames.py"), cProfile in full.
    path = "/" + filename.replace("\\", "/").lstrip("/")
    if "/websockets/" in path:  # before the plumbing: websockets has an asyncio/ folder of its own
        name = function.rpartition(".")[2]
        writing = name.startswith("send") or name in WEBSOCKETS_WRITING
        return "websockets framing: writing" if writing else "websockets framing: reading"
    if any(marker in path for marker in STORE):
        return "store"
    if any(marker in path for marker in TRANSPARENT) or any(marker in function for marker in TRANSPARENT):
        return None
    if path.endswith("shared/protocol.py") or path.endswith("server/core/records.py"):
        return "encode" if "encode" in function else "decode"
    if "server/core/" in path:
        return "core"
    if any(path.endswith(name) for name in ENGINE):
        return "engine"
    in_app = path.endswith("server/app.py")  # py-spy qualifies a method (RaceServer._deliver), cProfile not
    if any(path.endswith(name) for name in FAN_OUT_FILES) or (in_app and function.rpartition(".")[2] in FAN_OUT):
        return "fan-out"
    if SHELL_PACKAGE in path or any(path.endswith(name) for name in SHELL_FILES):
        return "shell"
    if any(marker in path for marker in EVENT_LOOP):
        return "event loop and I/O"
    return "other"


def classify(frames: Sequence[tuple[str, str]]) -> str:
    """The part of one stack (``(function, file)`` pairs, outermost first): its innermost frame that
    names a part; a stack of plumbing only is the event loop's own time."""
    return classify_where(frames)[0]


def classify_where(frames: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The part of one stack and the file of the frame that decided it (``""`` for the loop's own)."""
    for function, filename in reversed(frames):
        part = part_of_frame(function, filename)
        if part is not None:
            return part, filename
    return "event loop and I/O", ""


# ---------------------------------------------------------------- reading the profiles


def parse_pyspy_frame(text: str) -> tuple[str, str]:
    """``function (file:line)`` -> (function, file)."""
    function, _, where = text.rpartition(" (")
    if not function:
        return text, ""
    return function, where.rstrip(")").rsplit(":", 1)[0]


LOOP_RUNNERS = ("/asyncio/runners.py", "/uvloop/__init__.py", "/asyncio/base_events.py")


def loop_only(frames: Sequence[tuple[str, str]]) -> bool:
    """A stack whose innermost Python frame is the event loop's runner: the loop is waiting for the
    sockets, or in its own C code (uvloop). py-spy cannot tell the two apart here (its idle detection
    counted idle time as busy on this VM), so such samples are left out and the loop's own time is
    what the server's CPU has beyond the rest (see ``table``)."""
    return not frames or any(("/" + frames[-1][1].lstrip("/")).endswith(runner) for runner in LOOP_RUNNERS)


def pyspy_parts(raw: str) -> tuple[Counter[str], Counter[tuple[str, str]], int, int]:
    """py-spy's collapsed stacks -> (samples per part, samples per innermost function, samples counted,
    loop-only samples left out)."""
    parts: Counter[str] = Counter()
    leaves: Counter[tuple[str, str]] = Counter()
    total = 0
    skipped = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [parse_pyspy_frame(frame) for frame in stack.split(";")]
        if loop_only(frames):
            skipped += count
            continue
        parts[classify(frames)] += count
        leaves[frames[-1]] += count
        total += count
    return parts, leaves, total, skipped


SPLIT_BY_FILE = ("core", "shell", "engine", "fan-out")  # the parts the second table splits by file


def pyspy_files(raw: str) -> Counter[tuple[str, str]]:
    """py-spy's collapsed stacks -> samples per (part, file that decided it), for the parts in
    ``SPLIT_BY_FILE`` (loop-only stacks left out, as in ``pyspy_parts``)."""
    files: Counter[tuple[str, str]] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [parse_pyspy_frame(frame) for frame in stack.split(";")]
        if loop_only(frames):
            continue
        part, filename = classify_where(frames)
        if part in SPLIT_BY_FILE:
            files[(part, filename)] += int(count_text)
    return files


Func = tuple[str, int, str]  # cProfile's (file, line, function)


def cprofile_parts(stats: pstats.Stats) -> tuple[dict[str, float], dict[tuple[str, str], float], float]:
    """cProfile's own times -> (seconds per part, seconds per function, seconds). A built-in's (or
    plumbing's) own time is shared among its callers by what each call site spent in it."""
    table: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    parts: defaultdict[str, float] = defaultdict(float)
    functions: defaultdict[tuple[str, str], float] = defaultdict(float)
    decided: dict[Func, str | None] = {}

    def spread(func: Func, seconds: float, depth: int) -> None:
        part = decided.setdefault(func, part_of_frame(func[2], func[0]))
        if part is not None or depth > 12:
            parts[part or "event loop and I/O"] += seconds
            return
        callers: dict[Func, tuple[int, int, float, float]] = table.get(func, (0, 0, 0.0, 0.0, {}))[4]
        weights = {caller: timing[2] for caller, timing in callers.items() if timing[2] > 0}
        whole = sum(weights.values())
        if not whole:
            parts["event loop and I/O"] += seconds
            return
        for caller, weight in weights.items():
            spread(caller, seconds * weight / whole, depth + 1)

    total = 0.0
    for func, (_cc, _nc, own, _cumulative, _callers) in table.items():
        if own <= 0:
            continue
        total += own
        functions[(func[2], func[0])] += own
        spread(func, own, 0)
    return parts, functions, total


# ---------------------------------------------------------------- running the server and the load


@dataclass
class Window:
    """What one profiled run measured."""

    store: str
    profiler: str
    moves: int
    seconds: float
    server_cpu_seconds: float
    runqueue_wait_share: float
    part_seconds: dict[str, float]
    profiled_seconds: float
    loop_only_seconds: float
    hottest: list[tuple[str, str, float]]
    loadgen: dict[str, Any] = field(default_factory=dict)
    loadavg: list[float] = field(default_factory=list)
    server_warnings: dict[str, int] = field(default_factory=dict)  # e.g. append_failed: the run went wrong
    workload: str = "play"
    # py-spy: seconds per "part: file" of the parts in SPLIT_BY_FILE (the core, the shell... by file)
    file_seconds: dict[str, float] = field(default_factory=dict)


SERVE_UNDER_CPROFILE = "serve-under-cprofile"


def serve_under_cprofile(stats_path: str, argv: list[str]) -> int:
    """The server's own main, with cProfile switched on by SIGUSR1 and off (stats written) by SIGUSR2."""
    from server.cli import main as server_main

    # CPU time, not the default wall clock: on a shared machine the server waits for its core.
    profiler = cProfile.Profile(time.process_time)

    def start(_signum: int, _frame: object) -> None:
        profiler.enable()

    def stop(_signum: int, _frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(stats_path + ".tmp")
        os.replace(stats_path + ".tmp", stats_path)  # appears whole: the runner polls for it

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return server_main(argv)


@contextlib.contextmanager
def race_server(
    store: str, profiler: str, stats_path: str, pure: bool = False
) -> Iterator[tuple[str, subprocess.Popen[bytes], run_load.Target]]:
    """plot-server (memory store, or a fresh redis-server) on a free loopback port, pinned like run_load's."""
    with contextlib.ExitStack() as stack:
        port = run_load.free_port()
        args = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *run_load.BENCH_SERVER_FLAGS]
        if store == "redis":
            redis_url, _sampler = stack.enter_context(run_load.redis_server())
            args += ["--redis", redis_url]
        if profiler == "cprofile":
            cmd = [run_load.PYTHON, str(Path(__file__).resolve()), SERVE_UNDER_CPROFILE, stats_path, *args]
        else:
            cmd = [run_load.PYTHON, "-m", "server.cli", *args]
        log = stack.enter_context(tempfile.TemporaryFile())
        proc = subprocess.Popen(
            run_load.pinned(cmd, run_load.SERVER_CORE),
            cwd=run_load.ROOT,
            # no spectator page: it would take port + 1; --pure: the engine's pure-Python build
            env=server_environment(**({"PLOT_PURE_PYTHON": "1"} if pure else {})),
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=run_load.raise_fd_limit,
        )
        stack.callback(run_load.stop_process, proc)
        try:
            run_load.wait_port(port, proc)
        except RuntimeError as exc:
            log.seek(0)
            raise RuntimeError(f"{store} server did not start: {exc}\n{log.read()[-2000:].decode()}") from None
        url = f"ws://127.0.0.1:{port}"
        # run_load's Target reads the server's JSON log lines: warnings such as append_failed.
        yield url, proc, run_load.Target(store, url, run_load.ProcSampler(proc.pid), None, log)


def py_spy_binary() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_once(store: str, opts: argparse.Namespace) -> Window:
    """One profiled run of the load against a fresh server with this store."""
    with tempfile.TemporaryDirectory(prefix="plot-profile-") as workdir:
        return profile_in(workdir, store, opts)


def profile_in(workdir: str, store: str, opts: argparse.Namespace) -> Window:
    stats_path = str(Path(workdir) / "server.prof")
    raw_path = str(Path(workdir) / "pyspy.txt")
    loadgen_args = [
        "--racers", str(opts.racers),
        "--pace", str(opts.pace),
        "--duration", str(opts.duration),
        "--warmup", str(opts.warmup),
        "--seed", str(opts.seed),
        "--workload", opts.workload,
    ]  # fmt: skip
    with race_server(store, opts.profiler, stats_path, opts.pure) as (url, proc, target):
        sampler = run_load.ProcSampler(proc.pid)  # taskset execs the server: same pid
        cmd = run_load.pinned(
            [run_load.PYTHON, run_load.LOADGEN, "server", "--url", url, *loadgen_args], run_load.CLIENT_CORE
        )
        loadavg_before = run_load.loadavg()
        generator = subprocess.Popen(cmd, cwd=run_load.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        marks: dict[str, tuple[float, float, float]] = {}
        spy: list[subprocess.Popen[bytes]] = []
        tail: list[str] = []

        def on_stderr() -> None:
            assert generator.stderr is not None
            for line in generator.stderr:
                name = line.strip()
                if name == "window-start":
                    if opts.profiler == "cprofile":
                        os.kill(proc.pid, signal.SIGUSR1)
                    else:
                        spy.append(start_py_spy(proc.pid, opts, raw_path))
                    marks[name] = (time.monotonic(), sampler.cpu_seconds(), sampler.runqueue_wait_seconds())
                elif name == "window-end":
                    marks[name] = (time.monotonic(), sampler.cpu_seconds(), sampler.runqueue_wait_seconds())
                    if opts.profiler == "cprofile":
                        os.kill(proc.pid, signal.SIGUSR2)
                else:
                    tail.append(line)
                    del tail[:-40]

        stdout_lines: list[str] = []

        def on_stdout() -> None:
            assert generator.stdout is not None
            stdout_lines.extend(generator.stdout)

        readers = [threading.Thread(target=reader, daemon=True) for reader in (on_stderr, on_stdout)]
        for reader in readers:
            reader.start()
        try:
            generator.wait(opts.setup_timeout + opts.warmup + opts.duration + 60)
        except subprocess.TimeoutExpired:
            generator.kill()
            generator.wait()
            raise RuntimeError("loadgen did not finish in time") from None
        for reader in readers:
            reader.join(5)
        if generator.returncode != 0:
            raise RuntimeError(f"loadgen failed ({generator.returncode}): {''.join(tail)[-2000:]}")
        stdout = "".join(stdout_lines)
        result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        if "window-start" not in marks or "window-end" not in marks:
            raise RuntimeError("loadgen printed no window marks")
        if opts.profiler == "cprofile":
            wait_for_file(stats_path, 30.0)
        for process in spy:
            process.wait(opts.duration + 30)
            if process.returncode != 0:
                raise RuntimeError(f"py-spy failed ({process.returncode})")
        warnings = target.log_events()
    (t0, cpu0, wait0), (t1, cpu1, wait1) = marks["window-start"], marks["window-end"]
    loop_only_seconds = 0.0
    file_seconds: dict[str, float] = {}
    if opts.profiler == "cprofile":
        counted, functions, seconds = cprofile_parts(pstats.Stats(stats_path))
        part_seconds = dict(counted)
        function_seconds = dict(functions)
    else:
        samples, leaves, total, skipped = pyspy_parts(Path(raw_path).read_text())
        loop_only_seconds = skipped / opts.rate
        part_seconds = {part: count / opts.rate for part, count in samples.items()}
        function_seconds = {leaf: count / opts.rate for leaf, count in leaves.items()}
        seconds = total / opts.rate
        raw = Path(raw_path).read_text()
        file_seconds = {f"{part}: {short_path(name)}": n / opts.rate for (part, name), n in pyspy_files(raw).items()}
    hottest = sorted(function_seconds.items(), key=lambda item: -item[1])[: opts.top]
    return Window(
        store=store,
        profiler=opts.profiler,
        moves=int(result["accepted_moves"]),
        seconds=t1 - t0,
        server_cpu_seconds=cpu1 - cpu0,
        runqueue_wait_share=(wait1 - wait0) / max(t1 - t0, 1e-9),
        part_seconds=part_seconds,
        profiled_seconds=seconds,
        loop_only_seconds=loop_only_seconds,
        hottest=[(function, filename, value) for (function, filename), value in hottest],
        loadgen={key: result.get(key) for key in ("moves_per_second", "ack_latency_ms", "errors", "rejected")},
        loadavg=loadavg_before,
        server_warnings=warnings,
        workload=opts.workload,
        file_seconds=file_seconds,
    )


def start_py_spy(pid: int, opts: argparse.Namespace, raw_path: str) -> subprocess.Popen[bytes]:
    binary = py_spy_binary()
    if binary is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]', or use --profiler cprofile")
    cmd = [
        binary, "record", "--pid", str(pid), "--rate", str(opts.rate), "--duration", str(round(opts.duration)),
        "--format", "raw", "--output", raw_path, "--nonblocking",
    ]  # fmt: skip
    return subprocess.Popen(
        run_load.pinned(cmd, run_load.CLIENT_CORE), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_for_file(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server wrote no profile to {path} within {timeout:g} s")
        time.sleep(0.05)


# ---------------------------------------------------------------- report


def part_micros(window: Window) -> dict[str, float]:
    """µs per accepted move in each part.

    py-spy: each part's share of the counted samples times the server's CPU per move from /proc.
    Its own seconds are not used: on this VM py-spy counts a thread that waits for its core (or, at
    high rates, an idle one) as busy, so its sample-seconds ran to 1.2-2.5 times the server's CPU;
    the shares hold. The loop's own C code (uvloop), in no part's frames, is spread over the parts.
    cProfile: each part's own CPU seconds per move (inflated by the profiler's cost); what the server
    spent beyond them (the loop's C code) is added to the event loop's part."""
    moves = max(window.moves, 1)
    cpu_per_move = window.server_cpu_seconds / moves * 1e6
    if window.profiler == "py-spy":
        counted = window.profiled_seconds or 1.0
        return {part: window.part_seconds.get(part, 0.0) / counted * cpu_per_move for part in PARTS}
    micros = {part: window.part_seconds.get(part, 0.0) / moves * 1e6 for part in PARTS}
    micros["event loop and I/O"] += max(0.0, cpu_per_move - window.profiled_seconds / moves * 1e6)
    return micros


def table(window: Window) -> list[str]:
    moves = max(window.moves, 1)
    cpu_per_move = window.server_cpu_seconds / moves * 1e6
    micros = part_micros(window)
    total = sum(micros.values())
    lines = [
        f"{window.store} store, {window.profiler}: {window.moves:,} moves accepted in {window.seconds:.1f} s "
        f"({window.moves / window.seconds:,.0f}/s); server CPU {window.server_cpu_seconds / window.seconds:.2f} "
        f"of a core, run-queue wait {window.runqueue_wait_share:.1%}; load average before "
        + ", ".join(f"{value:.2f}" for value in window.loadavg),
    ]
    if window.server_warnings:
        lines.append(f"server warnings and errors logged: {window.server_warnings}")
    if window.profiler == "py-spy":
        lines.append(
            f"server CPU per accepted move (/proc, the whole window): {cpu_per_move:.0f} µs, split by the shares "
            f"of {window.profiled_seconds:.2f} sample-seconds; {window.loop_only_seconds:.2f} sample-seconds "
            "with only the loop on the stack left out"
        )
    else:
        in_frames = window.profiled_seconds / moves * 1e6
        lines.append(
            f"server CPU per accepted move (/proc, the whole window, profiler included): {cpu_per_move:.0f} µs; "
            f"in the profile's functions {in_frames:.0f} µs, the rest counted to the event loop"
        )
    lines += ["", "| part of the move path | µs per move | share |", "|---|---|---|"]
    for part in PARTS:
        lines.append(f"| {part} | {micros[part]:.1f} | {micros[part] / total if total else 0.0:.1%} |")
    lines.append(f"| **total** | **{total:.1f}** | 100% |")
    if window.file_seconds:
        counted = window.profiled_seconds or 1.0
        lines += ["", "| part: file | µs per move |", "|---|---|"]
        for name, value in sorted(window.file_seconds.items(), key=lambda item: -item[1]):
            if value / counted * cpu_per_move >= 0.1:
                lines.append(f"| {name} | {value / counted * cpu_per_move:.1f} |")
    if window.hottest:
        scale = cpu_per_move / (window.profiled_seconds / moves * 1e6) if window.profiler == "py-spy" else 1.0
        lines += ["", "| hottest functions (own time) | file | µs per move |", "|---|---|---|"]
        for function, filename, seconds in window.hottest:
            lines.append(f"| `{function}` | {short_path(filename)} | {seconds / moves * 1e6 * scale:.1f} |")
    return lines


def short_path(filename: str) -> str:
    """A file as a reader finds it: from its package folder (site-packages, the standard library) or the
    repository root."""
    path = filename.replace("\\", "/")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    root = f"{run_load.ROOT.as_posix()}/"
    if path.startswith(root):
        return path[len(root) :]
    stdlib = re.search(r"/lib/python3\.\d+/(.*)", path)
    return stdlib.group(1) if stdlib else path or "?"


def describe_machine() -> str:
    return f"{cpu_name()}, {os.cpu_count()} CPUs, Linux {os.uname().release}, Python {sys.version.split()[0]}"


def options(arguments: list[str]) -> argparse.Namespace:
    """The command line, with the defaults that depend on each other filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="memory,redis", help="memory, redis, or both (comma-separated)")
    parser.add_argument("--profiler", choices=["py-spy", "cprofile"], default=None,
                        help="py-spy (default where installed) or cprofile")  # fmt: skip
    parser.add_argument("--racers", type=int, default=None, help="default 1000 (paced), 64 (--saturation)")
    parser.add_argument("--pace", type=float, default=None, help="moves per second per racer (default 2; 0: saturate)")
    parser.add_argument(
        "--saturation", action="store_true", help="the saturated path: --pace 0, 64 racers unless --racers says"
    )
    parser.add_argument(
        "--workload",
        choices=["play", "home-undo"],
        default="play",
        help="what the racers play (bench/loadgen.py --workload): real games, or a card home and undone",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="the engine's pure-Python build (PLOT_PURE_PYTHON=1): a compiled engine's time counts to its callers",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="profiled seconds (py-spy: whole seconds)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second (it keeps up at 250)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--top", type=int, default=0, help="also list this many hottest functions")
    parser.add_argument("--setup-timeout", type=float, default=300.0)
    parser.add_argument("--json", default="", help="also write the figures to this file")
    opts = parser.parse_args(arguments)
    if opts.saturation and opts.pace not in (None, 0):
        parser.error("--saturation is --pace 0: leave --pace out")
    opts.pace = 0.0 if opts.saturation else (2.0 if opts.pace is None else opts.pace)
    if opts.racers is None:
        opts.racers = 64 if opts.pace == 0 else 1000
    if opts.profiler is None:
        opts.profiler = "py-spy" if py_spy_binary() else "cprofile"
    stores = [name.strip() for name in opts.store.split(",") if name.strip()]
    if not stores or any(name not in ("memory", "redis") for name in stores):
        parser.error("--store takes memory, redis or memory,redis")
    if opts.profiler == "py-spy" and opts.duration < 1:
        parser.error("py-spy profiles whole seconds: --duration 1 or more")
    opts.stores = stores
    return opts


def main(argv: Iterable[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == [SERVE_UNDER_CPROFILE]:
        sys.exit(serve_under_cprofile(arguments[1], arguments[2:]))
    opts = options(arguments)
    stores: list[str] = opts.stores
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    windows = [profile_once(store, opts) for store in stores]
    print(f"{started}; {describe_machine()}")
    print(
        (
            f"saturation: {opts.racers} racers in rooms of 8, each move sent when the last is answered"
            if opts.pace == 0
            else f"paced load: {opts.racers} racers in rooms of 8 x {opts.pace:g} moves/s"
        )
        + ("" if opts.workload == "play" else f", workload {opts.workload}")
        + (", the pure-Python engine" if opts.pure else "")
        + f", {opts.warmup:g} s warm-up, "
        f"{opts.duration:g} s profiled" + (f", py-spy at {opts.rate} Hz" if opts.profiler == "py-spy" else "")
    )
    for window in windows:
        print()
        print("\n".join(table(window)))
    if opts.json:
        Path(opts.json).write_text(json.dumps([window.__dict__ for window in windows], indent=1) + "\n")


if __name__ == "__main__":
    main()
