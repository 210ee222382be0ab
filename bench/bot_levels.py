"""Each bot level's win rate and race time over a sample of proved-winnable deals.

    nice -n 10 .venv/bin/python bench/bot_levels.py --deals 50
    nice -n 10 .venv/bin/python bench/bot_levels.py --deals 300 --workers 2   # a bigger run

The deals are the first ``--deals`` deals from ``--start`` (default 1000, away from the deals
the levels were tuned on) that the solver proved winnable in bench/results/winrate.jsonl. Each
level plays each deal through the engine, choosing every move from the View alone (what the
server sends a racer, never the deal), with the seed of a bot numbered by the deal, so a run is
repeatable up to the clock: a search level's time limit per move can cut a search short on a
busy machine.

A game's race time is what the bot would take on a server: each move takes the bot's paced
delay or its thinking time, whichever is longer (client.bot.Bot waits out the rest of its delay
after thinking), with no network time. Reported per level: wins, the win rate with its 95%
Wilson interval, the median race time of the won games with a 95% distribution-free interval
(order statistics), mean cards home, and the thinking time per move (mean, 99th percentile and
the most). The JSON goes to bench/results/bot-levels-DATE.json (``--out``); the table to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machine_info import cpu_name  # noqa: E402  (bench/ is the script folder)
from winrate import wilson  # noqa: E402

from client.bot_levels import LEVEL_NAMES, Player, level_named, parse_levels  # noqa: E402
from shared.engine import PLAYING, WON, Game  # noqa: E402

WINRATE = ROOT / "bench" / "results" / "winrate.jsonl"
ENTRY_CAP = 3000  # a game still playing after this many entries counts as lost (none has come near)


def winnable_deals(start: int, count: int, path: Path = WINRATE) -> list[int]:
    """The first ``count`` deals from ``start`` on that the solver proved winnable (the file's last
    line for a deal decides, as bench/winrate.py writes it)."""
    verdicts: dict[int, str] = {}
    with path.open() as rows:
        for line in rows:
            row = json.loads(line)
            verdicts[int(row["deal"])] = row["verdict"]
    deals = sorted(d for d, verdict in verdicts.items() if d >= start and verdict == "winnable")
    if len(deals) < count:
        raise SystemExit(f"only {len(deals)} proved-winnable deals from {start} in {path}")
    return deals[:count]


def play_game(job: tuple[str, int]) -> dict[str, Any]:
    """One level's game of one deal, every move chosen from the View; its outcome and timings."""
    level_name, deal = job
    player = Player(level_named(level_name), seed=deal)
    game = Game(deal)
    race_seconds = 0.0
    thinking: list[float] = []
    while game.status == PLAYING and len(game.entries) < ENTRY_CAP:
        started = time.perf_counter()
        entry = player.choose_here(game.view())
        think = time.perf_counter() - started
        if entry is None:
            break
        thinking.append(think)
        race_seconds += max(think, player.delay())
        game.play(entry)
    if game.status == PLAYING and game.blocked_pending:
        game.resolve_blocked(game.is_blocked())  # what the server's worker decides
    return {
        "level": level_name,
        "deal": deal,
        "status": game.status,
        "cards": game.foundation_cards,
        "moves": len(game.entries),
        "race_seconds": round(race_seconds, 2),
        "think_seconds": round(sum(thinking), 3),
        "think_max": round(max(thinking, default=0.0), 3),
        "think_p99": round(sorted(thinking)[int(0.99 * (len(thinking) - 1))] if thinking else 0.0, 3),
        "solves": player.memory.solves,
    }


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics whose binomial(n, 1/2)
    tail leaves at most (1 - confidence) / 2 on each side (the whole range when n is too small)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return (math.nan, math.nan)
    tail = (1 - confidence) / 2
    cumulative = 0.0
    low = 0  # ordered[low] is the lower bound
    for i in range(n):
        cumulative += math.comb(n, i) / 2**n
        if cumulative > tail:
            low = max(i - 1, 0) if i > 0 else 0
            break
    return (ordered[low], ordered[n - 1 - low])


def summarise(games: list[dict[str, Any]]) -> dict[str, Any]:
    wins = [g for g in games if g["status"] == WON]
    n = len(games)
    lo, hi = wilson(len(wins), n)
    times = [g["race_seconds"] for g in wins]
    mlo, mhi = median_interval(times)
    moves = sum(g["moves"] for g in games)
    return {
        "games": n,
        "wins": len(wins),
        "win_rate": round(len(wins) / n, 4) if n else None,
        "win_rate_95": [round(lo, 4), round(hi, 4)],
        "median_win_seconds": round(statistics.median(times), 1) if times else None,
        "median_win_seconds_95": [round(mlo, 1), round(mhi, 1)] if times else None,
        "mean_cards": round(statistics.fmean(g["cards"] for g in games), 1),
        "think_ms_per_move": round(1000 * sum(g["think_seconds"] for g in games) / max(moves, 1), 2),
        "think_ms_p99_worst_game": round(1000 * max(g["think_p99"] for g in games), 1),
        "think_ms_max": round(1000 * max(g["think_max"] for g in games), 1),
        "statuses": {s: sum(g["status"] == s for g in games) for s in sorted({g["status"] for g in games})},
    }


def level_settings(name: str) -> dict[str, Any]:
    level = level_named(name)
    return {"pace": level.pace, "slip": level.slip, "search": None if level.search is None else asdict(level.search)}


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| level | wins | win rate (95% CI) | median time to win (95% CI) | cards home "
        "| thinking per move (mean / max) |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lo, hi = s["win_rate_95"]
        if s["median_win_seconds"] is None:
            median = "no win"
        else:
            mlo, mhi = s["median_win_seconds_95"]
            median = f"{s['median_win_seconds']:.0f} s ({mlo:.0f}-{mhi:.0f})"
        lines.append(
            f"| {name} | {s['wins']}/{s['games']} | {100 * s['win_rate']:.0f}% ({100 * lo:.0f}-{100 * hi:.0f}%) "
            f"| {median} | {s['mean_cards']:.1f} | {s['think_ms_per_move']:.1f} ms / {s['think_ms_max']:.0f} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deals", type=int, default=50, help="proved-winnable deals per level (default 50)")
    parser.add_argument("--start", type=int, default=1000, help="the first deal number looked at (default 1000)")
    parser.add_argument("--levels", default=",".join(LEVEL_NAMES), help="levels, comma-separated (default all)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1: the machine is shared)")
    parser.add_argument("--out", type=Path, default=None, help="the JSON (default bench/results/bot-levels-DATE.json)")
    args = parser.parse_args(argv)
    levels = [level.name for level in parse_levels(args.levels)]
    deals = winnable_deals(args.start, args.deals)
    jobs = [(level, deal) for level in levels for deal in deals]
    started = time.perf_counter()
    games: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.workers > 1:
            played = stack.enter_context(ProcessPoolExecutor(max_workers=args.workers)).map(play_game, jobs)
        else:
            played = map(play_game, jobs)  # in this process
        for done, game in enumerate(played, start=1):
            games.append(game)
            print(f"\r{done}/{len(jobs)} games", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    summary = {level: summarise([g for g in games if g["level"] == level]) for level in levels}
    out = args.out or ROOT / "bench" / "results" / f"bot-levels-{time.strftime('%Y%m%d')}.json"
    report = {
        "command": "bench/bot_levels.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpu": cpu_name(), "python": platform.python_version()},
        "deals": deals,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "levels": {name: {"settings": level_settings(name), **summary[name]} for name in levels},
        "games": games,
    }
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(summary))
    print(f"written: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
