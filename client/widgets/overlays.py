"""Overlays on top of the board: the help (every key), the whole waste, a yes/no question."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.events import Resize
from textual.screen import ModalScreen
from textual.widgets import Static

from client.widgets.cards import card_text
from client.words import plural

OVERLAY_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 100%; max-width: 100; height: auto; max-height: 100%;
    border: round $accent; background: $panel; padding: 0 1;
}}
"""


class HelpScreen(ModalScreen[None]):
    """Every key, generated from the keymap itself so it can never be out of date.

    How to close it is on its first line; the keys scroll (arrows, PgUp/PgDn, Home/End, the
    wheel) when the terminal has fewer rows than there are keys.
    """

    DEFAULT_CSS = (
        OVERLAY_CSS.format(name="HelpScreen")
        + """
    HelpScreen #help-scroll { height: auto; scrollbar-size-vertical: 1; }
    """
    )
    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
        Binding("f1", "dismiss", "close"),
    ]

    def __init__(self, rows: Sequence[tuple[str, str]], title: str = "Keys") -> None:
        super().__init__()
        self.rows = list(rows)
        self.title_text = title

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for keys, what in self.rows:
            table.add_row(Text(keys), Text(what))
        title = Text.assemble((self.title_text, "bold"), ("   Esc or ? closes · ↑ ↓ PgUp PgDn scroll", "dim"))
        with Vertical():
            yield Static(title, markup=False, id="help-title")
            with VerticalScroll(id="help-scroll"):
                yield Static(table, id="help-keys")

    def on_mount(self) -> None:
        self._fit(self.app.size.height)
        self.query_one("#help-scroll", VerticalScroll).focus()

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        # The keys scroll within what the border and the title line leave (a max-height of 100%
        # would count those in, and the last rows could never be scrolled to).
        self.query_one("#help-scroll", VerticalScroll).styles.max_height = max(height - 3, 3)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)


class WasteScreen(ModalScreen[None]):
    """The whole waste, bottom first; the last card is the one that plays."""

    DEFAULT_CSS = OVERLAY_CSS.format(name="WasteScreen")
    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("v", "dismiss", "close")]

    def __init__(self, waste: Sequence[int]) -> None:
        super().__init__()
        self.waste = list(waste)

    def compose(self) -> ComposeResult:
        body = Text()
        if not self.waste:
            body.append("The waste is empty.", style="dim")
        for i, card in enumerate(self.waste):
            if i and i % 13 == 0:
                body.append("\n")
            elif i:
                body.append(" ")
            body.append_text(card_text(card, highlight=i == len(self.waste) - 1))
        with Vertical():
            yield Static(
                Text(f"The waste: {plural(len(self.waste), 'card')}, bottom first; the last one plays", style="bold")
            )
            yield Static(body, id="waste-all")
            yield Static(Text("Esc or v closes", style="dim"))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: y or Enter says yes, n or Esc says no."""

    DEFAULT_CSS = OVERLAY_CSS.format(name="ConfirmScreen")
    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("enter", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question, style="bold"), id="question")
            yield Static(Text("y: yes   n: no", style="dim"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
