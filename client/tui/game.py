"""The game screen: the board, a message line, the typed-move line, and every key.

The screen does not know where moves go. A :class:`GameDriver` carries them out (the local
engine for ``plot play``, the server in a race) and answers with the reason a move was refused;
new Views come back through :meth:`GameScreen.show_view`.
"""

from __future__ import annotations

from typing import Protocol

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from client.widgets.board import PILE_KEYS, Board, Pick
from client.widgets.overlays import ConfirmScreen, HelpScreen, WasteScreen
from client.widgets.plain import plain
from client.words import readable_cards
from shared.engine import PLAYING, View


class GameDriver(Protocol):
    """Where the board's moves go."""

    async def submit(self, entry: str) -> str | None:
        """Play ``entry`` (a move, ``undo`` or ``resign``); None when accepted, else the reason it was not."""
        ...

    async def hint(self) -> str:
        """A sentence for the hint key: the suggested move, or why there is none."""
        ...


# Keys other than the piles' own: (Textual keys, action, label in the help, shown in the footer).
COMMAND_KEYS: list[tuple[tuple[str, ...], str, str, str | None]] = [
    (("f",), "home", "send the picked card home (where it fits)", "home"),
    (("z", "backspace"), "undo", "undo (not a stock turn or a reserve move)", "undo"),
    (("t", "colon"), "type", "type a move: waste>t3, r>f0, undo, resign…", "type"),
    (("v",), "waste", "view the whole waste", None),
    (("h",), "hint", "a hint from the solver (play, practice)", None),
    (("R",), "resign", "resign (asks first)", None),
    (("escape",), "cancel", "cancel the pick / leave the move line", None),
    (("question_mark", "f1"), "help", "this help", "help"),
    (("ctrl+q", "ctrl+c"), "quit", "quit (Ctrl+C asks first mid-race)", None),
]

KEY_LABELS = {
    "space": "Space",
    "question_mark": "?",
    "colon": ":",
    "escape": "Esc",
    "backspace": "Backspace",
    "ctrl+q": "Ctrl+Q",
    "ctrl+c": "Ctrl+C",
    "f1": "F1",
    "R": "Shift+R",
    "E": "Shift+E",
    "N": "Shift+N",
    "G": "Shift+G",
    "enter": "Enter",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "up": "↑",
    "down": "↓",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "home": "Home",
    "end": "End",
}


def _pile_help() -> list[tuple[str, str]]:
    rows = [" ".join(PILE_KEYS[f"t{i}"][1] for i in range(start, start + 4)) for start in (0, 4, 8)]
    tableau = " / ".join(rows)
    return [
        ("Space", "turn the stock (stock>waste)"),
        ("w", "pick the waste's top card"),
        ("r", "pick the reserve's top card"),
        (tableau, "pick t0 … t11 (rows of four, like the piles)"),
        ("0 1 2 3 4 5 6 7", "f0 … f7 as a destination"),
        ("pile twice", "its obvious move: home, else its only one"),
        ("mouse", "click a pile: the same as its key"),
    ]


