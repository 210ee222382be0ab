"""Solver speed on a sample of random deal numbers: median time per deal (every deal counted,
unknowns included) and the share decided (winnable or unwinnable) within 2 s and within 30 s.

    .venv/bin/python bench/solver_bench.py --sample 300 --runs 3 [--write-doc]

Pass 1 gives every deal up to --cap seconds (default 30) and decides the shares; passes 2.. cap
each deal at 2 s and only time the deals again (the median is far below either cap). The median
reported is the median over passes of each pass's median. With --write-doc the figures replace
the block between the solver-bench markers in docs/benchmarks.md. Times (and the caps) are CPU
seconds of the process by default (--clock cpu): on a shared machine the wall clock mostly
measures the other work.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine_info import cpu_name  # noqa: E402  (bench/ is the script folder)

from shared.engine import Game  # noqa: E402
from shared.solver import UNKNOWN, WINNABLE, solve  # noqa: E402

START = "<!-- solver-bench:start -->"
END = "<!-- solver-bench:end -->"


def run_pass(
    deals: list[int], cap: float, max_positions: int, clock: Callable[[], float]
) -> list[tuple[str, float, int, int]]:
    out = []
    for deal in deals:
        started = clock()
        result = solve(Game(deal), max_positions=max_positions, max_seconds=cap, clock=clock)
        out.append((result.verdict, clock() - started, result.positions, len(result.moves)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=300, help="how many random deal numbers (default 300)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the sample (default 2026)")
    parser.add_argument("--runs", type=int, default=3, help="passes over the sample (default 3)")
    parser.add_argument("--cap", type=float, default=30.0, help="seconds per deal in pass 1 (default 30)")
    parser.add_argument("--max-positions", type=int, default=5_000_000, help="positions per deal (default 5M)")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="time each deal by the process's CPU time (default: steady on a shared machine) or the wall clock",
    )
    parser.add_argument("--write-doc", action="store_true", help="write the figures into docs/benchmarks.md")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    deals = [rng.getrandbits(64) for _ in range(args.sample)]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    first = run_pass(deals, args.cap, args.max_positions, clock)
    medians = [statistics.median(t for _, t, _, _ in first)]
    for index in range(1, args.runs):
        print(f"pass {index + 1}/{args.runs}", file=sys.stderr)
        medians.append(statistics.median(t for _, t, _, _ in run_pass(deals, 2.0, args.max_positions, clock)))
    n = len(first)
    decided_2 = sum(1 for v, t, _, _ in first if v != UNKNOWN and t <= 2.0)
    decided_30 = sum(1 for v, _, _, _ in first if v != UNKNOWN)
    wins = [m for v, _, _, m in first if v == WINNABLE]
    times = sorted(t for _, t, _, _ in first)
    counts = {v: sum(1 for x, _, _, _ in first if x == v) for v in ("winnable", "unwinnable", "unknown")}
    command = (
        f".venv/bin/python bench/solver_bench.py --sample {args.sample} --seed {args.seed} --runs {args.runs}"
        f" --cap {args.cap:g} --clock {args.clock}" + (" --write-doc" if args.write_doc else "")
    )
    lines = [
        START,
        "`shared/solver.py` ([solver.md](solver.md)) on random deal numbers, measured by "
        "`bench/solver_bench.py`: time per deal from the layout to a verdict (a winning move list, or an "
        "exhaustive proof of none), every deal counted, unknowns included. Targets: median at most 50 ms; "
        "at least 95% of deals decided within 2 s. The 10,000-deal study is in [winrate.md](winrate.md).",
        "",
        f"Command: `{command}`. Machine: {cpu_name()} "
        f"(2 cores, shared with other work), {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, one process. Sample: {n} deal numbers drawn uniformly from 0..2^64-1 "
        f"(seed {args.seed}). Pass 1 allows {args.cap:g} s per deal (and at most {args.max_positions:,} "
        "positions); the other passes 2 s. Times are "
        + ("CPU seconds of the solving process" if args.clock == "cpu" else "wall-clock seconds")
        + f"; the load average was {os.getloadavg()[0]:.1f} at the end of the run.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| median time per deal, every deal counted (median of {args.runs} passes; "
        f"target <= 50 ms) | "
        f"{statistics.median(medians) * 1000:.1f} ms (passes: {', '.join(f'{m * 1000:.1f}' for m in medians)}) |",
        f"| 90th / 99th percentile time (pass 1) | {times[int(0.9 * n)] * 1000:.0f} ms / "
        f"{times[min(n - 1, int(0.99 * n))] * 1000:.0f} ms |",
        f"| decided within 2 s (target >= 95%) | {decided_2}/{n} = {100 * decided_2 / n:.1f}% |",
        f"| decided within {args.cap:g} s | {decided_30}/{n} = {100 * decided_30 / n:.1f}% |",
        f"| verdicts (pass 1) | {counts['winnable']} winnable, {counts['unwinnable']} unwinnable, "
        f"{counts['unknown']} unknown |",
        f"| solution length (moves), median / max | {statistics.median(wins):.0f} / {max(wins)} |"
        if wins
        else "| solution length | - |",
        END,
    ]
    block = "\n".join(lines)
    print(block)
    if args.write_doc:
        doc = ROOT / "docs" / "benchmarks.md"
        text = doc.read_text() if doc.exists() else "# Benchmarks\n"
        if START in text and END in text:
            head, rest = text.split(START, 1)
            _, tail = rest.split(END, 1)
            text = head + block + tail
        else:
            text = text.rstrip("\n") + "\n\n## Solver\n\n" + block + "\n"
        doc.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
