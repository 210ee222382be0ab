"""``plot practice``: race bots on a server started inside this process. No set-up, no second terminal.

The server is the real one (``server.shell.RaceServer``) on the in-memory store, on a free
loopback port, living as long as the command. The client chooses the deal itself (a practice
room is a chosen-deal room), which is what lets the hint key work: a hint knows the stock.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from client.commands._race_args import add_level_argument, deal_number

if TYPE_CHECKING:
    from client.ghosts import GhostFile


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
    parser.add_argument(
        "--daily",
        metavar="DAY",
        help="a past daily deal (its number, or its date YYYY-MM-DD) against its top attempts and your own, "
        "as ghosts (read from --server once the day is over): docs/ghosts.md",
    )
    parser.add_argument("--top", type=int, default=3, metavar="K", help="with --daily: the day's best K (default 3)")
    parser.add_argument(
        "--server", default=None, help="with --daily: the server of the daily deal (default: $PLOT_SERVER)"
    )


def _daily(args: argparse.Namespace) -> tuple[int, tuple[GhostFile, ...]]:
    """The past day's deal and its ghosts, from the server (--server)."""
    import asyncio

    from client.commands._race_args import display_name, server_url
    from client.daily_ghosts import daily_ghosts, day_number
    from client.ghosts import GhostFileError

    if not 1 <= args.top <= 7:
        raise GhostFileError("--top must be 1..7 (a room races 8 ghosts: the best K and yours)")
    return asyncio.run(daily_ghosts(server_url(args), display_name(args), day_number(args.daily), args.top))


def run(args: argparse.Namespace) -> int:
    import asyncio

    from client.commands._race_args import check_name_or_exit, display_name
    from client.ghosts import GhostFileError, ghosts_for_room

    try:
        ghosts, deal = ghosts_for_room(args.ghost, args.deal)
        if args.daily is not None:
            daily_deal, daily = _daily(args)
            if deal is not None and deal != daily_deal:
                raise GhostFileError(f"day {args.daily} was deal {daily_deal}: leave out --deal (and --ghost)")
            deal, ghosts = daily_deal, (*ghosts, *daily)
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
