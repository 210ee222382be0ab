"""Races on a server: host, join, watch, practice. One Textual app, one screen that follows the room.

The app owns a resuming :class:`client.connection.Connection` and a :class:`RaceModel` fed by
every server message; the screen shows the part of the room that matters now: the lobby and
countdown, the board and leaderboard while racing (spectators: the leaderboard, and boards only
when the room allows), the results with the client's own checks at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.events import Resize
from textual.widgets import Footer, Input, Static

from client.connection import CONNECTED, RECONNECTING, Connection, ConnectionFailed, TokenFile
from client.state import safe_name, state_dir
from client.tui.game import GameScreen, help_rows
from client.tui.play import CSS_PATH
from client.viewmodel import RaceModel
from client.widgets.board import Board
from client.widgets.cards import span
from client.widgets.chat import ChatPanel
from client.widgets.leaderboard import LeaderboardPanel, clock
from client.widgets.overlays import ConfirmScreen
from client.widgets.plain import plain
from client.widgets.room import LobbyPanel, ResultsPanel, save_records
from client.words import describe_error, ordinal, plot_command
from shared.engine import PLAYING, View
from shared.protocol import (
    CHAT_MAX,
    COUNTDOWN,
    DEALING,
    LOBBY,
    NAME_TAKEN,
    RACER,
    RACING,
    RESULTS,
    SPECTATOR,
    SUPERSEDED,
    UNKNOWN_ROOM,
    Chat,
    CreateRoom,
    EndRace,
    Error,
    Join,
    Leave,
    Left,
    MoveOk,
    Mute,
    RaceStart,
    Ready,
    Rematch,
    Room,
    RoomOptions,
    ServerMessage,
    Start,
    Welcome,
)

HOST = "host"
CHAT_PLACEHOLDER = "chat: Enter sends, Esc leaves (host: /mute NAME, /unmute NAME)"
RANDOM_PRACTICE_DEAL = "picked for you at random"
GIVEN_PRACTICE_DEAL = "the number you gave"
JOIN = "join"
WATCH = "watch"


@dataclass(slots=True)
class RaceConfig:
    """What a race command asks of the app."""

    url: str
    name: str
    mode: str  # host | join | watch
    code: str | None = None
    options: RoomOptions = field(default_factory=RoomOptions)
    profile: str | None = "player"  # which saved token to use for this server (None: keep none)
    bots: int = 0  # bots the host adds, run in this process
    bot_speed: float | None = None  # moves per second (None: each bot's level's own pace)
    bot_levels: tuple[str, ...] = ("medium",)  # the bots take these levels in turn
    auto_start: bool = False  # start as soon as every racer is ready (practice)
    record_dir: Path | None = None
    hint: Callable[[], Awaitable[str]] | None = None  # practice only: a hint knows the stock
    next_deal: Callable[[], int] | None = None  # the deal of each rematch, when the host chooses (practice)
    title: str = "The Plot race"
    watch_url: str | None = None  # the spectator page's base URL: the lobby shows the room's link (plot host)
    deal_note: str | None = None  # practice: how the (chosen) deal was chosen, said instead of the chosen-deal warning
    reachable: bool = True  # others can reach the server (False: practice, a server inside this process)


class NetDriver:
    """The board's moves go to the server; its answer comes back as a new View or a reason."""

    def __init__(self, app: RaceApp) -> None:
        self.app = app

    async def submit(self, entry: str) -> str | None:
        app = self.app
        if app.connection is None:
            return "not connected to a server"
        if app.model.phase != RACING:
            return "the race is not on"
        if app.model.role != RACER:
            return "spectators watch; they do not play"
        result = await app.connection.move(entry)
        if isinstance(result, MoveOk):
            app.accepted_entries.append(entry)  # a duplicate was applied once, before a reconnect
            return None
        return result.reason

    async def hint(self) -> str:
        if self.app.config.hint is None:
            return f"no hints in a race: a hint knows the stock (practice games only: {plot_command()} practice)"
        return await self.app.config.hint()


