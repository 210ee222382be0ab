"""Helpers shared by the test modules, in one place (no test module imports another).

- ``eventually`` / ``eventually_sync``: wait by condition, with a deadline, never a fixed sleep.
- The core's test shell and its session helpers (re-exported from :mod:`server.testing.shell`).
- A real WebSocket ``Client`` and a real server on a free loopback port (``running_server``).
- ``plot-server`` as a real process (``server_process``, ``wait_healthy``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from server.core import CoreConfig, ServerCore
from server.core.records import MemberRecord, RoomRecord
from server.limits import LimitsConfig
from server.probes import ProbeConfig
from server.shell import RaceServer, ServerConfig
from server.store.base import Store
from server.store.memory import MemoryStore
from server.testing.shell import DEAL, SeededEntropy, Shell, lobby, pid, racing
from shared import protocol as p
from shared.engine import Game, View

__all__ = [
    "DEAL",
    "FAST",
    "SIZE",
    "TLS",
    "Client",
    "SeededEntropy",
    "Shell",
    "board",
    "eventually",
    "eventually_sync",
    "fast_config",
    "health",
    "latest",
    "lobby",
    "log_lines",
    "make_room",
    "message",
    "metric",
    "metrics",
    "pid",
    "play",
    "racing",
    "raw_upgrade",
    "room_phase",
    "running_server",
    "screen_text",
    "server_process",
    "start_race",
    "until",
    "url",
    "view_game",
    "wait_for_file",
    "wait_healthy",
    "ws_frame",
]


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> None:
    """Poll ``check`` (a plain or an async predicate) until it holds; fail after ``timeout`` seconds.
    The default deadline is generous: a deadline, not a timing, and a 2-core machine running
    other suites beside this one (a landing beside other work) took over 5 s for a few checks.
    A check that raises AssertionError (``latest`` finding no such message yet) is false for now;
    the last such error is the cause of the failure at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        failed: AssertionError | None = None
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except AssertionError as error:
            failed, result = error, False
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {timeout} s" + (f": {what}" if what else "")) from failed
        await asyncio.sleep(interval)


