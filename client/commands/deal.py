"""``plot deal N [--json]``: the layout of deal number N (docs/rules.md, "Deal numbers")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from shared.cards import card_name, rank, rank_name
from shared.deal import Layout, deal_layout, parse_deal_number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("number", metavar="N", help="the deal number, a whole number 0..18446744073709551615")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a board")


def cards_text(cards: Iterable[int]) -> str:
    """Card names separated by spaces, '-' for none."""
    return " ".join(card_name(card) for card in cards) or "-"


def layout_text(layout: Layout) -> str:
    """A readable board of a freshly dealt layout (the whole deal, stock order included)."""
    base = rank(layout.foundation)
    lines = [
        f"deal {layout.deal}   base rank: {rank_name(base)}",
        f"reserve (bottom..top, {len(layout.reserve)}): {cards_text(layout.reserve)}",
        f"f0: {card_name(layout.foundation)}   f1..f7: empty",
        "tableau:",
    ]
    for row in range(3):
        piles = range(row * 4, row * 4 + 4)
        lines.append("  " + "   ".join(f"t{i:<2} {card_name(layout.tableau[i])}" for i in piles))
    lines.append(f"stock ({len(layout.stock)}, next to turn first):")
    for start in range(0, len(layout.stock), 13):
        lines.append("  " + cards_text(layout.stock[start : start + 13]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        deal = parse_deal_number(args.number)
    except ValueError as exc:
        print(f"plot deal: {exc}", file=sys.stderr)
        return 2
    layout = deal_layout(deal)
    if args.json:
        print(json.dumps(layout.to_json(), separators=(",", ":")))
    else:
        print(layout_text(layout))
    return 0