def help_rows(extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """Every key of the game screen, for the help overlay and docs/client.md."""
    rows = _pile_help()
    for keys, _action, label, _footer in COMMAND_KEYS:
        rows.append((" / ".join(KEY_LABELS.get(k, k) for k in keys), label))
    return rows + (extra or [])


def _bindings() -> list[BindingType]:
    bindings: list[BindingType] = [
        Binding(key, f"pick('{pile}')", pile, show=False) for pile, (key, _label) in PILE_KEYS.items()
    ]
    for keys, action, _label, footer in COMMAND_KEYS:
        if action == "quit":
            continue  # the App's own ctrl+q
        bindings.append(Binding(",".join(keys), action, footer or action, show=footer is not None))
    return bindings


class GameScreen(Screen[None]):
    """One player's board with its keys. Subclasses add panels (the race's leaderboard)."""

    AUTO_FOCUS = "Board"
    BINDINGS = _bindings()
    DEFAULT_CSS = """
    GameScreen { layout: vertical; }
    GameScreen #message { height: auto; max-height: 2; padding: 0 1; }
    GameScreen #message.-error { color: $error; }
    GameScreen #move-input { height: 1; border: none; padding: 0 1; }
    GameScreen #move-input:focus { border: none; background: $boost; }
    """

    def __init__(self, driver: GameDriver, *, title: str = "") -> None:
        super().__init__()
        self.driver = driver
        self.title_text = title
        self.pending_view: View | None = None
        self.pending_note: tuple[str, bool] | None = None
        self.ready = False  # composed and mounted: the widgets can be reached
        self.sticky = False  # a note that must stay (the game is over) until the next one

    def compose(self) -> ComposeResult:
        yield Board()
        yield Static("", id="message", markup=False)
        yield Input(placeholder="t: type a move (waste>t3, stock>waste, undo, resign)", id="move-input")
        yield Footer()

    def on_mount(self) -> None:
        self.ready = True
        if self.title_text:
            self.sub_title = self.title_text
        if self.pending_view is not None:
            self.board.show(self.pending_view)
            self.pending_view = None
        if self.pending_note is not None:
            self.say(self.pending_note[0], error=self.pending_note[1], sticky=self.sticky)
            self.pending_note = None

    @property
    def board(self) -> Board:
        return self.query_one(Board)

    # ------------------------------------------------------------------ from the driver

    def show_view(self, view: View | None) -> None:
        """Draw a new View (the driver calls this whenever one arrives)."""
        if not self.ready:
            self.pending_view = view
            return
        self.board.show(view)

    def say(self, text: str, *, error: bool = False, sticky: bool = False) -> None:
        """One line for the player: plain text, never markup (it may hold server or player text).

        A ``sticky`` line (the game is over) is not replaced by the next move's tick mark.
        """
        self.sticky = sticky
        if not self.ready:
            self.pending_note = (text, error)
            return
        try:
            message = self.query_one("#message", Static)
        except NoMatches:  # the screen is being torn down (quitting)
            return
        message.update(plain(text))
        message.set_class(error, "-error")

    # ------------------------------------------------------------------ keys

    def _handle(self, pick: Pick) -> None:
        if pick.move is not None:
            self.request(pick.move)
        elif pick.note is not None:
            self.say(pick.note)

    def action_pick(self, pile: str) -> None:
        self._handle(self.board.pick(pile))

    def on_board_pile_clicked(self, message: Board.PileClicked) -> None:
        self.board.focus()
        self.action_pick(message.pile)

    def action_home(self) -> None:
        self._handle(self.board.to_foundation())

    def action_undo(self) -> None:
        self.board.cancel()
        self.request("undo")

    def action_resign(self) -> None:
        view = self.board.view
        if view is None or view.status != PLAYING:
            self.say("there is no game in play to resign")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.request("resign")
            else:
                self.say("not resigned: play on")

        self.app.push_screen(ConfirmScreen("Resign this game? It cannot be taken back."), answered)

    def action_cancel(self) -> None:
        if self.board.cancel():
            self.say("pick cancelled")

    def action_type(self) -> None:
        self.board.cancel()
        self.query_one("#move-input", Input).focus()

    def action_waste(self) -> None:
        view = self.board.view
        self.app.push_screen(WasteScreen(view.waste if view else []))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.help_rows()))

    def help_rows(self) -> list[tuple[str, str]]:
        return help_rows()

    def action_hint(self) -> None:
        async def ask() -> None:
            self.say(await self.driver.hint())

        self.run_worker(ask(), group="hint")

    # ------------------------------------------------------------------ the move line

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "move-input":
            return
        entry = event.value.strip().lower().replace(" ", "")
        event.input.value = ""
        self.board.focus()
        if entry:
            self.request(expand_move(entry))

    def key_escape(self) -> None:
        # Esc inside the move line leaves it (the binding covers the board).
        move_input = self.query_one("#move-input", Input)
        if move_input.has_focus:
            move_input.value = ""
            self.board.focus()

    # ------------------------------------------------------------------ moves

    def request(self, entry: str) -> None:
        """Hand ``entry`` to the driver; a refusal shows the reason and changes nothing."""

        async def submit() -> None:
            reason = await self.driver.submit(entry)
            if reason is None:
                if not self.sticky:
                    self.say(f"✓ {entry}")
            else:
                self.say(f"✗ {entry}: {readable_cards(reason)}", error=True)

        self.run_worker(submit(), group="moves")


SHORT_PILES = {"w": "waste", "r": "reserve", "s": "stock"}


def expand_move(entry: str) -> str:
    """Accept the short pile names a typist reaches for (``w>t3``, ``r>f0``); the rest is left as typed."""
    src, sep, dst = entry.partition(">")
    if not sep:
        return entry
    return f"{SHORT_PILES.get(src, src)}>{SHORT_PILES.get(dst, dst)}"
