"""``plot watch CODE``: spectate a room: the live leaderboard, and boards when the room allows."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, check_name_or_exit, display_name, room_code, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", type=room_code, help="the room's code")
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from client.commands._race_args import run_race_app
    from client.tui.race import WATCH, RaceConfig

    name = display_name(args)
    problem = check_name_or_exit(name, "watch")
    if problem:
        print(problem)
        return 2
    # A spectator keeps its own token, so watching never touches the seat of a race you are in.
    config = RaceConfig(url=server_url(args), name=name, mode=WATCH, code=args.code, profile="spectator")
    return run_race_app(config)
