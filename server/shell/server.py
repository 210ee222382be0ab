"""The server: the parts of the shell composed around one room core.

Frames come in through the gate (gate.py), become core events, and the core's effects are carried
out by :class:`ShellEffects` (effects.py, on the one dispatch of executor.py) on the parts: delivery (frames out),
the append pipeline (moves), room writes and player writes (written behind), reads, timers and
workers. Several nodes add their glue (several_nodes.py), built only when rooms are shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from server.core import ServerCore
from server.core import events as ev
from server.limits import AddressLimits, AnswerBudgets
from server.proxy import trusting
from server.shell.appends import AppendPipeline
from server.shell.config import ServerConfig, ServerStats, Tasks, log, log_event
from server.shell.daily import DailyPart
from server.shell.delivery import Delivery
from server.shell.effects import ShellEffects
from server.shell.gate import Gate, PlotConnection
from server.shell.http import Http, StoreHealth
from server.shell.link import Link
from server.shell.part import ShellContext
from server.shell.players import PlayerWrites
from server.shell.profiles import ProfileSteps
from server.shell.reads import Reads
from server.shell.room_writes import RoomWrites
from server.shell.timers import Timers
from server.shell.workers import Workers
from server.store.base import Store, StoreUnavailable
from server.winnable import DealFinder
from shared import protocol as p

if TYPE_CHECKING:
    from server.metrics import Metrics, Snapshot
    from server.nodes import NodeLink


class RaceServer:
    """``await start()``, then serve until ``await stop()``."""

    def __init__(
        self,
        store: Store,
        config: ServerConfig | None = None,
        *,
        core: ServerCore | None = None,
        store_name: str = "memory",
    ) -> None:
        self.store = store
        self.config = config or ServerConfig()
        self.store_name = store_name
        if self.config.core.shared_rooms and not self.config.core.node_id:
            # Several nodes: this node's name, recorded with the members connected to it.
            self.config = replace(self.config, core=replace(self.config.core, node_id=secrets.token_hex(6)))
        self.stats = ServerStats()
        self.core = core or ServerCore(self.config.core)
        self.metrics: Metrics | None = None  # made once the parts it reads exist (below)
        self.tasks = Tasks()
        self.nodes: NodeLink | None = None  # several nodes: the pub/sub link
        self.link = self._make_link()
        ctx = ShellContext(self.config, store, self.core, self.link, self.tasks, self.dispatch)
        limits = AddressLimits(self.config.limits)
        self.answers = AnswerBudgets(limits)  # what each connection's requests may make the server send
        self.delivery = Delivery(self.config, self.stats, None, self.tasks, self.answers)
        self.appends = AppendPipeline(ctx)
        self.gate = Gate(ctx, self.stats, self.delivery, self.appends, limits, self.answers)
        self.delivery.on_check = self.gate.limits.prune
        self.room_writes = RoomWrites(ctx, self.execute)
        self.link.attach(self.room_writes.versions.is_news)
        self.timers = Timers(self.dispatch)
        self.reads = Reads(ctx, self.room_writes)
        self.player_writes = PlayerWrites(ctx)
        self.workers = Workers(ctx)
        self.daily = DailyPart(ctx, self.workers)
        self.health = StoreHealth(store, store_name)
        self.http = Http(self.config, self.health, None, self._status)
        self.effects = ShellEffects(
            self.delivery,
            self.appends,
            self.timers,
            self.room_writes,
            self.reads,
            self.player_writes,
            self.workers,
            self.tasks,
            self.daily,
            ProfileSteps(ctx),
        )
        if self.config.metrics:
            self.metrics = self._make_metrics()
            self.delivery.metrics = self.http.metrics = self.metrics
            self.gate.timed = self.metrics is not None
            if self.metrics is None:
                self.http.metrics_unavailable()
        self._server: Server | None = None
        self._closing = False

    def _make_metrics(self) -> Metrics | None:
        """This node's metrics, with their own registry; None without prometheus_client (the
        ``server`` extra), as on a client-only install running ``plot practice``."""
        try:
            from server.metrics import Metrics
        except ImportError:
            return None
        metrics = Metrics(self.metrics_snapshot)
        self.store.observer = metrics.store_call
        return metrics

    def _make_link(self) -> Link:
        """One node: the plain link. Several nodes (shared rooms): the glue, on a Redis store."""
        if not self.config.core.shared_rooms:
            return Link()
        from server.shell.several_nodes import SharedRooms
        from server.store.redis import RedisStore

        if not isinstance(self.store, RedisStore):
            raise ValueError("several nodes (shared rooms) need the Redis store (one Redis or a Redis Cluster)")
        glue = SharedRooms(self.config, self.store, self.core, self.dispatch, self._pubsub_lag)
        self.nodes = glue.link
        return glue

    def _pubsub_lag(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.pubsub_lag.observe(seconds)

    # ------------------------------------------------------------------ the core

    @property
    def limits(self) -> AddressLimits:
        return self.gate.limits

    @property
    def deal_finder(self) -> DealFinder:
        return self.workers.deal_finder

    def dispatch(self, event: ev.Event) -> None:
        try:
            effects = self.core.handle(event)
        except Exception:
            log.exception("core_failed", extra={"fields": {"event": type(event).__name__}})
            if isinstance(event, ev.ClientEvent | ev.HelloEvent):
                conn = self.delivery.conns.get(event.conn)
                if conn is not None:
                    self.delivery.reply(conn, p.Error(code=p.INTERNAL, message="the server failed on this message"))
            return
        payers = self.answers.payers(event, self.delivery.conns)
        if payers:  # what answers a request is charged to its connection and address
            with self.answers.charging(payers):
                self.effects.execute_all(effects)
        else:
            execute = self.effects.execute
            for effect in effects:
                execute(effect)
        if isinstance(event, ev.RoomLoaded):
            self.gate.room_loaded(event.code)

    def execute(self, effects: list[ev.Effect]) -> None:
        self.effects.execute_all(effects)

    # ------------------------------------------------------------------ queries

    async def read_room(self, code: str) -> tuple[bytes, int] | None:
        """The room as the store has it once every write this process queued for it has landed."""
        return await self.room_writes.read_room(code)

    def writes_pending(self, code: str) -> bool:
        """Are writes (or a read-back) of this room still queued or running here?"""
        return code in self.room_writes.workers

    def known_version(self, code: str) -> int | None:
        """The store version of the room this node last wrote or read (None: unknown)."""
        book = self.room_writes.versions.books.get(code)
        return None if book is None else book.version

    @property
    def store_ok(self) -> bool | None:
        return self.health.ok

    def _status(self) -> dict[str, object]:
        return {
            "connections": len(self.delivery.conns),
            "rooms": self.core.room_count(),
            "node": self.link.node_id,  # several nodes: which one answered
        }

    def metrics_snapshot(self) -> Snapshot:
        """The levels /metrics reports, read when scraped (docs/metrics.md)."""
        from server.metrics import Snapshot

        kinds = dict.fromkeys(("anonymous", "lobby", p.RACER, p.SPECTATOR), 0)
        for conn in self.delivery.conns.values():
            kinds[self.core.connection_kind(conn.player)] += 1
        phases = dict.fromkeys((p.LOBBY, p.DEALING, p.COUNTDOWN, p.RACING, p.RESULTS), 0)
        phases.update(self.core.phase_counts())
        finder = self.workers.deal_finder
        queues = {
            "move_writes": self.appends.backlog,
            "move_batches_in_flight": self.appends.batches_in_flight,
            "room_writes": self.room_writes.queued,
            "player_writes": len(self.player_writes.saves),
            "solver_waiting": len(finder.queued()),
            "solver_running": len(finder.running()),
        }
        stats = self.stats
        published, received, missed = self.link.pubsub_counts()
        return Snapshot(
            connections=kinds,
            rooms=phases,
            queues=queues,
            frames_in=stats.frames_in,
            frames_out=stats.frames_out,
            dropped_frames=stats.dropped_frames,
            slow_disconnects=stats.slow_disconnects,
            rate_limited=stats.rate_limited,
            limited={
                "conns_per_address": stats.refused_per_address,
                "hello_timeout": stats.hello_timeouts,
                "hellos_per_minute": stats.address_limited["hello"],
                "rooms_per_minute": stats.address_limited["create_room"],
                "join_failures_per_minute": stats.address_limited["join"],
                "claims_per_hour": stats.address_limited["claim"],
                "probe_rate": self.http.probes.refused,
                "metrics_allow": self.http.probes.forbidden,
                "answer_bytes": self.answers.refused,
            },
            connections_total=stats.connections,
            pubsub_published=published,
            pubsub_received=received,
            pubsub_gaps=missed,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.link.start()
        ssl_context: ssl.SSLContext | None = None
        if self.config.tls_cert:
            ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ssl_context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        self._server = await serve(
            self.gate.handler,
            self.config.host,
            self.config.port,
            compression=None,
            reuse_port=self.config.reuse_port or None,
            max_size=self.config.max_frame,
            max_queue=4,
            ping_interval=self.config.ping_interval,
            ping_timeout=self.config.ping_timeout,
            process_request=self._process_request,
            ssl=ssl_context,
            server_header="plot-server",
            create_connection=trusting(PlotConnection, self.config.limits.trusted_proxies),
        )
        self.delivery.start()
        self.health.start()
        self.daily.start()
        await self.http.start()
        log_event(
            logging.INFO,
            "server_started",
            host=self.config.host,
            port=self.port,
            store=self.store_name,
            metrics_port=self.metrics_port,
            tls=ssl_context is not None,
            node=self.link.node_id,
        )

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        # The query is ignored: clients name their room in it (?room=CODE) for a balancer to hash
        # on (docs/deployment.md, "Room affinity"); any other path takes the WebSocket.
        path = request.path.split("?", 1)[0]
        answer = await self.http.answer(connection, path)
        if answer is not None:
            return answer
        return self.gate.refuse(connection)

    @property
    def metrics_port(self) -> int | None:
        """The metrics listener's port (None: none)."""
        return self.http.probes.port

    @property
    def port(self) -> int:
        assert self._server is not None
        for sock in self._server.sockets:
            return int(sock.getsockname()[1])
        raise RuntimeError("the server is not listening")

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def stop(self, reason: str = "the server is shutting down") -> None:
        """Tell every client, close every connection (1001), flush the store writes."""
        if self._closing:
            return
        self._closing = True
        self.gate.closing = True
        self.reads.closing = True
        log_event(logging.INFO, "server_stopping", reason=reason, connections=len(self.delivery.conns))
        self.delivery.broadcast_all(p.encode(p.Shutdown(reason=reason, retry_after_ms=self.config.shutdown_retry_ms)))
        self.timers.stop()
        self.daily.stop()
        self.delivery.stop()
        self.health.stop()
        self.workers.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.http.stop()
        await self.flush(self.config.flush_timeout_s)
        await self.link.close()
        log_event(logging.INFO, "server_stopped")

    async def flush(self, timeout: float) -> None:
        """Wait for pending store writes (moves, rooms, players)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            pending = [*self.tasks.running, *self.room_writes.workers.values(), *self.player_writes.workers.values()]
            if not pending:
                if self.appends.idle:
                    return
                await asyncio.sleep(0.01)  # a batch is about to be sent
                continue
            await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
        log_event(logging.WARNING, "flush_timeout", rooms=list(self.room_writes.workers))


async def run_server(
    server: RaceServer, stop: asyncio.Event, after_start: Callable[[], Awaitable[object]] | None = None
) -> None:
    """Serve until ``stop`` is set, then shut down cleanly. ``after_start`` runs once the game
    port listens (plot-server starts the spectator page's port there: server/web/)."""
    await server.start()
    try:
        if after_start is not None:
            await after_start()
        await stop.wait()
    finally:
        await server.stop()
        with contextlib.suppress(StoreUnavailable):
            await server.store.close()
