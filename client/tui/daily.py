"""``plot daily``: today's attempt at the daily deal, on the race app's usual board.

The race machinery carries the attempt (a room of one racer on the server, docs/daily.md): this
app is the race app (client/tui/race.py) entering by ``daily`` instead of creating or joining a
room. Its screen is the race screen with a line for the day (its number, date and the countdown
to its end) and, once the attempt is over, the day's board as it stands (live) and the
spoiler-free text to share, copied to the clipboard where the terminal allows it (OSC 52).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer, Static

from client.tui.race import RaceApp, RaceConfig
from client.tui.race_screen import RaceScreen
from client.widgets.cards import span
from client.widgets.daily import DailyBoardPanel, day_text
from client.widgets.leaderboard import clock
from client.widgets.plain import clean
from client.words import describe_error, plot_command
from shared.daily_share import cards_curve, share_text
from shared.engine import PLAYING
from shared.protocol import (
    COUNTDOWN,
    DAILY_DONE,
    DAY_OVER,
    NOT_CLAIMED,
    RACING,
    RESULTS,
    Daily,
    DailyBoard,
    DailyDay,
    DailyRow,
    Error,
    GetBoard,
    LeaderboardRow,
    Leave,
    Left,
    Room,
    ServerMessage,
    WatchDaily,
    Welcome,
)

DAILY = "daily"
CLIPBOARD_NOTE = (
    "copied to the clipboard (OSC 52), where the terminal allows it; if not, select the text above "
    "(it is printed again when you quit)"
)


@dataclass(slots=True)
class DailyConfig:
    """What ``plot daily`` asks of the app, beside the race app's own settings."""

    replay: bool = False  # an unranked game of today's deal (the ranked attempt is used)
    page_url: str | None = None  # the server's web pages' base (the share text links the day's page)


@dataclass(slots=True)
class Progress:
    """The attempt's cards home over its time, for the share text's curve."""

    times_ms: list[int]
    cards: list[int]

    def add(self, elapsed_ms: int, cards: int) -> None:
        if not self.cards or cards != self.cards[-1]:
            self.times_ms.append(max(elapsed_ms, self.times_ms[-1] if self.times_ms else 0))
            self.cards.append(cards)


