"""``plot board [DATE]``: a day's board of the daily deal (today's live; a past day's revealed and checked here)."""

from __future__ import annotations

import argparse

from client.commands._daily_args import day_argument
from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser, name=False)
    parser.add_argument(
        "day",
        nargs="?",
        type=day_argument,
        metavar="DATE",
        help="YYYY-MM-DD (UTC) or a day number (default: today); [ and ] step through the days",
    )
    parser.add_argument(
        "--standing", action="store_true", help="the standing board over all days (points) instead of a day's"
    )


def run(args: argparse.Namespace) -> int:
    from client.identities import identity_for
    from client.tui.standings import BOARD, STANDING, StandingsApp, StandingsConfig

    url = server_url(args)
    identity = identity_for(url)  # your row stands out, when you have one
    what = STANDING if args.standing else BOARD
    config = StandingsConfig(url=url, what=what, day=args.day, me=identity.profile_id if identity else None)
    app = StandingsApp(config)
    app.run()
    if app.exit_note:
        print(f"plot board: {app.exit_note}")
        return 1
    return 0