def eventually_sync(check: Callable[[], bool], timeout: float = 15.0, interval: float = 0.02, what: str = "") -> None:
    """``eventually`` outside an event loop (a subprocess, a file)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {timeout} s" + (f": {what}" if what else ""))
        time.sleep(interval)


# ====================================================================== the real server over WebSockets

M = TypeVar("M", bound=p.ServerMessage)

FAST = CoreConfig(
    countdown_ms=100,
    grace_ms=2000,
    member_grace_ms=5000,
    leaderboard_interval_ms=50,
    spectator_leaderboard_interval_ms=150,
    leaderboard_full_ms=500,
)


def fast_config(**overrides: Any) -> ServerConfig:
    core = overrides.pop("core", FAST)
    # The per-address caps are off: the tests open many connections from 127.0.0.1 (one address).
    limits = LimitsConfig.per_address_off()
    base = ServerConfig(
        host="127.0.0.1",
        port=0,
        rate_per_s=1000,
        burst=2000,
        flush_timeout_s=2.0,
        core=core,
        limits=limits,
        # A metrics listener on a free port, and no probe rate: tests poll /healthz and /metrics.
        probes=ProbeConfig(metrics_port=0, probe_rate=0),
    )
    return replace(base, **overrides)


@asynccontextmanager
async def running_server(
    store: Store | None = None, config: ServerConfig | None = None, core: ServerCore | None = None
) -> AsyncIterator[RaceServer]:
    server = RaceServer(store or MemoryStore(), config or fast_config(), core=core)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def url(server: RaceServer) -> str:
    return f"ws://127.0.0.1:{server.port}"


class Client:
    """A real WebSocket client that records every frame it receives, in order."""

    def __init__(self, ws: ClientConnection, label: str = "") -> None:
        self.ws = ws
        self.label = label
        self.frames: list[bytes] = []
        self.messages: list[p.ServerMessage] = []
        self._queue: asyncio.Queue[p.ServerMessage | None] = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read())
        self.welcome: p.Welcome | None = None
        self.closed_code: int | None = None
        self.board = p.BoardKeeper()  # the racer's board, as a v2 client keeps it
        self.diverged: list[p.MoveOk] = []  # move_oks whose changes or check value did not fit the board
        self.strict = True  # a divergence fails the test (False: tests of planted bugs, the board goes on)
        self.leaderboard: p.Leaderboard | None = None  # the leaderboard as a client shows it (partial ones merged)

    @classmethod
    async def open(cls, server: RaceServer | str, label: str = "", **kwargs: Any) -> Client:
        address = server if isinstance(server, str) else url(server)
        return cls(await connect(address, compression=None, **kwargs), label)

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                assert isinstance(frame, bytes), "the server sends binary frames only"
                self.frames.append(frame)
                msg = p.decode_server(frame)
                if isinstance(msg, p.Leaderboard):
                    self.leaderboard = msg.merged_into(self.leaderboard) or self.leaderboard
                if isinstance(msg, p.RaceStart):
                    self.board.race_start(msg)
                elif isinstance(msg, p.MoveOk):
                    # Tests read the board after each move from move_ok.view: fill it in from the
                    # changes (docs/protocol.md), checked against the check value.
                    view = self.board.move_ok(msg)
                    if view is None:
                        self.diverged.append(msg)
                        if not self.strict and self.board.view is not None:
                            with contextlib.suppress(ValueError):
                                view = msg.board_after(self.board.view)
                                self.board.seq, self.board.view = msg.seq, view
                    if view is not None:
                        msg = msgspec.structs.replace(msg, view=view)
                self.messages.append(msg)
                await self._queue.put(msg)
        except ConnectionClosed:
            pass
        finally:
            self.closed_code = self.ws.close_code
            await self._queue.put(None)

    async def send(self, msg: p.ClientMessage) -> None:
        await self.ws.send(p.encode(msg))

    async def send_raw(self, data: bytes | str) -> None:
        await self.ws.send(data)

    async def expect(self, kind: type[M], timeout: float = 15.0) -> M:
        """The next message of this type (others are skipped, but stay recorded)."""

        async def wait() -> M:
            while True:
                msg = await self._queue.get()
                if msg is None:
                    raise ConnectionError(
                        f"{self.label}: closed ({self.closed_code}) while waiting for {getattr(kind, '__name__', kind)}"
                    )
                assert not (self.strict and self.diverged), f"{self.label}: the board diverged at {self.diverged[0]!r}"
                if isinstance(msg, kind):
                    return msg

        return await asyncio.wait_for(wait(), timeout)

    async def hello(self, name: str, token: str | None = None, bot: bool = False) -> p.Welcome:
        await self.send(p.Hello(v=p.PROTOCOL_VERSION, name=name, token=token, bot=bot))
        self.welcome = await self.expect(p.Welcome)
        return self.welcome

    @property
    def pid(self) -> str:
        assert self.welcome is not None
        return self.welcome.player_id

    async def close(self) -> None:
        await self.ws.close()
        with contextlib.suppress(Exception):
            await self._reader

    async def closed(self, timeout: float = 5.0) -> int | None:
        await asyncio.wait_for(self._reader, timeout)
        return self.closed_code


async def raw_upgrade(
    port: int, source: str = "127.0.0.1", rcvbuf: int | None = None, timeout: float = 5.0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket connection by hand (a client that may never read): the upgrade's answer has
    been read; what follows is frames. ``source``: another loopback address (127.0.0.2, ...) to
    come from; ``rcvbuf``: a small receive buffer, so a client that does not read fills up fast."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    if not head.startswith(b"HTTP/1.1 101"):
        writer.close()
        raise ConnectionError(head.decode(errors="replace").split("\r\n", 1)[0])
    return reader, writer


def ws_frame(opcode: int, payload: bytes = b"") -> bytes:
    """One masked client frame (payload up to 125 bytes): 0x9 ping, 0x2 binary, 0x8 close."""
    assert len(payload) <= 125
    mask = os.urandom(4)
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def board(msg: p.MoveOk | p.RaceStart) -> View:
    """The board a move_ok (filled in by Client or the test shell from its changes) or a racer's
    race_start shows."""
    assert msg.view is not None, f"no board in {msg!r}"
    return msg.view


def view_game(view: View) -> Game:
    """A Game with the position a view shows (the stock's cards unknown): for choosing legal moves
    on the client side, as a client without the deal must."""
    game = Game(0)
    game.stock = [0] * view.stock
    game.waste = list(view.waste)
    game.reserve = [0] * (view.reserve_count - 1) + ([view.reserve_top] if view.reserve_top is not None else [])
    game.foundations = [list(f) for f in view.foundations]
    game.tableau = [list(t) for t in view.tableau]
    game.base = view.base_rank
    game.foundation_cards = view.foundation_cards
    game.status = view.status
    return game


def toggling_moves(deal: int = DEAL) -> tuple[list[str], str]:
    """Moves that reach a position with a foundation move, and that move: playing it and undoing
    it changes the cards shown every move."""
    game = Game(deal)
    opening: list[str] = []
    while True:
        home = next((m for m in game.legal_moves() if ">f" in m), None)
        if home is not None:
            return opening, home
        opening.append("stock>waste")
        game.play("stock>waste")


def latest(client: Client, kind: type[M]) -> M:
    """The last message of this type the client has received so far."""
    for msg in reversed(client.messages):
        if isinstance(msg, kind):
            return msg
    raise AssertionError(f"{client.label} has no {kind.__name__}")


async def make_room(server: RaceServer | str, names: list[str], **options: Any) -> tuple[list[Client], str]:
    clients = [await Client.open(server, name) for name in names]
    for client, name in zip(clients, names, strict=True):
        await client.hello(name)
    await clients[0].send(p.CreateRoom(options=p.RoomOptions(**options)))
    code = (await clients[0].expect(p.Room)).code
    for client in clients[1:]:
        await client.send(p.Join(code=code))
        await client.expect(p.Room)
        await client.send(p.Ready(ready=True))
    return clients, code


async def start_race(clients: list[Client]) -> list[p.RaceStart]:
    # Everyone but the host must be ready: wait until the host's snapshot says so.
    host = clients[0]
    while True:
        room = latest(host, p.Room)
        if all(m.ready for m in room.members if m.player_id != host.pid and m.role == p.RACER):
            break
        await host.expect(p.Room)
    await clients[0].send(p.Start())
    return [await c.expect(p.RaceStart) for c in clients]


async def play(client: Client, view: View, moves: int, rng: random.Random, first_id: int = 1) -> tuple[View, int]:
    """Play up to ``moves`` random legal moves (foundation moves preferred), waiting for each ack."""
    move_id = first_id
    for _ in range(moves):
        if view.status != "playing":
            break
        legal = view_game(view).legal_moves()
        if not legal:
            break
        up = [m for m in legal if ">f" in m]
        move = rng.choice(up) if up else rng.choice(legal)
        await client.send(p.Move(id=move_id, move=move))
        reply = await client.expect(p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
        assert isinstance(reply, p.MoveOk), reply
        assert reply.id == move_id
        view = board(reply)
        move_id += 1
    return view, move_id


async def plot_process(*args: str) -> asyncio.subprocess.Process:
    """``plot ARGS`` as its own process, its output captured and no terminal on its input."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "client.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )


