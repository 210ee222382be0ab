"""HTTP beside the WebSocket: the store's reachability, /healthz and /metrics (answered by
server/probes.py: the public /healthz, the metrics listener, their rates), and, under
``plot-server --workers``, each worker's own metrics on a unix socket so any worker answers for all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Response

from server.probes import Probes, StoreStatus
from server.shell.config import Backoff, ServerConfig, log_event
from server.store.base import Store, StoreUnavailable
from shared import protocol as p

if TYPE_CHECKING:
    from server.metrics import Metrics


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class StoreHealth:
    """The store as last seen: ``ok`` None (not asked yet), True, or False with when it went. Its
    transitions are logged once each; a watcher asks again with back-off while it is away."""

    def __init__(self, store: Store, store_name: str) -> None:
        self.store = store
        self.store_name = store_name
        self.ok: bool | None = None
        self.down_since: float | None = None
        self._watch: asyncio.Task[None] | None = None
        self.closing = False

    async def ping(self) -> str | None:
        """None when the store answers a ping, else the cause."""
        try:
            await asyncio.wait_for(self.store.ping(), 2.0)
        except (StoreUnavailable, TimeoutError, OSError) as exc:
            return str(exc) or type(exc).__name__
        return None

    def seen(self, cause: str | None) -> None:
        if cause is None:
            if self.ok is False:
                down = time.monotonic() - (self.down_since or time.monotonic())
                log_event(logging.INFO, "store_reachable", store=self.store_name, down_s=round(down, 1))
            self.ok = True
            self.down_since = None
            return
        if self.ok is not False:
            self.down_since = time.monotonic()
            log_event(
                logging.ERROR,
                "store_unreachable",
                store=self.store_name,
                cause=cause,
                action="clients get store_unavailable; retrying with back-off",
            )
        self.ok = False
        if not self.closing and (self._watch is None or self._watch.done()):
            self._watch = asyncio.ensure_future(self.watch())

    def start(self) -> None:
        self._watch = asyncio.ensure_future(self.watch())

    def stop(self) -> None:
        self.closing = True
        if self._watch is not None:
            self._watch.cancel()

    async def watch(self) -> None:
        """Ask the store until it answers (back-off from 0.5 s doubling up to 30 s)."""
        backoff = Backoff(first=0.5, cap=30.0)
        while not self.closing:
            cause = await self.ping()
            self.seen(cause)
            if cause is None:
                return
            await backoff.wait()


class Http:
    """``answer(connection, path)``: the HTTP response for /healthz and /metrics on the game port,
    None for any other path (it takes the WebSocket); the metrics listener is ``probes``'."""

    def __init__(
        self,
        config: ServerConfig,
        health: StoreHealth,
        metrics: Metrics | None,
        status: Callable[[], dict[str, object]],
    ) -> None:
        self.config = config
        self.health = health
        self.metrics = metrics
        self.status = status  # what the detailed /healthz reports beside the store's state
        self._socket: asyncio.Server | None = None  # --workers: this worker's own metrics, for its siblings
        self._inode: int | None = None  # ... and its file's inode (a reload's next worker replaces it)
        store_status = StoreStatus(health.ping, health.seen, config.probes.store_status_ttl_s)
        self.probes = Probes(config.probes, store_status, self._health_body, self._metrics_body, config.reuse_port)

    def metrics_unavailable(self) -> None:
        """Metrics are on but prometheus_client is not installed: /metrics says so."""
        self.probes.metrics_off = "unavailable: no prometheus_client installed"

    async def answer(self, connection: ServerConnection, path: str) -> Response | None:
        if path in Probes.PATHS:
            return await self.probes.public(connection, path)
        return None

    def _health_body(self, cause: str | None, detailed: bool) -> dict[str, object]:
        """/healthz: the status a probe needs; ``detailed`` (the metrics listener) adds what only an
        operator should see."""
        down = self.health.down_since
        body: dict[str, object] = {
            "status": "ok" if cause is None else "unavailable",
            "store_ok": cause is None,
            "store_down_s": None if down is None else round(time.monotonic() - down, 1),
            "protocol": p.PROTOCOL_VERSION,
        }
        if detailed:
            body |= {
                "store": self.health.store_name,
                **self.status(),
                "pid": os.getpid(),
                "worker": self.config.worker_slot,
            }
        return body

    # ------------------------------------------------------------------ plot-server --workers

    def _worker_socket(self, slot: int | None) -> str | None:
        """Where worker ``slot`` of ``plot-server --workers`` serves its own metrics (None: no workers)."""
        if self.config.workers_dir is None or slot is None:
            return None
        return os.path.join(self.config.workers_dir, f"worker-{slot}.sock")

    async def start(self) -> None:
        await self.probes.start()
        own = self._worker_socket(self.config.worker_slot)
        if own is None:
            return
        if self.metrics is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(own)  # left by this slot's previous worker (killed, or being replaced)
            self._socket = await asyncio.start_unix_server(self._serve_own_metrics, own)
        self._mark_ready(own)

    async def stop(self) -> None:
        await self.probes.stop()
        if self._socket is None:
            return
        self._socket.close()
        own = self._worker_socket(self.config.worker_slot)
        # Not when the slot's next worker (a reload) has taken the path over since.
        if own is not None and self._inode == _inode(own):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(own)

    def _mark_ready(self, own: str) -> None:
        """Tell the supervisor this worker listens (a reload waits for it before it stops the worker
        it replaces): its pid in ``worker-SLOT.ready``, written whole (renamed)."""
        self._inode = _inode(own)
        ready = own.removesuffix(".sock") + ".ready"
        with open(ready + ".tmp", "w") as file:
            file.write(str(os.getpid()))
        os.replace(ready + ".tmp", ready)

    async def _serve_own_metrics(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A sibling worker answering a scrape asks for this worker's own metrics: the text, then EOF."""
        try:
            if self.metrics is not None:
                writer.write(self.metrics.render())
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _sibling_metrics(self, slot: int) -> bytes | None:
        """Worker ``slot``'s own metrics, None if it does not answer within a second (dead, restarting)."""
        path = self._worker_socket(slot)
        if path is None:
            return None
        try:
            async with asyncio.timeout(1.0):
                reader, writer = await asyncio.open_unix_connection(path)
                try:
                    return await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return None

    async def _metrics_body(self) -> bytes | None:
        """This node's metrics; under ``--workers`` the host's: every worker's, labelled by worker.
        None: no metrics (--metrics off, or no prometheus_client installed)."""
        if self.metrics is None:
            return None
        own = self.config.worker_slot
        if own is None or self.config.workers_dir is None:
            return self.metrics.render()
        from server.metrics import merge_workers

        slots = [slot for slot in range(self.config.worker_count) if slot != own]
        fetched = await asyncio.gather(*(self._sibling_metrics(slot) for slot in slots))
        scrapes: dict[int, bytes | None] = dict(zip(slots, fetched, strict=True))
        scrapes[own] = self.metrics.render()
        return merge_workers(scrapes, self.config.worker_count)
