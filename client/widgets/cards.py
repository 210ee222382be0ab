"""How a card looks on the terminal: the rank stands out (bold), the suit is a symbol, red or not.

Suits never matter to the rules of The Plot, ranks do, so the rank is bold and the suit symbol
follows it; hearts and diamonds are red, clubs and spades use the terminal's own foreground
(plain black would vanish on a dark terminal).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.style import Style
from rich.text import Text

from shared.cards import SUIT_SYMBOLS, is_red, rank, suit

RANK_TEXT = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
RED = Style(color="bright_red", bold=True)
BLACK = Style(bold=True)
DIM = Style(dim=True)
EMPTY = "·"


def span(text: str = "", style: str | Style = "") -> Text:
    """Styled text whose style covers only itself: what is appended after it keeps its own style.

    (``Text(x, style=s)`` would make ``s`` the base style of everything appended later.)
    """
    return Text.assemble((text, style))


def rank_text(r: int) -> str:
    """'A', '2', ..., '10', 'J', 'Q', 'K'."""
    return RANK_TEXT[r - 1]


def card_plain(card: int) -> str:
    """The card as the screen shows it, without style: 'Q♥', '10♠'."""
    return rank_text(rank(card)) + SUIT_SYMBOLS[suit(card)]


def card_text(card: int | None, *, highlight: bool = False) -> Text:
    """One card (or the empty mark) as styled text; ``highlight`` is for the card that plays next."""
    if card is None:
        return span(EMPTY, DIM)
    style = RED if is_red(card) else BLACK
    if highlight:
        style = style + Style(reverse=True)
    return Text.assemble((rank_text(rank(card)), style), (SUIT_SYMBOLS[suit(card)], style + Style(bold=False)))


def cards_text(cards: Iterable[int], *, highlight_last: bool = False) -> Text:
    """Cards in a row, bottom first, one space apart."""
    items = list(cards)
    out = Text()
    for i, card in enumerate(items):
        if i:
            out.append(" ")
        out.append_text(card_text(card, highlight=highlight_last and i == len(items) - 1))
    return out


def text_width(cards: Iterable[int]) -> int:
    """The width ``cards_text`` takes on the screen."""
    items = list(cards)
    return sum(len(card_plain(c)) for c in items) + max(len(items) - 1, 0)


def fit_run(cards: list[int], width: int, *, highlight_last: bool = False) -> Text:
    """A pile in ``width`` columns: whole when it fits, else compact (bottom card, '…', top cards).

    A tableau pile is a run down by one, so its bottom and top card and its length say it all;
    as many top cards as fit are kept, since only the top plays.
    """
    if not cards:
        return card_text(None)
    if text_width(cards) <= width:
        return cards_text(cards, highlight_last=highlight_last)
    out = card_text(cards[0])
    out.append(" …", style=DIM)
    used = len(card_plain(cards[0])) + 2
    tail: list[int] = []
    for card in reversed(cards[1:]):
        need = len(card_plain(card)) + 1
        if tail and used + need > width:
            break
        tail.insert(0, card)
        used += need
    out.append(" ")
    out.append_text(cards_text(tail, highlight_last=highlight_last))
    return out
