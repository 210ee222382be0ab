"""``plot solo [DEAL]``: play a game alone on the shared engine.

In a terminal it opens the same Textual board as ``plot play``. With ``--plain``, ``--save``,
or when input or output is not a terminal (scripts, pipes), it is the small line-based game:
show the board, read a line, apply it. At the end the game record is saved as JSON so
``plot verify`` can replay it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from client.commands.deal import cards_text
from client.words import plot_command, plural, typed_path
from shared.cards import rank_name
from shared.deal import parse_deal_number
from shared.engine import PLAYING, RESIGN, UNDO, Game, IllegalMove, View, rank_word

HELP = """\
moves:    SRC>DST, e.g. stock>waste, waste>t3, t2>t7, reserve>f0, waste>f1
          piles: stock, waste, reserve, f0..f7 (foundations), t0..t11 (tableau)
commands: moves (list the legal moves), undo, resign, help, quit"""

WASTE_SHOWN = 12  # the waste is all visible; the board shows its top cards, the count says the rest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deal", metavar="DEAL", nargs="?", help="a deal number (default: a random deal)")
    parser.add_argument("--no-undo", action="store_true", help="play with undo off")
    parser.add_argument("--plain", action="store_true", help="the line-based game even in a terminal")
    parser.add_argument(
        "--save",
        metavar="PATH",
        help="where to write the game record (default: a new file under $XDG_STATE_HOME/plot or ~/.local/state/plot)",
    )


def board_text(view: View, needs: list[int]) -> str:
    """The player's view as text; ``needs[i]`` is the rank foundation ``fi`` takes next."""
    waste = view.waste
    hidden = len(waste) - WASTE_SHOWN
    waste_text = ("... " if hidden > 0 else "") + cards_text(waste[-WASTE_SHOWN:])
    reserve = "-" if view.reserve_top is None else cards_text([view.reserve_top])
    lines = [
        f"stock {view.stock}   reserve {view.reserve_count} (top {reserve})   "
        f"base rank {rank_name(view.base_rank)}   on foundations {view.foundation_cards}/104",
        f"waste ({len(waste)}, top last): {waste_text}",
    ]
    foundations = []
    for i, pile in enumerate(view.foundations):
        if len(pile) == 13:
            state = "complete"
        elif view.restricted and i > 0:
            state = "-"
        else:
            state = f"needs {rank_word(needs[i])}"
        top = cards_text(pile[-1:]) if pile else "--"
        foundations.append(f"f{i} {top} ({len(pile)}, {state})")
    lines.append("   ".join(foundations[:4]))
    lines.append("   ".join(foundations[4:]))
    for i, pile in enumerate(view.tableau):
        lines.append(f"t{i:<2} {cards_text(pile) if pile else '(space)'}")
    return "\n".join(lines)


def _default_record_path(deal: int) -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(state_home) / "plot" / f"solo-{deal}-{stamp}.json"


def _save_record(game: Game, requested: str | None) -> None:
    """Write the record and say where; if it cannot be written, print it instead."""
    text = json.dumps(game.record())
    path = Path(requested) if requested else _default_record_path(game.deal)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not requested:
            counter = 1
            while path.exists():
                path = path.with_name(f"{path.stem.rsplit('.', 1)[0]}.{counter}.json")
                counter += 1
        path.write_text(text + "\n")
    except OSError as exc:
        print(f"could not save the game record to {path} ({exc.strerror or exc}); here it is:")
        print(text)
        return
    print(f"game record saved to {path} (check it with: {plot_command()} verify {typed_path(path)})")


def _show(game: Game) -> None:
    print(board_text(game.view(), [game.needed_rank(i) for i in range(len(game.foundations))]))


def run(args: argparse.Namespace) -> int:
    if not args.plain and args.save is None and sys.stdin.isatty() and sys.stdout.isatty():
        from client.commands import play

        return play.run(args)
    if args.deal is None:
        from shared.fairplay import random_deal

        deal = random_deal()
    else:
        try:
            deal = parse_deal_number(args.deal)
        except ValueError as exc:
            print(f"plot solo: {exc}", file=sys.stderr)
            return 2
    # A local game has no worker pool to ask: decide blocked exactly (rarely over a few ms).
    game = Game(deal, undo=not args.no_undo, blocked_budget=None)
    print(f"The Plot, deal {deal}{' (undo off)' if args.no_undo else ''}. Type help for the commands.")
    _show(game)
    while game.status == PLAYING:
        try:
            line = input("> ")
        except EOFError:
            print()
            break
        entry = "".join(line.split()).lower()
        if not entry:
            continue
        if entry in ("help", "?"):
            print(HELP)
            continue
        if entry in ("quit", "q", "exit"):
            break
        if entry == "moves":
            print(" ".join(game.legal_moves()) or "no legal moves")
            continue
        try:
            game.play(entry)
        except IllegalMove as exc:
            print(f"not allowed: {exc.reason}")
            continue
        if entry != RESIGN:
            _show(game)
        if entry == UNDO:
            print("undone")

    if game.status == PLAYING:
        print(f"game left unfinished with {plural(game.foundation_cards, 'card')} on the foundations")
    else:
        print(f"game over: {game.status}, {plural(game.foundation_cards, 'card')} on the foundations")
    if game.entries:
        _save_record(game, args.save)
    return 0
