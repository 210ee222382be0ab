"""Engine benchmark: replay throughput, legal-move generation, the blocked check.

    .venv/bin/python bench/engine_bench.py            # the figures in docs/benchmarks.md
    .venv/bin/python bench/engine_bench.py --quick    # a smoke run

Throughputs are medians over ``--runs`` runs; per-position times are each position's median
over the runs, summarised over the positions. Positions come from fixed seeds, so runs differ
only in timing. One core: nothing here
is parallel. The position generators are the test suite's (tests/engine_reference.py), so the
benchmark measures the positions the tests check for exactness.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the position generators live with the tests

import engine_reference as ref  # noqa: E402
from machine_info import cpu_name  # noqa: E402  (bench/ is the script folder)

from shared.engine import BLOCKED_BUDGET, PLAYING, Game, replay  # noqa: E402


def machine() -> str:
    cpu = cpu_name()
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()} ({platform.python_implementation()})"


# ---------------------------------------------------------------- inputs (fixed seeds)


def reference_records() -> list[tuple[int, list[str]]]:
    data = json.loads((ROOT / "tests" / "vectors" / "records.json").read_text())
    return [(c["record"]["deal"], c["record"]["moves"]) for c in data["records"] if c["expect"]["ok"]]


def played_records(count: int, seed: int) -> list[tuple[int, list[str]]]:
    """Whole games of random legal play (with undo), as a live game wrote them."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        deal = rng.getrandbits(64)
        entries: list[str] = []
        for _game, entry in ref.random_playout(rng, deal, 2000, undo_chance=0.05):
            entries.append(entry)
        records.append((deal, entries))
    return records


def played_positions(count: int, seed: int, *, empty_stock: bool) -> list[Game]:
    rng = random.Random(seed)
    positions: list[Game] = []
    while len(positions) < count:
        for game, _entry in ref.random_playout(rng, rng.getrandbits(64), 600, check_blocked=False):
            if game.status == PLAYING and bool(game.stock) != empty_stock and rng.random() < 0.2:
                positions.append(game.copy())
    return positions[:count]


def built_positions(count: int, seed: int) -> list[Game]:
    rng = random.Random(seed)
    return [ref.game_at(ref.random_position(rng, stock_empty=True)) for _ in range(count)]


def dig_positions(count: int, seed: int, *, unrestricted: bool) -> list[Game]:
    """Constructed hard ones: a long waste (20-78 cards over the needed one), 0-12 spaces."""
    rng = random.Random(seed)
    games = []
    for _ in range(count):
        spaces, dig = rng.randint(0, 12), rng.randint(20, 78)
        games.append(ref.game_at(ref.dig_position(rng, spaces=spaces, dig=dig, unrestricted=unrestricted)))
    return games


# ---------------------------------------------------------------- measurements


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
clock = time.process_time  # set from --clock


def replay_rate(records: Sequence[tuple[int, list[str]]]) -> float:
    moves = sum(len(entries) for _, entries in records)
    start = clock()
    for deal, entries in records:
        _, result = replay(deal, entries)
        assert result.ok
    return moves / (clock() - start)


def live_rate(records: Sequence[tuple[int, list[str]]]) -> float:
    """Game.play entry by entry, with the blocked check after every move (what the server does)."""
    moves = sum(len(entries) for _, entries in records)
    start = clock()
    for deal, entries in records:
        game = Game(deal)
        for entry in entries:
            if game.status != PLAYING:
                break
            game.play(entry)
    return moves / (clock() - start)


def per_call(positions: Sequence[Game], call: Callable[[Game], object], repeat: int) -> list[float]:
    """Seconds per call for each position (``repeat`` calls timed together). The garbage
    collector is paused while timing, as timeit does: a full collection walks every stored
    position and would be charged to whichever call it interrupts."""
    times = []
    gc.collect()
    gc.disable()
    try:
        for game in positions:
            start = clock()
            for _ in range(repeat):
                call(game)
            times.append((clock() - start) / repeat)
    finally:
        gc.enable()
    return times