class DailyScreen(RaceScreen):
    """The race screen, with the day's line on top and the day's board once the attempt is over."""

    BINDINGS = [
        *RaceScreen.BINDINGS,
        Binding("y", "copy_share", "copy result"),
        Binding("b", "board", "refresh board"),
    ]
    DEFAULT_CSS = """
    DailyScreen #day-line { height: 1; padding: 0 1; background: $primary 30%; }
    DailyScreen #daily-after { display: none; height: auto; }
    DailyScreen.-daily-over #daily-after { display: block; }
    DailyScreen.-daily-over #results-scroll { display: none; }
    DailyScreen #share { height: auto; padding: 0 1; margin-top: 1; border: round $success; }
    """
    HIDDEN_ACTIONS = frozenset({"start", "rematch", "end_race", "qr_code", "ready", "chat"})

    def __init__(self, app: DailyApp) -> None:
        super().__init__(app)
        self.daily_app = app

    def compose(self) -> ComposeResult:
        yield Static("", id="day-line", markup=False)
        for widget in super().compose():
            if isinstance(widget, Footer):
                # The day's board and the share text, under the board, above the footer.
                yield Vertical(DailyBoardPanel(), Static("", id="share", markup=False), id="daily-after")
            yield widget

    def on_mount(self) -> None:
        super().on_mount()
        self.show_after()  # a board that came before the screen was up

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.HIDDEN_ACTIONS:
            return False  # a room of one: nothing to start, ready, end or chat about
        if action in ("copy_share", "board"):
            return self.daily_app.over
        if action in ("cycle", "scroll_results"):
            return False  # an attempt ends without results: its board of the day is all there is
        return super().check_action(action, parameters)

    def action_copy_share(self) -> None:
        self.daily_app.copy_share()

    def action_board(self) -> None:
        self.daily_app.ask_board()

    def _tick(self) -> None:
        super()._tick()
        self._name_the_attempt()
        app = self.daily_app
        line = span("daily", "bold")
        if app.config_daily.replay:
            line.append(" · unranked replay", style="yellow")
        day = app.day
        if day is not None:
            line.append(" · ")
            line.append(day_text(day, app.model.server_now()))
            line.append(f" · attempt limit {clock(day.time_limit_s * 1000)}", style="dim")
            line.append(f" · commitment {clean(day.commitment)[:12]}…", style="dim")
        self.query_one("#day-line", Static).update(line)

    def _name_the_attempt(self) -> None:
        """The status line says "today's attempt" (or "replay") where a room's code would be: the
        attempt's room is the server's own business."""
        room = self.daily_app.model.room
        status = self.query_one("#status-line", Static)
        content = status.content
        if room is None or not isinstance(content, Text):
            return
        named = f" · room {clean(room.code)}"
        at = content.plain.find(named)
        if at < 0:
            return
        what = "unranked replay" if self.daily_app.config_daily.replay else "today's attempt"
        status.update(content[:at] + span(f" · {what}", "bold") + content[at + len(named) :])

    def show_after(self) -> None:
        """The day's board and the share text, once the attempt is over."""
        app = self.daily_app
        if not self.is_attached:
            return
        self.set_class(app.over, "-daily-over")
        if not app.over:
            return
        with contextlib.suppress(NoMatches):  # the screen is being torn down (quitting)
            self._show_after()

    def _show_after(self) -> None:
        app = self.daily_app
        title = "Today's board" + (f" · {app.day.date}" if app.day is not None else "")
        self.query_one(DailyBoardPanel).show(app.board, app.profile_id, title)
        share = app.share_text()
        out = span("Your result, to share (no spoilers)\n", "bold")
        out.append(share)
        out.append(f"\n{CLIPBOARD_NOTE if app.copied else 'y copies it to the clipboard'}", style="dim")
        self.query_one("#share", Static).update(out)


