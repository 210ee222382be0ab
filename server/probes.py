"""The operator's HTTP endpoints: ``/healthz`` and ``/metrics`` (docs/metrics.md;
docs/reliability.md, "Probes and the metrics listener").

- On the public game port, ``GET /healthz`` answers what a load balancer's or an orchestrator's
  probe needs and nothing more: 200 or 503, the store's status and the protocol version.
  ``/metrics`` is not served there.
- The *metrics listener*, a port of its own (``--metrics-port``, on 127.0.0.1 unless
  ``--metrics-host`` says otherwise), answers ``GET /metrics`` and a detailed ``GET /healthz``
  (the store's address, connections, rooms, node id, pid, worker) to the addresses of
  ``--metrics-allow`` only (loopback by default): 403 to any other.
- Both are under a per-address rate (``--probe-rate``, a token bucket of twice that): past it,
  429 with ``Retry-After``, before any work is spent.
- The store's status is asked (one PING) at most once per ``store_status_ttl_s``: every probe
  within that second shares the last answer, and concurrent probes share one PING in flight.

The listener is a websockets server whose every request is answered over HTTP (no WebSocket is
ever accepted there), so the request parsing is websockets' own, as on the game port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from server.limits import TokenBucket, address_key

log = logging.getLogger("plot.server")

LOOPBACK = ("127.0.0.0/8", "::1/128")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ProbeConfig:
    """The metrics listener and the probes' limits. ``metrics_port`` 0: any free port; None (the
    default of a server made in code, as ``plot practice``'s): no listener. plot-server's own
    default is the game port + 2 (server/cli.py)."""

    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    metrics_allow: tuple[str, ...] = LOOPBACK  # networks (or single addresses) the listener answers
    probe_rate: float = 10.0  # requests per second per address, each endpoint's port; 0: no limit
    store_status_ttl_s: float = 1.0  # a store status is reused this long by every /healthz

    @property
    def probe_burst(self) -> int:
        return max(1, math.ceil(self.probe_rate * 2))


def parse_networks(text: str) -> tuple[str, ...]:
    """``--metrics-allow``: comma-separated addresses or networks (``10.0.0.0/8``, ``::1``), or
    ``loopback``; ValueError naming the bad one."""
    networks: list[str] = []
    for part in (item.strip() for item in text.split(",")):
        if part == "loopback":
            networks += LOOPBACK
            continue
        try:
            networks.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise ValueError(f"{part!r} is not an address or a network (e.g. 10.0.0.0/8, ::1, loopback)") from None
    if not networks:
        raise ValueError("no address or network given")
    return tuple(networks)


class ProbeLimiter:
    """A token bucket per address (``address_key``): ``rate`` requests a second, ``burst`` at once.
    Addresses whose bucket is full again are forgotten, so a flood of addresses cannot grow it for ever."""

    SWEEP_AT = 4096  # entries; past it, the full ones are dropped

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self.refused = 0

    def wait(self, address: str) -> float:
        """0.0: the request may go on (a token taken); else the seconds until one is there."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= self.SWEEP_AT:
                self._sweep(now)
            bucket = self._buckets[address] = TokenBucket(self.rate, self.burst, now)
        wait = bucket.take(now)
        if wait:
            self.refused += 1
        return wait

    def _sweep(self, now: float) -> None:
        for key in [key for key, bucket in self._buckets.items() if bucket.full(now)]:
            del self._buckets[key]


class StoreStatus:
    """The store's status, asked at most once per ``ttl_s`` (a PING), shared by every caller; a
    fresh answer goes to ``seen`` (the server logs the store's transitions from it)."""

    def __init__(
        self,
        ping: Callable[[], Awaitable[str | None]],
        seen: Callable[[str | None], None],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ping = ping
        self._seen = seen
        self.ttl_s = ttl_s
        self.clock = clock
        self._cause: str | None = None
        self._asked: float | None = None
        self._pending: asyncio.Future[str | None] | None = None

    async def cause(self) -> str | None:
        """None when the store answered its last ping, else why not."""
        if self._asked is not None and self.clock() - self._asked < self.ttl_s:
            return self._cause
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._ask())
        return await asyncio.shield(self._pending)

    async def _ask(self) -> str | None:
        try:
            cause = await self._ping()
        finally:
            self._pending = None
        self._cause, self._asked = cause, self.clock()
        self._seen(cause)
        return cause


