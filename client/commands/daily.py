"""``plot daily``: today's daily deal, once, ranked; then the day's board and your result to share."""

from __future__ import annotations

import argparse

from client.commands._daily_args import add_page_argument
from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser, name=False)
    add_page_argument(parser)
    parser.add_argument(
        "--replay",
        action="store_true",
        help="play today's deal again, unranked (once your ranked attempt is over)",
    )


def run(args: argparse.Namespace) -> int:
    from client.commands._race_args import finish
    from client.commands.host import watch_url
    from client.identities import identity_for
    from client.tui.daily import DAILY, DailyApp, DailyConfig
    from client.tui.race import RaceConfig
    from client.words import plot_command

    url = server_url(args)
    identity = identity_for(url)
    if identity is None or not identity.claimed:
        print(f"plot daily: the daily deal is for claimed names: {plot_command()} claim NAME --server {url} first")
        return 1
    # The connection says hello with the name's secret (client/identities.py): never shown.
    config = RaceConfig(url=url, name=identity.name or "player", mode=DAILY, profile="daily", title="daily deal")
    app = DailyApp(config, DailyConfig(replay=args.replay, page_url=watch_url(url, args.watch_url)))
    app.run()
    code = finish(app)
    if app.shared:
        print("your result, to share:")
        print(app.shared)
    return code