class DailyApp(RaceApp):
    """The race app entering today's attempt (``daily``); see the module's docstring."""

    def __init__(self, config: RaceConfig, daily: DailyConfig | None = None) -> None:
        super().__init__(config)
        self.config_daily = daily or DailyConfig()
        self.daily_screen = DailyScreen(self)
        self.screen_ = self.daily_screen
        self.day: DailyDay | None = None
        self.board: DailyBoard | None = None
        self.progress = Progress([], [])
        self.over = False  # the attempt has ended (won, blocked, resigned, stopped, or used before)
        self.copied = False
        self.shared: str | None = None  # the share text shown (printed again on quitting)
        self.profile_id: str | None = None

    async def _enter_room(self, welcome: Welcome) -> None:
        connection = self.connection
        assert connection is not None
        self.profile_id = welcome.profile
        if self.entered:
            await connection.send(WatchDaily())
            return  # a reconnect: the server brings the attempt back where it was
        if welcome.resumed and welcome.room is not None:
            room = self.model.room if self.model.room and self.model.room.code == welcome.room else None
            if room is None:
                with contextlib.suppress(TimeoutError):
                    msg = await connection.wait_for(lambda m: isinstance(m, Room) and m.code == welcome.room, 5.0)
                    room = msg if isinstance(msg, Room) else None
            if room is not None and room.phase in (COUNTDOWN, RACING):
                self.entered = True  # an attempt under way, taken up again (its clock has run on)
                await connection.send(WatchDaily())
                self.screen_.say("back in today's attempt, where you left it (the clock ran on)")
                return
            await connection.request(Leave(), Left)  # an attempt (or a room) that is over
        reply = await connection.request(Daily(replay=self.config_daily.replay), Room)
        # The day's board as it changes (and today's daily_day); the attempt's day came first.
        await connection.send(WatchDaily())
        if isinstance(reply, Error):
            self._refused(reply)
            return
        self.entered = True
        self.on_server_message(reply)

    def _refused(self, error: Error) -> None:
        plot = plot_command()
        if error.code == DAILY_DONE:
            self.over = True
            self.screen_.say(
                f"today's ranked attempt is used: the board is below ({plot} daily --replay plays the deal unranked)",
                sticky=True,
            )
            self.ask_board()
        elif error.code == NOT_CLAIMED:
            self.fail(f"the daily deal is for claimed names: {plot} claim NAME first ({error.message})")
        elif error.code == DAY_OVER:
            self.fail(f"that day is over: {error.message} (run {plot} daily again for today's)")
        else:
            self.fail(f"cannot start the daily attempt: {describe_error(error)}")

    def ask_board(self) -> None:
        async def go() -> None:
            if self.connection is None:
                return
            day = self.day.day if self.day is not None else None
            reply = await self.connection.request(GetBoard(day=day), DailyBoard)
            if isinstance(reply, Error):
                self.screen_.say(f"no board: {describe_error(reply)}", error=True)

        self.run_worker(go(), group="board")

    def on_server_message(self, msg: ServerMessage) -> None:
        if isinstance(msg, DailyDay):
            # The attempt's day (the first to come), kept past its end: the next day's is not its.
            if self.day is None or msg.day == self.day.day:
                self.day = msg
            self.screen_.tick()
            return
        if isinstance(msg, DailyBoard):
            if (self.day is None or msg.day == self.day.day) and msg.offset == 0:
                self.board = msg
                self.daily_screen.show_after()
            return
        super().on_server_message(msg)
        model = self.model
        if model.view is not None and model.phase in (RACING, RESULTS):
            self.progress.add(model.race_clock_ms() or 0, model.view.foundation_cards)
        ended = model.phase == RESULTS or (model.view is not None and model.view.status != PLAYING)
        if ended and not self.over:
            self.over = True
            status = model.view.status if model.view is not None else "over"
            self.screen_.say(f"your attempt is over ({status}): the day's board is below, live", sticky=True)
            self.ask_board()
            self.screen_.refresh_bindings()
            self.daily_screen.show_after()

    # ------------------------------------------------------------------ the share text

    def mine(self) -> tuple[DailyRow | None, LeaderboardRow | None]:
        """This attempt's row on the day's board (ranked), and its row on the attempt's leaderboard."""
        board = self.board
        row = None
        if board is not None and not self.config_daily.replay:
            rows = [*board.rows, *([board.you] if board.you else [])]
            row = next((r for r in rows if r.profile_id == self.profile_id), None)
        racers = self.model.leaderboard.racers if self.model.leaderboard else []
        lrow = next((r for r in racers if r.player_id == self.model.player_id), None)
        return row, lrow

    def share_text(self) -> str:
        row, lrow = self.mine()
        day = self.day
        if day is None or (row is None and lrow is None):
            return "(your result shows here once the server has it)"
        figures = row if row is not None else lrow
        assert figures is not None
        board = self.board
        players = (board.total or len(board.rows)) if board is not None and row is not None else None
        base = self.config_daily.page_url
        text = share_text(
            date=day.date,
            status=figures.status,
            cards=figures.cards,
            moves=figures.moves,
            elapsed_ms=figures.elapsed_ms,
            rank=row.rank if row is not None else None,
            players=players,
            curve=cards_curve(self.progress.times_ms, self.progress.cards, figures.elapsed_ms),
            url=f"{base.rstrip('/')}/daily/{day.date}" if base else None,
        )
        self.shared = text
        # Copied once, as soon as the server's figures are final (the day's row; a replay's last
        # leaderboard); y copies the text as it stands later (the place changes as others finish).
        replayed = self.config_daily.replay and self.model.phase == RESULTS
        final = (row is not None and row.status != PLAYING) or replayed
        if final and not self.copied:
            self.copy_share()
        return text

    def copy_share(self) -> None:
        if self.shared is None:
            return
        self.copy_to_clipboard(self.shared)  # OSC 52: the terminal may ignore it
        self.copied = True
