"""HAProxy with deploy/haproxy.cfg on loopback, without Docker: for tests/test_haproxy_affinity.py
and deploy/haproxy_trial.py.

The compose names (``server``, ``server-b``) become loopback ports, the Docker DNS resolver is left
out, checks run every 500 ms instead of 5 s, and a stats socket is added so a caller can wait until
HAProxy sees every node up (``wait_up``) rather than sleep. The binary is Debian's ``haproxy``
package (``scripts/setup.sh`` installs it where missing); ``$PLOT_TEST_HAPROXY`` names another.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from support import Client, eventually, health

ROOT = Path(__file__).resolve().parent.parent
NODES = (("server-a", "server"), ("server-b", "server-b"))  # deploy/haproxy.cfg's server label, compose host


def find_haproxy() -> str:
    configured = os.environ.get("PLOT_TEST_HAPROXY")
    if configured:
        return configured
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.access(p, os.X_OK)), None)
    if found is None:
        raise RuntimeError(
            "no haproxy found for the balancer tests: install it "
            "(scripts/setup.sh does; Debian: apt-get install haproxy) "
            "or set PLOT_TEST_HAPROXY to its path"
        )
    return found


def loopback_config(
    game: dict[str, int],
    web: dict[str, int],
    listen: tuple[int, int],
    stats: Path | None = None,
    proxy_protocol: bool = True,
) -> str:
    """deploy/haproxy.cfg with each compose name on a loopback port, checks every 500 ms, and
    (``stats``) an admin socket at that path. ``proxy_protocol=False``: without the config's
    ``send-proxy-v2`` (the nodes then see every client at HAProxy's address)."""
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    if not proxy_protocol:
        text = text.replace(" send-proxy-v2", "")
    text = re.sub(r"\nresolvers docker\n(    .*\n)+", "\n", text).replace(" resolvers docker", "")
    for label, host in NODES:
        text = text.replace(f"server {label} {host}:8765", f"server {label} 127.0.0.1:{game[label]}")
        text = text.replace(f"server {label} {host}:8766", f"server {label} 127.0.0.1:{web[label]}")
    text = text.replace("bind :8765", f"bind 127.0.0.1:{listen[0]}")
    text = text.replace("bind :8766", f"bind 127.0.0.1:{listen[1]}")
    if stats is not None:
        text = text.replace("\nglobal\n", f"\nglobal\n    stats socket {stats} level operator\n", 1)
    return text.replace("inter 5s", "inter 500ms")


class LocalHAProxy:
    """HAProxy in the foreground (``-db``) on ``loopback_config``; its log kept (``output``)."""

    def __init__(
        self, game: dict[str, int], web: dict[str, int], listen: tuple[int, int], proxy_protocol: bool = True
    ) -> None:
        self.binary = find_haproxy()
        self.listen = listen
        self._folder = tempfile.TemporaryDirectory(prefix="plot-haproxy-")
        self.stats = Path(self._folder.name) / "stats.sock"
        self.config = Path(self._folder.name) / "haproxy.cfg"
        self.config.write_text(loopback_config(game, web, listen, self.stats, proxy_protocol))
        self.process: subprocess.Popen[str] | None = None
        self.output = ""

    @property
    def game_url(self) -> str:
        return f"ws://127.0.0.1:{self.listen[0]}"

    def start(self) -> None:
        command = [self.binary, "-f", str(self.config), "-db"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
            try:
                self.output = self.process.communicate(timeout=10)[0]
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.output = self.process.communicate()[0]
            self.process = None
        self._folder.cleanup()

    def __enter__(self) -> LocalHAProxy:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def server_states(self) -> dict[tuple[str, str], str]:
        """(backend, server) -> its status as HAProxy sees it (UP, DOWN, "UP 1/2", ...); {} until it answers."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(str(self.stats))
                sock.sendall(b"show stat\n")
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
        except OSError:
            return {}
        lines = data.decode().splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        header = lines[0][2:].split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {
            (row["pxname"], row["svname"]): row["status"]
            for row in rows
            if row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait_up(self, timeout: float = 15.0) -> None:
        """Until HAProxy sees every server of every backend up (its checks passed ``rise`` times)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"haproxy exited {self.process.returncode}: {self.process.communicate()[0]}")
            states = self.server_states()
            if states and all(status == "UP" for status in states.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"haproxy did not see every node up within {timeout} s: {states}")
            time.sleep(0.1)


async def idle_connections(url: str, ports: dict[str, int], per_node: int) -> list[Client]:
    """Connections through the balancer that name no room and say hello, exactly ``per_node`` on
    each node (by its /healthz count). They stand for a deployment's other players: the balance
    factor (``hash-balance-factor 150``) keeps a node under 1.5x the mean of connections, so with
    few connections in all a room's would spill over to the other node. Round robin over the hash
    ring is only roughly even: more are opened until each node has enough, the extra closed."""

    def held() -> dict[str, int]:
        return {label: int(health(port)[1]["connections"]) for label, port in ports.items()}

    base = held()
    placed: dict[str, list[Client]] = {label: [] for label in ports}
    for i in range(6 * per_node * len(ports)):
        if all(len(clients) >= per_node for clients in placed.values()):
            break
        before = held()
        client = await Client.open(url, f"idle{i}")
        await client.hello(f"idle{i}")
        after = held()
        label = next(label for label in ports if after[label] > before[label])
        placed[label].append(client)
    kept: list[Client] = []
    for label, clients in placed.items():
        assert len(clients) >= per_node, f"round robin put too few connections on {label}: {len(clients)}"
        for client in clients[per_node:]:
            await client.close()
        kept += clients[:per_node]
    await eventually(
        lambda: held() == {label: count + per_node for label, count in base.items()}, 10, what="the extra closed"
    )
    return kept
