"""``plot play``: the board on the local engine. The game is yours alone, so hints are allowed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from textual.app import App

from client.state import save_record
from client.tui.game import GameScreen
from client.words import plot_command, typed_path
from shared.engine import PLAYING, Game, IllegalMove, View

CSS_PATH = Path(__file__).resolve().parent.parent / "plot.tcss"


HINT_SECONDS = 2.0  # the solver's budget for one hint


def solver_hint(game: Game) -> str | None:
    """The solver's next move for ``game`` (None when it finds no win within the budget).

    CPU-bound: call it through ``asyncio.to_thread`` so the screen (and a race's connection)
    stay live while it thinks.
    """
    from shared.solver import hint

    return hint(game.copy(), max_seconds=HINT_SECONDS, clock=time.monotonic)


class LocalDriver:
    """Moves go to a local engine game; the screen is told of every new View."""

    def __init__(self, game: Game, on_view: Callable[[View], None]) -> None:
        self.game = game
        self.on_view = on_view

    async def submit(self, entry: str) -> str | None:
        try:
            self.game.play(entry)
        except IllegalMove as exc:
            return exc.reason
        self.on_view(self.game.view())
        return None

    async def hint(self) -> str:
        if self.game.status != PLAYING:
            return f"the game is over ({self.game.status})"
        try:
            move = await asyncio.to_thread(solver_hint, self.game.copy())
        except Exception as exc:  # a solver fault must not end the game
            return f"no hint: the solver failed ({exc})"
        if move is None:
            moves = self.game.legal_moves()
            if not moves:
                return "no legal move: undo, or resign"
            return f"no hint: the solver finds no win from here within {HINT_SECONDS:g}s"
        return f"hint: {move}"


class PlayApp(App[None]):
    """A game of The Plot alone, on the board."""

    CSS_PATH = CSS_PATH
    TITLE = "The Plot"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, deal: int, *, undo: bool = True, record_dir: Path | None = None) -> None:
        super().__init__()
        # A local game has no worker pool to ask: decide blocked exactly (rarely over a few ms).
        self.game = Game(deal, undo=undo, blocked_budget=None)
        self.record_dir = record_dir
        self.record_path: Path | None = None
        self.game_screen = GameScreen(LocalDriver(self.game, self._on_view), title=f"deal {deal}")

    def action_help_quit(self) -> None:
        """Ctrl+C quits, as Ctrl+Q does (Textual's default only points to Ctrl+Q)."""
        self.exit()

    def on_mount(self) -> None:
        self.sub_title = f"deal {self.game.deal}"
        self.push_screen(self.game_screen)
        self.game_screen.show_view(self.game.view())
        self.game_screen.say("? shows every key. Pick a card (w, r, u…/), then where it goes; Space turns the stock")

    def _on_view(self, view: View) -> None:
        self.game_screen.show_view(view)
        if view.status != PLAYING:
            self.record_path = save_record(self.game.record(), f"deal-{self.game.deal}", self.record_dir)
            self.game_screen.say(
                f"Game over: {view.status}, {view.foundation_cards}/104 home. "
                f"Record saved to {self.record_path} (replay: {plot_command()} verify {typed_path(self.record_path)})",
                sticky=True,
            )
