"""The ``plot`` command. Each subcommand lives in its own module under ``client.commands``.

Command modules keep their top level light (argparse only) and import heavy dependencies
(Textual, websockets) inside ``run``, so ``plot deal`` starts fast and a broken optional
dependency cannot break unrelated commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# name -> (module, one-line help). A module provides ``add_arguments(parser)`` and
# ``run(args) -> int`` (the exit code).
COMMANDS: dict[str, tuple[str, str]] = {
    "deal": ("client.commands.deal", "show the layout of a deal number"),
    "verify": ("client.commands.verify", "replay a game record and check every entry"),
    "replay": ("client.commands.replay", "play a saved game record back on the board (step, pause, jump to a move)"),
    "solo": ("client.commands.solo", "play a game alone in the terminal, line by line"),
    "play": ("client.commands.play", "play a game alone on the full-screen board (keys and mouse)"),
    "practice": ("client.commands.practice", "race bots on a server started in this process (no set-up)"),
    "host": ("client.commands.host", "open a race room on a server and show its join code"),
    "join": ("client.commands.join", "race in a room: plot join CODE"),
    "watch": ("client.commands.watch", "spectate a room: plot watch CODE"),
    "rooms": ("client.commands.rooms", "list the open rooms on a server"),
    "bot": ("client.commands.bot", "bot racers for a room (they play from their own view)"),
    "solve": ("client.commands.solve", "is a deal winnable? search it with full knowledge (prints a winning line)"),
    "claim": ("client.commands.claim", "claim a name on a server and keep it (rooms mark it; --rename changes it)"),
    "ratings": ("client.commands.ratings", "a server's rating board, or one claimed name's rating and rated races"),
    "identity": ("client.commands.identity", "move the secrets that hold your claimed names: export, import, list"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plot", description="The Plot: a two-deck patience, raced.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args._module.run(args)
        sys.stdout.flush()  # a closed pipe shows here, while it can still be caught
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`plot rooms | head -1`): what is left unprinted goes nowhere, and
        # the interpreter's last flush must not fail on the closed pipe either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped
    return code


if __name__ == "__main__":
    sys.exit(main())
