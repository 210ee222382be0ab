"""The asyncio WebSocket shell around the room core.

It decodes frames into events (a bad frame becomes an error reply here, never an exception
further in), runs :class:`server.core.ServerCore`, and carries out the effects: frames out
through a fan-out that never waits for a slow reader, store writes (move appends before any
acknowledgement; room and player records written behind, in order, latest wins), per-room
timers (countdown, ~10 Hz leaderboard coalescing, time limits, forfeits, idle lobbies).

Rooms are rebuilt lazily from the store (record + move logs) the first time a message needs
one, so a restarted server, or another process, picks up where the last one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import secrets
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, assert_never

import msgspec
from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Event as WsEvent

from server.core import CoreConfig, ServerCore
from server.core.events import (
    Bind,
    BlockedChecked,
    CheckBlocked,
    ClientEvent,
    CloseConnection,
    Connected,
    CreateRoomRecord,
    DealFound,
    Disconnected,
    DropRoom,
    Effect,
    Event,
    ExpireRoom,
    FindDeal,
    HelloEvent,
    LeaderboardTick,
    ListRooms,
    LoadRoom,
    LogReloaded,
    LookupToken,
    MovePersisted,
    MovePersistFailed,
    NodesGone,
    Note,
    PersistMove,
    PlayerRegistered,
    RegisterFailed,
    RegisterPlayer,
    ReloadLog,
    RemoteBatch,
    RemoteMoves,
    Reply,
    RoomChanged,
    RoomCreated,
    RoomCreateFailed,
    RoomLoaded,
    RoomSaved,
    RoomsListed,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Tick,
    TokenLooked,
    Wake,
    WakeLeaderboards,
)
from server.core.records import (
    LogEntry,
    PlayerRecord,
    RoomRecord,
    decode_entry,
    decode_player,
    decode_room,
    encode_record,
    open_race_of,
)
from server.fanout import Fanout, LocalFanout
from server.limits import AddressLimits, AnswerBudgets, ByteBudget, LimitsConfig, address_key
from server.probes import ProbeConfig, Probes, StoreStatus
from server.proxy import ProxiedConnection, trusting
from server.store.base import AppendRequest, AppendResult, LogLength, Store, StoreUnavailable
from server.winnable import DealFinder, SearchOutcome, WinnableConfig
from shared import protocol as p

if TYPE_CHECKING:  # redis-py is imported only when several nodes share a Redis (server/nodes.py)
    from server.metrics import Metrics, Snapshot
    from server.nodes import Appended, NodeLink, RoomVersion

log = logging.getLogger("plot.server")
MOVE_ANSWERS = (p.MoveOk, p.MoveRejected)  # a tuple: ``A | B`` in isinstance builds a union at each call
NOTE_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_event(level: int, event: str, **fields: object) -> None:
    """A structured log line: the event name plus fields (rendered as JSON by the CLI's formatter)."""
    log.log(level, event, extra={"fields": fields})


def now_ms() -> int:
    return int(time.time() * 1000)


class Backoff:
    """Exponential delays for a retry loop: 50 ms doubling up to ``cap`` seconds."""

    __slots__ = ("cap", "delay", "first")

    def __init__(self, first: float = 0.05, cap: float = 2.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    async def wait(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.cap, self.delay * 2)

    def reset(self) -> None:
        self.delay = self.first


# One room write waiting in the room's queue: (kind, value). Kinds: "save" (RoomRecord), "listed"
# (bool), "expire" (seconds or None), "read" (a future for the store's (data, version) or None).
RoomOp = tuple[str, object]


@dataclass(frozen=True, slots=True)
class QueuedSave:
    """A room save waiting in the room's queue. ``epoch``: the room's refresh count when the core
    made it (several nodes: a save made before the room was refreshed from the store is stale)."""

    record: RoomRecord
    epoch: int
    commands: int = 0  # several nodes: the room commands (their numbers) up to here are in this save
    then: tuple[Send, ...] = ()  # sent once this save has landed (SaveRoom.then)

    def replacing(self, older: QueuedSave) -> QueuedSave:
        """This save in place of an older one of the same room that has not landed: it carries the
        older one's messages too, unless a read-back came between (the older was made on a copy
        the read-back replaced, and the read-back sent the stored room's own)."""
        if older.epoch != self.epoch or not older.then:
            return self
        return replace(self, then=older.then + self.then)


def counted_logs(record: RoomRecord) -> tuple[LogLength, ...]:
    """The logs a finished race's results count, each as long as the ending node's copy held it:
    several nodes, the save lands only if the store's logs hold exactly these (another node's
    entry stored but not yet heard here refuses it, and the room is read back, logs and all)."""
    race = record.race
    if race is None or race.log_lengths is None or record.phase != p.RESULTS:
        return ()
    return tuple(LogLength(race.number, pid, length) for pid, length in race.log_lengths.items())


TURN_GAP_S = 0.05  # turns with moves further apart than this are not one backlog (busy_turn_streak)


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    max_frame: int = 4096  # bytes per incoming message; larger ones close the connection (1009)
    rate_per_s: float = 30.0  # messages per second per connection, sustained ...
    burst: int = 60  # ... with this many at once; past it: error rate_limited, close 1008
    max_connections: int = 2000
    write_soft_limit: int = 64 * 1024  # over this many buffered bytes, progress frames are dropped
    write_hard_limit: int = 1024 * 1024  # over this, the connection is cut: it cannot keep up
    slow_grace_s: float = 10.0  # ... and so is one that stays over the soft limit this long
    buffer_check_s: float = 1.0  # every connection's write buffer is checked this often, sent to or not
    limits: LimitsConfig = field(default_factory=LimitsConfig)  # hello deadline, per-address caps
    ping_interval: float | None = 20.0
    ping_timeout: float | None = 20.0
    socket_sndbuf: int | None = None  # kernel send buffer per connection (None: the system's)
    tls_cert: str | None = None
    tls_key: str | None = None
    list_limit: int = 100
    shutdown_retry_ms: int = 3000
    flush_timeout_s: float = 5.0
    # Group commit: the moves waiting to be written go to the store together, up to this many per
    # batch (one round trip on Redis), with at most this many batches in flight at once.
    append_batch_max: int = 256
    append_batches_in_flight: int = 4
    # When the store cannot keep up, a new move is answered `busy` at once: past this many moves
    # queued or in flight to the store, or while a batch has been out longer than append_stall_ms.
    append_backlog_limit: int = 4096
    append_stall_ms: int = 1000
    # ... and when the event loop itself is behind: once busy_turn_streak turns of the loop in a
    # row (back to back) have each handled at least this many moves (a standing backlog of ready
    # connections, not one burst after a pause), a turn's moves past this many are answered
    # `busy` before any work is spent on them. 0: no such limit.
    # Off by default: on a quiet machine at 1.5x the saturation rate it refused 123k moves in 10 s
    # and cut goodput by 30% (docs/benchmarks.md, "Overload, quiet machine"); the store's backlog rule stays on.
    busy_turn_moves: int = 0
    busy_turn_streak: int = 3
    busy_retry_ms: int = 250
    read_wait_s: float = 5.0  # a room read waits this long for the room's pending writes, then fails
    reuse_port: bool = False  # SO_REUSEPORT: several processes share the port (plot-server --workers)
    node_sweep_s: float = 5.0  # several nodes: how often channels of rooms no longer held are dropped
    # Several nodes: the lease on a room's winnable-deal search (one node searches; when it dies the
    # lease lapses after this long and a node waiting for it, polling 6 times as often, searches).
    deal_lease_s: float = 3.0
    # Several nodes: a room read back after another node's change reads each racer's log past the
    # entries this node's copy holds ("incremental"), or all of it ("full": for measuring).
    readback: str = "incremental"
    metrics: bool = True  # GET /metrics (server/metrics.py), when prometheus_client is installed
    probes: ProbeConfig = field(default_factory=ProbeConfig)  # /healthz, the metrics listener (server/probes.py)
    # plot-server --workers N: this worker's slot (0 to N-1), N, and the supervisor's directory where
    # each worker serves its own metrics on a unix socket, so that any worker answers /metrics for all.
    worker_slot: int | None = None
    worker_count: int = 1
    workers_dir: str | None = None
    core: CoreConfig = field(default_factory=CoreConfig)
    winnable: WinnableConfig = field(default_factory=WinnableConfig)  # deal searches of winnable_only rooms


@dataclass
class ServerStats:
    connections: int = 0
    frames_in: int = 0
    frames_out: int = 0
    errors_sent: int = 0
    dropped_frames: int = 0
    slow_disconnects: int = 0
    rate_limited: int = 0
    refused_per_address: int = 0  # upgrades refused with 429: the address holds its cap of connections
    hello_timeouts: int = 0
    # Hellos, room creations and joins refused rate_limited for their address, by message type.
    address_limited: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("hello", "create_room", "join"), 0))


