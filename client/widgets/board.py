"""The board: one player's game drawn from a ``shared.engine.View`` and nothing else.

The same widget serves a local game (``plot play``) and a race, where only the View the server
sent is known. It draws and it turns picks (keys or clicks) into move text; whoever owns it
carries the moves out (the local engine or the server) and hands back the next View.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal
from textual.events import Click
from textual.message import Message
from textual.widget import Widget

from client.viewmodel import legal_moves, needed_rank
from client.widgets.cards import DIM, card_plain, card_text, fit_run, rank_text, span
from client.words import plural
from shared.cards import rank
from shared.engine import PLAYING, View

FOUNDATIONS: Final = tuple(f"f{i}" for i in range(8))
TABLEAU: Final = tuple(f"t{i}" for i in range(12))
PILES: Final = ("stock", "waste", "reserve", *FOUNDATIONS, *TABLEAU)

# The keymap (docs/client.md). Tableau piles sit in three rows of four, and so do their keys on
# the right hand; the left hand has the other piles and the commands.
TABLEAU_KEYS: Final = ("u", "i", "o", "p", "j", "k", "l", "semicolon", "m", "comma", "full_stop", "slash")
TABLEAU_KEY_LABELS: Final = ("u", "i", "o", "p", "j", "k", "l", ";", "m", ",", ".", "/")
PILE_KEYS: Final[dict[str, tuple[str, str]]] = {  # pile -> (Textual key, label shown)
    "stock": ("space", "␣"),
    "waste": ("w", "w"),
    "reserve": ("r", "r"),
    **{f: (str(i), str(i)) for i, f in enumerate(FOUNDATIONS)},
    **{t: (key, label) for t, key, label in zip(TABLEAU, TABLEAU_KEYS, TABLEAU_KEY_LABELS, strict=True)},
}
# Each fits the box's line at 80 columns (25 cells).
STATUS_TEXT: Final = {
    "won": "WON: every card is home",
    "blocked": "BLOCKED: no way home left",
    "resigned": "RESIGNED",
}


@dataclass(frozen=True, slots=True)
class Pick:
    """What a pick leads to: a move to send, a note for the player, or only a new selection."""

    move: str | None = None
    note: str | None = None


class PileBox(Widget):
    """One pile: a label line (its key, its name, what matters about it) over its cards."""

    def __init__(self, pile: str) -> None:
        super().__init__(id=f"pile-{pile}", classes="pile")
        self.pile = pile
        self.view: View | None = None

    def render(self) -> Text:
        key_label = PILE_KEYS[self.pile][1]
        label = span(key_label, "bold reverse")
        label.append(" ")
        label.append(self.pile, style="bold" if self.pile == "f0" else "")
        view = self.view
        if view is None:
            return label
        width = max(self.content_region.width, 4)
        label.append_text(self._label_extra(view))
        label.append("\n")
        out = label + self._cards(view, width)
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out

    def _label_extra(self, view: View) -> Text:
        pile = self.pile
        if pile == "waste":
            return span(f" {len(view.waste)}  (v: all)", DIM)
        if pile.startswith("f"):
            count = len(view.foundations[int(pile[1:])])
            out = span("★", "bold yellow") if pile == "f0" else span("")
            return out + span(f" {count}", DIM) if count else out
        if pile.startswith("t"):
            count = len(view.tableau[int(pile[1:])])
            return span(f" ({count})", DIM) if count > 1 else span("")
        return Text("")

    def _cards(self, view: View, width: int) -> Text:
        pile = self.pile
        if pile == "stock":
            return span(plural(view.stock, "card"), "bold") if view.stock else span("empty", DIM)
        if pile == "waste":
            # The top plays, so it is drawn prominently; earlier cards as far as they fit.
            if not view.waste:
                return card_text(None)
            return _fit_waste(view.waste, width)
        if pile == "reserve":
            if view.reserve_top is None:
                return span("empty", DIM)
            return card_text(view.reserve_top) + span(f" ({view.reserve_count})", DIM)
        if pile.startswith("f"):
            index = int(pile[1:])
            cards = view.foundations[index]
            if index and view.restricted:
                return span("locked", DIM)
            out = card_text(cards[-1]) if cards else card_text(None)
            if len(cards) == 13:
                return out + span(" ✓", "bold green")
            return out + span(f" ›{rank_text(needed_rank(view, index))}", "bold")
        cards = view.tableau[int(pile[1:])]
        if not cards:
            return span("space", DIM)
        return fit_run(cards, width)

    def on_click(self, event: Click) -> None:
        event.stop()
        self.post_message(Board.PileClicked(self.pile))


def _fit_waste(waste: list[int], width: int) -> Text:
    shown: list[int] = []
    used = 0
    for card in reversed(waste):
        need = len(card_plain(card)) + (1 if shown else 0)
        if shown and used + need > width - 2:
            break
        shown.insert(0, card)
        used += need
    out = span("… ", DIM) if len(shown) < len(waste) else span()
    for i, card in enumerate(shown):
        if i:
            out.append(" ")
        out.append_text(card_text(card, highlight=i == len(shown) - 1))
    return out


class InfoBox(Widget):
    """The base rank, whether the game is still restricted, and the game's status."""

    def __init__(self) -> None:
        super().__init__(id="info")
        self.view: View | None = None

    def render(self) -> Text:
        view = self.view
        if view is None:
            return span("waiting for the deal…", DIM)
        base = rank(view.foundations[0][0])
        out = span("base ", DIM)
        out.append(rank_text(base), style="bold yellow")
        out.append(f"  {view.foundation_cards}/104 home\n", style=DIM)
        if view.status != PLAYING:
            out.append(STATUS_TEXT.get(view.status, view.status.upper()), style="bold magenta")
        elif view.restricted:
            out.append("RESTRICTED", style="bold red")
            out.append(f" · f0 needs {rank_text(needed_rank(view, 0))}", style="")
        else:
            out.append("unrestricted: f1-f7 open", style="green")
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out