Health = Callable[[str | None, bool], Mapping[str, object]]


def json_response(connection: ServerConnection, status: int, body: Mapping[str, object]) -> Response:
    response = connection.respond(status, json.dumps(body) + "\n")
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = "application/json"
    return response


def too_many(connection: ServerConnection, wait_s: float) -> Response:
    response = connection.respond(429, "too many requests from your address: slow down\n")
    response.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
    return response


class Probes:
    """``/healthz`` on the game port, and the metrics listener. ``health(cause, detailed)`` builds
    a /healthz body from the store's status; ``metrics()`` the metrics text (None: metrics off)."""

    PATHS = ("/healthz", "/metrics")

    def __init__(
        self,
        config: ProbeConfig,
        store_status: StoreStatus,
        health: Health,
        metrics: Callable[[], Awaitable[bytes | None]],
        reuse_port: bool = False,
    ) -> None:
        self.config = config
        self.store_status = store_status
        self._health = health
        self._metrics = metrics
        self._reuse_port = reuse_port
        self._allowed: tuple[Network, ...] = tuple(ipaddress.ip_network(n, strict=False) for n in config.metrics_allow)
        self.public_limiter = ProbeLimiter(config.probe_rate, config.probe_burst)
        self.listener_limiter = ProbeLimiter(config.probe_rate, config.probe_burst)
        self.forbidden = 0
        self.metrics_off = "off (--metrics off)"  # why metrics() gives None
        self._server: Server | None = None

    @property
    def port(self) -> int | None:
        """The metrics listener's port (None: no listener)."""
        if self._server is None:
            return None
        for sock in self._server.sockets:
            return int(sock.getsockname()[1])
        return None

    @property
    def refused(self) -> int:
        return self.public_limiter.refused + self.listener_limiter.refused

    async def start(self) -> None:
        if self.config.metrics_port is None:
            return
        self._server = await serve(
            self._no_websocket,
            self.config.metrics_host,
            self.config.metrics_port,
            compression=None,
            reuse_port=self._reuse_port or None,
            process_request=self._listener_request,
            server_header="plot-server",
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _no_websocket(self, connection: ServerConnection) -> None:  # never reached: every request is answered
        await connection.close(1008, "no WebSocket here")

    async def public(self, connection: ServerConnection, path: str) -> Response:
        """A probe on the game port: /healthz (status only); /metrics is on the listener."""
        wait = self.public_limiter.wait(address_key(connection.remote_address))
        if wait:
            return too_many(connection, wait)
        if path == "/metrics":
            where = "the metrics listener (--metrics-port)" if self.config.metrics_port is not None else "no port"
            return connection.respond(404, f"/metrics is served on {where}, not on the game port\n")
        return await self._healthz(connection, detailed=False)

    async def _listener_request(self, connection: ServerConnection, request: Request) -> Response:
        if not self._allows(connection.remote_address):
            self.forbidden += 1
            return connection.respond(403, "this address may not use the metrics listener (--metrics-allow)\n")
        wait = self.listener_limiter.wait(address_key(connection.remote_address))
        if wait:
            return too_many(connection, wait)
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            return await self._healthz(connection, detailed=True)
        if path == "/metrics":
            body = await self._metrics()
            if body is None:
                return connection.respond(404, f"metrics are {self.metrics_off}\n")
            from server.metrics import CONTENT_TYPE

            response = connection.respond(200, "")
            response.body = body
            for header, value in (("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))):
                del response.headers[header]
                response.headers[header] = value
            return response
        return connection.respond(404, "not found: GET /metrics or /healthz\n")

    async def _healthz(self, connection: ServerConnection, detailed: bool) -> Response:
        cause = await self.store_status.cause()
        return json_response(connection, 200 if cause is None else 503, self._health(cause, detailed))

    def _allows(self, remote: object) -> bool:
        host = remote[0] if isinstance(remote, tuple) and remote else None
        if not isinstance(host, str):
            return False
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self._allowed)
