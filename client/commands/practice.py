"""``plot practice``: race bots on a server started inside this process. No set-up, no second terminal.

The server is the real one (``server.shell.RaceServer``) on the in-memory store, on a free
loopback port, living as long as the command. The client chooses the deal itself (a practice
room is a chosen-deal room), which is what lets the hint key work: a hint knows the stock.
"""

from __future__ import annotations

import argparse

from client.commands._race_args import add_level_argument, deal_number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bots", type=int, default=None, metavar="N", help="how many bots to race (1-15; default 2, none with --ghost)"
    )
    parser.add_argument(
        "--ghost",
        action="append",
        default=[],
        metavar="RECORD",
        help="race a saved record as a ghost, on its deal and its move times (repeatable): docs/ghosts.md",
    )
    parser.add_argument("--deal", type=deal_number, help="the deal to race on (default: a random one)")
    add_level_argument(parser)
    parser.add_argument(
        "--speed", type=float, default=None, metavar="MOVES_PER_S", help="bots' pace (default: their level's)"
    )
    parser.add_argument("--name", default=None, help="your name on the leaderboard (default: $PLOT_NAME or your login)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.commands._race_args import check_name_or_exit, display_name
    from client.ghosts import GhostFileError, ghosts_for_room

    try:
        ghosts, deal = ghosts_for_room(args.ghost, args.deal)
    except GhostFileError as exc:
        print(f"plot practice: {exc}")
        return 2
    bots = args.bots if args.bots is not None else 0 if ghosts else 2
    least = 0 if ghosts else 1
    if not least <= bots <= 15 or (args.speed is not None and args.speed <= 0):
        print(f"plot practice: --bots must be {least}..15 and --speed above 0")
        return 2
    name = display_name(args)
    problem = check_name_or_exit(name, "practice")
    if problem:
        print(problem)
        return 2
    from client.tui.practice import run_practice

    try:
        return asyncio.run(
            run_practice(name=name, bots=bots, deal=deal, speed=args.speed, levels=args.level, ghosts=ghosts)
        )
    except KeyboardInterrupt:
        return 130
