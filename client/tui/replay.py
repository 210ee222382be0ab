"""``plot replay``: a saved game record played back on the board, on the pure engine.

Every position is computed once, up front, by playing the record's entries on
``shared.engine.Game`` (the same rules as ``plot verify``); the screen only moves through them:
playing at a chosen pace, paused, a step either way, or a jump to any move. The board is the
race's own widget, so the record is seen as its player saw it (the stock face down).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static

from client.tui.play import CSS_PATH
from client.widgets.board import Board
from client.widgets.cards import span
from client.widgets.plain import plain
from shared.engine import Game, IllegalMove, View

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # moves per second, for + and -


@dataclass(frozen=True, slots=True)
class Replay:
    """A record's positions: ``views[i]`` is the board after its first ``i`` entries."""

    deal: int
    entries: list[str]  # the entries that were played (an illegal one and those after it are not)
    views: list[View]
    illegal: str | None = None  # why the record stops early: "entry N (move): reason"

    @property
    def moves(self) -> int:
        return len(self.entries)


def build_replay(deal: int, entries: list[object], *, undo: bool = True) -> Replay:
    """Play ``entries`` on the engine; the positions stop before an illegal entry (with the reason)."""
    game = Game(deal, undo=undo, blocked_budget=None)
    views = [game.view()]
    played: list[str] = []
    illegal: str | None = None
    for index, entry in enumerate(entries):
        if not isinstance(entry, str):
            illegal = f"entry {index} ({entry!r}) is not a move"
            break
        try:
            game.play(entry, check_blocked=False)
        except IllegalMove as exc:
            illegal = f"entry {index} ({entry}) is illegal: {exc.reason}"
            break
        played.append(entry)
        views.append(game.view())
    game.settle_status()  # blocked is decided once, for the last position (as plot verify does)
    views[-1] = game.view()
    return Replay(deal=deal, entries=played, views=views, illegal=illegal)


class ReplayScreen(Screen[None]):
    """The board at one move of the record, and the keys that move through it."""

    AUTO_FOCUS = "Board"
    BINDINGS = [
        Binding("space", "play_pause", "play / pause"),
        Binding("right", "step(1)", "step"),
        Binding("left", "step(-1)", "back"),
        Binding("home", "jump(0)", "start", show=False),
        Binding("end", "jump(-1)", "end", show=False),
        Binding("g", "goto", "go to move"),
        Binding("plus,equals_sign", "faster", "faster", key_display="+"),
        Binding("minus", "slower", "slower", key_display="-"),
    ]
    DEFAULT_CSS = """
    ReplayScreen { layout: vertical; }
    ReplayScreen #replay-status { height: 1; padding: 0 1; background: $boost; }
    ReplayScreen #replay-move { height: 1; padding: 0 1; }
    ReplayScreen #replay-note { height: auto; padding: 0 1; }
    ReplayScreen #replay-goto { height: 1; border: none; padding: 0 1; display: none; }
    ReplayScreen #replay-goto.-open { display: block; }
    ReplayScreen #replay-goto:focus { border: none; background: $boost; }
    """

    def __init__(self, replay: Replay, *, speed: float, title: str, paused: bool = False) -> None:
        super().__init__()
        self.replay = replay
        self.speed = speed
        self.title_text = title
        self.position = 0
        self.playing = not paused and replay.moves > 0
        self.timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="replay-status", markup=False)
        yield Board()
        yield Static("", id="replay-move", markup=False)
        yield Static("", id="replay-note", markup=False)
        yield Input(placeholder=f"go to move (0..{self.replay.moves}), Enter; Esc cancels", id="replay-goto")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = self.title_text
        self._restart_timer()
        self.show()

    # ------------------------------------------------------------------ drawing

    def show(self) -> None:
        replay = self.replay
        view = replay.views[self.position]
        self.query_one(Board).show(view)
        # What changes first, so a narrow terminal cuts only the record's name.
        status = span("Replay", "bold")
        status.append(f" · move {self.position}/{replay.moves}", style="bold")
        if self.playing:
            status.append(f" · playing at {self.speed:g} moves/s", style="green")
        else:
            status.append(" · paused", style="yellow")
        status.append_text(plain(f" · {self.title_text}"))
        status.no_wrap = True
        status.overflow = "ellipsis"
        self.query_one("#replay-status", Static).update(status)
        move = Text()
        if self.position == 0:
            move.append("the deal, before the first move", style="dim")
        else:
            move.append(f"{self.position}: ", style="dim")
            move.append(replay.entries[self.position - 1], style="bold")
        if self.position < replay.moves:
            move.append(f"   next: {replay.entries[self.position]}", style="dim")
        elif replay.illegal is None:
            move.append(f"   end of the record: {view.status}, {view.foundation_cards}/104 home", style="bold")
        self.query_one("#replay-move", Static).update(move)
        note = Text()
        if replay.illegal is not None and self.position == replay.moves:
            note.append(f"the record stops here: {replay.illegal}", style="bold red")
        else:
            note.append("Home / End: the deal / the last move · Ctrl+Q quits", style="dim")
        self.query_one("#replay-note", Static).update(note)

    # ------------------------------------------------------------------ playing

    def _restart_timer(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
        if self.playing:
            self.timer = self.set_interval(1.0 / self.speed, self._advance)

    def _advance(self) -> None:
        if self.position >= self.replay.moves:
            self._pause()
            return
        self.position += 1
        if self.position >= self.replay.moves:
            self._pause()
        self.show()

    def _pause(self) -> None:
        self.playing = False
        self._restart_timer()

    # ------------------------------------------------------------------ keys

    def action_play_pause(self) -> None:
        if not self.playing and self.position >= self.replay.moves:
            self.position = 0  # at the end, play starts over
        self.playing = not self.playing
        self._restart_timer()
        self.show()

    def action_step(self, delta: int) -> None:
        self._pause()
        self.position = min(max(self.position + delta, 0), self.replay.moves)
        self.show()

    def action_jump(self, position: int) -> None:
        self._pause()
        self.position = self.replay.moves if position < 0 else min(position, self.replay.moves)
        self.show()

    def action_faster(self) -> None:
        self.speed = next((s for s in SPEEDS if s > self.speed), self.speed)
        self._restart_timer()
        self.show()

    def action_slower(self) -> None:
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), self.speed)
        self._restart_timer()
        self.show()

    def action_goto(self) -> None:
        self._pause()
        self.show()
        box = self.query_one("#replay-goto", Input)
        box.add_class("-open")
        box.value = ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self._close_goto()
        if not text.isdigit():
            self.query_one("#replay-note", Static).update(
                Text(f"not a move number: {text!r} (0..{self.replay.moves})", style="bold red")
            )
            return
        self.action_jump(int(text))

    def key_escape(self) -> None:
        self._close_goto()

    def _close_goto(self) -> None:
        box = self.query_one("#replay-goto", Input)
        box.remove_class("-open")
        box.value = ""
        self.query_one(Board).focus()


class ReplayApp(App[None]):
    """``plot replay``: one screen, the record's positions."""

    CSS_PATH = CSS_PATH
    TITLE = "The Plot"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, replay: Replay, *, speed: float = 2.0, title: str = "", paused: bool = False) -> None:
        super().__init__()
        title = title or f"deal {replay.deal}"
        self.replay_screen = ReplayScreen(replay, speed=speed, title=title, paused=paused)

    def on_mount(self) -> None:
        self.push_screen(self.replay_screen)
