"""The daily deal's boards in the terminal: ``plot board [DATE]`` (a day's board; today's live),
``plot board --standing`` (the standing board over all days), ``plot me`` and ``plot player
NAME`` (a claimed player's days).

One small Textual app over a :class:`client.connection.Connection`: it asks the server
(``get_board``, ``get_player``; ``watch_daily`` for today's board as it changes) and shows what
comes back. A revealed day is checked here (client/daily_check.py): its deal against the
commitment, each record replayed to its row.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from client.connection import Connection, ConnectionFailed
from client.daily_check import check_day
from client.tui.play import CSS_PATH
from client.viewmodel import now_ms
from client.widgets.cards import span
from client.widgets.daily import DailyBoardPanel, ProfilePanel, StandingPanel, day_title, reveal_text
from client.widgets.leaderboard import clock
from client.widgets.plain import clean
from client.words import describe_error
from shared.protocol import (
    NO_DAY,
    DailyBoard,
    DailyDay,
    Error,
    GetBoard,
    GetPlayer,
    GetStanding,
    PlayerProfile,
    ServerMessage,
    Standing,
    WatchDaily,
)

BOARD = "board"
PLAYER = "player"
STANDING = "standing"


@dataclass(slots=True)
class StandingsConfig:
    url: str
    what: str  # board | player | standing
    day: int | None = None  # board: which day (None: today)
    name: str | None = None  # player: whose profile
    me: str | None = None  # the profile id of this client's claimed name on this server, if any
    reader_name: str = "board reader"  # the name the connection says hello with


class StandingsScreen(Screen[None]):
    BINDINGS = [
        Binding("left_square_bracket", "day(-1)", "prev day"),
        Binding("right_square_bracket", "day(1)", "next day"),
        Binding("t", "today", "today"),
        Binding("r", "refresh", "refresh"),
        Binding("q", "app.quit", "quit"),
    ]
    DEFAULT_CSS = """
    StandingsScreen #status-line { height: 1; padding: 0 1; background: $boost; }
    StandingsScreen #message { height: auto; padding: 0 1; }
    StandingsScreen #reveal { height: auto; padding: 0 1; margin-top: 1; }
    """

    def __init__(self, app: StandingsApp) -> None:
        super().__init__()
        self.standings = app

    def compose(self) -> ComposeResult:
        yield Static("", id="status-line", markup=False)
        with VerticalScroll(id="body"):
            if self.standings.config.what == PLAYER:
                yield ProfilePanel()
            elif self.standings.config.what == STANDING:
                yield StandingPanel()
            else:
                yield DailyBoardPanel()
                yield Static("", id="reveal", markup=False)
        yield Static("", id="message", markup=False)
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("day", "today"):
            return self.standings.config.what == BOARD
        return True

    def action_day(self, step: int) -> None:
        self.standings.go_to_day(step)

    def action_today(self) -> None:
        self.standings.go_to_day(None)

    def action_refresh(self) -> None:
        self.standings.ask()

    def say(self, text: str, *, error: bool = False) -> None:
        self.query_one("#message", Static).update(span(text, "bold red" if error else ""))

    def redraw(self) -> None:
        if not self.is_attached:
            return
        app = self.standings
        status = span("The Plot daily", "bold")
        if app.config.what == BOARD:
            if app.shown_day is not None:
                status.append(f" · {day_title(app.shown_day, app.board.date if app.board else '')}")
            today = app.today
            if today is not None and app.shown_day == today.day:
                left = today.ends_at - app.server_now()
                status.append(f" · today, ends in {clock(left)}" if left > 0 else " · today, over")
            self.query_one(DailyBoardPanel).show(app.board, app.config.me, "Board")
            reveal = self.query_one("#reveal", Static)
            board = app.board
            if board is not None and board.deal is not None:
                reveal.update(reveal_text(board, app.verdict))
                reveal.display = True
            else:
                reveal.display = False
        elif app.config.what == STANDING:
            status.append(" · the standing board")
            self.query_one(StandingPanel).show(app.standing)
        else:
            status.append(f" · player {clean(app.config.name or '')}")
            self.query_one(ProfilePanel).show(app.profile)
        self.query_one("#status-line", Static).update(status)


class StandingsApp(App[int]):
    CSS_PATH = CSS_PATH
    TITLE = "The Plot daily"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, config: StandingsConfig) -> None:
        super().__init__()
        self.config = config
        self.connection: Connection | None = None
        self.today: DailyDay | None = None
        self.board: DailyBoard | None = None
        self.shown_day: int | None = config.day
        self.profile: PlayerProfile | None = None
        self.standing: Standing | None = None
        self.verdict: str | None = None
        self.exit_note = ""
        self.offset_ms = 0
        self.screen_ = StandingsScreen(self)

    def server_now(self) -> int:
        return now_ms() + self.offset_ms

    def on_mount(self) -> None:
        self.push_screen(self.screen_)
        self.run_worker(self._session(), group="session")
        self.set_interval(1.0, self.screen_.redraw)

    async def _session(self) -> None:
        connection = Connection(self.config.url, self.config.reader_name, resume=False)
        connection.on_message = self.on_server_message
        self.connection = connection
        try:
            welcome = await connection.start()
        except ConnectionFailed as exc:
            # Nothing to show without the server: say why, and end with exit 1 (the note printed).
            self.exit_note = str(exc)
            self.screen_.say(str(exc), error=True)
            await self.shutdown()
            self.exit(1, return_code=1)
            return
        self.offset_ms = welcome.server_time - now_ms()
        if self.config.what == BOARD:
            await connection.send(WatchDaily())  # the day (daily_day) and today's board as it changes
        self.ask()

    def ask(self) -> None:
        async def go() -> None:
            connection = self.connection
            if connection is None:
                return
            if self.config.what == PLAYER:
                assert self.config.name is not None
                reply: ServerMessage = await connection.request(GetPlayer(name=self.config.name), PlayerProfile)
            elif self.config.what == STANDING:
                reply = await connection.request(GetStanding(), Standing)
            else:
                reply = await connection.request(GetBoard(day=self.shown_day), DailyBoard)
            if isinstance(reply, Error):
                self.on_refusal(reply)

        self.run_worker(go(), group="ask")

    def on_refusal(self, error: Error) -> None:
        if error.code == NO_DAY:
            self.board = None
            self.screen_.say(f"no board for that day on this server ({error.message})", error=True)
        elif self.config.what == PLAYER:
            self.profile = None
            self.screen_.say(f"no profile: {describe_error(error)}", error=True)
        else:
            self.screen_.say(f"server: {describe_error(error)}", error=True)
        self.screen_.redraw()

    def go_to_day(self, step: int | None) -> None:
        today = self.today.day if self.today is not None else None
        if step is None:
            self.shown_day = today
        else:
            current = self.shown_day if self.shown_day is not None else today
            if current is None:
                return
            target = max(current + step, 0)
            if today is not None and target > today:
                self.screen_.say("that day has not begun: its board does not exist yet")
                return
            self.shown_day = target
        self.board = None
        self.verdict = None
        self.screen_.say("")
        self.screen_.redraw()
        self.ask()

    def on_server_message(self, msg: ServerMessage) -> None:
        if isinstance(msg, DailyDay):
            self.today = msg
            if msg.server_time:
                self.offset_ms = msg.server_time - now_ms()
            if self.shown_day is None:
                self.shown_day = msg.day
        elif isinstance(msg, DailyBoard):
            wanted = self.shown_day if self.shown_day is not None else (self.today.day if self.today else msg.day)
            if msg.day != wanted or msg.offset != 0:
                return  # another day's (a live frame of today while an old day is on show)
            self.shown_day = msg.day
            self.board = msg
            self.verdict = None
            if msg.deal is not None:
                self.run_worker(self._check(msg), group="check", exclusive=True)
        elif isinstance(msg, PlayerProfile):
            self.profile = msg
        elif isinstance(msg, Standing) and msg.offset == 0:
            self.standing = msg
        else:
            return
        self.screen_.redraw()

    async def _check(self, board: DailyBoard) -> None:
        checked = await asyncio.to_thread(check_day, board)
        if checked is not None and self.board is board:
            self.verdict = checked.verdict()
            self.screen_.redraw()

    async def action_quit(self) -> None:
        await self.shutdown()
        self.exit(0)

    async def shutdown(self) -> None:
        if self.connection is not None:
            self.connection.on_message = lambda msg: None
            with contextlib.suppress(Exception):
                await self.connection.close()
