"""Arguments the network commands share (argparse only: command modules keep a light top level)."""

from __future__ import annotations

import argparse
import getpass
import os
from dataclasses import dataclass

DEFAULT_SERVER = "ws://localhost:8765"


def add_server_arguments(parser: argparse.ArgumentParser, *, name: bool = True) -> None:
    parser.add_argument(
        "--server",
        default=None,
        help=f"server address, ws://host:port or wss://… (default: $PLOT_SERVER or {DEFAULT_SERVER})",
    )
    if name:
        parser.add_argument(
            "--name",
            default=None,
            help="your display name, at most 24 terminal cells wide, a wide character taking 2 "
            "(default: $PLOT_NAME or your login)",
        )


def server_url(args: argparse.Namespace) -> str:
    url: str = args.server or os.environ.get("PLOT_SERVER") or DEFAULT_SERVER
    if "://" not in url:
        url = "ws://" + url  # "host:8765" is what people type
    return url


def display_name(args: argparse.Namespace) -> str:
    """--name, else $PLOT_NAME, else the login name. An empty --name is kept (and refused by the
    name check): only a name not given at all falls back."""
    name = getattr(args, "name", None)
    if name is None:
        name = os.environ.get("PLOT_NAME")
    if name is None:
        try:
            name = getpass.getuser()
        except Exception:  # no login name in this environment
            name = "player"
    return name


def room_code(text: str) -> str:
    """argparse type: a room code as people type it (any case, spaces or dashes)."""
    from shared.protocol import ROOM_CODE_LENGTH, is_room_code, normalize_room_code

    code = normalize_room_code(text)
    if not is_room_code(code):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a room code: {ROOM_CODE_LENGTH} characters from 2-9 and A-Z (no 0, 1, I, L, O)"
        )
    return code


@dataclass(frozen=True, slots=True)
class RoomTarget:
    """A room as ``plot join`` / ``plot watch`` take it: a code, or an invite (the server's
    address and the code: ``ws://HOST:PORT/CODE``) that needs no ``--server``."""

    code: str
    server: str | None = None  # None: a bare code (the server comes from --server or $PLOT_SERVER)


def room_target(text: str) -> RoomTarget:
    """argparse type: a room code, or an invite ``ws://HOST:PORT/CODE`` (``wss://`` too)."""
    if "://" not in text:
        return RoomTarget(room_code(text))
    from client.invite import split_invite

    try:
        server, code = split_invite(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return RoomTarget(room_code(code), server)


def target_server(args: argparse.Namespace, target: RoomTarget) -> str:
    """The server of ``target``: its invite's, else --server / $PLOT_SERVER. Raises ValueError when
    --server names another server than the invite."""
    if target.server is None:
        return server_url(args)
    if args.server and server_url(args).rstrip("/") != target.server.rstrip("/"):
        raise ValueError(f"the invite names {target.server} and --server names {args.server}: give one of them")
    return target.server


def add_target_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("code", type=room_target, metavar="CODE|INVITE", help=help_text)


def race_target(args: argparse.Namespace, command: str) -> tuple[str, str] | int:
    """``plot join`` / ``plot watch``: the server URL and display name, or the exit code (2) after
    printing what is wrong."""
    try:
        url = target_server(args, args.code)
    except ValueError as exc:
        print(f"plot {command}: {exc}")
        return 2
    name = display_name(args)
    problem = check_name_or_exit(name, command)
    if problem:
        print(problem)
        return 2
    return url, name


def deal_number(text: str) -> int:
    """argparse type: a deal number 0..2^64-1."""
    from shared.deal import parse_deal_number

    try:
        return parse_deal_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bot_levels(text: str) -> tuple[str, ...]:
    """argparse type: a bot level, or a mix the bots take in turn (``easy,hard``)."""
    from client.bot_levels import parse_levels

    try:
        return tuple(level.name for level in parse_levels(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_level_argument(parser: argparse.ArgumentParser, flag: str = "--level") -> None:
    from client.bot_levels import DEFAULT_LEVEL, LEVEL_NAMES

    parser.add_argument(
        flag,
        type=bot_levels,
        default=(DEFAULT_LEVEL,),
        metavar="LEVEL",
        help=f"the bots' level: {', '.join(LEVEL_NAMES)}, or a mix taken in turn such as easy,hard "
        f"(default {DEFAULT_LEVEL}); it shows beside each bot's name",
    )


def check_name_or_exit(name: str, command: str) -> str | None:
    """None if ``name`` is a valid display name, else the message to print."""
    from shared.protocol import check_name

    problem = check_name(name)
    return f"plot {command}: bad --name {name!r}: {problem}" if problem else None


def run_race_app(config: object) -> int:
    """Run the race app for ``config`` (a RaceConfig); prints where things are afterwards."""
    from client.tui.race import RaceApp, RaceConfig

    assert isinstance(config, RaceConfig)
    app = RaceApp(config)
    app.run()
    return finish(app)


def finish(app: object) -> int:
    """After the race app: print where things are and what is true of the seat; the exit code."""
    from client.tui.race import RaceApp
    from client.widgets.room import verify_command

    assert isinstance(app, RaceApp)
    model = app.model
    if app.exit_note:
        print(app.exit_note)
        return 1
    if model.saved_records:
        folder = next(iter(model.saved_records.values())).parent
        print(f"records of the last race: {folder}")
        mine = model.saved_records.get(model.player_id or "")
        if mine is not None and model.results is not None:
            print(f"replay yours: {verify_command(mine, model.results)}")
    print(exit_summary(app))
    return 0


def exit_summary(app: object) -> str:
    """What is true of this window's seat once it has quit: left, still racing, or not in a room."""
    from client.tui.race import RaceApp
    from shared.protocol import RACER, SPECTATOR

    assert isinstance(app, RaceApp)
    model = app.model
    if app.left_room is not None:
        return f"you left room {app.left_room}"
    room = model.room
    if room is None:
        return "you are in no room"
    if model.role == SPECTATOR:
        return f"you stopped watching room {room.code}"
    if model.role == RACER and model.phase in ("dealing", "countdown", "racing"):
        return (
            f"you are still racing in room {room.code}: run the same command again to rejoin "
            "(away too long, you forfeit)"
        )
    return f"you are still in room {room.code}: run the same command again to rejoin"