class Board(Widget, can_focus=True):
    """The whole board. Call :meth:`show` with each new View; picks come in as pile names."""

    DEFAULT_CSS = """
    Board { height: auto; }
    Board #top-row, Board #foundation-row { height: 3; }
    Board #tableau { grid-size: 4 3; grid-rows: 3; grid-gutter: 0 1; height: 9; }
    Board .pile { height: 2; padding: 0 1; width: 1fr; }
    Board #pile-waste { width: 2fr; }
    Board #info { width: 2fr; height: 2; padding: 0 1; }
    Board #foundation-row .pile { padding: 0 0 0 1; }
    Board .pile.-selected { background: $accent 50%; }
    Board .pile.-target { background: $success 25%; }
    """

    class PileClicked(Message):
        """A pile was clicked (the owner treats it as pressing that pile's key)."""

        def __init__(self, pile: str) -> None:
            super().__init__()
            self.pile = pile

    def __init__(self, *, id: str | None = "board") -> None:
        super().__init__(id=id)
        self.view: View | None = None
        self.selected: str | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="top-row"):
            yield PileBox("stock")
            yield PileBox("waste")
            yield PileBox("reserve")
            yield InfoBox()
        with Horizontal(id="foundation-row"):
            for name in FOUNDATIONS:
                yield PileBox(name)
        with Grid(id="tableau"):
            for name in TABLEAU:
                yield PileBox(name)

    # ------------------------------------------------------------------ drawing

    def show(self, view: View | None) -> None:
        """Draw ``view``; a selection that no longer makes sense is dropped."""
        self.view = view
        if self.selected is not None and (view is None or not self._has_card(self.selected)):
            self.selected = None
        for box in self.query(PileBox):
            box.view = view
            box.refresh()
        info = self.query_one(InfoBox)
        info.view = view
        info.refresh()
        self._mark_selection()

    def _mark_selection(self) -> None:
        targets = set(self.targets_of(self.selected)) if self.selected else set()
        for box in self.query(PileBox):
            box.set_class(box.pile == self.selected, "-selected")
            box.set_class(box.pile in targets, "-target")

    def targets_of(self, source: str) -> list[str]:
        """Where the top card of ``source`` may legally go now."""
        if self.view is None:
            return []
        prefix = source + ">"
        return [m[len(prefix) :] for m in legal_moves(self.view) if m.startswith(prefix)]

    def _has_card(self, pile: str) -> bool:
        view = self.view
        if view is None:
            return False
        if pile == "waste":
            return bool(view.waste)
        if pile == "reserve":
            return view.reserve_top is not None
        if pile.startswith("t"):
            return bool(view.tableau[int(pile[1:])])
        return False

    # ------------------------------------------------------------------ picking

    def cancel(self) -> bool:
        """Drop the selection; True if there was one."""
        had = self.selected is not None
        self.selected = None
        self._mark_selection()
        return had

    def pick(self, pile: str) -> Pick:
        """The player picked ``pile`` (its key or a click): select a source, or complete a move."""
        view = self.view
        if view is None:
            return Pick(note="no game on the board yet")
        if view.status != PLAYING:
            return Pick(note=f"the game is over ({view.status})")
        source = self.selected
        if source is None:
            if pile == "stock":
                return Pick(move="stock>waste")
            if pile.startswith("f"):
                return Pick(note="pick a card to move first: cards never leave a foundation")
            if not self._has_card(pile):
                return Pick(note=f"{pile} is empty: pick a pile with a card on it")
            self.selected = pile
            self._mark_selection()
            targets = self.targets_of(pile)
            hint = ", ".join(targets) if targets else "no legal move for it now"
            return Pick(note=f"{pile} picked: now pick where it goes ({hint}); Esc cancels")
        self.selected = None
        self._mark_selection()
        if pile == source:
            return self._auto_move(source)
        return Pick(move=f"{source}>{pile}")

    def to_foundation(self) -> Pick:
        """Send the picked card home: to the foundation that takes it (the one it should go to if none does)."""
        source = self.selected
        view = self.view
        if source is None or view is None:
            return Pick(note="pick a card first (w, r or a tableau key), then f sends it to a foundation")
        self.selected = None
        self._mark_selection()
        homes = [t for t in self.targets_of(source) if t.startswith("f")]
        if homes:
            return Pick(move=f"{source}>{homes[0]}")
        # None takes it: ask anyway, so the player hears why not.
        if view.restricted:
            return Pick(move=f"{source}>f0")
        open_ones = [f"f{i}" for i in range(1, 8) if len(view.foundations[i]) < 13]
        return Pick(move=f"{source}>{open_ones[0] if open_ones else 'f1'}")

    def _auto_move(self, source: str) -> Pick:
        """The same pile picked twice: the move it obviously wants (home first), if there is one."""
        targets = self.targets_of(source)
        homes = [t for t in targets if t.startswith("f")]
        if homes:
            return Pick(move=f"{source}>{homes[0]}")
        if len(targets) == 1:
            return Pick(move=f"{source}>{targets[0]}")
        if not targets:
            return Pick(note=f"{source} has no legal move now")
        return Pick(note=f"{source} could go to {', '.join(targets)}: pick one")
