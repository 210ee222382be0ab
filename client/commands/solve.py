"""``plot solve N [--budget POSITIONS] [--seconds S] [--json]``: is deal N winnable? (shared/solver.py)"""

from __future__ import annotations

import argparse
import json
import os
import sys

from client.words import plural

DEFAULT_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("number", metavar="N", help="the deal number, a whole number 0..18446744073709551615")
    parser.add_argument(
        "--budget",
        type=int,
        metavar="POSITIONS",
        default=None,
        help="most positions to search (default: the solver's default, 200000)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        metavar="S",
        default=DEFAULT_SECONDS,
        help=f"most seconds to search (default {DEFAULT_SECONDS:g}; 0 for no time limit)",
    )
    parser.add_argument("--json", action="store_true", help='print one JSON object: {"deal", "verdict", "moves", ...}')


def run(args: argparse.Namespace) -> int:
    import time

    from shared.deal import parse_deal_number
    from shared.engine import Game
    from shared.solver import DEFAULT_MAX_POSITIONS, WINNABLE, solve

    try:
        deal = parse_deal_number(args.number)
    except ValueError as exc:
        print(f"plot solve: {exc}", file=sys.stderr)
        return 2
    budget = DEFAULT_MAX_POSITIONS if args.budget is None else args.budget
    if budget < 1:
        print(f"plot solve: --budget must be a whole number of positions >= 1, not {budget}", file=sys.stderr)
        return 2
    if not args.seconds >= 0:  # also rejects NaN
        print(f"plot solve: --seconds must be >= 0, not {args.seconds}", file=sys.stderr)
        return 2
    max_seconds = args.seconds if args.seconds > 0 else None
    result = solve(Game(deal), max_positions=budget, max_seconds=max_seconds, clock=time.monotonic)
    if args.json:
        text = json.dumps(result.to_json(deal), separators=(",", ":"))
    else:
        lines = [f"deal {deal}: {result.verdict} ({result.positions} positions, {result.seconds:.3f} s)"]
        if result.verdict == WINNABLE:
            lines.append(f"a win in {plural(len(result.moves), 'move')}:")
            lines.extend("  " + " ".join(result.moves[i : i + 10]) for i in range(0, len(result.moves), 10))
        text = "\n".join(lines)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # e.g. `plot solve N | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
