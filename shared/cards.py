"""Cards of The Plot (docs/rules.md, "Cards"): 104 integer ids, two 52-card decks.

A card id ``c`` in ``0..103``: deck ``c // 52``, suit ``(c % 52) // 13``
(clubs, diamonds, hearts, spades), rank ``c % 13 + 1`` (Ace = 1 .. King = 13).
Suits never matter to the rules; they are kept for display only.
"""

from __future__ import annotations

CARD_COUNT = 104
RANK_LETTERS = "A23456789TJQK"
SUIT_LETTERS = "cdhs"
SUIT_SYMBOLS = "♣♦♥♠"
RANK_NAMES = (
    "Ace", "Two", "Three", "Four", "Five", "Six", "Seven",
    "Eight", "Nine", "Ten", "Jack", "Queen", "King",
)  # fmt: skip


def rank(card: int) -> int:
    """Rank 1..13 (Ace..King)."""
    return card % 13 + 1


def suit(card: int) -> int:
    """Suit 0..3: clubs, diamonds, hearts, spades."""
    return (card % 52) // 13


def deck(card: int) -> int:
    """Which of the two decks, 0 or 1."""
    return card // 52


def is_red(card: int) -> bool:
    return suit(card) in (1, 2)


def next_rank(r: int) -> int:
    """The rank after ``r``, round the corner: King is followed by Ace."""
    return r % 13 + 1


def card_name(card: int, with_deck: bool = True) -> str:
    """Text name per docs/rules.md: ``Th1`` is the ten of hearts of the second deck."""
    if not 0 <= card < CARD_COUNT:
        raise ValueError(f"card id {card} is out of range 0..103")
    name = RANK_LETTERS[card % 13] + SUIT_LETTERS[suit(card)]
    return name + str(deck(card)) if with_deck else name


def parse_card(name: str) -> int:
    """Inverse of :func:`card_name` (deck digit required)."""
    if len(name) != 3 or name[0] not in RANK_LETTERS or name[1] not in SUIT_LETTERS or name[2] not in "01":
        raise ValueError(f"not a card name: {name!r} (expected e.g. 'Th1')")
    return int(name[2]) * 52 + SUIT_LETTERS.index(name[1]) * 13 + RANK_LETTERS.index(name[0])


def rank_name(r: int) -> str:
    return RANK_NAMES[r - 1]
