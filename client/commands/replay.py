"""``plot replay RECORD [--speed MOVES_PER_S] [--paused]``: a saved game record played back on the board.

Space plays / pauses, ← → step, Home / End jump to the deal / the last move, g jumps to a move
number, + / - change the pace. The positions come from the pure engine, as ``plot verify``
replays them; a record with an illegal entry plays up to it and says why it stops there.
Exit 2 (the reason on stderr) when the record cannot be read or is not a game record, or a
flag is out of range.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("record", metavar="RECORD", help="a game record JSON file (what plot verify reads)")
    parser.add_argument(
        "--speed", type=float, default=2.0, metavar="MOVES_PER_S", help="moves per second while playing (default 2)"
    )
    parser.add_argument("--paused", action="store_true", help="open paused, on the deal (Space plays)")


def _fail(message: str) -> int:
    print(f"plot replay: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from shared.engine import NotARecord, parse_record

    if not 0 < args.speed <= 1000:
        return _fail(f"--speed must be above 0 and at most 1000 moves per second, not {args.speed:g}")
    name = args.record
    try:
        raw = Path(name).read_bytes()
    except OSError as exc:
        return _fail(f"cannot read {name}: {exc.strerror or exc}")
    try:
        data = json.loads(raw)
    except RecursionError:
        return _fail(f"{name} is not a game record: its JSON is nested too deeply")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return _fail(f"{name} is not JSON: {exc}")
    try:
        deal, entries, undo = parse_record(data)
    except NotARecord as exc:
        return _fail(f"{name} is not a game record: {exc}")

    from client.tui.replay import ReplayApp, build_replay

    replay = build_replay(deal, entries, undo=undo)
    app = ReplayApp(replay, speed=args.speed, title=f"deal {deal} · {Path(name).name}", paused=args.paused)
    app.run()
    return 0