class TokenBucket:
    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class PlotConnection(ProxiedConnection):
    """A server connection whose WebSocket pings and pongs take from its message bucket, and whose
    whole binary messages go straight to the server's handler.

    websockets answers a ping by itself, below the frame loop: without this, pings bypassed the
    rate limit and a client that sent them and never read piled up pongs without limit.

    A message in one binary frame (every message a client of ours sends) is handed to
    ``on_binary`` from the frame parser, in the same step: not queued for the connection's
    handler task and read back by it (the queue, a future and a task wake-up per message were
    a tenth of a move's CPU: docs/benchmarks.md, "The move path at saturation"). Anything else
    (text, a fragmented message) takes websockets' own path, and while such a message waits
    there every later one does too, so messages are handled in the order they came. A trusted
    proxy's PROXY header comes off the stream first (server/proxy.py)."""

    bucket: TokenBucket | None = None
    address: str = "local"
    flooded: bool = False
    stats: ServerStats | None = None
    on_binary: Callable[[bytes], None] | None = None  # set by the server's handler once it is ready
    queued_messages = 0  # messages given to websockets' queue (from their first frame), not yet read by the handler

    def process_event(self, event: WsEvent) -> None:
        if not isinstance(event, Frame):
            super().process_event(event)
            return
        opcode = event.opcode
        if opcode is Opcode.BINARY and event.fin and self.on_binary is not None and not self.queued_messages:
            data = event.data
            self.on_binary(data if isinstance(data, bytes) else bytes(data))
            return
        if opcode in (Opcode.BINARY, Opcode.TEXT):  # a message's first frame (continuations are CONT)
            self.queued_messages += 1
        if self.bucket is not None and opcode in (Opcode.PING, Opcode.PONG) and not self.bucket.take():
            if not self.flooded:
                self.flooded = True
                if self.stats is not None:
                    self.stats.rate_limited += 1
                log_event(logging.WARNING, "rate_limited", address=self.address, what="pings")
                # Close 1008, stop reading (and answering pings), and cut it if it does not go.
                self.protocol.fail(CloseCode.POLICY_VIOLATION, "rate limit exceeded (pings count as messages)")
                self.send_data()
                self.loop.call_later(2.0, self.transport.abort)
            return
        super().process_event(event)


@dataclass(slots=True)
class Conn:
    id: int
    ws: ServerConnection
    bucket: TokenBucket
    address: str = "local"
    player: str | None = None
    hello_seen: bool = False
    join_pending: str | None = None  # a join waiting for its room to load (its budget token not yet given back)
    over_since: float | None = None
    cut: bool = False
    limited: bool = False  # over its message rate: being closed, its messages dropped
    moves_in: dict[int, float] = field(default_factory=dict)  # move id -> receipt (metrics on only)
    results_seen: str | None = None  # the commitment of the race whose results it last got
    answers: ByteBudget | None = None  # what its requests may make the server send (server/limits.py)


