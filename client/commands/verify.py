"""``plot verify RECORD [--json] [--commitment HASH --salt SALT | --reveal [REVEAL]]``: replay a game record.

Exit 0 when every entry is legal (and the commitment, if given, matches); 1 at the first
illegal entry (later entries are not applied) or on a commitment mismatch; 2 when the
record cannot be read or is not a game record (docs/rules.md, "Piles, what a player sees,
and moves"), with the reason on stderr (and, with ``--json``, the JSON error object on stdout:
``ok`` false, ``status`` null, ``error`` with the reason and no entry).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from client.words import plural, readable_cards
from shared.engine import NotARecord, ReplayResult, parse_record, replay


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("record", metavar="RECORD", help="a game record JSON file, or - for standard input")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the result")
    parser.add_argument(
        "--commitment", metavar="HASH", help="also check the race's commitment to the record's deal (needs --salt)"
    )
    parser.add_argument("--salt", metavar="SALT", help="the salt the server revealed with the deal")
    parser.add_argument(
        "--reveal",
        nargs="?",
        const="",
        metavar="REVEAL",
        help="check the commitment with the salt and commitment of a saved reveal.json "
        "(default: the reveal.json beside RECORD, as the race client saves them)",
    )


def _read(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    with open(source, "rb") as handle:
        return handle.read()


def _fail(message: str, as_json: bool = False) -> int:
    """Exit 2: the line on stderr, and with ``--json`` the JSON error object on stdout too."""
    print(f"plot verify: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps(error_json(message)))
    return 2


def error_json(message: str) -> dict[str, object]:
    """The ``--json`` object when nothing could be replayed (exit 2): the result's shape, ``ok``
    false, ``status`` null, and ``error`` with no entry (index and move null) and the reason."""
    return {
        "ok": False,
        "moves": 0,
        "foundation_cards": 0,
        "status": None,
        "error": {"index": None, "move": None, "reason": message},
    }


def result_json(result: ReplayResult) -> dict[str, object]:
    """The ``--json`` object: ok, moves, foundation_cards, status, error (null or index/move/reason)."""
    error = result.error
    return {
        "ok": result.ok,
        "moves": result.moves,
        "foundation_cards": result.foundation_cards,
        "status": result.status,
        "error": None if error is None else {"index": error.index, "move": error.move, "reason": error.reason},
    }


def read_reveal(path: str) -> tuple[str, str]:
    """The commitment (as seen at the start, else as revealed) and the salt of a saved reveal.json."""
    with open(path, "rb") as handle:
        data = json.loads(handle.read())
    if not isinstance(data, dict):
        raise ValueError("not a reveal (a JSON object with salt and commitment)")
    commitment = data.get("commitment_at_start") or data.get("commitment_revealed")
    salt = data.get("salt")
    if not isinstance(commitment, str) or not isinstance(salt, str):
        raise ValueError("it has no salt and commitment")
    return commitment, salt


def run(args: argparse.Namespace) -> int:
    if args.reveal is not None:
        if args.commitment is not None or args.salt is not None:
            return _fail("--reveal gives the commitment and the salt: leave out --commitment and --salt", args.json)
        if not args.reveal and args.record == "-":
            return _fail("--reveal needs its file when the record comes from standard input", args.json)
        reveal = args.reveal or os.path.join(os.path.dirname(args.record), "reveal.json")
        try:
            args.commitment, args.salt = read_reveal(reveal)
        except OSError as exc:
            return _fail(f"cannot read the reveal {reveal}: {exc.strerror or exc}", args.json)
        except (ValueError, RecursionError) as exc:
            return _fail(f"{reveal} is not a saved reveal: {exc}", args.json)
    if (args.commitment is None) != (args.salt is None):
        return _fail("--commitment and --salt go together: give both or neither", args.json)
    name = "standard input" if args.record == "-" else args.record
    try:
        raw = _read(args.record)
    except OSError as exc:
        return _fail(f"cannot read {name}: {exc.strerror or exc}", args.json)
    try:
        data = json.loads(raw)
    except RecursionError:
        return _fail(f"{name} is not a game record: its JSON is nested too deeply", args.json)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return _fail(f"{name} is not JSON: {exc}", args.json)
    try:
        deal, entries, undo = parse_record(data)
    except NotARecord as exc:
        return _fail(f"{name} is not a game record: {exc}", args.json)

    _, result = replay(deal, entries, undo=undo)
    commitment_ok: bool | None = None
    if args.commitment is not None:
        from shared.fairplay import check_commitment

        commitment_ok = check_commitment(deal, args.salt, args.commitment)

    if args.json:
        out = result_json(result)
        if commitment_ok is not None:
            out["commitment_ok"] = commitment_ok
        print(json.dumps(out))
    else:
        if result.error is None:
            print(
                f"legal: {plural(result.moves, 'entry')}, "
                f"{plural(result.foundation_cards, 'card')} on the foundations, status {result.status}"
            )
        else:
            error = result.error
            print(
                f"illegal entry {error.index} ({error.move}): {readable_cards(error.reason)} "
                f"[{plural(result.moves, 'entry')} applied, "
                f"{plural(result.foundation_cards, 'card')} on the foundations]"
            )
        if commitment_ok:
            print(f"commitment matches deal {deal} and the salt")
    if commitment_ok is False:
        print(
            f"plot verify: commitment mismatch: {args.commitment} is not the commitment to deal {deal} "
            "with this salt (SHA-256 of 'the-plot:<deal>:<salt>')",
            file=sys.stderr,
        )
    return 0 if result.ok and commitment_ok is not False else 1
