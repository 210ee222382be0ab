"""The client's connection to a race server: one WebSocket that resumes itself.

Frames are the shared protocol's MessagePack messages (``shared.protocol``). On connect the
connection says hello, with the resume token saved on disk for that server when there is one;
when the socket drops it reports "reconnecting", waits (exponential backoff with jitter) and
says hello again with the token, so the server gives the same identity, seat and game back.
Moves are tracked by id until the server answers; after a resume the unanswered ones are sent
again with the same ids (the server never applies an id twice).

The WebSocket's URL names the room whenever it is known (``?room=CODE``: the room given to join
or watch, the room the saved token was in, the room the connection is in at a reconnect), so a
balancer that hashes on it (deploy/haproxy.cfg, ``balance url_param room``) sends every connection
of a room to one node. A host learns its room only once the server created it: :meth:`Connection.follow_room`
then reconnects naming it and resumes (docs/deployment.md, "Room affinity").

Everything runs on the caller's asyncio loop (the Textual app's, the bot's).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from client.identities import claimed_secret
from client.state import safe_name, state_dir, write_private
from shared.protocol import (
    BAD_IDENTITY,
    BAD_TOKEN,
    BUSY,
    CLOSE_SUPERSEDED,
    PROTOCOL_VERSION,
    RATE_LIMITED,
    SUPERSEDED,
    BoardKeeper,
    ClientMessage,
    Error,
    Hello,
    Kicked,
    Left,
    Move,
    MoveOk,
    MoveRejected,
    ProtocolError,
    RaceStart,
    Room,
    ServerMessage,
    Shutdown,
    Sync,
    Welcome,
    decode_server,
    encode,
    message_type,
)

log = logging.getLogger("plot.client")

DEFAULT_SERVER = "ws://localhost:8765"
CLOSE_TIMEOUT = 2.0  # seconds a close may take before it is cut short
HELLO_WAITS = 5  # hellos refused rate_limited (the server's per-address budget) waited out before giving up
BUSY_RESENDS = 5  # a move answered busy (the server is overloaded) is sent again this many times, as it says
FOLLOW_TRIES = 6  # follow_room's resumes that came back without the room, tried again (50 ms, doubling)
RETRY_MS = re.compile(r"retry_ms=(\d+)")
M = TypeVar("M")

# Connection states, for the screen.
CONNECTING = "connecting"
CONNECTED = "connected"
RECONNECTING = "reconnecting"
CLOSED = "closed"


def room_url(url: str, code: str | None) -> str:
    """``url`` with its query's ``room`` parameter set to ``code`` (None: taken out), the rest of the
    URL as given (path, other parameters, their encoding). The server ignores the query; a balancer
    may hash on it. An empty path becomes ``/`` (what the request line says anyway)."""
    parts = urlsplit(url)
    query = [part for part in parts.query.split("&") if part and part.split("=", 1)[0] != "room"]
    if code is not None:
        query.append(f"room={code}")  # a room code is letters and digits: nothing to escape
    return urlunsplit(parts._replace(path=parts.path or "/", query="&".join(query)))


class ConnectionFailed(RuntimeError):
    """The server cannot be reached, or refused us for good (a message a person can read)."""


class _FollowAgain(Exception):
    """follow_room's resume came back without the room: connect again shortly (Connection._follow_again)."""


SUPERSEDED_NOTE = (
    "another window or device took over this seat (it resumed the same player): this window no longer acts in the room"
)


# ---------------------------------------------------------------- the resume token on disk