def summary(positions: Sequence[Game], call: Callable[[Game], object], repeat: int, runs: int) -> dict[str, float]:
    """Each position's time is its median over the runs (a shared machine's hiccups drop out);
    then the median, 99th percentile and worst over the positions."""
    by_run = [per_call(positions, call, repeat) for _ in range(runs)]
    ordered = sorted(statistics.median(run[i] for run in by_run) for i in range(len(positions)))
    return {
        "median": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "worst": ordered[-1],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small inputs, two runs")
    parser.add_argument("--blocked-only", action="store_true", help="only the blocked-check tables")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: this process's CPU time (default; steady on a shared machine); wall: elapsed time",
    )
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    runs = 2 if args.quick else args.runs
    scale = 10 if args.quick else 1

    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"runs: {runs} (medians over runs), clock: {args.clock}\n")

    if args.blocked_only:
        return blocked_tables(runs, scale)
    records = reference_records() + played_records(200 // scale, seed=1)
    total_moves = sum(len(entries) for _, entries in records)
    print(f"replay: {len(records)} records, {total_moves} entries (10 reference records + random play)")
    rates = [replay_rate(records) for _ in range(runs)]
    live = [live_rate(records) for _ in range(runs)]
    print(f"  replay():            {statistics.median(rates):>12,.0f} entries/s")
    print(f"  Game.play() live:    {statistics.median(live):>12,.0f} entries/s (blocked check after each move)\n")

    positions = played_positions(5000 // scale, seed=2, empty_stock=False) + played_positions(
        1000 // scale, seed=3, empty_stock=True
    )
    legal = summary(positions, Game.legal_moves, 20, runs)
    print(f"legal_moves(): {len(positions)} positions from random play")
    print(
        f"  median {legal['median'] * 1e6:.2f} µs   p99 {legal['p99'] * 1e6:.2f} µs   "
        f"worst {legal['worst'] * 1e6:.2f} µs\n"
    )

    return blocked_tables(runs, scale)


def blocked_tables(runs: int, scale: int) -> int:
    """is_blocked() (exact) and blocked_status(BLOCKED_BUDGET) (what a live game runs) per family."""
    families = [
        ("random play, stock empty", played_positions(5000 // scale, seed=4, empty_stock=True)),
        ("random positions, stock empty", built_positions(3000 // scale, seed=5)),
        ("dig, restricted (long waste, 0-12 spaces)", dig_positions(1000 // scale, seed=6, unrestricted=False)),
        ("dig, unrestricted (long waste, 0-12 spaces)", dig_positions(300 // scale, seed=7, unrestricted=True)),
    ]
    print("is_blocked(): one call per position per run")
    print(f"  {'family':<45} {'positions':>9} {'blocked':>8} {'median':>10} {'p99':>10} {'worst':>10}")
    for name, games in families:
        blocked = sum(game.is_blocked() for game in games)
        stats = summary(games, Game.is_blocked, 1, runs)
        print(
            f"  {name:<45} {len(games):>9} {blocked:>8} {stats['median'] * 1e6:>8.1f}µs "
            f"{stats['p99'] * 1e3:>8.2f}ms {stats['worst'] * 1e3:>8.1f}ms"
        )
    print(f"\nblocked_status({BLOCKED_BUDGET}): the budgeted check a live game runs after each move")
    print(f"  {'family':<45} {'positions':>9} {'undecided':>9} {'median':>10} {'p99':>10} {'worst':>10}")
    for name, games in families:
        undecided = sum(game.blocked_status(BLOCKED_BUDGET) is None for game in games)
        stats = summary(games, budgeted, 1, runs)
        print(
            f"  {name:<45} {len(games):>9} {undecided:>9} {stats['median'] * 1e6:>8.1f}µs "
            f"{stats['p99'] * 1e3:>8.2f}ms {stats['worst'] * 1e3:>8.2f}ms"
        )
    return 0


def budgeted(game: Game) -> bool | None:
    return game.blocked_status(BLOCKED_BUDGET)


if __name__ == "__main__":
    sys.exit(main())
