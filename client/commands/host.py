"""``plot host``: open a room, show its join code, wait for racers, start the race."""

from __future__ import annotations

import argparse
import os
from urllib.parse import urlsplit

from client.commands._race_args import (
    add_level_argument,
    add_server_arguments,
    check_name_or_exit,
    deal_number,
    display_name,
    server_url,
)

GAME_PORT = 8765  # plot-server's default port; it serves the spectator page on the next one


def watch_url(server: str, explicit: str | None = None) -> str:
    """The spectator page's base URL: ``--watch-url``, else the server's host on the port after
    the server's (plot-server's default --web-port)."""
    if explicit:
        return explicit.rstrip("/")
    parts = urlsplit(server)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    port = (parts.port or GAME_PORT) + 1
    return f"{'https' if parts.scheme == 'wss' else 'http'}://{host}:{port}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument(
        "--watch-url",
        default=os.environ.get("PLOT_WATCH_URL"),
        metavar="URL",
        help="the server's spectator page, shown with the room code as URL/watch/CODE "
        "(default: $PLOT_WATCH_URL, else the server's host on the server's port + 1)",
    )
    parser.add_argument("--deal", type=deal_number, help="a chosen deal number (the room is then marked as such)")
    parser.add_argument("--max-racers", type=int, default=8, help="2-16 (default 8)")
    parser.add_argument("--no-undo", action="store_true", help="undo off for every racer")
    parser.add_argument(
        "--spectator-delay",
        type=int,
        metavar="S",
        help="spectators see live boards S seconds behind (the room is then not leak-proof); "
        "default: boards only after the race",
    )
    parser.add_argument(
        "--spectator-chat",
        choices=("outside_race", "always"),
        default="outside_race",
        help="who reads the spectators' chat during a race: outside_race keeps it from the racers "
        "while a race is on (the default), always lets them read it",
    )
    parser.add_argument("--private", action="store_true", help="join by code only, never listed")
    parser.add_argument("--time-limit", type=int, metavar="SECONDS", help="end the race after this long")
    parser.add_argument("--no-bots", action="store_true", help="refuse bot racers")
    parser.add_argument("--winnable", action="store_true", help="deal only deals the solver proves winnable")
    parser.add_argument("--bots", type=int, default=0, metavar="N", help="add N bot racers (run by this client)")
    parser.add_argument(
        "--ghost",
        action="append",
        default=[],
        metavar="FILE",
        help="race a saved record as a ghost (repeatable; the room takes its deal): docs/ghosts.md",
    )
    add_level_argument(parser, "--bot-level")
    parser.add_argument(
        "--bot-speed", type=float, default=None, metavar="MOVES_PER_S", help="bots' pace (default: their level's)"
    )


def run(args: argparse.Namespace) -> int:
    import msgspec

    from client.tui.race import HOST, RaceConfig
    from client.words import option_problem
    from shared import protocol as p
    from shared.protocol import RoomOptions

    name = display_name(args)
    problem = check_name_or_exit(name, "host")
    if problem:
        print(problem)
        return 2
    fields: dict[str, object] = {
        "max_racers": args.max_racers,
        "undo": not args.no_undo,
        "private": args.private,
        "bots_allowed": not args.no_bots,
        "winnable_only": args.winnable,
        "spectator_boards": "after" if args.spectator_delay is None else args.spectator_delay,
        "spectator_chat": args.spectator_chat,
    }
    from client.ghosts import GhostFileError, ghosts_for_room

    try:
        ghosts, deal = ghosts_for_room(args.ghost, args.deal)
    except GhostFileError as exc:
        print(f"plot host: {exc}")
        return 2
    if ghosts and args.winnable:
        print("plot host: a ghost races on its own deal, never a searched one: leave out --winnable or --ghost")
        return 2
    if deal is not None:
        fields["deal"] = deal
    if args.time_limit is not None:
        fields["time_limit"] = args.time_limit
    for problem in (
        option_problem("--max-racers", args.max_racers, p.MAX_RACERS_MIN, p.MAX_RACERS_MAX),
        option_problem("--spectator-delay", args.spectator_delay, 0, p.MAX_SPECTATOR_DELAY, "seconds"),
        option_problem("--time-limit", args.time_limit, p.TIME_LIMIT_MIN, p.TIME_LIMIT_MAX, "seconds"),
    ):
        if problem is not None:
            print(f"plot host: {problem}")
            return 2
    if args.winnable and args.deal is not None:
        print("plot host: --winnable deals random deals the solver proves winnable: leave out --deal or --winnable")
        return 2
    try:
        options = msgspec.convert(fields, RoomOptions)
    except msgspec.ValidationError:
        print("plot host: these options do not make a room: see plot host -h")
        return 2
    if args.bots < 0 or args.bots > options.max_racers - 1:
        print(f"plot host: --bots must be 0..{options.max_racers - 1} (the room seats {options.max_racers})")
        return 2
    if args.bot_speed is not None and args.bot_speed <= 0:
        print("plot host: --bot-speed must be above 0")
        return 2
    url = server_url(args)
    config = RaceConfig(
        url=url,
        name=name,
        mode=HOST,
        options=options,
        bots=args.bots,
        bot_speed=args.bot_speed,
        bot_levels=args.bot_level,
        watch_url=watch_url(url, args.watch_url),
        ghosts=ghosts,
    )
    from client.commands._race_args import run_race_app

    return run_race_app(config)