async def wait_for_file(path: Path, timeout: float = 30.0) -> str:
    """The text of a file another process writes, once it has some."""
    await eventually(lambda: path.exists() and bool(path.read_text()), timeout, what=f"{path.name} written")
    return path.read_text()


async def room_phase(client: Client, phase: str) -> p.Room:
    while True:
        room = latest(client, p.Room)
        if room.phase == phase:
            return room
        await client.expect(p.Room)


# ====================================================================== plot-server as a process

TLS = Path(__file__).parent / "tls"


def server_environment(**extra: str) -> dict[str, str]:
    """The environment of a plot-server process a test or a bench starts: none of this shell's
    ``PLOT_*`` settings or ``REDIS_URL``, no daily deal, and no spectator page or metrics listener unless asked
    (``--web-port``, ``--metrics-port``): by default they take the game port + 1 and + 2, which
    may be another process's free ports, so two runs at once would clash. Works for older
    checkouts too (``bench/run_load.py --tree``): a server without them ignores the variables."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PLOT_") and k != "REDIS_URL"}
    environment["PLOT_WEB_PORT"] = "0"
    environment["PLOT_METRICS_PORT"] = "0"
    # The day's deal search takes a worker core for seconds at boot: only the daily's own tests
    # (which pass --daily on) pay for it.
    environment["PLOT_DAILY"] = "off"
    environment.update(extra)
    return environment


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets in /proc/PID/fd, found in /proc/net/tcp*)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)  # the header
            for line in lines:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN, the socket's inode
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@contextmanager
def server_process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    environment = server_environment(**(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def stop_processes(*procs: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM to each, then SIGKILL to any still running after ``grace`` seconds: none is left behind."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def health(port: int, scheme: str = "http") -> tuple[int, dict[str, Any]]:
    """GET /healthz: the status and the JSON body; (429, {}) when polled past the server's probe
    rate (--probe-rate): a poll by condition then simply asks again."""
    context = ssl.create_default_context(cafile=str(TLS / "localhost.pem")) if scheme == "https" else None
    try:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {} if exc.code == 429 else json.loads(exc.read())


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics(port: int | None) -> Samples:
    """GET /metrics over HTTP: every sample, by (name, sorted labels). Blocking: call it in a thread."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")  # the text format
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 if the scrape has no such sample."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_healthy(proc: subprocess.Popen[str], port: int, scheme: str = "http") -> dict[str, Any]:
    """Wait until the process answers /healthz with 200 (fail at once if it exits)."""
    answer: dict[str, Any] = {}

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"plot-server exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            status, body = health(port, scheme)
        except (OSError, ValueError):
            return False
        answer.update(body)
        return status == 200

    eventually_sync(healthy, 15.0, 0.05, "plot-server did not come up")
    return answer