class RaceServer:
    """``await start()``, then serve until ``await stop()``."""

    def __init__(
        self,
        store: Store,
        config: ServerConfig | None = None,
        *,
        core: ServerCore | None = None,
        store_name: str = "memory",
        fanout: Fanout | None = None,
    ) -> None:
        self.store = store
        self.config = config or ServerConfig()
        self.store_name = store_name
        if self.config.core.shared_rooms and not self.config.core.node_id:
            # Several nodes: this node's name, recorded with the members connected to it.
            self.config = replace(self.config, core=replace(self.config.core, node_id=secrets.token_hex(6)))
        self.stats = ServerStats()
        self.core = core or ServerCore(self.config.core)
        self.fanout = fanout or LocalFanout(self._conns_of, self._deliver)
        self._conns: dict[int, Conn] = {}
        self._player_conns: dict[str, set[int]] = {}
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self._closing = False
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._leaderboard_timer: asyncio.TimerHandle | None = None  # the node's shared leaderboard tick
        self._tasks: set[asyncio.Task[None]] = set()
        self._room_ops: dict[str, deque[RoomOp]] = {}
        self._room_workers: dict[str, asyncio.Task[None]] = {}
        self._store_versions: dict[str, int | None] = {}
        # A save whose outcome is unknown (StoreUnavailable): (the version it expected, its data),
        # so the next save can tell whether it landed before deciding on a version.
        self._uncertain_saves: dict[str, tuple[int, bytes]] = {}
        self._save_conflicts: set[str] = set()  # rooms another writer changed: never overwritten
        # The open race of each room as the store has it, and the open race of the latest save
        # waiting in the room's queue. Ticks of a room whose queued save opens a race the store
        # has not got yet are held (_held_ticks): the race record (deal, salt) is stored before
        # the race_start carrying its commitment can reach anyone.
        self._stored_races: dict[str, int | None] = {}
        self._queued_races: dict[str, int | None] = {}
        self._held_ticks: set[str] = set()
        self._append_queue: list[PersistMove] = []  # waiting for the next batch
        self._append_backlog = 0  # moves queued, backing off or in flight to the store
        self._append_batches = 0  # batches in flight
        self._batch_starts: dict[int, float] = {}  # id of each batch in flight -> when it was sent
        self._batch_ids = itertools.count()
        self._append_flush_scheduled = False
        self._turn_moves = 0  # moves that arrived in this turn of the event loop (_end_turn resets it)
        self._big_turns = 0  # turns in a row, back to back, with at least busy_turn_moves moves each
        self._turn_ended = 0.0  # when the last turn with moves ended (time.monotonic)
        self._player_saves: dict[str, SavePlayer] = {}
        self._player_workers: dict[str, asyncio.Task[None]] = {}
        self.deal_finder = DealFinder(self.config.winnable)  # its worker process starts with the first search
        self._searches: set[asyncio.Task[None]] = set()
        self.limits = AddressLimits(self.config.limits)
        self.answers = AnswerBudgets(self.limits)
        self._buffer_watch: asyncio.Task[None] | None = None
        # The store as last seen: None (not asked yet), True, or False with when it went.
        self.store_ok: bool | None = None
        self._store_down_since: float | None = None
        self._store_watch: asyncio.Task[None] | None = None
        self._metrics_socket: asyncio.Server | None = None  # --workers: this worker's own metrics, for its siblings
        self._metrics_inode: int | None = None  # ... and its file's inode (a reload's next worker replaces it)
        # Several nodes on one Redis (CoreConfig.shared_rooms): the pub/sub link, started by start().
        self.nodes: NodeLink | None = None
        self._room_epochs: dict[str, int] = {}  # refreshes of each room from the store
        self._refreshing: set[str] = set()  # rooms with a refresh waiting in their queue
        # Room commands handled here whose change no save has yet committed: (number, the event), by
        # room. A refresh handles them again on the store's copy (RoomChanged.replay): never lost.
        self._uncommitted: dict[str, list[tuple[int, ClientEvent]]] = {}
        self._commands = 0
        self._sweeper: asyncio.Task[None] | None = None
        status = StoreStatus(self._ping_store, self._store_seen, self.config.probes.store_status_ttl_s)
        self.probes = Probes(self.config.probes, status, self._health_body, self._metrics_body, self.config.reuse_port)
        self.metrics: Metrics | None = self._make_metrics() if self.config.metrics else None
        if self.config.metrics and self.metrics is None:
            self.probes.metrics_off = "unavailable: no prometheus_client installed"

    # ================================================================ metrics

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

    def metrics_snapshot(self) -> Snapshot:
        """The levels /metrics reports, read when scraped (docs/scaling.md, "Metrics")."""
        from server.metrics import Snapshot

        kinds = dict.fromkeys(("anonymous", "lobby", p.RACER, p.SPECTATOR), 0)
        for conn in self._conns.values():
            kinds[self._conn_kind(conn)] += 1
        phases = dict.fromkeys((p.LOBBY, p.DEALING, p.COUNTDOWN, p.RACING, p.RESULTS), 0)
        for room in self.core.rooms.values():
            phases[room.phase] = phases.get(room.phase, 0) + 1
        queues = {
            "move_writes": self._append_backlog,
            "move_batches_in_flight": self._append_batches,
            "room_writes": sum(len(ops) for ops in self._room_ops.values()),
            "player_writes": len(self._player_saves),
            "solver_waiting": len(self.deal_finder.queued()),
            "solver_running": len(self.deal_finder.running()),
        }
        stats = self.stats
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
                "probe_rate": self.probes.refused,
                "metrics_allow": self.probes.forbidden,
                "answer_bytes": self.answers.refused,
            },
            connections_total=stats.connections,
            pubsub_published=0 if self.nodes is None else self.nodes.published,
            pubsub_received=0 if self.nodes is None else self.nodes.received,
            pubsub_gaps=0 if self.nodes is None else self.nodes.missed,
        )

    def _conn_kind(self, conn: Conn) -> str:
        """anonymous (no hello yet), lobby (in no room), racer or spectator (its role in its room)."""
        player = self.core.players.get(conn.player) if conn.player is not None else None
        if player is None:
            return "anonymous"
        room = self.core.rooms.get(player.room) if player.room is not None else None
        member = room.members.get(player.player_id) if room is not None else None
        if member is None:
            return "lobby"
        return p.SPECTATOR if member.role == p.SPECTATOR else p.RACER

    def _count_answer(self, conn: Conn, message: p.MoveOk | p.MoveRejected | p.Error) -> None:
        """A move answered to the connection that sent it: refused, by code, or a duplicate's move_ok."""
        assert self.metrics is not None
        received = conn.moves_in.pop(message.id, None) if message.id is not None else None
        if isinstance(message, p.MoveOk):
            self.metrics.accepted(None if received is None else time.perf_counter() - received, message.duplicate)
        else:
            self.metrics.rejected(message.code)

    def _count_ok(self, players: tuple[str, ...], message: p.MoveOk) -> None:
        """A move stored and acknowledged (to every connection of its racer): its latency from
        its receipt on whichever of them sent it."""
        assert self.metrics is not None
        received: float | None = None
        for player in players:
            for cid in self._player_conns.get(player, ()):
                conn = self._conns.get(cid)
                sent = conn.moves_in.pop(message.id, None) if conn is not None else None
                if sent is not None:
                    received = sent
        self.metrics.accepted(None if received is None else time.perf_counter() - received, message.duplicate)

    # ================================================================ lifecycle

    async def start(self) -> None:
        if self.config.core.shared_rooms:
            await self._start_node()
        ssl_context: ssl.SSLContext | None = None
        if self.config.tls_cert:
            ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ssl_context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        self._server = await serve(
            self._handler,
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
        await self.probes.start()
        self._buffer_watch = asyncio.ensure_future(self._watch_buffers())
        self._store_watch = asyncio.ensure_future(self._watch_store())
        own = self._worker_socket(self.config.worker_slot)
        if own is not None:
            if self.metrics is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(own)  # left by this slot's previous worker (killed, or being replaced)
                self._metrics_socket = await asyncio.start_unix_server(self._serve_own_metrics, own)
            self._mark_ready()
        log_event(
            logging.INFO,
            "server_started",
            host=self.config.host,
            port=self.port,
            store=self.store_name,
            metrics_port=self.probes.port,
            tls=ssl_context is not None,
            node=None if self.nodes is None else self.nodes.node_id,
        )

    async def _start_node(self) -> None:
        from server.nodes import NodeLink
        from server.store.redis import RedisStore

        if not isinstance(self.store, RedisStore):
            raise ValueError("several nodes (shared rooms) need the Redis store (one Redis or a Redis Cluster)")
        self.nodes = NodeLink(
            self.store,
            self._on_node_messages,
            self._on_nodes_missed,
            node_id=self.core.config.node_id or None,
            on_lag=None if self.metrics is None else self.metrics.pubsub_lag.observe,
        )
        await self.nodes.start()
        self._sweeper = asyncio.ensure_future(self._sweep_channels())

    async def _sweep_channels(self) -> None:
        """Every second: members of the rooms held here whose node stopped renewing its liveness are
        away (NodesGone); every ``node_sweep_s``: channels of rooms no longer held are dropped."""
        swept = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if self.nodes is None:
                continue
            others = self.core.remote_nodes()
            gone = await self.nodes.gone(others) if others else set()
            if gone:
                log_event(logging.WARNING, "nodes_gone", nodes=sorted(gone))
                self._dispatch(NodesGone(frozenset(gone), now_ms()))
            if time.monotonic() - swept >= self.config.node_sweep_s:
                swept = time.monotonic()
                await self.nodes.retain(self.core.holds)

    @property
    def metrics_port(self) -> int | None:
        """The metrics listener's port (None: none)."""
        return self.probes.port

    @property
    def port(self) -> int:
        assert self._server is not None
        for sock in self._server.sockets:
            return int(sock.getsockname()[1])
        raise RuntimeError("the server is not listening")

    async def _ping_store(self) -> str | None:
        """None when the store answers a ping, else the cause."""
        try:
            await asyncio.wait_for(self.store.ping(), 2.0)
        except (StoreUnavailable, TimeoutError, OSError) as exc:
            return str(exc) or type(exc).__name__
        return None

    def _store_seen(self, cause: str | None) -> None:
        """Log the store's transitions once each: store_unreachable (with the cause) and
        store_reachable (with how long it was away); a watcher retries while it is away."""
        if cause is None:
            if self.store_ok is False:
                down = time.monotonic() - (self._store_down_since or time.monotonic())
                log_event(logging.INFO, "store_reachable", store=self.store_name, down_s=round(down, 1))
            self.store_ok = True
            self._store_down_since = None
            return
        if self.store_ok is not False:
            self._store_down_since = time.monotonic()
            log_event(
                logging.ERROR,
                "store_unreachable",
                store=self.store_name,
                cause=cause,
                action="clients get store_unavailable; retrying with back-off",
            )
        self.store_ok = False
        if not self._closing and (self._store_watch is None or self._store_watch.done()):
            self._store_watch = asyncio.ensure_future(self._watch_store())

    async def _watch_store(self) -> None:
        """Ask the store until it answers: at start-up, and again whenever it is found away
        (back-off from 0.5 s doubling up to 30 s)."""
        backoff = Backoff(first=0.5, cap=30.0)
        while not self._closing:
            cause = await self._ping_store()
            self._store_seen(cause)
            if cause is None:
                return
            await backoff.wait()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def stop(self, reason: str = "the server is shutting down") -> None:
        """Tell every client, close every connection (1001), flush the store writes."""
        if self._closing:
            return
        self._closing = True
        log_event(logging.INFO, "server_stopping", reason=reason, connections=len(self._conns))
        frame = p.encode(p.Shutdown(reason=reason, retry_after_ms=self.config.shutdown_retry_ms))
        broadcast([c.ws for c in self._conns.values()], frame)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._leaderboard_timer is not None:
            self._leaderboard_timer.cancel()
            self._leaderboard_timer = None
        if self._buffer_watch is not None:
            self._buffer_watch.cancel()
        if self._store_watch is not None:
            self._store_watch.cancel()
        for search in self._searches:
            search.cancel()  # a room still dealing is stored so: a restarted server searches again
        self.deal_finder.shutdown()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.probes.stop()
        if self._metrics_socket is not None:
            self._metrics_socket.close()
            own = self._worker_socket(self.config.worker_slot)
            # Not when the slot's next worker (a reload) has taken the path over since.
            if own is not None and self._metrics_inode == _inode(own):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(own)
        await self.flush(self.config.flush_timeout_s)
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.nodes is not None:
            await self.nodes.close()
        log_event(logging.INFO, "server_stopped")

    async def flush(self, timeout: float) -> None:
        """Wait for pending store writes (moves, rooms, players)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [t for t in (*self._tasks, *self._room_workers.values(), *self._player_workers.values())]
            if not pending:
                if not self._append_queue:
                    return
                await asyncio.sleep(0.01)  # a batch is about to be sent (_flush_appends is scheduled)
                continue
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        log_event(logging.WARNING, "flush_timeout", rooms=list(self._room_workers))

    # ================================================================ HTTP

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        # The query is ignored: clients name their room in it (?room=CODE) for a balancer to hash
        # on (docs/scaling.md, "Room affinity"); any path takes the WebSocket.
        path = request.path.split("?", 1)[0]
        if path in Probes.PATHS:
            return await self.probes.public(connection, path)
        if self._closing:
            return connection.respond(503, "the server is shutting down\n")
        if len(self._conns) >= self.config.max_connections:
            return connection.respond(503, "the server is full: try again later\n")
        address = address_key(connection.remote_address)
        if self.limits.connection_refused(address):
            self.stats.refused_per_address += 1
            cap = self.config.limits.conns_per_address
            log_event(logging.WARNING, "connection_refused", address=address, why="per_address", limit=cap)
            return connection.respond(
                429, f"too many connections from your address (limit {cap}): close some and try again\n"
            )
        # Counted from here until the TCP connection is gone, whatever happens to the handshake.
        self.limits.opened(address)
        connection.connection_lost_waiter.add_done_callback(lambda _: self.limits.closed(address))
        if isinstance(connection, PlotConnection):
            connection.address = address
            connection.bucket = TokenBucket(self.config.rate_per_s, self.config.burst)
            connection.stats = self.stats
        return None

    def _mark_ready(self) -> None:
        """``--workers``: tell the supervisor this worker listens (a reload waits for it before it
        stops the worker it replaces): its pid in ``worker-SLOT.ready``, written whole (renamed)."""
        own = self._worker_socket(self.config.worker_slot)
        if own is None:
            return
        self._metrics_inode = _inode(own)
        ready = own.removesuffix(".sock") + ".ready"
        with open(ready + ".tmp", "w") as file:
            file.write(str(os.getpid()))
        os.replace(ready + ".tmp", ready)

    def _worker_socket(self, slot: int | None) -> str | None:
        """Where worker ``slot`` of ``plot-server --workers`` serves its own metrics (None: no workers)."""
        if self.config.workers_dir is None or slot is None:
            return None
        return os.path.join(self.config.workers_dir, f"worker-{slot}.sock")

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

    def _health_body(self, cause: str | None, detailed: bool) -> dict[str, object]:
        """/healthz: the status a probe needs; ``detailed`` (the metrics listener) adds what only an
        operator should see."""
        down = self._store_down_since
        body: dict[str, object] = {
            "status": "ok" if cause is None else "unavailable",
            "store_ok": cause is None,
            "store_down_s": None if down is None else round(time.monotonic() - down, 1),
            "protocol": p.PROTOCOL_VERSION,
        }
        if detailed:
            body |= {
                "store": self.store_name,
                "connections": len(self._conns),
                "rooms": len(self.core.rooms),
                "node": None if self.nodes is None else self.nodes.node_id,  # several nodes: which one answered
                "pid": os.getpid(),
                "worker": self.config.worker_slot,
            }
        return body

    # ================================================================ connections

    async def _handler(self, ws: ServerConnection) -> None:
        bucket = ws.bucket if isinstance(ws, PlotConnection) else None
        address = ws.address if isinstance(ws, PlotConnection) else "local"
        bucket = bucket or TokenBucket(self.config.rate_per_s, self.config.burst)
        conn = Conn(next(self._ids), ws, bucket, address, answers=self.answers.for_connection())
        deadline = asyncio.get_running_loop().call_later(self.config.limits.hello_timeout_s, self._hello_overdue, conn)
        if self.config.socket_sndbuf is not None:
            sock = ws.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_sndbuf)
        self._conns[conn.id] = conn
        self.stats.connections += 1
        self._dispatch(Connected(conn.id, now_ms()))
        plot_ws = ws if isinstance(ws, PlotConnection) else None
        if plot_ws is not None:
            plot_ws.on_binary = lambda data: self._on_message(conn, data)
        try:
            async for frame in ws:  # what did not come through on_binary, in order
                if plot_ws is not None:
                    plot_ws.queued_messages -= 1
                self._on_message(conn, frame)
        except ConnectionClosed:
            pass
        finally:
            if plot_ws is not None:
                plot_ws.on_binary = None
            deadline.cancel()
            self._conns.pop(conn.id, None)
            self._unbind(conn)
            self._dispatch(Disconnected(conn.id, now_ms()))

    def _on_message(self, conn: Conn, frame: str | bytes) -> None:
        """One message from a connection: counted against its rate, then handled. Past the rate it
        is answered rate_limited and closed (1008); what comes meanwhile is read and dropped, so the
        close handshake is never stuck behind a full queue."""
        if conn.limited:
            return
        self.stats.frames_in += 1
        if not conn.bucket.take():
            conn.limited = True
            self.stats.rate_limited += 1
            limit = f"{self.config.rate_per_s:g} messages per second"
            self._reply(conn, p.Error(code=p.RATE_LIMITED, message=f"too many messages (limit {limit})"))
            log_event(logging.WARNING, "rate_limited", conn=conn.id, player=conn.player)
            self._spawn(self._close(conn, 1008, "rate limit exceeded"))
            return
        self._on_frame(conn, frame)

    def _hello_overdue(self, conn: Conn) -> None:
        """The hello deadline: a connection that has said nothing useful gives its slot back."""
        if conn.hello_seen or conn.cut or conn.id not in self._conns:
            return
        self.stats.hello_timeouts += 1
        timeout = self.config.limits.hello_timeout_s
        log_event(logging.INFO, "hello_timeout", conn=conn.id, address=conn.address, seconds=timeout)
        self._spawn(self._close(conn, 1008, f"no hello within {timeout:g} s"))

    async def _close(self, conn: Conn, code: int, reason: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await conn.ws.close(code, reason)

    def _address_limited(self, conn: Conn, msg: p.ClientMessage) -> p.Error | None:
        """The per-address budgets (server/limits.py): a hello, a room creation or a join past
        its address's budget is answered rate_limited with a retry hint, and never reaches the core."""
        limits = self.config.limits
        if isinstance(msg, p.Hello):
            wait, what, per = self.limits.take_hello(conn.address), "hellos", limits.hellos_per_minute
        elif isinstance(msg, p.CreateRoom):
            wait, what, per = self.limits.take_room(conn.address), "rooms created", limits.rooms_per_minute
        elif isinstance(msg, p.Join) and conn.player is not None:  # before welcome: wrong_phase, no guess
            wait, what, per = self.limits.take_join(conn.address), "failed joins", limits.join_failures_per_minute
        else:
            return None
        if wait == 0.0:
            return None
        self.stats.address_limited[p.message_type(msg)] += 1
        retry_ms = max(1, round(wait * 1000))
        log_event(logging.WARNING, "address_limited", conn=conn.id, address=conn.address, what=what)
        return p.Error(
            code=p.RATE_LIMITED,
            message=f"too many {what} from your address (limit {per} a minute): "
            f"try again in {wait:.1f} s; retry_ms={retry_ms}",
            ref=p.message_type(msg),
        )

    def _member_of(self, conn: Conn, code: str) -> bool:
        room = self.core.rooms.get(code)
        return room is not None and conn.player is not None and conn.player in room.members

    def _on_frame(self, conn: Conn, frame: str | bytes) -> None:
        msg: p.ClientMessage | None = None
        try:
            if isinstance(frame, str):
                raise p.ProtocolError(p.MALFORMED, "messages are binary MessagePack frames, not text")
            msg = p.decode_client(frame)
            if isinstance(msg, p.Move):  # most frames: none of the checks below concerns a move
                if self.metrics is not None:
                    if len(conn.moves_in) >= 1024:  # answers that never came (cannot happen; never grows for ever)
                        conn.moves_in.clear()
                    conn.moves_in[msg.id] = time.perf_counter()
                if conn.player is not None:
                    if self.config.busy_turn_moves:  # the loop rule is off by default: no count then
                        self._count_turn_move()
                    cause = self._busy()
                    if cause is not None:
                        # Degrade, never collapse: a fast explicit answer instead of a queue that grows
                        # into time-outs and reloads. Nothing reached the core: the move was not played.
                        self._reply(conn, self._busy_answer(msg.id, cause))
                        return
                self._dispatch(ClientEvent(conn.id, msg, now_ms()))
                return
            if isinstance(msg, p.Hello):
                conn.hello_seen = True
            limited = self.answers.refusal(conn, msg) or self._address_limited(conn, msg)
            if limited is not None:
                self._reply(conn, limited)
                return
            if isinstance(msg, p.Hello):
                self._dispatch(HelloEvent(conn.id, msg, now_ms()))
                return
            self._dispatch(ClientEvent(conn.id, msg, now_ms()))
            if isinstance(msg, p.Join) and conn.player is not None:
                if self._member_of(conn, msg.code):
                    self.limits.join_succeeded(conn.address)  # only failed joins spend the budget
                elif not self.core.has_room(msg.code):
                    conn.join_pending = msg.code  # decided once the room is loaded (RoomLoaded)
        except p.ProtocolError as exc:
            self._reply(conn, exc.to_message())
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=conn.id, error=str(exc))
            ref = None if msg is None else p.message_type(msg)
            self._reply(conn, p.Error(code=p.STORE_UNAVAILABLE, message="the store did not answer: retry", ref=ref))
        except Exception:
            ref = None if msg is None else p.message_type(msg)
            log.exception("frame_failed", extra={"fields": {"conn": conn.id, "type": ref}})
            self._reply(conn, p.Error(code=p.INTERNAL, message="the server failed on this message", ref=ref))

    @staticmethod
    def _decode_entries(code: str, raw: list[bytes]) -> list[LogEntry]:
        entries: list[LogEntry] = []
        for item in raw:
            try:
                entries.append(decode_entry(item))
            except msgspec.DecodeError:
                log_event(logging.ERROR, "log_entry_unreadable", room=code)
                entries.append(LogEntry(move="?", t_ms=0))  # keeps the log length; the replay skips it
        return entries

    # ================================================================ core glue

    def _dispatch(self, event: Event) -> None:
        try:
            effects = self.core.handle(event)
        except Exception:
            log.exception("core_failed", extra={"fields": {"event": type(event).__name__}})
            conn = getattr(event, "conn", None)
            if isinstance(event, ClientEvent | HelloEvent) and isinstance(conn, int) and conn in self._conns:
                self._reply(self._conns[conn], p.Error(code=p.INTERNAL, message="the server failed on this message"))
            return
        if self.nodes is not None and isinstance(event, ClientEvent):
            self._note_command(event, effects)
        with self.answers.charging(self.answers.payers(event, self._conns)):
            self._execute(effects)
        if isinstance(event, RoomLoaded):
            for conn in self._conns.values():
                if conn.join_pending == event.code:
                    conn.join_pending = None
                    if self._member_of(conn, event.code):
                        self.limits.join_succeeded(conn.address)

    def _note_command(self, event: ClientEvent, effects: list[Effect]) -> None:
        """Several nodes: remember a room command until a save of its room commits it (a join that
        waits for its room to load, until the save that follows the load)."""
        if isinstance(event.msg, p.Move | p.Ping | p.ListRooms | p.CreateRoom):
            return
        codes = {e.code for e in effects if isinstance(e, SaveRoom)}
        if isinstance(event.msg, p.Join):
            codes.update(e.code for e in effects if isinstance(e, LoadRoom))
        if codes:
            self._commands += 1
            for code in codes:
                self._uncommitted.setdefault(code, []).append((self._commands, event))

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                if isinstance(effect.message, p.Results):
                    self._send_results(effect.players, effect.message)
                elif self.fanout.reaches(effect.players):  # never encoded for nobody (members on other nodes)
                    self.fanout.publish(None, effect.players, p.encode(effect.message), effect.droppable)
                if self.metrics is not None and isinstance(effect.message, p.MoveOk):
                    self._count_ok(effect.players, effect.message)  # to all the racer's connections
            elif isinstance(effect, Reply):
                target = self._conns.get(effect.conn)
                if target is None:
                    continue
                if isinstance(effect.message, p.Results):
                    if target.results_seen == effect.message.commitment:
                        continue  # it has them (a read-back's fresh snapshot sends them again)
                    target.results_seen = effect.message.commitment
                self._reply(target, effect.message)
            elif isinstance(effect, PersistMove):
                self._enqueue_append(effect)
            elif isinstance(effect, Wake):
                self._wake(effect.code, effect.at_ms)
            elif isinstance(effect, WakeLeaderboards):
                self._wake_leaderboards(effect.at_ms)
            elif isinstance(effect, SaveRoom):
                self._queued_races[effect.code] = open_race_of(effect.record)
                epoch = self._room_epochs.get(effect.code, 0)
                self._room_op(effect.code, "save", QueuedSave(effect.record, epoch, self._commands, effect.then))
            elif isinstance(effect, Note):
                log_event(NOTE_LEVELS[effect.level], effect.event, **effect.fields)
            elif isinstance(effect, Bind):
                bound = self._conns.get(effect.conn)
                if bound is not None:
                    bound.player = effect.player_id
                    self._player_conns.setdefault(effect.player_id, set()).add(effect.conn)
            elif isinstance(effect, CloseConnection):
                self._close_conn(effect)
            elif isinstance(effect, SavePlayer):
                self._save_player(effect)
            elif isinstance(effect, RegisterPlayer):
                self._spawn(self._register(effect))
            elif isinstance(effect, CreateRoomRecord):
                self._spawn(self._create_room(effect))
            elif isinstance(effect, SetListed):
                self._room_op(effect.code, "listed", effect.listed)
            elif isinstance(effect, ExpireRoom):
                # A room still live in this process never expires in the store: its expiry starts
                # when it finishes (results) or closes. A TTL running under a live race made the
                # room vanish mid-race, and every later append with it.
                self._room_op(effect.code, "expire", None if self._live(effect.code) else effect.seconds)
            elif isinstance(effect, ReloadLog):
                self._spawn(self._reload(effect))
            elif isinstance(effect, FindDeal):
                search = asyncio.ensure_future(self._find_deal(effect))
                self._searches.add(search)
                search.add_done_callback(self._searches.discard)
            elif isinstance(effect, CheckBlocked):  # its own worker: never behind a deal search
                check = asyncio.ensure_future(self._check_blocked(effect))
                self._searches.add(check)  # cancelled at shutdown like a search: a restart asks again
                check.add_done_callback(self._searches.discard)
            elif isinstance(effect, LookupToken):
                self._spawn(self._lookup_token(effect))
            elif isinstance(effect, LoadRoom):
                self._spawn(self._load_room(effect))
            elif isinstance(effect, ListRooms):
                self._spawn(self._list_rooms(effect))
            elif isinstance(effect, DropRoom):
                timer = self._timers.pop(effect.code, None)
                if timer is not None:
                    timer.cancel()
                self._held_ticks.discard(effect.code)
                if effect.code not in self._room_workers:
                    self._forget_room_store_state(effect.code)
            else:
                assert_never(effect)

    def _close_conn(self, effect: CloseConnection) -> None:
        """Unbind the connection (no fan-out reaches it any more), then close it after what was
        already written to it (the frames before the close frame are delivered)."""
        conn = self._conns.get(effect.conn)
        if conn is None:
            return
        self._unbind(conn)
        self._spawn(self._close_ws(conn.ws, effect.code, effect.reason))

    def _unbind(self, conn: Conn) -> None:
        """The connection no longer speaks for its player: fan-out to the player skips it."""
        if conn.player is None:
            return
        conns = self._player_conns.get(conn.player)
        if conns is not None:
            conns.discard(conn.id)
            if not conns:
                del self._player_conns[conn.player]
        conn.player = None

    @staticmethod
    async def _close_ws(ws: ServerConnection, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await ws.close(code, reason)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task_failed", exc_info=task.exception())

    def _wake(self, code: str, at_ms: int | None) -> None:
        timer = self._timers.pop(code, None)
        if timer is not None:
            timer.cancel()
        if at_ms is None or self._closing:
            return
        delay = max(0.0, (at_ms - now_ms()) / 1000)
        self._timers[code] = asyncio.get_running_loop().call_later(delay, self._on_timer, code)

    def _on_timer(self, code: str) -> None:
        self._timers.pop(code, None)
        if self._race_unstored(code):
            self._held_ticks.add(code)  # dispatched once the race record is stored (_room_worker)
            return
        self._dispatch(Tick(code, now_ms()))

    def _wake_leaderboards(self, at_ms: int | None) -> None:
        """One timer for every room's leaderboard (docs/architecture.md, "Leaderboards")."""
        if self._leaderboard_timer is not None:
            self._leaderboard_timer.cancel()
            self._leaderboard_timer = None
        if at_ms is None or self._closing:
            return
        delay = max(0.0, (at_ms - now_ms()) / 1000)
        self._leaderboard_timer = asyncio.get_running_loop().call_later(delay, self._on_leaderboard_timer)

    def _on_leaderboard_timer(self) -> None:
        self._leaderboard_timer = None
        self._dispatch(LeaderboardTick(now_ms()))

    def _race_unstored(self, code: str) -> bool:
        """A save waiting in the room's queue opens a race the store does not have yet."""
        queued = self._queued_races.get(code)
        return queued is not None and queued != self._stored_races.get(code)

    def _live(self, code: str) -> bool:
        """This process holds the room and it is not showing results (lobby, dealing, countdown, race)."""
        summary = self.core.summary(code)
        return summary is not None and summary.phase != p.RESULTS

    def _forget_room_store_state(self, code: str) -> None:
        self._room_epochs.pop(code, None)
        self._uncommitted.pop(code, None)
        self._store_versions.pop(code, None)
        self._uncertain_saves.pop(code, None)
        self._save_conflicts.discard(code)
        self._stored_races.pop(code, None)
        self._queued_races.pop(code, None)

    # ================================================================ frames out

    def _conns_of(self, player: str) -> set[int]:
        return self._player_conns.get(player, set())

    def _send_results(self, players: tuple[str, ...], results: p.Results) -> None:
        """A race's results, once per connection: several nodes read a room back after every
        change another node makes, and each read-back sends its local members a fresh snapshot,
        in the results phase the results again (a spectator got the same results twice)."""
        targets = [
            conn
            for player in players
            for cid in self._conns_of(player)
            if (conn := self._conns.get(cid)) is not None and conn.results_seen != results.commitment
        ]
        for conn in targets:
            conn.results_seen = results.commitment
        if targets:
            self._deliver([conn.id for conn in targets], p.encode(results), False)

    def _reply(self, conn: Conn, message: p.ServerMessage) -> None:
        if isinstance(message, p.Error):
            self.stats.errors_sent += 1
        self._deliver([conn.id], p.encode(message), False)
        if self.metrics is not None and (
            isinstance(message, MOVE_ANSWERS) or (isinstance(message, p.Error) and message.id is not None)
        ):
            self._count_answer(conn, message)

    def _deliver(self, conn_ids: list[int], frame: bytes, droppable: bool) -> None:
        """Write ``frame`` to these connections without waiting for any of them (``broadcast``).

        broadcast() has no backpressure, so the buffers are checked here: a connection over the
        soft limit misses droppable (progress) frames, the next one replaces them; one over the
        hard limit, or over the soft limit for too long, cannot keep up and is cut."""
        targets: list[ServerConnection] = []
        clock = time.monotonic()
        for cid in conn_ids:
            conn = self._conns.get(cid)
            if conn is None or conn.cut:
                continue
            state = self._buffer_state(conn, clock)
            if state == "cut":
                continue
            if state == "over" and droppable:
                self.stats.dropped_frames += 1
                continue
            targets.append(conn.ws)
        if targets:
            self.stats.frames_out += len(targets)
            self.answers.sent(len(frame) * len(targets))
            broadcast(targets, frame)

    def _buffer_state(self, conn: Conn, clock: float) -> str:
        """ "ok"; "over" the soft limit (progress frames are skipped); or "cut": over the hard
        limit, or over the soft one for longer than slow_grace_s (the connection is aborted)."""
        buffered = conn.ws.transport.get_write_buffer_size()
        if buffered <= self.config.write_soft_limit:
            conn.over_since = None
            return "ok"
        if conn.over_since is None:
            conn.over_since = clock
        if buffered > self.config.write_hard_limit or clock - conn.over_since > self.config.slow_grace_s:
            self._cut(conn, buffered)
            return "cut"
        return "over"

    async def _watch_buffers(self) -> None:
        """Every connection's write buffer on a timer, not only when a game message goes out:
        a client that never reads while the server answers it (pongs, errors) is cut too."""
        while True:
            await asyncio.sleep(self.config.buffer_check_s)
            clock = time.monotonic()
            for conn in list(self._conns.values()):
                if not conn.cut:
                    self._buffer_state(conn, clock)
            self.limits.prune()

    def _cut(self, conn: Conn, buffered: int) -> None:
        conn.cut = True
        self.stats.slow_disconnects += 1
        log_event(logging.WARNING, "too_slow", conn=conn.id, player=conn.player, buffered=buffered)
        conn.ws.transport.abort()

    # ================================================================ store work

    async def _lookup_token(self, effect: LookupToken) -> None:
        """The player a resume token names (its record), for the core's hello."""
        record: PlayerRecord | None = None
        try:
            player_id = await self.store.player_by_token(effect.token_hash)
            data = await self.store.get_player(player_id) if player_id is not None else None
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=effect.conn, op="lookup_token", error=str(exc))
            self._dispatch(TokenLooked(effect.conn, effect.token_hash, None, now_ms(), failed=True))
            return
        if data is not None:
            try:
                record = decode_player(data)
            except msgspec.DecodeError:
                log_event(logging.ERROR, "player_record_unreadable", player=player_id)
        self._dispatch(TokenLooked(effect.conn, effect.token_hash, record, now_ms()))

    async def _load_room(self, effect: LoadRoom) -> None:
        """A room's record and its current race's move logs, for the core (retried with back-off
        while the store does not answer, unless ``once``)."""
        code = effect.code
        if self.nodes is not None:
            await self.nodes.subscribe(code)  # before the read: no change committed after it is missed
        delay = 0.05
        while True:
            try:
                loaded = await self.read_room(code)  # behind this process's own pending writes
                record: RoomRecord | None = None
                version: int | None = None
                logs: dict[str, list[LogEntry]] = {}
                if loaded is not None:
                    data, version = loaded
                    try:
                        record = decode_room(data)
                    except msgspec.DecodeError:
                        log_event(logging.ERROR, "room_record_unreadable", room=code)
                logs = await self._race_logs(code, record)
            except StoreUnavailable as exc:
                log_event(logging.WARNING, "store_unavailable", room=code, op="load_room", error=str(exc))
                if effect.once or self._closing:
                    self._dispatch(RoomLoaded(code, None, {}, now_ms(), failed=True))
                    return
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            if record is not None and not self.core.has_room(code) and code not in self._room_workers:
                self._store_versions[code] = version
                self._stored_races[code] = open_race_of(record)
                self._save_conflicts.discard(code)
            self._dispatch(RoomLoaded(code, record, logs, now_ms()))
            return

    async def _race_logs(
        self, code: str, record: RoomRecord | None, starts: dict[str, int] | None = None
    ) -> dict[str, list[LogEntry]]:
        """The move logs of the room's current race (none for a room gone, closed or between races);
        ``starts``: racers whose log is read from that index on."""
        logs: dict[str, list[LogEntry]] = {}
        if record is not None and record.race is not None and record.members and not record.closed:
            wanted = [(r.player_id, 0 if starts is None else starts.get(r.player_id, 0)) for r in record.race.racers]
            for (player_id, _start), raw in zip(
                wanted, await self.store.load_logs(code, record.race.number, wanted), strict=True
            ):
                logs[player_id] = self._decode_entries(code, raw)
        return logs

    def _known_lengths(self, code: str, record: RoomRecord | None) -> dict[str, int]:
        """Where a read-back may start reading each racer's log: the length this node's copy of the
        same race holds, for racers whose copy lines up with the log (an unreadable stored entry
        makes positions differ: read it all). Nothing with ``readback="full"``, for a new race, or
        a room not held here."""
        copy = self.core.rooms.get(code)
        if (
            self.config.readback != "incremental"
            or copy is None
            or copy.race is None
            or record is None
            or record.race is None
            or record.race.number != copy.race.record.number
        ):
            return {}
        return {
            pid: racer.log_length
            for pid, racer in copy.race.racers.items()
            if racer.log_length and len(racer.game.entries) == len(racer.times) == racer.log_length
        }

    # ================================================================ several nodes

    def _on_node_messages(self, batch: list[tuple[str, RoomVersion | Appended]]) -> None:
        """Other nodes' changes to rooms, as one read of the subscription brought them: a new version
        (read the room back), or stored moves. A racer's entries that follow on from each other make
        one RemoteMoves, and the read's RemoteMoves go to the core together, as one RemoteBatch (one
        event, one deadline recompute and wake-up per room, for them all)."""
        from server.nodes import RoomVersion

        runs: dict[tuple[str, int, str], list[tuple[int, list[LogEntry]]]] = {}
        for code, message in batch:
            if not self.core.has_room(code):
                continue
            if isinstance(message, RoomVersion):
                known = self._store_versions.get(code)
                # Version 1 of a room held here is never news: another node stored it again after it
                # vanished (a room's creation is not announced), its versions counting from 1 again.
                if known is None or known < message.version or (message.version == 1 and known != 1):
                    self._request_refresh(code)
                continue
            try:
                entry = decode_entry(message.entry)
            except msgspec.DecodeError:
                log_event(logging.ERROR, "log_entry_unreadable", room=code)
                continue
            racer_runs = runs.setdefault((code, message.race, message.player), [])
            if racer_runs and racer_runs[-1][0] + len(racer_runs[-1][1]) == message.start:
                racer_runs[-1][1].append(entry)
            else:
                racer_runs.append((message.start, [entry]))
        now = now_ms()
        moves = tuple(
            RemoteMoves(code, race, player, start, entries, now)
            for (code, race, player), racer_runs in runs.items()
            for start, entries in racer_runs
        )
        if len(moves) == 1:
            self._dispatch(moves[0])
        elif moves:  # one core event for the whole read (docs/scaling.md, "Reading the subscription")
            self._dispatch(RemoteBatch(moves, now))

    def _on_nodes_missed(self, codes: Collection[str]) -> None:
        """Pub/sub messages of these rooms may have been lost (a gap or a dropped connection on
        their shard): those held here are read back from the store."""
        for code in codes:
            if self.core.has_room(code):
                self._request_refresh(code)

    def _request_refresh(self, code: str, first: bool = False) -> None:
        """Read the room back from the store (in its queue: after this node's own pending writes,
        or ``first``: before the saves queued behind a save that lost its compare-and-set)."""
        if code in self._refreshing:
            return
        self._refreshing.add(code)
        if first:
            self._room_ops.setdefault(code, deque()).appendleft(("refresh", None))
            if code not in self._room_workers:
                self._room_workers[code] = asyncio.ensure_future(self._room_worker(code))
        else:
            self._room_op(code, "refresh", None)

    async def _refresh_room(self, code: str) -> None:
        """The room's record and logs as the store has them replace this node's copy (RoomChanged).
        Saves the core made before this were made on the old copy: they are dropped (the epoch)."""
        loaded = await self.store.load_room(code)
        record: RoomRecord | None = None
        if loaded is not None:
            try:
                record = decode_room(loaded[0])
            except msgspec.DecodeError:
                log_event(logging.ERROR, "room_record_unreadable", room=code)
                return
        starts = self._known_lengths(code, record)
        logs = await self._race_logs(code, record, starts)
        self._refreshing.discard(code)
        self._room_epochs[code] = self._room_epochs.get(code, 0) + 1
        if loaded is not None:
            self._store_versions[code] = loaded[1]
        race = None if record is None else open_race_of(record)
        self._stored_races[code] = race
        self._queued_races[code] = race
        self._uncertain_saves.pop(code, None)
        self._save_conflicts.discard(code)
        replay = tuple(event for _number, event in self._uncommitted.get(code, []))
        self._dispatch(RoomChanged(code, record, logs, now_ms(), replay, starts))

    async def _list_rooms(self, effect: ListRooms) -> None:
        """The listed rooms, for the core's room list: codes, and the records of those it does not hold."""
        codes: list[str] = []
        records: dict[str, RoomRecord] = {}
        try:
            for code in await self.store.listed_rooms():
                if len(codes) >= self.config.list_limit:
                    break
                if self.core.has_room(code):
                    codes.append(code)
                    continue
                loaded = await self.read_room(code)
                if loaded is None:
                    continue
                try:
                    record = decode_room(loaded[0])
                except msgspec.DecodeError:
                    continue
                if record.members and not record.closed:
                    codes.append(code)
                    records[code] = record
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=effect.conn, op="list_rooms", error=str(exc))
            self._dispatch(RoomsListed(effect.conn, [], {}, now_ms(), failed=True))
            return
        self._dispatch(RoomsListed(effect.conn, codes, records, now_ms()))

    def _busy(self) -> str | None:
        """Why a new move cannot be taken on now (None: it can): "store", the store's writes are
        backed up; "loop", this turn of the event loop has taken on its share of moves already."""
        limit = self.config.busy_turn_moves
        if limit and self._turn_moves > limit and self._big_turns >= self.config.busy_turn_streak:
            return "loop"
        if self._append_backlog >= self.config.append_backlog_limit:
            return "store"
        stall = self.config.append_stall_ms / 1000
        if self._batch_starts and time.monotonic() - min(self._batch_starts.values()) > stall:
            return "store"
        return None

    def _count_turn_move(self) -> None:
        """Count a move arriving in this turn of the loop. The count is closed by a callback
        queued behind every connection already woken in this turn. A count, not a clock: a
        process the machine deschedules sees its timers late without being behind on its own
        work; and a streak of big turns, not one: one big turn after a pause (a collection, a
        neighbour on the core) is worked through in a few milliseconds and refuses nothing."""
        self._turn_moves += 1
        if self._turn_moves == 1:
            if time.monotonic() - self._turn_ended > TURN_GAP_S:
                self._big_turns = 0  # the loop was idle in between: not a standing backlog
            asyncio.get_running_loop().call_soon(self._end_turn)

    def _end_turn(self) -> None:
        limit = self.config.busy_turn_moves
        self._big_turns = self._big_turns + 1 if limit and self._turn_moves >= limit else 0
        self._turn_moves = 0
        self._turn_ended = time.monotonic()

    def _busy_answer(self, move_id: int, cause: str) -> p.MoveRejected:
        """A busy answer with its retry hint. The hint is spread over half to one and a half times
        busy_retry_ms, so that the moves refused in one turn do not all come back in one turn."""
        retry = max(1, round(self.config.busy_retry_ms * (0.5 + random.random())))
        what = "writing moves" if cause == "store" else "taking on moves"
        why = f"the server is busy {what}: send it again (same id) in {retry} ms; retry_ms={retry}"
        return p.MoveRejected(id=move_id, code=p.BUSY, reason=why)

    def _enqueue_append(self, effect: PersistMove) -> None:
        """Queue a move for the next batch, at once: a retried write comes from the core only when
        its own back-off is over (the racer's RETRYING state, docs/architecture.md), so the shell
        adds no second delay of its own."""
        self._append_backlog += 1
        self._append_queue.append(effect)
        if not self._append_flush_scheduled:
            self._append_flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_appends)

    def _flush_appends(self) -> None:
        """Send what this event-loop turn queued: one batch (one store round trip) per
        ``append_batch_max`` moves, while fewer than ``append_batches_in_flight`` are out; the rest
        waits for a batch to come back, so batches grow with the load."""
        self._append_flush_scheduled = False
        size = self.config.append_batch_max
        while self._append_queue and self._append_batches < self.config.append_batches_in_flight:
            batch = self._append_queue[:size]
            del self._append_queue[:size]
            self._append_batches += 1
            self._spawn(self._write_batch(batch))

    async def _write_batch(self, batch: list[PersistMove]) -> None:
        """Append a batch, then hand the core each move's own outcome (each entry is its own
        compare-and-set: one failed entry fails only its own move)."""
        results: list[AppendResult | StoreUnavailable]
        batch_id = next(self._batch_ids)
        self._batch_starts[batch_id] = time.monotonic()
        try:
            requests = [self._append_request(e) for e in batch]
            results = await self.store.append_moves(requests)
        except StoreUnavailable as exc:
            results = [exc] * len(batch)
        except Exception as exc:  # a bug: nothing was written (requests are checked first); settle by reload
            log.exception("append_batch_failed", extra={"fields": {"moves": len(batch)}})
            results = [StoreUnavailable(repr(exc))] * len(batch)
        finally:
            del self._batch_starts[batch_id]
            self._append_batches -= 1
            self._append_backlog -= len(batch)
            if self._append_queue and not self._append_flush_scheduled:
                self._append_flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush_appends)
        if self.nodes is not None:  # the store published each stored entry's notice
            self.nodes.noticed(sum(1 for result in results if result is AppendResult.APPENDED))
        now = now_ms()  # one answer for the whole batch: the same moment for each of its moves
        for effect, result in zip(batch, results, strict=True):
            event: MovePersisted | MovePersistFailed
            if result is AppendResult.APPENDED:
                event = MovePersisted(effect.code, effect.race, effect.player_id, effect.expected_length + 1, now)
            elif isinstance(result, StoreUnavailable):
                log_event(
                    logging.WARNING, "append_failed", room=effect.code, player=effect.player_id, error=str(result)
                )
                event = MovePersistFailed(effect.code, effect.race, effect.player_id, "uncertain", now)
            elif result is AppendResult.LENGTH_MISMATCH:
                log_event(logging.WARNING, "append_conflict", room=effect.code, player=effect.player_id)
                event = MovePersistFailed(effect.code, effect.race, effect.player_id, "conflict", now)
            else:
                log_event(
                    logging.ERROR, "append_no_such_race", room=effect.code, race=effect.race, player=effect.player_id
                )
                event = MovePersistFailed(effect.code, effect.race, effect.player_id, "gone", now)
            self._dispatch(event)

    def _append_request(self, effect: PersistMove) -> AppendRequest:
        entry = encode_record(effect.entry)
        notice = b""
        if self.nodes is not None:  # several nodes: the other nodes hear of it from the append itself
            notice = self.nodes.appended_notice(effect.race, effect.player_id, effect.expected_length, entry)
        return AppendRequest(effect.code, effect.race, effect.player_id, effect.expected_length, entry, notice)

    async def _find_deal(self, effect: FindDeal) -> None:
        """A winnable deal for a room, from the worker process; the event loop only waits for it.

        One search per room in the finder's bounded queue: it is dropped, or stopped after its
        current candidate, once the room no longer waits for it (docs/solver.md, "The solver queue")."""
        if self.nodes is None:
            outcome = await self.deal_finder.find(effect.code, lambda: self._deal_wanted(effect))
        else:
            leased = await self._find_deal_leased(effect)
            if leased is None:
                return  # another node searched, and the room moved on (the answer would be stale)
            outcome = leased
        if outcome.busy:
            name, level = "deal_search_refused", logging.WARNING
        elif outcome.cancelled and outcome.candidates == 0:
            name, level = "deal_search_dropped", logging.INFO
        else:
            name = "deal_search_finished"
            level = logging.INFO if outcome.deal is not None or outcome.cancelled else logging.WARNING
        log_event(
            level,
            name,
            room=effect.code,
            race=effect.race,
            search=effect.search,
            found=outcome.deal is not None,
            seconds=round(outcome.seconds, 3),
            positions=outcome.positions,
            candidates=outcome.candidates,
            cancelled=outcome.cancelled,
            detail=outcome.detail,
        )
        self._dispatch(
            DealFound(effect.code, effect.race, effect.search, outcome.deal, now_ms(), outcome.detail, outcome.busy)
        )

    async def _find_deal_leased(self, effect: FindDeal) -> SearchOutcome | None:
        """Several nodes: every node holding a dealing room is asked for its deal, but one searches,
        the holder of the room's deal lease; the others wait for the room to move on (the holder
        commits the countdown, they read it back) or for the lease to lapse (the holder died or
        stopped: one of them takes over). None: this node did not search and the room moved on."""
        assert self.nodes is not None
        lease = self.nodes.deal_lease(effect.code, effect.race, self.config.deal_lease_s)
        waiting = False
        while True:
            if not self._deal_wanted(effect):
                return None
            if not await lease.take():
                if not waiting:
                    log_event(logging.INFO, "deal_search_waiting", room=effect.code, race=effect.race, why="leased")
                waiting = True
                await asyncio.sleep(self.config.deal_lease_s / 6)
                continue
            if waiting:
                log_event(logging.INFO, "deal_search_taken_over", room=effect.code, race=effect.race)
            lease.keep()
            try:
                outcome = await self.deal_finder.find(effect.code, lambda: self._deal_wanted(effect) and lease.held)
            finally:
                await lease.stop()
            if outcome.deal is not None or lease.held:
                if outcome.deal is None and not outcome.cancelled:
                    await lease.stop(release=True)  # back to the lobby: the host may start again at once
                return outcome
            waiting = True  # lost the lease mid-search (cut off from Redis): wait for it again

    def _deal_wanted(self, effect: FindDeal) -> bool:
        """Does the room still wait for this search? (The core drops an answer to any other as stale.)"""
        room = self.core.rooms.get(effect.code)
        return (
            room is not None
            and room.phase == p.DEALING
            and room.search == effect.search
            and room.race_number == effect.race
        )

    async def _check_blocked(self, effect: CheckBlocked) -> None:
        """The exact blocked check of a racer's position, in the worker process (it may take seconds)."""
        started = time.monotonic()
        checked = await self.deal_finder.check_blocked(effect.deal, effect.entries, effect.undo)
        log_event(
            logging.INFO if checked.blocked is not None else logging.WARNING,
            "blocked_check_finished",
            room=effect.code,
            player=effect.player_id,
            entries=effect.length,
            blocked=checked.blocked,
            seconds=round(time.monotonic() - started, 3),
            detail=checked.detail,
        )
        self._dispatch(
            BlockedChecked(effect.code, effect.race, effect.player_id, effect.length, checked.blocked, now_ms())
        )

    async def _reload(self, effect: ReloadLog) -> None:
        delay = 0.05
        while self.core.has_room(effect.code):
            try:
                raw = await self.store.load_moves(effect.code, effect.race, effect.player_id)
            except StoreUnavailable:
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            entries = self._decode_entries(effect.code, raw)
            self._dispatch(LogReloaded(effect.code, effect.race, effect.player_id, entries, now_ms()))
            return

    async def _register(self, effect: RegisterPlayer) -> None:
        event: Event
        try:
            await self.store.put_player(
                effect.record.player_id, effect.token_hash, encode_record(effect.record), ttl_s=effect.ttl_s
            )
        except StoreUnavailable:
            event = RegisterFailed(effect.conn, now_ms())
        else:
            event = PlayerRegistered(effect.conn, effect.record, effect.token_hash, effect.token, now_ms())
        self._dispatch(event)

    async def _create_room(self, effect: CreateRoomRecord) -> None:
        code = effect.record.code
        if self.nodes is not None:
            await self.nodes.subscribe(code)
        event: Event
        try:
            created = await self.store.create_room(
                code, encode_record(effect.record), open_race=open_race_of(effect.record)
            )
        except StoreUnavailable:
            event = RoomCreateFailed(effect.conn, effect.record, False, now_ms())
        else:
            if created:
                self._store_versions[code] = 1
                self._stored_races[code] = open_race_of(effect.record)
                self._save_conflicts.discard(code)
                event = RoomCreated(effect.conn, effect.record, now_ms())
            else:
                event = RoomCreateFailed(effect.conn, effect.record, True, now_ms())
        self._dispatch(event)

    def _save_player(self, effect: SavePlayer) -> None:
        pid = effect.record.player_id
        self._player_saves[pid] = effect
        if pid not in self._player_workers:
            self._player_workers[pid] = asyncio.ensure_future(self._player_worker(pid))

    async def _player_worker(self, pid: str) -> None:
        """A player's record, written behind: the latest wins. Every failure is logged; an
        unexpected one drops that write (retrying it could only fail again), never the worker."""
        backoff = Backoff()
        try:
            while pid in self._player_saves:
                effect = self._player_saves[pid]
                try:
                    data = encode_record(effect.record)
                    await self.store.put_player(pid, effect.token_hash, data, ttl_s=effect.ttl_s)
                except StoreUnavailable as exc:
                    log_event(logging.WARNING, "player_write_failed", player=pid, error=str(exc), retry=True)
                    await backoff.wait()
                    continue
                except Exception as exc:
                    log.exception(
                        "player_write_failed", extra={"fields": {"player": pid, "error": repr(exc), "retry": False}}
                    )
                backoff.reset()
                if self._player_saves.get(pid) is effect:
                    del self._player_saves[pid]
        finally:
            self._player_workers.pop(pid, None)

    def _room_op(self, code: str, kind: str, value: object) -> None:
        ops = self._room_ops.setdefault(code, deque())
        if kind == "save" and ops and ops[-1][0] == "save":
            # Latest wins (the worker takes an op off the queue before running it).
            assert isinstance(value, QueuedSave) and isinstance(ops[-1][1], QueuedSave)
            ops[-1] = (kind, value.replacing(ops[-1][1]))
        else:
            ops.append((kind, value))
        if code not in self._room_workers:
            self._room_workers[code] = asyncio.ensure_future(self._room_worker(code))

    async def read_room(self, code: str) -> tuple[bytes, int] | None:
        """The room as the store has it once every write this process queued for it has landed:
        a read never sees the store from before the shell's own pending writes."""
        if code not in self._room_ops:
            return await self.store.load_room(code)
        answer: asyncio.Future[tuple[bytes, int] | None] = asyncio.get_running_loop().create_future()
        self._room_op(code, "read", answer)
        try:
            # Writes being retried (the store is down) must not hold a client's request for ever.
            return await asyncio.wait_for(asyncio.shield(answer), self.config.read_wait_s)
        except TimeoutError:
            raise StoreUnavailable(
                f"room {code}: this process's pending writes did not land within {self.config.read_wait_s:g} s"
            ) from None

    async def _room_worker(self, code: str) -> None:
        """One room's writes (and reads), in order: a save never lands after the expiry that
        followed it, a read sees every write queued before it. Every failure is logged; the
        store being unavailable is retried with back-off, anything else drops that one op."""
        ops = self._room_ops[code]
        backoff = Backoff()
        try:
            while ops:
                kind, value = ops.popleft()
                try:
                    await self._room_write(code, kind, value)
                except StoreUnavailable as exc:
                    if isinstance(value, asyncio.Future):
                        if not value.done():
                            value.set_exception(exc)  # the reader answers its client
                        continue
                    log_event(logging.WARNING, "room_write_failed", room=code, op=kind, error=str(exc), retry=True)
                    if kind == "save" and ops and ops[0][0] == "save":
                        newer = ops[0][1]  # a newer save, queued, replaces this one
                        assert isinstance(newer, QueuedSave) and isinstance(value, QueuedSave)
                        ops[0] = (kind, newer.replacing(value))
                    else:
                        ops.appendleft((kind, value))
                    await backoff.wait()
                    continue
                except Exception as exc:
                    log.exception(
                        "room_write_failed",
                        extra={"fields": {"room": code, "op": kind, "error": repr(exc), "retry": False}},
                    )
                    if isinstance(value, asyncio.Future) and not value.done():
                        value.set_exception(exc)
                    continue
                backoff.reset()
                if kind in ("save", "refresh") and code in self._held_ticks and not self._race_unstored(code):
                    self._held_ticks.discard(code)
                    self._on_timer(code)  # the race record is stored: the race may start
        finally:
            self._room_workers.pop(code, None)
            if not ops:
                self._room_ops.pop(code, None)
                if not self.core.has_room(code):
                    self._forget_room_store_state(code)

    async def _room_write(self, code: str, kind: str, value: object) -> None:
        if kind == "save":
            assert isinstance(value, QueuedSave)
            await self._save_room(code, value)
        elif kind == "refresh":
            await self._refresh_room(code)
        elif kind == "listed":
            await self.store.set_listed(code, bool(value))
        elif kind == "expire":
            assert value is None or isinstance(value, int | float)
            await self.store.expire_room(code, value)
        elif kind == "read":
            assert isinstance(value, asyncio.Future)
            loaded = await self.store.load_room(code)
            if not value.done():
                value.set_result(loaded)
        else:
            raise ValueError(f"unknown room operation {kind!r}")

    async def _save_room(self, code: str, save: QueuedSave) -> None:
        """Compare-and-set on the version this process last wrote. The store is never
        overwritten on a mismatch: an earlier save of ours whose outcome was unknown is
        recognised by its data; any other change is another writer's, and wins (several nodes:
        the room is read back from the store, and saves made on the old copy are dropped)."""
        record = save.record
        if self.nodes is not None and save.epoch != self._room_epochs.get(code, 0):
            log_event(logging.INFO, "room_save_stale", room=code, why="made before the room was read back")
            return
        data = encode_record(record)
        race = open_race_of(record)
        if code in self._save_conflicts:
            log_event(logging.WARNING, "room_save_skipped", room=code, why="another writer changed the room")
            return
        version = self._store_versions.get(code)
        if version is None:
            loaded = await self.store.load_room(code)
            if loaded is None:
                await self._recreate_room(code, save, data, race)
                return
            uncertain = self._uncertain_saves.pop(code, None)
            if uncertain is not None and loaded[0] == uncertain[1]:
                version = loaded[1]  # our last save landed after all
            elif uncertain is not None and loaded[1] == uncertain[0]:
                version = loaded[1]  # it did not land, and no one else wrote
            else:
                self._save_conflict(code, None if uncertain is None else uncertain[0], loaded[1])
                return
        # Several nodes: the new version's notice goes out with the save, in its script.
        notice = b"" if self.nodes is None else self.nodes.version_notice(version + 1)
        logs = () if self.nodes is None else counted_logs(record)
        try:
            new = await self.store.save_room(code, data, version, open_race=race, notice=notice, logs=logs)
        except StoreUnavailable:
            self._store_versions[code] = None
            self._uncertain_saves[code] = (version, data)
            raise
        if new is not None:
            self._store_versions[code] = new
            self._stored_races[code] = race
            if self.nodes is not None:
                pending = [c for c in self._uncommitted.pop(code, []) if c[0] > save.commands]
                if pending:
                    self._uncommitted[code] = pending
                self.nodes.noticed(1)
            self._execute(list(save.then))  # landed: what waited for it goes out (the results)
            self._saved(code, record)
            return
        loaded = await self.store.load_room(code)
        if loaded is None:
            await self._recreate_room(code, save, data, race)
        else:
            self._save_conflict(code, version, loaded[1])

    def _saved(self, code: str, record: RoomRecord) -> None:
        """Several nodes: the core learns what the room's members have now been shown."""
        if self.nodes is not None:
            self._dispatch(RoomSaved(code, record.phase, record.race_number, now_ms()))

    def _save_conflict(self, code: str, expected: int | None, found: int) -> None:
        self._store_versions[code] = None
        if self.nodes is not None:
            # Another node committed first: its change stands, this node reads the room back.
            log_event(logging.INFO, "room_save_lost", room=code, expected=expected, found=found)
            self._request_refresh(code, first=True)
            return
        self._save_conflicts.add(code)
        log_event(logging.ERROR, "room_save_conflict", room=code, expected=expected, found=found)

    async def _recreate_room(self, code: str, save: QueuedSave, data: bytes, race: int | None) -> None:
        """The room vanished from the store while this process still holds it (a finished room
        expired, or someone deleted it): store it afresh rather than lose it."""
        log_event(logging.WARNING, "room_recreated", room=code)
        record = save.record
        # Several nodes: version 1's notice goes out with the creation, in its script (as a save's).
        notice = b"" if self.nodes is None else self.nodes.version_notice(1)
        if await self.store.create_room(code, data, open_race=race, notice=notice):
            self._store_versions[code] = 1
            self._stored_races[code] = race
            if self.nodes is not None:
                self.nodes.noticed(1)
            if not record.options.private and record.members:
                self._room_op(code, "listed", True)  # next in the room's queue, retried there on failure
            self._execute(list(save.then))
            self._saved(code, record)
        else:  # created by someone else meanwhile
            self._save_conflict(code, None, 1)


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


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
