"""``plot join CODE`` or ``plot join ws://HOST:PORT/CODE`` (the invite ``plot host`` shows): take a
racer's seat in a room (a client started again rejoins its race)."""

from __future__ import annotations

import argparse

from client.commands._race_args import add_server_arguments, add_target_argument, race_target


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_argument(parser, "the room's code, or the invite plot host shows (ws://HOST:PORT/CODE)")
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from client.commands._race_args import run_race_app
    from client.tui.race import JOIN, RaceConfig

    target = race_target(args, "join")
    if isinstance(target, int):
        return target
    url, name = target
    return run_race_app(RaceConfig(url=url, name=name, mode=JOIN, code=args.code.code))
