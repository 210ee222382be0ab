"""Deal numbers to layouts (docs/rules.md, "Deal numbers"): SplitMix64 and an unbiased Fisher-Yates.

The same number gives the same layout everywhere, forever: never change this file's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.cards import CARD_COUNT

MASK64 = (1 << 64) - 1
MAX_DEAL = MASK64
RESERVE_SIZE = 13
TABLEAU_SIZE = 12
FOUNDATION_COUNT = 8
STOCK_SIZE = CARD_COUNT - RESERVE_SIZE - 1 - TABLEAU_SIZE  # 78


class SplitMix64:
    """The SplitMix64 generator, arithmetic modulo 2**64."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def check_deal_number(deal: object) -> int:
    """Return ``deal`` if it is a valid deal number, else raise ValueError saying why."""
    if isinstance(deal, bool) or not isinstance(deal, int):
        raise ValueError(f"a deal number must be a whole number, not {deal!r}")
    if not 0 <= deal <= MAX_DEAL:
        raise ValueError(f"deal number {deal} is out of range 0..{MAX_DEAL}")
    return deal


def parse_deal_number(text: str) -> int:
    """Parse a decimal deal number as a person types it."""
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):  # str.isdigit alone takes '٣' and '²'
        raise ValueError(f"not a deal number: {text!r} (expected a whole number 0..{MAX_DEAL})")
    return check_deal_number(int(stripped))


def shuffled_cards(deal: int) -> list[int]:
    """The 104 card ids in dealing order, first dealt first."""
    rng = SplitMix64(check_deal_number(deal))
    cards = list(range(CARD_COUNT))
    for i in range(CARD_COUNT - 1, 0, -1):
        m = i + 1
        limit = (1 << 64) - ((1 << 64) % m)
        x = rng.next()
        while x >= limit:
            x = rng.next()
        j = x % m
        cards[i], cards[j] = cards[j], cards[i]
    return cards


@dataclass(frozen=True, slots=True)
class Layout:
    """A dealt layout. ``reserve`` is bottom..top; ``stock`` is next-to-turn first."""

    deal: int
    reserve: tuple[int, ...]
    foundation: int
    tableau: tuple[int, ...]
    stock: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "deal": self.deal,
            "reserve": list(self.reserve),
            "foundation": self.foundation,
            "tableau": [[card] for card in self.tableau],
            "stock": list(self.stock),
        }


def deal_layout(deal: int) -> Layout:
    cards = shuffled_cards(deal)
    return Layout(
        deal=deal,
        reserve=tuple(cards[0:13]),
        foundation=cards[13],
        tableau=tuple(cards[14:26]),
        stock=tuple(cards[26:]),
    )