class RaceScreen(GameScreen):
    """The room, whatever its phase. Screen classes say what shows: -lobby, -racing, -results,
    -spectator, -boards (a board is on show), -wide (leaderboard beside the board), -short."""

    BINDINGS = [
        *GameScreen.BINDINGS,
        Binding("enter", "ready", "ready / not ready"),
        Binding("s", "start", "start the race"),
        Binding("n", "rematch", "new race"),
        Binding("E", "end_race", "end race"),
        Binding("c", "chat", "chat"),
        Binding("g", "qr_code", "QR code"),
        Binding("left_square_bracket", "cycle(-1)", "prev board"),
        Binding("right_square_bracket", "cycle(1)", "next board"),
        # The results summary scrolls (a full room's does not fit 80x24); the footer shows one of them.
        Binding("down", "scroll_results('down')", "scroll", key_display="↑↓"),
        Binding("up", "scroll_results('up')", "scroll", show=False),
        Binding("pagedown", "scroll_results('page_down')", "scroll", show=False),
        Binding("pageup", "scroll_results('page_up')", "scroll", show=False),
        Binding("home", "scroll_results('home')", "scroll", show=False),
        Binding("end", "scroll_results('end')", "scroll", show=False),
    ]
    RACER_ACTIONS = frozenset({"pick", "home", "undo", "type", "resign", "hint", "waste"})
    DEFAULT_CSS = """
    RaceScreen { layout: vertical; }
    RaceScreen #status-line { height: 1; padding: 0 1; background: $boost; }
    RaceScreen #status-line.-trouble { background: $error 40%; }
    RaceScreen #main { height: auto; layout: vertical; }
    RaceScreen.-wide #main { layout: horizontal; }
    RaceScreen #play { height: auto; width: 1fr; }
    RaceScreen.-wide #side { width: 72; }
    RaceScreen #side { height: auto; }
    RaceScreen LobbyPanel, RaceScreen ResultsPanel, RaceScreen Board, RaceScreen #move-input,
    RaceScreen LeaderboardPanel { display: none; }
    RaceScreen.-lobby LobbyPanel { display: block; }
    RaceScreen.-racing LeaderboardPanel { display: block; }
    RaceScreen.-results ResultsPanel { display: block; }
    RaceScreen #results-scroll { height: auto; scrollbar-size-vertical: 1; }
    RaceScreen.-results #main, RaceScreen.-results #play, RaceScreen.-results #results-scroll { height: 1fr; }
    RaceScreen.-results.-boards #main, RaceScreen.-results.-boards #play { height: auto; }
    RaceScreen.-results.-boards #results-scroll { height: auto; }
    RaceScreen.-boards Board { display: block; }
    RaceScreen.-racing.-racer #move-input { display: block; }
    RaceScreen #chat-input { display: none; height: 1; border: none; padding: 0 1; }
    RaceScreen.-chatting #chat-input { display: block; }
    RaceScreen.-chatting #move-input { display: none; }
    RaceScreen #chat-input:focus { border: none; background: $boost; }
    RaceScreen.-short Board #top-row, RaceScreen.-short Board #foundation-row { height: 2; }
    RaceScreen.-short Board #tableau { grid-rows: 2; height: 6; }
    """

    def __init__(self, app: RaceApp) -> None:
        super().__init__(NetDriver(app), title=app.config.title)
        self.race_app = app
        self.board_index = 0  # which racer's board a spectator (or the results) shows
        self.viewing: str | None = None  # whose board is on show, when it is not the player's own

    def compose(self) -> ComposeResult:
        yield Static("", id="status-line", markup=False)
        with Horizontal(id="main"):
            with Vertical(id="play"):
                config = self.race_app.config
                yield LobbyPanel(
                    self.race_app.model, watch_url=config.watch_url, server=config.url if config.reachable else None
                )
                yield Board()
                with VerticalScroll(id="results-scroll", can_focus=False):
                    yield ResultsPanel(self.race_app.model)
                yield Static("", id="message", markup=False)
                yield Input(placeholder="t: type a move (waste>t3, stock>waste, undo, resign)", id="move-input")
                yield Input(placeholder=CHAT_PLACEHOLDER, id="chat-input", max_length=CHAT_MAX)
            with Vertical(id="side"):
                yield LeaderboardPanel()
                yield ChatPanel()
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self._fit(self.app.size.width, self.app.size.height)
        self.redraw(set())

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """Leaderboard beside the board on wide terminals; the board without blank lines when rows are few."""
        wide = width >= 150
        self.set_class(wide, "-wide")
        room = self.race_app.model.room
        racers = sum(1 for m in room.members if m.role == RACER) if room else 2
        # status 1 + board 15 + message (up to 2: a long reason wraps) and move line 3 + footer 1,
        # and the leaderboard below unless wide
        needed = 20 + (0 if wide else 1 + racers)
        if self.race_app.model.phase == RESULTS:
            needed = 23  # status 1 + board 15 + the results' few lines under it 5 + message 1 + footer 1
        self.set_class(height < needed, "-short")

    def help_rows(self) -> list[tuple[str, str]]:
        return help_rows(
            [
                ("Enter", "lobby: ready / not ready"),
                ("s", "lobby, host: start the race"),
                ("Shift+E", "host: end the race now (asks first)"),
                ("n", "results, host: a new race in this room"),
                ("c", "chat to the room (host: /mute NAME)"),
                # One row for both: one more would not fit the help at 80x24.
                ("[ ]  ↑ ↓ PgUp PgDn", "boards (results, watching) · scroll results"),
            ]
        )

    # ------------------------------------------------------------------ drawing

    def redraw(self, changed: set[str]) -> None:
        """Bring the screen up to date with the model (``changed`` names what moved)."""
        if not self.ready or not self.is_attached:
            return
        with contextlib.suppress(NoMatches):  # the screen is being torn down (quitting)
            self._redraw(changed)

    def _redraw(self, changed: set[str]) -> None:
        model = self.race_app.model
        if "room" in changed:
            self._fit(self.app.size.width, self.app.size.height)
            self.refresh_bindings()
        elif changed & {"boards", "results", "race"}:
            self.refresh_bindings()
        phase = model.phase
        spectator = model.role == SPECTATOR
        self.set_class(phase in (LOBBY, DEALING, COUNTDOWN) or phase is None, "-lobby")
        self.set_class(phase == RACING, "-racing")
        self.set_class(phase == RESULTS and model.results is not None, "-results")
        self.set_class(spectator, "-spectator")
        self.set_class(model.role == RACER, "-racer")
        lobby = self.query_one(LobbyPanel)
        lobby.deal_note = self.race_app.config.deal_note
        lobby.refresh(layout=True)
        board_on_show = self._board_to_show()
        results_panel = self.query_one(ResultsPanel)
        results_panel.deal_note = self.race_app.config.deal_note
        results_panel.showing = self.viewing if board_on_show is not None and phase == RESULTS else None
        results_panel.refresh(layout=True)
        if self.has_class("-boards") != (board_on_show is not None):
            self.set_class(board_on_show is not None, "-boards")
            self.refresh_bindings()  # the scroll keys are live on the results summary only
        if "results" in changed:  # a new race's summary starts at its top
            self.query_one("#results-scroll", VerticalScroll).scroll_home(animate=False)
        if board_on_show is not None:
            self.show_view(board_on_show)
        self.query_one(ChatPanel).show(model.feed, model.player_id, self._chat_rows())
        if "leaderboard" in changed or "race" in changed or "room" in changed:
            title = "Leaderboard" if model.race is None else f"Leaderboard · race {model.race.race}"
            if model.room is not None and model.room.spectators:
                title += f" · {model.room.spectators} watching"
            self.query_one(LeaderboardPanel).show(model.leaderboard, model.player_id, title)
        self.tick()

    def _chat_rows(self) -> int:
        """How many feed lines fit: few beside a race at 80x24, more in the lobby and when wide."""
        phase, height = self.race_app.model.phase, self.app.size.height
        if self.has_class("-wide"):
            return 10
        if phase == RACING:
            return 2 if height < 30 else 4
        if phase == RESULTS:
            return 2 if height < 30 else 4
        return 4 if height < 30 else 8

    def _board_to_show(self) -> View | None:
        model = self.race_app.model
        if model.phase == RACING and model.role == RACER:
            return model.view
        boards: dict[str, View] = {}
        if model.phase == RESULTS and model.results is not None:
            boards = {pid: replayed.view for pid, replayed in model.replayed().items()}
            if self.board_index % (len(boards) + 1) == 0:
                return None  # the results summary is on show (between the last board and the first)
        elif model.phase == RACING and model.boards is not None:
            race_ms = model.race_clock_ms() or 0
            if race_ms < model.boards.delay_ms:
                return None  # the delay still runs: nothing to show but the opening everyone had
            boards = model.boards.boards
        if not boards:
            return None
        ids = list(boards)
        # On the results, position 0 is the summary: the boards are 1..len.
        index = self.board_index % (len(ids) + 1) - 1 if model.phase == RESULTS else self.board_index % len(ids)
        self.viewing = ids[index]
        return boards[ids[index]]

    def tick(self) -> None:
        """The status line: room, phase, race clock or countdown, connection state."""
        if not self.ready or not self.is_attached:
            return
        with contextlib.suppress(NoMatches):  # the screen is being torn down (quitting)
            self._tick()

    def _tick(self) -> None:
        app = self.race_app
        model = app.model
        room = model.room
        out = span("The Plot", "bold")
        if room is not None:
            out.append(" · room ")
            out.append_text(plain(room.code, style="bold"))
            out.append_text(plain(f" · {room.phase}"))
            if model.role == SPECTATOR:
                out.append(" · watching", style="yellow")
        left = model.countdown_left_ms()
        if left is not None and model.phase == COUNTDOWN:
            out.append(f" · starts in {max(left + 999, 0) // 1000}", style="bold magenta")
        race_ms = model.race_clock_ms()
        if race_ms is not None and model.phase == RACING:
            out.append(f" · {clock(race_ms)}", style="bold")
            if model.race is not None and model.race.ends_at is not None:
                out.append(f" (ends in {clock(model.race.ends_at - model.server_now())})")
        if self.has_class("-boards") and (model.role != RACER or model.phase == RESULTS):
            viewing = self.viewing
            if viewing is not None:
                out.append(" · board of ")
                out.append_text(plain(model.member_name(viewing), style="bold"))
                if model.boards is not None and model.phase == RACING:
                    out.append(f" ({model.boards.delay_ms // 1000}s behind)")
        state = app.connection_state
        line = self.query_one("#status-line", Static)
        if state == RECONNECTING:
            out.append(" · reconnecting…", style="bold red")
        elif state != CONNECTED:
            out.append(f" · {state}", style="dim")
        line.set_class(state != CONNECTED, "-trouble")
        line.update(out)
        if model.phase in (LOBBY, DEALING, COUNTDOWN):
            self.query_one(LobbyPanel).refresh()
        boards = model.boards
        if model.phase == RACING and boards is not None and not self.has_class("-boards"):
            delay_over = (model.race_clock_ms() or 0) >= boards.delay_ms
            if delay_over:
                self._redraw({"boards"})

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only the keys that do something now are live (and shown in the footer)."""
        model = self.race_app.model
        if self.race_app.superseded and action not in ("help", "quit"):
            return False  # another window has this seat: nothing here acts on the room any more
        if action in self.RACER_ACTIONS:
            return model.phase == RACING and model.role == RACER
        if action == "ready":
            return model.phase == LOBBY and model.role == RACER
        if action == "start":
            return model.phase == LOBBY and model.is_host
        if action == "rematch":
            return model.phase == RESULTS and model.is_host
        if action == "end_race":
            return model.phase == RACING and model.is_host
        if action == "chat":
            return model.room is not None
        if action == "qr_code":
            return model.phase == LOBBY and self.query_one(LobbyPanel).watch_link() is not None
        if action == "scroll_results":
            return model.phase == RESULTS and model.results is not None and not self.has_class("-boards")
        if action == "cycle":
            return model.phase == RESULTS or (
                model.phase == RACING and model.boards is not None and model.role != RACER
            )
        return True

    def action_pick(self, pile: str) -> None:
        if self.race_app.model.role != RACER or self.race_app.model.phase != RACING:
            return  # the board is not yours to play (watching, or no race on)
        super().action_pick(pile)

    def action_ready(self) -> None:
        model = self.race_app.model
        me = model.me
        if model.phase != LOBBY or me is None or me.role != RACER:
            return
        self.race_app.send(Ready(ready=not me.ready))

    def action_start(self) -> None:
        if self.race_app.model.phase == LOBBY:
            self.race_app.send(Start())

    def action_rematch(self) -> None:
        app = self.race_app
        if app.model.phase == RESULTS:
            deal = app.config.next_deal() if app.config.next_deal else None
            app.known_deal = deal
            if app.config.deal_note is not None:
                app.config.deal_note = RANDOM_PRACTICE_DEAL
            app.send(Rematch(deal=deal))

    def action_end_race(self) -> None:
        if not (self.race_app.model.phase == RACING and self.race_app.model.is_host):
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                self.say("the race goes on")
            elif self.race_app.model.phase == RACING:
                self.race_app.send(EndRace())

        question = "End the race now, for every racer? Games still in play are ranked as they stand."
        self.app.push_screen(ConfirmScreen(question), answered)

    def action_chat(self) -> None:
        self.board.cancel()
        self.set_class(True, "-chatting")
        self.query_one("#chat-input", Input).focus()

    def _leave_chat(self) -> None:
        chat_input = self.query_one("#chat-input", Input)
        chat_input.value = ""
        self.set_class(False, "-chatting")
        self.board.focus()

    def key_escape(self) -> None:
        if self.query_one("#chat-input", Input).has_focus:
            self._leave_chat()
            return
        super().key_escape()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "chat-input":
            super().on_input_submitted(event)
            return
        text = event.value.strip()
        self._leave_chat()
        if not text:
            return
        command, _, rest = text.partition(" ")
        if command in ("/mute", "/unmute"):
            self._mute(rest.strip(), command == "/mute")
            return
        self.race_app.send(Chat(text=text))

    def _mute(self, name: str, muted: bool) -> None:
        model = self.race_app.model
        if not model.is_host:
            self.say("only the host may mute", error=True)
            return
        ids = [pid for pid, shown in model.chat_senders().items() if shown.casefold() == name.casefold()]
        if len(ids) != 1:
            known = ", ".join(sorted(set(model.chat_senders().values()))) or "nobody yet"
            why = "no one" if not ids else f"{len(ids)} members are"
            self.say(f"{why} named {name!r} here (members and chat senders: {known})", error=True)
            return
        self.race_app.send(Mute(player_id=ids[0], muted=muted))
        self.say(f"{'muted' if muted else 'unmuted'} {name}")

    def action_qr_code(self) -> None:
        from client.widgets.invite import QrScreen

        link = self.query_one(LobbyPanel).watch_link()
        if link is not None:
            self.app.push_screen(QrScreen(link))

    def action_cycle(self, step: int) -> None:
        self.board_index += step
        self.redraw({"boards"})

    def action_scroll_results(self, how: str) -> None:
        summary = self.query_one("#results-scroll", VerticalScroll)
        scroll = {
            "down": summary.scroll_down,
            "up": summary.scroll_up,
            "page_down": summary.scroll_page_down,
            "page_up": summary.scroll_page_up,
            "home": summary.scroll_home,
            "end": summary.scroll_end,
        }[how]
        scroll(animate=False)


class RaceApp(App[int]):
    """A race client. ``config.mode`` says how to enter a room (host, join, watch)."""

    CSS_PATH = CSS_PATH
    TITLE = "The Plot"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, config: RaceConfig) -> None:
        super().__init__()
        self.config = config
        self.model = RaceModel()
        self.connection: Connection | None = None
        self.connection_state = "connecting"
        self.screen_: RaceScreen = RaceScreen(self)
        self.entered = False  # a room was created or joined (re-entering after a lost session joins it again)
        self.started_for_race: int | None = None  # auto-start: the race we asked to start
        self.readied_for_race: int | None = None  # auto-start: the race we readied up for
        self.bot_tasks: list[asyncio.Task[object]] = []
        self.exit_note = ""
        self.seat_note = ""  # why this window took a new seat instead of the saved one
        self.token_file: TokenFile | None = None
        self.superseded = False  # another window resumed this seat: this one stopped
        self.left_room: str | None = None  # the room this window left when quitting (lobby, results)
        self.closed = False
        self.announced_race: int | None = None  # the race whose start the message line said
        self.was_connected = False  # this window has had a connection (a resume is then a reconnect)
        self.known_deal = config.options.deal  # the deal, when this client chose it (practice hints)
        self.accepted_entries: list[str] = []  # this race's entries the server accepted (practice hints)

    def on_mount(self) -> None:
        self.push_screen(self.screen_)
        self.run_worker(self._session(), name="session", group="session")
        self.set_interval(0.25, self.screen_.tick)

    # ------------------------------------------------------------------ the session

    async def _session(self) -> None:
        config = self.config
        token_file, resume = self._seat()
        self.token_file = token_file
        # join and watch name their room in the URL from the start (?room=CODE: docs/deployment.md, "Room affinity").
        connection = Connection(config.url, config.name, token_file=token_file, resume=resume, room=config.code)
        connection.on_message = self.on_server_message
        connection.on_state = self.on_connection_state
        connection.on_welcome = self.on_welcome
        self.connection = connection
        try:
            await connection.start()
        except ConnectionFailed as exc:
            # Bounded (the connection gives up after a few tries): say why, and end with exit 1.
            self.connection_state = "not connected"
            self.screen_.tick()
            self.fail(str(exc))

    def _seat(self) -> tuple[TokenFile | None, bool]:
        """The saved seat this window may use, and whether to resume it (docs/client.md, "One seat
        per window"): a seat is one server, role and name; a live window holds its lock; the saved
        token is resumed only for the room it was in (``plot join``/``watch``: that room's code;
        ``plot host``: the race it was in). Otherwise this window says hello as a new player."""
        config = self.config
        if not config.profile:
            return None, False
        token_file = TokenFile.for_server(config.url, config.profile, name=config.name)
        try:
            locked = token_file.lock()
        except OSError as exc:
            self.seat_note = f"cannot keep a resume token ({exc.strerror or exc}): this window cannot resume later"
            return None, False
        if not locked:
            self.seat_note = (
                f"another window is seated as {config.name} on this server: this one takes a new seat "
                "(it cannot be resumed later)"
            )
            return None, False
        saved_room = token_file.room()
        if config.mode in (JOIN, WATCH):
            return token_file, saved_room is None or saved_room == config.code
        return token_file, True

    def on_connection_state(self, state: str, detail: str) -> None:
        self.connection_state = state
        connection = self.connection
        if connection is not None and connection.superseded:
            self._stop_superseded()
            return
        if state == RECONNECTING:
            self.screen_.say(f"reconnecting… ({detail})", error=True)
        elif state == CONNECTED and detail == "resumed" and self.was_connected:
            self.screen_.say("reconnected: back in the race where you left it")
        if state == CONNECTED:
            self.was_connected = True  # a later "resumed" is a reconnect; the first is a saved seat's
        self.screen_.tick()

    def _stop_superseded(self) -> None:
        """Another window took this seat over: say so, and act on that room no more."""
        if self.superseded:
            return
        self.superseded = True
        code = self.model.room.code if self.model.room is not None else None
        where = f" in room {code}" if code else ""
        note = f"this seat{where} was taken over by another window or device: this window stopped (Ctrl+Q quits)"
        self.exit_note = note.replace(" (Ctrl+Q quits)", "")
        self.model.room = None
        self.model.left_reason = "taken over by another window"
        self.connection_state = "taken over"
        self.screen_.say(note, error=True, sticky=True)
        self.screen_.redraw({"room", "left"})

    def on_welcome(self, welcome: Welcome) -> None:
        if self.seat_note:
            self.screen_.say(self.seat_note)
        self.run_worker(self._enter_room(welcome), group="enter")

    async def _enter_room(self, welcome: Welcome) -> None:
        config = self.config
        connection = self.connection
        assert connection is not None
        if welcome.resumed and welcome.room is not None:
            if self.entered:
                return  # a reconnect: the server brings the room, race and board back
            room = self.model.room if self.model.room and self.model.room.code == welcome.room else None
            if room is None:
                with contextlib.suppress(TimeoutError):
                    msg = await connection.wait_for(lambda m: isinstance(m, Room) and m.code == welcome.room, 5.0)
                    room = msg if isinstance(msg, Room) else None
            # A client started again rejoins the race it was in; an old lobby or finished race is left.
            stay = room is not None and room.phase in (COUNTDOWN, RACING)
            if config.mode != HOST and welcome.room == config.code:
                stay = True
            if stay:
                self.entered = True
                self.screen_.say(f"back in room {welcome.room}")
                return
            await connection.request(Leave(), Left)
        if self.entered and self.model.room is not None:
            # The server no longer knew us: take a seat again in the same room.
            role = SPECTATOR if config.mode == WATCH else RACER
            await self._join(self.model.room.code, role)
            return
        if config.mode == HOST:
            reply = await connection.request(CreateRoom(options=config.options), Room)
            if isinstance(reply, Error):
                self.fail(f"cannot create the room: {describe_error(reply)}")
                return
            self.entered = True
            self.on_server_message(reply)
            # Now that the room has a code, connect again naming it: a balancer hashing on the room
            # puts this seat on the room's node, with everyone who joins it (docs/deployment.md,
            # "Room affinity"). On one server it is a resume on the same one. The lobby stays on screen.
            await connection.follow_room(reply.code)
            if config.reachable:
                self.screen_.say(f"Room {reply.code} is open: share the invite above")
            else:
                self.screen_.say("Practice: the race starts once the bots are ready")
            for i in range(config.bots):
                self.add_bot(reply.code, i + 1)
            self._maybe_auto_start()
            return
        assert config.code is not None
        await self._join(config.code, SPECTATOR if config.mode == WATCH else RACER)

    async def _join(self, code: str, role: str) -> None:
        assert self.connection is not None
        reply = await self.connection.request(Join(code=code, role=role), Room)  # type: ignore[arg-type]
        if isinstance(reply, Error):
            why = describe_error(reply)
            if reply.code == UNKNOWN_ROOM:
                why = f"there is no room {code} on {self.config.url} ({plot_command()} rooms lists the open ones)"
            elif reply.code == NAME_TAKEN:
                command = "watch" if role == SPECTATOR else "join"
                why = f"{reply.message}: {plot_command()} {command} {code} --name ANOTHER"
            if self.entered:
                self.screen_.say(f"cannot join room {code} again: {why}", error=True, sticky=True)
            else:
                self.fail(f"cannot join room {code}: {why}")
            return
        self.entered = True
        room = self.model.room
        if role == RACER and room is not None and room.phase == RESULTS:
            self.screen_.say(
                f"race {room.race} is over: you have a racer's seat for the next one, when the host starts it"
            )

    def fail(self, note: str) -> None:
        """This window cannot do what its command asked (no such room, a refused room): say so,
        and end with ``note`` printed and exit code 1."""
        self.exit_note = note
        self.screen_.say(note, error=True, sticky=True)

        async def end() -> None:
            await self.shutdown()
            self.exit(1, return_code=1)

        self.run_worker(end(), group="quit")

    def add_bot(self, code: str, number: int) -> None:
        from client.bot import Bot
        from client.bot_levels import bot_name, level_named

        levels = self.config.bot_levels
        level = level_named(levels[(number - 1) % len(levels)])
        name = bot_name(f"bot-{number}", level)
        bot = Bot(self.config.url, code, name=name, speed=self.config.bot_speed, level=level)
        self.bot_tasks.append(asyncio.create_task(bot.run(), name=name))

    def send(self, message: Start | Ready | Rematch | EndRace | Leave | Chat | Mute) -> None:
        async def go() -> None:
            if self.connection is None or not await self.connection.send(message):
                self.screen_.say("not connected: try again in a moment", error=True)

        self.run_worker(go(), group="send")

    # ------------------------------------------------------------------ messages

    def on_server_message(self, msg: ServerMessage) -> None:
        if self.superseded:
            return  # this window stopped: nothing more from that room is shown
        changed = self.model.apply(msg)
        if "error" in changed and isinstance(msg, Error) and msg.ref != "move" and msg.code != SUPERSEDED:
            self.screen_.say(f"server: {describe_error(msg)}", error=True)
        if changed & {"room", "left"} and self.token_file is not None:
            with contextlib.suppress(OSError):
                self.token_file.set_room(self.model.room.code if self.model.room is not None else None)
        if "results" in changed:
            self._save_records()
        if "race" in changed or "room" in changed:
            self.screen_.board_index = 0
        if "race" in changed and self.model.seq <= 0:
            self.accepted_entries = []
        if isinstance(msg, RaceStart) and msg.race != self.announced_race:
            # A new race's first word replaces the last one's (a sticky "race over" among them).
            self.announced_race = msg.race
            if msg.seq > 0:
                self.screen_.say(f"back in race {msg.race}, where you left it")
            else:
                self.screen_.say(f"race {msg.race} is on" + (": go!" if self.model.role == RACER else ""))
        if "left" in changed and self.entered:
            self.screen_.say(f"you are out of the room: {self.model.left_reason}", error=True, sticky=True)
        self._maybe_auto_start()
        if "view" in changed and self.model.view is not None and self.model.view.status != PLAYING:
            self.screen_.say(f"your game is over: {self.model.view.status}. Waiting for the others…", sticky=True)
        self.screen_.redraw(changed)

    def _save_records(self) -> None:
        results = self.model.results
        room = self.model.room
        if results is None:
            return
        # The server's text never steers a path (safe_name); the results may come before the room.
        code = safe_name(room.code if room is not None else self.config.code or "room")
        folder = (self.config.record_dir or state_dir() / "records") / f"{code}-race{results.race}"
        try:
            self.model.saved_records = save_records(self.model, folder)
        except OSError as exc:
            self.screen_.say(f"could not save the records: {exc}", error=True)
            return
        place = results.ranking.index(self.model.player_id) + 1 if self.model.player_id in results.ranking else None
        if place is None:
            self.screen_.say("race over", sticky=True)
        else:
            self.screen_.say(f"race over: you placed {ordinal(place)} of {len(results.ranking)}", sticky=True)

    def _maybe_auto_start(self) -> None:
        """Practice: ready up and start as soon as every racer is ready (once per race)."""
        model = self.model
        room = model.room
        if not self.config.auto_start or room is None or room.phase != LOBBY or not model.is_host:
            return
        me = model.me
        if me is not None and me.role == RACER and not me.ready:
            if self.readied_for_race != room.race:
                self.readied_for_race = room.race
                self.send(Ready(ready=True))
            return
        racers = [m for m in room.members if m.role == RACER]
        if len(racers) < 1 + self.config.bots or not all(m.ready for m in racers):
            return
        if self.started_for_race == room.race:
            return
        self.started_for_race = room.race
        self.send(Start())

    # ------------------------------------------------------------------ the end

    async def on_unmount(self) -> None:
        await self.shutdown()

    async def action_quit(self) -> None:
        await self.shutdown()
        self.exit(0)

    def action_help_quit(self) -> None:
        """Ctrl+C quits too; mid-race (a game of yours in play) it asks first, like resigning."""
        model = self.model
        racing = (
            model.phase == RACING
            and model.role == RACER
            and model.view is not None
            and model.view.status == PLAYING
            and not self.superseded
        )
        if not racing:
            self.run_worker(self.action_quit(), group="quit")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(self.action_quit(), group="quit")
            else:
                self.screen_.say("still racing")

        question = (
            "Quit mid-race? Your seat is kept: run the same command again to rejoin (away too long, you forfeit)."
            if self.config.reachable
            else "Quit mid-race? Practice ends with this program: this race cannot be taken up again."
        )
        self.push_screen(ConfirmScreen(question), answered)

    async def shutdown(self) -> None:
        """Stop the bots and close the connection (leaving the room unless a race is on: the seat is kept)."""
        if self.closed:
            return
        self.closed = True
        if self.token_file is not None:
            self.token_file.unlock()
        for task in self.bot_tasks:
            task.cancel()
        if self.bot_tasks:
            await asyncio.wait(self.bot_tasks, timeout=5.0)  # each bot closes its connection
        if self.connection is not None:
            # The screen may be half torn down by now: nothing more reaches it.
            self.connection.on_state = lambda state, detail: None
            self.connection.on_message = lambda msg: None
            room = self.model.room
            if room is not None and self.model.phase in (LOBBY, RESULTS) and not self.superseded:
                with contextlib.suppress(Exception):
                    if await self.connection.send(Leave()):
                        self.left_room = room.code
            await self.connection.close()
