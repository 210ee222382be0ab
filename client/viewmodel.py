"""What the client knows, derived only from what the server shows it.

``game_from_view`` rebuilds an engine ``Game`` from a ``View`` without any hidden card: stock
cards and the reserve's buried cards are the placeholder :data:`HIDDEN`, which the rules never
look at (only the stock's length and the reserve's top matter to which moves are legal). The
board uses it to highlight legal destinations, the bot to choose its moves: neither ever needs
the deal.
"""

from __future__ import annotations

from typing import Final

from shared.cards import rank
from shared.engine import Game, View

HIDDEN: Final = -1  # a card the player cannot see; never played, never shown


def game_from_view(view: View, *, undo: bool = True) -> Game:
    """An engine game in the position ``view`` shows (hidden cards are placeholders).

    Good for ``legal_moves``, ``reason_illegal`` and moves that uncover nothing; never call
    ``play('stock>waste')`` or play from the reserve on it (that would turn a placeholder up).
    """
    game = Game.__new__(Game)
    game.deal = 0  # unknown to a player, and never needed by the rules
    game.base = rank(view.foundations[0][0])
    game.undo_enabled = undo
    game.stock = [HIDDEN] * view.stock
    game.waste = list(view.waste)
    game.reserve = [HIDDEN] * max(view.reserve_count - 1, 0)
    if view.reserve_top is not None:
        game.reserve.append(view.reserve_top)
    game.foundations = [list(f) for f in view.foundations]
    game.tableau = [list(t) for t in view.tableau]
    game.status = view.status
    game.entries = []
    game.foundation_cards = sum(len(f) for f in view.foundations)
    game._undo_stack = []
    game._undo_barrier = None
    return game


def legal_moves(view: View) -> list[str]:
    """Every legal move in the position ``view`` shows, in text form (undo and resign excluded)."""
    return game_from_view(view).legal_moves()


def needed_rank(view: View, foundation: int) -> int:
    """The rank foundation ``foundation`` (0..7) needs next; an empty one needs the base rank."""
    base = rank(view.foundations[0][0])
    return (base - 1 + len(view.foundations[foundation])) % 13 + 1
