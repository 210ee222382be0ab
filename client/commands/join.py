"""``plot join CODE``: take a racer's seat in a room (a client started again rejoins its race)."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, check_name_or_exit, display_name, room_code, server_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("code", type=room_code, help="the room's code, as the host shows it")
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from client.commands._race_args import run_race_app
    from client.tui.race import JOIN, RaceConfig

    name = display_name(args)
    problem = check_name_or_exit(name, "join")
    if problem:
        print(problem)
        return 2
    return run_race_app(RaceConfig(url=server_url(args), name=name, mode=JOIN, code=args.code))
