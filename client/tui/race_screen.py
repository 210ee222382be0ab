"""The race app's one screen (client/tui/race.py): the room, whatever its phase, and its keys."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.events import Resize
from textual.widgets import Footer, Input, Static

from client.connection import CONNECTED, RECONNECTING
from client.ghosts import GhostFileError, live_split, load_ghost
from client.tui.game import GameScreen, help_rows
from client.tui.race_config import (
    CHAT_PLACEHOLDER,
    RANDOM_PRACTICE_DEAL,
)
from client.widgets.board import Board
from client.widgets.cards import span
from client.widgets.chat import ChatPanel
from client.widgets.leaderboard import LeaderboardPanel, clock
from client.widgets.overlays import ConfirmScreen
from client.widgets.plain import plain
from client.widgets.room import LobbyPanel, ResultsPanel
from client.words import plot_command
from shared.engine import View
from shared.protocol import (
    CHAT_MAX,
    COUNTDOWN,
    DEALING,
    LOBBY,
    RACER,
    RACING,
    RESULTS,
    SPECTATOR,
    Chat,
    EndRace,
    MoveOk,
    Mute,
    Ready,
    Rematch,
    Start,
)
from shared.splits import Split

if TYPE_CHECKING:
    from client.tui.race import RaceApp


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
        Binding("N", "rematch_ghosts", "race these ghosts"),
        Binding("G", "add_ghost", "add a ghost"),
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
            self.query_one(LeaderboardPanel).show(model.leaderboard, model.player_id, title, self._splits())
        self.tick()

    def _splits(self) -> dict[str, Split | None] | None:
        """The racer's latest split against each ghost on the board (None: no ghost, or watching)."""
        model = self.race_app.model
        board, race, me = model.leaderboard, model.race, model.player_id
        if board is None or race is None or me is None or model.role != RACER:
            return None
        now = model.server_now() - race.started_at
        found = {row.player_id: live_split(model.samples, me, row.player_id, now) for row in board.racers if row.ghost}
        return found or None

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
        if action in ("rematch", "rematch_ghosts"):
            return model.phase == RESULTS and model.is_host
        if action == "add_ghost":
            return model.phase == LOBBY and model.is_host
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

    def action_rematch_ghosts(self) -> None:
        """The same deal again, this race's racers as ghosts on their own times."""
        app = self.race_app
        if app.model.phase == RESULTS and app.model.is_host:
            if app.model.results is not None:
                app.known_deal = app.model.results.deal
            app.send(Rematch(ghosts=True))

    def action_add_ghost(self) -> None:
        """The host, in the lobby: a ghost from a record file (typed in the chat line as /ghost FILE)."""
        model = self.race_app.model
        if model.phase != LOBBY or not model.is_host:
            return
        self.action_chat()
        chat_input = self.query_one("#chat-input", Input)
        chat_input.value = "/ghost "
        chat_input.cursor_position = len(chat_input.value)

    def _ghost(self, path: str) -> None:
        model = self.race_app.model
        if not model.is_host or model.phase != LOBBY:
            self.say("only the host adds ghosts, in the lobby", error=True)
            return
        try:
            ghost = load_ghost(Path(path).expanduser())
        except GhostFileError as exc:
            self.say(str(exc), error=True)
            return
        self.race_app.run_worker(self.race_app.add_ghost(ghost), group="send")

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
        if command == "/ghost":
            self._ghost(rest.strip())
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