@dataclass(slots=True)
class TokenFile:
    """The resume token of one seat: one server, one profile (player or spectator) and one display
    name, on disk, owner-only, with the room it was last in. A window that uses it holds its lock
    (:meth:`lock`) for as long as it runs, so a second window never resumes a seat a live one holds."""

    path: Path
    _lock_fd: int | None = None

    @classmethod
    def for_server(
        cls, url: str, profile: str = "player", folder: Path | None = None, name: str | None = None
    ) -> TokenFile:
        folder = folder or state_dir() / "tokens"
        stem = f"{safe_name(url)}--{safe_name(profile)}"
        if name is not None:
            # The name's hash too: names that differ only in characters safe_name drops stay apart.
            stem += f"--{safe_name(name)[:40]}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"
        return cls(folder / f"{stem}.json")

    def record(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def load(self) -> str | None:
        token = self.record().get("token")
        return token if isinstance(token, str) and token else None

    def room(self) -> str | None:
        """The room this seat was last in (None: none, or not known)."""
        room = self.record().get("room")
        return room if isinstance(room, str) else None

    def save(self, welcome: Welcome, url: str) -> None:
        record = {
            "server": url,
            "player_id": welcome.player_id,
            "name": welcome.name,
            "token": welcome.token,
            "room": welcome.room,
        }
        write_private(self.path, json.dumps(record))

    def set_room(self, code: str | None) -> None:
        """Remember the room the seat is in now (None: it left), if the token is still this file's."""
        record = self.record()
        if record.get("token") and record.get("room") != code:
            record["room"] = code
            write_private(self.path, json.dumps(record))

    def lock(self) -> bool:
        """Hold this seat for this window: False when another live window holds it. Released by
        :meth:`unlock`, or by the process ending (an advisory lock: a crash never leaves it held)."""
        if self._lock_fd is not None:
            return True
        lock_path = self.path.parent.parent / "locks" / (self.path.stem + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


# ---------------------------------------------------------------- the connection


# Connection's ``identity`` by default: the one kept for the server (None: play unclaimed).
SAVED_IDENTITY = "saved"


@dataclass(slots=True)
class PendingMove:
    id: int
    entry: str
    future: asyncio.Future[MoveOk | MoveRejected]


class Connection:
    """A resuming connection. Register ``on_message`` / ``on_state`` / ``on_welcome`` callbacks, then ``start()``."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        bot: bool = False,
        token_file: TokenFile | None = None,
        resume: bool = True,
        room: str | None = None,
        backoff_start: float = 0.2,
        backoff_max: float = 5.0,
        open_timeout: float = 5.0,
        identity: str | None = SAVED_IDENTITY,
    ) -> None:
        self.url = url
        self.name = name
        self.bot = bot
        # The secret of the name claimed on this server (client/identities.py): the hello binds the
        # player to it and the server shows the claimed name. Bots never carry one.
        self.identity = (claimed_secret(url) if not bot else None) if identity == SAVED_IDENTITY else identity
        self.token_file = token_file
        # ``resume`` False: a new identity, even if the token file holds one (saved over on welcome).
        self.token: str | None = token_file.load() if token_file and resume else None
        # The room the URL names (?room=CODE): the one given, else the saved seat's; then the one
        # this connection is in (a reconnect lands where the room is).
        self.room = room if room is not None else (token_file.room() if token_file and resume else None)
        self.backoff_start = backoff_start
        self.backoff_max = backoff_max
        self.open_timeout = open_timeout
        self.state = CONNECTING
        self.welcome: Welcome | None = None
        self.on_message: Callable[[ServerMessage], None] = lambda msg: None
        self.on_state: Callable[[str, str], None] = lambda state, detail: None
        self.on_welcome: Callable[[Welcome], None] = lambda welcome: None
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._waiters: list[tuple[Callable[[ServerMessage], bool], asyncio.Future[ServerMessage]]] = []
        self._pending: dict[int, PendingMove] = {}
        # One move out at a time, in the order asked: a move answered busy is sent again later, and
        # a move sent after it meanwhile would have been played first (the server plays what comes).
        self._moves_in_order = asyncio.Lock()
        self._next_move_id = random.randrange(1, 2**40)  # fresh per process: no clash with a crashed run's ids
        self._first = asyncio.Event()
        self._fatal: str | None = None
        self.superseded = False  # another connection resumed this player: this one stopped for good
        self.reconnects = 0
        self.board = BoardKeeper()  # the racer's board, kept from race_start and each move_ok's changes
        self._syncing = False
        self._sends: set[asyncio.Future[bool]] = set()
        self.resyncs = 0  # divergences found (each answered by a sync)
        self.busy_resends = 0  # moves sent again after a busy answer's retry_ms
        self._following = False  # follow_room closed the socket: reconnect at once, and quietly
        self._follow_tries = 0
        self._follow_delay: float | None = None  # follow_room's resume to try again after this many seconds
        self._settled = asyncio.Event()  # set but while follow_room's reconnect is under way
        self._settled.set()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Welcome:
        """Connect and say hello; returns the first welcome, or raises ConnectionFailed."""
        self._task = asyncio.create_task(self._run(), name=f"plot-connection-{self.name}")
        await self._first.wait()
        if self.welcome is None:
            await self.close()
            raise ConnectionFailed(self._fatal or f"cannot connect to {self.url}")
        return self.welcome

    async def close(self) -> None:
        """Close for good (no reconnect). Unanswered moves are abandoned. Bounded: never hangs."""
        self._closing = True
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT)
        task = self._task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        self._set_state(CLOSED, "")
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.cancel()
        for _match, future in self._waiters:
            if not future.done():
                future.cancel()

    @property
    def connected(self) -> bool:
        return self.state == CONNECTED

    def _set_state(self, state: str, detail: str) -> None:
        if state != self.state or detail:
            self.state = state
            self.on_state(state, detail)

    async def _run(self) -> None:
        try:
            await self._loop()
        finally:
            self._first.set()  # start() never waits for a loop that is gone
            if self._fatal:
                self._set_state(CLOSED, self._fatal)

    async def _loop(self) -> None:
        delay = self.backoff_start
        while not self._closing:
            url = room_url(self.url, self.room)
            try:
                async with connect(url, open_timeout=self.open_timeout, max_size=2**20, compression=None) as ws:
                    self._ws = ws
                    await self._hello(ws)
                    delay = self.backoff_start
                    await self._receive(ws)
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code == CLOSE_SUPERSEDED:
                    self._superseded()
                    return
                detail = _describe(exc)
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                detail = _describe(exc)
            except InvalidURI as exc:
                self._fatal = f"not a server address: {exc.uri!r} (expected ws://host:port or wss://…)"
                return
            except ConnectionFailed as exc:
                self._fatal = str(exc)
                return
            except _FollowAgain:
                detail = "the room was not in the resume yet"
            except Exception as exc:  # anything else: say so, and try again like any other loss
                log.exception("connection error")
                detail = f"{type(exc).__name__}: {exc}"
            else:
                detail = "the server closed the connection"
            finally:
                self._ws = None
            if self._closing:
                return
            if self._following:
                self._following = False  # once: a reconnect that fails goes on as any other would
                continue
            if self._follow_delay is not None:
                await asyncio.sleep(self._follow_delay)
                self._follow_delay = None
                continue
            if self.welcome is None and self.reconnects >= 2:
                # Never got in at all: say so rather than retrying forever in silence.
                self._fatal = f"cannot connect to {self.url}: {detail}"
                return
            self.reconnects += 1
            self._set_state(RECONNECTING, detail)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.backoff_max)

    async def _hello(self, ws: ClientConnection) -> None:
        attempt = waits = 0
        while True:
            hello = Hello(v=PROTOCOL_VERSION, name=self.name, token=self.token, bot=self.bot, identity=self.identity)
            await ws.send(encode(hello))
            reply = await self._next_message(ws)
            wait = _retry_after(reply)
            if wait is not None and waits < HELLO_WAITS:
                # Too many hellos from this address for now (docs/protocol.md, §1): wait as told, on
                # the same connection, and say hello again.
                waits += 1
                self._set_state(RECONNECTING, f"the server asks to wait {wait:.0f} s: {reply_text(reply)}")
                await asyncio.sleep(wait)
                continue
            if isinstance(reply, Welcome):
                if self._follow_again(reply):
                    raise _FollowAgain
                self.welcome = reply
                self.token = reply.token
                if self.token_file is not None:
                    self.token_file.save(reply, self.url)
                # follow_room's reconnect is no news: the state stays "connected", nothing is said.
                self._set_state(CONNECTED, "resumed" if reply.resumed and self._settled.is_set() else "")
                self._settled.set()
                self._first.set()
                self._dispatch(reply)
                try:
                    self.on_welcome(reply)
                except Exception:
                    log.exception("error while handling the welcome")
                await self._resend_pending(ws)
                return
            if isinstance(reply, Error) and reply.code == BAD_IDENTITY and self.identity is not None:
                # This server does not know the saved identity (another server's, or its store was
                # wiped): play unclaimed; the message says how to forget it (plot identity forget).
                self.identity = None
                self.on_message(reply)
                continue
            if isinstance(reply, Error) and reply.code == BAD_TOKEN and attempt == 0 and self.token:
                # The server no longer knows us (it forgot, or the token is from elsewhere): start afresh.
                attempt += 1
                self.token = None
                if self.token_file is not None:
                    self.token_file.clear()
                self.on_message(reply)
                continue
            if isinstance(reply, Error):
                raise ConnectionFailed(f"the server refused us: {reply.message} ({reply.code})")
            raise ConnectionFailed(f"the server answered hello with {type(reply).__name__}")

    def _follow_again(self, welcome: Welcome) -> bool:
        """Is this follow_room's resume, come back without the room? The node that created the room
        writes the player's record (the room in it) behind its answer, and the node resumed here
        may have read the record before that write landed: connect again shortly, a few times.
        Only the last answer is handed on."""
        if self._settled.is_set() or not welcome.resumed or welcome.room == self.room:
            return False
        if self._follow_tries >= FOLLOW_TRIES:
            return False
        self.token = welcome.token
        self._follow_delay = 0.05 * 2**self._follow_tries
        self._follow_tries += 1
        return True

    async def _next_message(self, ws: ClientConnection) -> ServerMessage:
        while True:
            frame = await ws.recv()
            if isinstance(frame, str):
                continue  # the protocol is binary frames only
            try:
                return decode_server(frame)
            except ProtocolError as exc:
                log.warning("undecodable frame from the server: %s", exc.message)

    def _superseded(self) -> None:
        """Never reconnect with this token: that would take the seat back from the newer window."""
        self.superseded = True
        self._fatal = SUPERSEDED_NOTE

    async def _receive(self, ws: ClientConnection) -> None:
        while True:
            msg = await self._next_message(ws)
            if isinstance(msg, Error) and msg.code == SUPERSEDED:
                self._superseded()
                self._dispatch(msg)
                raise ConnectionFailed(SUPERSEDED_NOTE)
            self._dispatch(msg)
            if isinstance(msg, Shutdown):
                self._set_state(RECONNECTING, f"the server is shutting down: {msg.reason}")

    def _dispatch(self, msg: ServerMessage) -> None:
        try:
            self._deliver(msg)
        except Exception:  # a fault in whoever listens must not cut the connection
            log.exception("error while handling %s", type(msg).__name__)

    def _board(self, msg: ServerMessage) -> ServerMessage:
        """Keep the racer's board (protocol 2: each move_ok carries only what changed): a move_ok is
        handed on with ``view``, the board after it, filled in. On a divergence (a missing entry,
        a check value that does not match) the move_ok goes on without a view and a ``sync`` asks
        for the whole board (a race_start), once until it comes."""
        if isinstance(msg, RaceStart):
            self.board.race_start(msg)
            self._syncing = False
        elif isinstance(msg, MoveOk):
            view = self.board.move_ok(msg)
            if view is not None:
                return msgspec.structs.replace(msg, view=view)
            if not self._syncing:
                self._syncing = True
                self.resyncs += 1
                log.warning("the board diverged at move_ok seq %d: asking for the whole board", msg.seq)
                task = asyncio.ensure_future(self.send(Sync()))
                self._sends.add(task)
                task.add_done_callback(self._sends.discard)
            return msgspec.structs.replace(msg, view=None)
        return msg

    def _deliver(self, msg: ServerMessage) -> None:
        msg = self._board(msg)
        if isinstance(msg, Room):
            self.room = msg.code
        elif isinstance(msg, Welcome) and msg.room is not None:
            self.room = msg.room
        elif isinstance(msg, Left | Kicked) and msg.room == self.room:
            self.room = None
        answer: MoveOk | MoveRejected | None = None
        if isinstance(msg, MoveOk | MoveRejected):
            answer = msg
        elif isinstance(msg, Error) and msg.id is not None:
            # An error that carries a move id answers that move (docs/protocol.md §3.2).
            answer = MoveRejected(id=msg.id, code=msg.code, reason=msg.message)
        if answer is not None:
            pending = self._pending.pop(answer.id, None)
            if pending is not None and not pending.future.done():
                pending.future.set_result(answer)
        for entry in list(self._waiters):
            match, future = entry
            if not future.done() and match(msg):
                future.set_result(msg)
                self._waiters.remove(entry)
        self.on_message(msg)

    async def _resend_pending(self, ws: ClientConnection) -> None:
        for pending in sorted(self._pending.values(), key=lambda p: p.id):
            await ws.send(encode(Move(id=pending.id, move=pending.entry)))

    async def follow_room(self, code: str) -> bool:
        """Reconnect naming room ``code`` in the URL, and resume: what the host does once the server
        created its room, whose code it did not know when it connected. Behind a balancer hashing
        on the room (docs/deployment.md, "Room affinity") the seat moves to the room's node, as any
        resume on another node does. Quiet: the state stays "connected", and :meth:`send` waits for
        the resume meanwhile. True once resumed; False when not connected (the next reconnect names
        the room anyway) or when the reconnect failed (then it goes on as any reconnect does)."""
        self.room = code
        ws = self._ws
        if ws is None or self.state != CONNECTED or self.token is None:
            return False
        resumed: asyncio.Future[ServerMessage] = asyncio.get_running_loop().create_future()
        entry: tuple[Callable[[ServerMessage], bool], asyncio.Future[ServerMessage]] = (
            lambda msg: isinstance(msg, Welcome),
            resumed,
        )
        self._waiters.append(entry)
        self._following = True
        self._follow_tries = 0
        self._settled.clear()
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT)
            # Each try may take a connection's opening, and the tries wait 50 ms doubling between them.
            patience = (FOLLOW_TRIES + 1) * self.open_timeout + 0.05 * 2**FOLLOW_TRIES + CLOSE_TIMEOUT
            welcome = await asyncio.wait_for(resumed, patience)
        except TimeoutError:
            return False
        finally:
            if not resumed.done():
                resumed.cancel()
            self._settled.set()
            if entry in self._waiters:
                self._waiters.remove(entry)
        return isinstance(welcome, Welcome) and welcome.resumed and welcome.room == code

    # ------------------------------------------------------------------ sending

    async def send(self, message: ClientMessage) -> bool:
        """Send now; False when not connected (the caller says so; moves use :meth:`move`)."""
        if not self._settled.is_set():  # follow_room's reconnect: this goes to the new socket
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), self.open_timeout + CLOSE_TIMEOUT)
        ws = self._ws
        if ws is None or self.state != CONNECTED:
            return False
        try:
            await ws.send(encode(message))
        except ConnectionClosed:
            return False
        return True

    async def request(self, message: ClientMessage, want: type[M], timeout: float = 10.0) -> M | Error:
        """Send ``message`` and wait for the first ``want`` that follows it, or the Error that answers
        it: one whose ``ref`` is this message's type (an error about another message is not this
        request's answer)."""
        future: asyncio.Future[ServerMessage] = asyncio.get_running_loop().create_future()
        ref = message_type(message)

        def answers(msg: ServerMessage) -> bool:
            return isinstance(msg, want) or (isinstance(msg, Error) and msg.ref == ref and msg.id is None)

        entry = (answers, future)
        self._waiters.append(entry)
        try:
            if not await self.send(message):
                return Error(code="not_connected", message="not connected to the server")
            reply = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return Error(code="timeout", message="the server did not answer in time")
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
        assert isinstance(reply, want | Error)
        return reply

    async def wait_for(self, match: Callable[[ServerMessage], bool], timeout: float | None = None) -> ServerMessage:
        """The next message ``match`` accepts (for flows like "wait until the race starts")."""
        future: asyncio.Future[ServerMessage] = asyncio.get_running_loop().create_future()
        entry = (match, future)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    async def move(self, entry: str) -> MoveOk | MoveRejected:
        """Send a move and wait for the server's answer, across reconnects (same id, never applied
        twice). A move answered busy was not played: it is sent again (same id) after the wait the
        server names (retry_ms), up to BUSY_RESENDS times; the last busy answer is returned. Moves
        asked for while one is out wait for its answer and go out in the order asked, so a busy
        move is never overtaken by the next one."""
        async with self._moves_in_order:
            return await self._move(entry)

    async def _move(self, entry: str) -> MoveOk | MoveRejected:
        self._next_move_id += 1
        move_id = self._next_move_id
        resends = 0
        while True:
            future: asyncio.Future[MoveOk | MoveRejected] = asyncio.get_running_loop().create_future()
            self._pending[move_id] = PendingMove(move_id, entry, future)
            ws = self._ws
            if ws is not None and self.state == CONNECTED:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(encode(Move(id=move_id, move=entry)))
            answer = await future
            if not (isinstance(answer, MoveRejected) and answer.code == BUSY) or resends == BUSY_RESENDS:
                return answer
            found = RETRY_MS.search(answer.reason)
            await asyncio.sleep(min(int(found.group(1)) if found else 250, 60_000) / 1000)
            resends += 1
            self.busy_resends += 1

    @property
    def pending_moves(self) -> int:
        return len(self._pending)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed):
        rcvd = exc.rcvd
        if rcvd is not None and rcvd.reason:
            return f"connection closed: {rcvd.reason}"
        return "connection lost"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__


def _retry_after(reply: ServerMessage) -> float | None:
    """Seconds to wait before saying hello again, when the hello was refused for a while."""
    if not (isinstance(reply, Error) and reply.code == RATE_LIMITED and reply.ref == "hello"):
        return None
    found = RETRY_MS.search(reply.message)
    return min(60.0, int(found.group(1)) / 1000) if found else 1.0


def reply_text(reply: ServerMessage) -> str:
    return reply.message if isinstance(reply, Error) else type(reply).__name__