def log_lines(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    assert proc.stderr is not None
    return [json.loads(line) for line in proc.stderr.read().splitlines() if line.strip()]


# ====================================================================== the terminal client under test

SIZE = (100, 40)  # the terminal size the client tests run at


def screen_text(app: Any) -> str:
    """What a running Textual app shows, as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def message(app: Any) -> str:
    """The race app's message line."""
    return str(app.screen.query_one("#message").render())


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """``eventually``, in the argument order the client tests use."""
    await eventually(condition, timeout, what=what)


async def race_against(app: Any, pilot: Any, server: RaceServer, name: str) -> Client:
    """The app (a RaceApp) hosts; ``name`` (a plain client) joins and readies; the host readies and
    starts by keys. Returns the client once the app races."""
    await until(lambda: app.model.room is not None, "the room")
    rival = await Client.open(server, name)
    await rival.hello(name)
    await rival.send(p.Join(code=app.model.room.code))
    await rival.expect(p.Room)
    await rival.send(p.Ready(ready=True))
    await until(lambda: any(m.name == name and m.ready for m in app.model.room.members), f"{name} ready")
    await pilot.press("enter")
    await until(lambda: app.model.me is not None and app.model.me.ready, "the host ready")
    await pilot.press("s")
    await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
    return rival


# The reachable blocked position of tests/vectors_blocked.json: its deal, the record reaching it,
# and a blocked-check budget too small to decide its last position (every earlier one it decides).
BLOCKED_VECTOR: dict[str, Any] = json.loads((Path(__file__).parent / "vectors_blocked.json").read_text())
BLOCKED_DEAL: int = BLOCKED_VECTOR["deal"]
BLOCKED_MOVES: list[str] = BLOCKED_VECTOR["moves"]
BLOCKED_TINY: int = BLOCKED_VECTOR["test_budget"]


def open_connections(server: RaceServer) -> int:
    """The connections the server holds open, from the levels /metrics reports."""
    return sum(server.metrics_snapshot().connections.values())


def move_writes(server: RaceServer) -> int:
    """Moves queued or in flight to the store, from the levels /metrics reports."""
    return server.metrics_snapshot().queues["move_writes"]


def room_members(server: RaceServer, code: str) -> list[MemberRecord]:
    """The members of a room the server holds, as it would store them (none if it holds no such room)."""
    record = server.core.room_record(code)
    return [] if record is None else record.members


def room_version(server: RaceServer, code: str) -> int | None:
    record = server.core.room_record(code)
    return None if record is None else record.version


def held_phase(server: RaceServer, code: str) -> str | None:
    """The phase of a room the server holds (None: it holds no such room)."""
    summary = server.core.summary(code)
    return None if summary is None else summary.phase


def race_number(server: RaceServer, code: str) -> int:
    """The current or next race of a room the server holds."""
    record = server.core.room_record(code)
    assert record is not None, f"the server holds no room {code}"
    return record.race_number


def phase_of(core: ServerCore, code: str) -> str | None:
    """The phase of a room the core holds (None: it holds no such room), from its summary."""
    summary = core.summary(code)
    return None if summary is None else summary.phase


def record_of(core: ServerCore, code: str) -> RoomRecord:
    """A room the core holds, as it would store it now."""
    record = core.room_record(code)
    assert record is not None, f"the core holds no room {code}"
    return record
