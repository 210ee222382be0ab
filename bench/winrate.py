"""The win-rate study: solve deals START..START+K-1 and write docs/winrate.md and docs/winrate.png.

    nice -n 10 .venv/bin/python bench/winrate.py --deals 10000 [--workers 1] [--budget 200000]
    .venv/bin/python bench/winrate.py --deals 10000 --report-only

Resumable: each result is appended to a JSONL file (default bench/results/winrate.jsonl) as
soon as it is known, and deals already there are skipped, so an interrupted run continues where
it stopped; run again with a bigger --budget and only the unknowns are solved again (the last
line for a deal wins). A progress bar goes to stderr. --workers N uses N processes: keep the default 1 on a
shared machine. The budget is in positions (deterministic: the same verdicts on any machine);
times are measured per deal (wall clock and process CPU time).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine_info import cpu_name  # noqa: E402  (bench/ is the script folder)

from shared.engine import Game, replay  # noqa: E402
from shared.solver import UNKNOWN, UNWINNABLE, WINNABLE, solve  # noqa: E402

DEFAULT_RESULTS = ROOT / "bench" / "results" / "winrate.jsonl"


def solve_one(job: tuple[int, int]) -> dict[str, Any]:
    deal, budget = job
    wall = time.perf_counter()
    cpu = time.process_time()
    result = solve(Game(deal), max_positions=budget)
    seconds = time.perf_counter() - wall
    cpu_seconds = time.process_time() - cpu
    row: dict[str, Any] = {
        "deal": deal,
        "verdict": result.verdict,
        "moves": len(result.moves),
        "positions": result.positions,
        "seconds": round(seconds, 5),
        "cpu": round(cpu_seconds, 5),
        "budget": budget,
    }
    if result.verdict == WINNABLE:
        # Not timed: the solution replayed through the engine, so the doc can say every one wins.
        _, replayed = replay(deal, result.moves)
        row["replayed"] = replayed.status
    return row


def load(path: Path) -> dict[int, dict[str, Any]]:
    done: dict[int, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interruption: that deal is solved again
                done[int(row["deal"])] = row
    return done


def progress(done: int, total: int, counts: Counter[str], started: float, fresh: int) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    elapsed = time.monotonic() - started
    rate = fresh / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else math.inf
    eta_text = f"{eta / 60:.1f} min" if math.isfinite(eta) else "?"
    sys.stderr.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
        f"won {counts[WINNABLE]} lost {counts[UNWINNABLE]} unknown {counts[UNKNOWN]}  "
        f"{rate:.1f} deals/s  eta {eta_text}   "
    )
    sys.stderr.flush()


def results(jobs: list[tuple[int, int]], workers: int) -> Iterator[dict[str, Any]]:
    if workers <= 1:
        for job in jobs:
            yield solve_one(job)
        return
    from multiprocessing import Pool

    with Pool(workers) as pool:
        yield from pool.imap_unordered(solve_one, jobs, chunksize=4)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) for k successes in n trials."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def write_chart(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges = [10 ** (k / 8) for k in range(-20, 17)]  # 3 ms .. 100 s, log spaced
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    series = []
    labels = []
    for verdict, colour in ((WINNABLE, "#2b8a3e"), (UNWINNABLE, "#c92a2a"), (UNKNOWN, "#868e96")):
        values = [max(edges[0], r["cpu"]) for r in rows if r["verdict"] == verdict]
        if values:
            series.append((values, colour))
            labels.append(f"{verdict} ({len(values)})")
    ax.hist([s for s, _ in series], bins=edges, stacked=True, color=[c for _, c in series], label=labels)
    ax.set_xscale("log")
    ax.set_yscale("log")  # the tail is a few deals among thousands
    ax.set_ylim(bottom=0.7)
    ax.set_xlabel("solve time per deal, CPU seconds (log scale)")
    ax.set_ylabel("deals (log scale)")
    ax.set_title(f"The Plot: solver time over deals 0..{len(rows) - 1}")
    for mark in (0.05, 2.0):
        ax.axvline(mark, color="#495057", linestyle="--", linewidth=0.8)
        ax.text(mark, ax.get_ylim()[1] * 0.95, f" {mark:g} s", fontsize=8, va="top")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def write_report(rows: list[dict[str, Any]], doc: Path, chart: Path, command: str, results_path: Path) -> None:
    n = len(rows)
    counts = Counter(r["verdict"] for r in rows)
    budgets = sorted({r["budget"] for r in rows})
    first_budget = min(budgets)
    lengths = sorted(r["moves"] for r in rows if r["verdict"] == WINNABLE)
    cpu = sorted(r["cpu"] for r in rows)
    wall = sorted(r["seconds"] for r in rows)
    decided = [r for r in rows if r["verdict"] != UNKNOWN]
    replayed_wins = sum(1 for r in rows if r["verdict"] == WINNABLE and r.get("replayed") == "won")
    first, last = min(r["deal"] for r in rows), max(r["deal"] for r in rows)
    out = [
        "# The Plot: win rate",
        "",
        f"The first published win rate of The Plot (rules as in docs/rules.md, which keep the rule that nothing is "
        f"built on a base-rank card): deals {first}..{last} ({n:,} deals), each solved with full knowledge "
        "of the deal by `shared/solver.py` (how it works, and its API: [solver.md](solver.md)).",
        "",
        "*Winnable* means the solver found a winning move list (replayed through the engine's `replay`: "
        f"{replayed_wins:,} of the {counts[WINNABLE]:,} lists end `won`); *unwinnable* means its search was "
        "exhaustive and found none (a proof, given the solver's "
        "pruning rules, each of which is proved sound in solver.md and checked against a plain exhaustive "
        "search in tests/test_solver.py); *unknown* means the position budget ran out first.",
        "",
        f"Budget: {first_budget:,} positions per deal"
        + (
            f"; the deals still unknown were solved again with {', '.join(f'{b:,}' for b in budgets[1:])}"
            if len(budgets) > 1
            else ""
        )
        + f". Command: `{command}`. "
        f"Machine: {cpu_name()}, 2 cores shared with other work, one process, "
        f"Python {platform.python_version()}. Results, one line per deal: `{shown_path(results_path)}`.",
        "",
        "## Results",
        "",
        "| verdict | deals | share | 95% confidence interval (Wilson) |",
        "|---|---|---|---|",
    ]
    for verdict in (WINNABLE, UNWINNABLE, UNKNOWN):
        k = counts[verdict]
        lo, hi = wilson(k, n)
        out.append(f"| {verdict} | {k:,} | {100 * k / n:.2f}% | {100 * lo:.2f}% .. {100 * hi:.2f}% |")
    k = counts[WINNABLE]
    lo, _ = wilson(k, n)
    _, hi2 = wilson(k + counts[UNKNOWN], n)
    out += [
        "",
        f"So the win rate of The Plot with perfect knowledge lies between {100 * lo:.1f}% and "
        f"{100 * hi2:.1f}% (95% confidence; the lower end counts every unknown as lost, the upper end as won). "
        "A player who does not know the stock wins less often.",
        "",
        "## Solution lengths",
        "",
        f"Moves in the winning lists ({len(lengths):,} deals), `stock>waste` turns included (78 of them at most) "
        "and the 103 moves to foundations:",
        "",
        "| min | 10% | 25% | median | 75% | 90% | max |",
        "|---|---|---|---|---|---|---|",
    ]
    if lengths:
        qs = [percentile([float(x) for x in lengths], q) for q in (0.1, 0.25, 0.5, 0.75, 0.9)]
        out.append(f"| {lengths[0]} | " + " | ".join(f"{q:.0f}" for q in qs) + f" | {lengths[-1]} |")
        out += ["", "| moves | deals |", "|---|---|"]
        bins = Counter((x // 20) * 20 for x in lengths)
        for start in sorted(bins):
            out.append(f"| {start}..{start + 19} | {bins[start]:,} |")
    out += [
        "",
        "## Solve times",
        "",
        "Per deal, every deal counted (unknowns took their whole budget). CPU seconds of the solving "
        "process (wall-clock in brackets; the machine was shared, so wall-clock includes waiting):",
        "",
        "| median | 90% | 95% | 99% | max | mean |",
        "|---|---|---|---|---|---|",
        "| "
        + " | ".join(
            f"{percentile(cpu, q) * 1000:.0f} ms ({percentile(wall, q) * 1000:.0f})" for q in (0.5, 0.9, 0.95, 0.99)
        )
        + f" | {cpu[-1]:.1f} s ({wall[-1]:.1f}) | {statistics.fmean(cpu) * 1000:.0f} ms |",
        "",
        "| decided within | 50 ms | 0.5 s | 2 s | 30 s |",
        "|---|---|---|---|---|",
        "| share of all deals | "
        + " | ".join(
            f"{100 * sum(1 for r in decided if r['cpu'] <= limit) / n:.1f}%" for limit in (0.05, 0.5, 2.0, 30.0)
        )
        + " |",
        "",
        "A deal left unknown counts as undecided in every column. A deal retried with a bigger budget counts "
        "with the time of the retry, which is the time of one solve with that budget (the search is "
        "deterministic: its first positions are those of the first try). "
        f"The study took about {sum(cpu) / 60:.0f} CPU minutes in all.",
        "",
        f"![solve-time distribution]({chart.name})",
        "",
        "Both axes are logarithmic; times under 3 ms (the deals proved lost before any search) are drawn at 3 ms.",
        "",
    ]
    unknown = [r["deal"] for r in rows if r["verdict"] == UNKNOWN]
    if unknown:
        shown = ", ".join(str(d) for d in unknown[:60]) + (" ..." if len(unknown) > 60 else "")
        out += [f"Unknown deals ({len(unknown)}): {shown}", ""]
    doc.write_text("\n".join(out))
    write_chart(rows, chart)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deals", type=int, default=10_000, help="how many deals, K (default 10000)")
    parser.add_argument("--start", type=int, default=0, help="first deal number (default 0)")
    parser.add_argument("--budget", type=int, default=200_000, help="positions per deal (default 200000)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1: the machine is shared)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the JSONL results file")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "winrate.md")
    parser.add_argument("--chart", type=Path, default=ROOT / "docs" / "winrate.png")
    parser.add_argument("--report-only", action="store_true", help="write the doc from the results file only")
    args = parser.parse_args()
    if args.deals < 1 or args.budget < 1 or args.workers < 1:
        parser.error("--deals, --budget and --workers must be at least 1")

    wanted = range(args.start, args.start + args.deals)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = load(args.results)
    if not args.report_only:
        # Skip deals already decided, or left unknown with at least this budget: rerunning with a
        # bigger --budget retries only the unknowns.
        todo = [
            (deal, args.budget)
            for deal in wanted
            if deal not in done or (done[deal]["verdict"] == UNKNOWN and done[deal]["budget"] < args.budget)
        ]
        retried = {deal for deal, _ in todo}
        counts = Counter(done[d]["verdict"] for d in wanted if d in done and d not in retried)
        finished = len(wanted) - len(todo)
        started = time.monotonic()
        with args.results.open("a") as sink:
            for fresh, row in enumerate(results(todo, args.workers), start=1):
                sink.write(json.dumps(row, separators=(",", ":")) + "\n")
                sink.flush()
                done[row["deal"]] = row
                counts[row["verdict"]] += 1
                if fresh % 10 == 0 or fresh == len(todo):
                    progress(finished + fresh, len(wanted), counts, started, fresh)
        sys.stderr.write("\n")
    rows = [done[d] for d in wanted if d in done]
    if len(rows) < len(wanted):
        print(f"only {len(rows)} of {len(wanted)} deals solved so far: run without --report-only", file=sys.stderr)
        return 1
    extra = f" --start {args.start}" if args.start else ""
    extra += f" --workers {args.workers}" if args.workers != 1 else ""
    command = " then ".join(
        f"nice -n 10 .venv/bin/python bench/winrate.py --deals {args.deals} --budget {budget}{extra}"
        for budget in sorted({r["budget"] for r in rows})
    )
    write_report(rows, args.doc, args.chart, command, args.results)
    print(f"wrote {args.doc} and {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
