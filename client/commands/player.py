"""``plot player NAME``: a claimed player's daily days (streaks, bests, history)."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser, name=False)
    parser.add_argument("name", help="the claimed name")


def run(args: argparse.Namespace) -> int:
    return show_player(server_url(args), args.name, "player")


def show_player(url: str, name: str, command: str, me: str | None = None) -> int:
    from client.tui.standings import PLAYER, StandingsApp, StandingsConfig

    app = StandingsApp(StandingsConfig(url=url, what=PLAYER, name=name, me=me))
    app.run()
    if app.exit_note:
        print(f"plot {command}: {app.exit_note}")
        return 1
    return 0
