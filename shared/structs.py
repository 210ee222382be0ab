"""The engine's msgspec structs: a player's view, and what replaying a record gives. Kept out of
shared/engine.py because the engine's compiled build (docs/engine.md, "The compiled build") erases
a compiled module's annotations to bare classes (``list[int]`` to ``list``, ``int | None`` to
``type``), and msgspec validates against them. shared.engine exports them as before."""

from __future__ import annotations

import msgspec

from shared.cards import rank


class View(msgspec.Struct, kw_only=True):
    """What a player may see (docs/rules.md, "Piles, what a player sees, and moves"), and nothing
    more: no stock order, no deal number."""

    stock: int
    waste: list[int]
    reserve_top: int | None
    reserve_count: int
    foundations: list[list[int]]
    tableau: list[list[int]]
    status: str

    @property
    def base_rank(self) -> int:
        return rank(self.foundations[0][0])

    @property
    def restricted(self) -> bool:
        return len(self.foundations[0]) < 13

    @property
    def foundation_cards(self) -> int:
        return sum(len(f) for f in self.foundations)

    def cards(self) -> list[int]:
        """Every card id this view shows (for leak checks)."""
        shown = list(self.waste)
        if self.reserve_top is not None:
            shown.append(self.reserve_top)
        for pile in self.foundations:
            shown.extend(pile)
        for pile in self.tableau:
            shown.extend(pile)
        return shown


class ReplayResult(msgspec.Struct, kw_only=True):
    """What replaying a game record gives (the shape of ``plot verify --json``)."""

    ok: bool
    moves: int
    foundation_cards: int
    status: str
    error: IllegalEntry | None = None


class IllegalEntry(msgspec.Struct, kw_only=True):
    index: int
    move: str
    reason: str
