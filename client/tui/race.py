"""Races on a server: host, join, watch, practice. One Textual app, one screen that follows the room.

The app owns a resuming :class:`client.connection.Connection` and a :class:`RaceModel` fed by
every server message; the screen (client/tui/race_screen.py; the app's settings in
client/tui/race_config.py) shows the part of the room that matters now: the lobby and
countdown, the board and leaderboard while racing (spectators: the leaderboard, and boards only
when the room allows), the results with the client's own checks at the end.
"""

from __future__ import annotations

import asyncio
import contextlib

from textual.app import App

from client.connection import CONNECTED, RECONNECTING, Connection, ConnectionFailed, TokenFile
from client.ghosts import GhostFile, ghost_frames
from client.state import safe_name, state_dir
from client.tui.play import CSS_PATH
from client.tui.race_config import (
    CHAT_PLACEHOLDER,
    GIVEN_PRACTICE_DEAL,
    HOST,
    JOIN,
    RANDOM_PRACTICE_DEAL,
    WATCH,
    RaceConfig,
)
from client.tui.race_screen import NetDriver, RaceScreen
from client.viewmodel import RaceModel
from client.widgets.overlays import ConfirmScreen
from client.widgets.room import save_records
from client.words import describe_error, ordinal, plot_command
from shared.engine import PLAYING
from shared.protocol import (
    COUNTDOWN,
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
    Mute,
    RaceStart,
    Ready,
    Rematch,
    Room,
    ServerMessage,
    Start,
    Welcome,
)

__all__ = [
    "CHAT_PLACEHOLDER",
    "GIVEN_PRACTICE_DEAL",
    "HOST",
    "JOIN",
    "RANDOM_PRACTICE_DEAL",
    "WATCH",
    "NetDriver",
    "RaceApp",
    "RaceConfig",
    "RaceScreen",
]


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
        self.adding_ghosts = False  # the host's ghosts are being sent (practice waits to start)
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
            self.adding_ghosts = bool(config.ghosts)  # practice starts once they are all in
            reply = await connection.request(CreateRoom(options=config.options), Room)
            if isinstance(reply, Error):
                self.adding_ghosts = False
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
            try:
                for ghost in config.ghosts:
                    await self.add_ghost(ghost)
            finally:
                self.adding_ghosts = False
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

    async def add_ghost(self, ghost: GhostFile) -> bool:
        """Send a ghost's record (in frames that fit the server's limit); True once it is in the room."""
        connection = self.connection
        if connection is None:
            self.screen_.say("not connected: try again in a moment", error=True)
            return False
        *parts, last = ghost_frames(ghost)
        for part in parts:
            if not await connection.send(part):
                self.screen_.say("not connected: the ghost was not added", error=True)
                return False
        reply = await connection.request(last, Room)
        if isinstance(reply, Error):
            self.screen_.say(f"the ghost {ghost.name} was not added: {describe_error(reply)}", error=True)
            return False
        paced = "on its recorded times" if ghost.times is not None else "paced evenly (its record has no times)"
        self.screen_.say(f"ghost {ghost.name} races beside you, {paced}")
        return True

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
            change = results.ratings.get(self.model.player_id or "")
            rating = f"; rating {change.after.shown} ({change.change:+d})" if change is not None else ""
            self.screen_.say(f"race over: you placed {ordinal(place)} of {len(results.ranking)}{rating}", sticky=True)

    def _maybe_auto_start(self) -> None:
        """Practice: ready up and start as soon as every racer is ready (once per race)."""
        model = self.model
        room = model.room
        if not self.config.auto_start or room is None or room.phase != LOBBY or not model.is_host:
            return
        if self.adding_ghosts:
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
