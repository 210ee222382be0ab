"""``plot play [DEAL]``: a game alone on the Textual board (the local engine; hints allowed)."""

from __future__ import annotations

import argparse

from client.words import plot_command, plural, typed_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deal", nargs="?", help="deal number 0..2^64-1 (default: a random one)")
    parser.add_argument("--no-undo", action="store_true", help="play with undo off")


def run(args: argparse.Namespace) -> int:
    from shared.deal import parse_deal_number
    from shared.fairplay import random_deal

    try:
        deal = parse_deal_number(args.deal) if args.deal is not None else random_deal()
    except ValueError as exc:
        print(f"plot play: {exc}")
        return 2
    from client.tui.play import PlayApp

    app = PlayApp(deal, undo=not args.no_undo)
    app.run()
    game = app.game
    print(f"deal {deal}: {game.status}, {game.foundation_cards}/104 cards home, {plural(len(game.entries), 'entry')}")
    if app.record_path is not None:
        print(f"record: {app.record_path}  (replay: {plot_command()} verify {typed_path(app.record_path)})")
    return 0
