"""``plot watch CODE`` or ``plot watch ws://HOST:PORT/CODE``: spectate a room: the live
leaderboard, and boards when the room allows."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, add_target_argument, race_target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser, "the room's code, or its invite (ws://HOST:PORT/CODE)")
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from client.commands._race_args import run_race_app
    from client.tui.race import WATCH, RaceConfig

    target = race_target(args, "watch")
    if isinstance(target, int):
        return target
    url, name = target
    # A spectator keeps its own token, so watching never touches the seat of a race you are in.
    config = RaceConfig(url=url, name=name, mode=WATCH, code=args.code.code, profile="spectator")
    return run_race_app(config)
