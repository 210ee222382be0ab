"""The shell's configuration, counters, structured log and the small helpers every part uses."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from server.core import CoreConfig
from server.limits import LimitsConfig
from server.probes import ProbeConfig
from server.winnable import WinnableConfig

log = logging.getLogger("plot.server")
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
    # `busy` before any work is spent on them. 0: no such limit. The core answers those moves
    # (server/core/wal.py), with CoreConfig.busy_retry_ms.
    # Off by default: on a quiet machine at 1.5x the saturation rate it refused 123k moves in 10 s
    # and cut goodput by 30% (docs/benchmarks.md, "Overload, quiet machine"); the store's backlog rule stays on.
    busy_turn_moves: int = 0
    busy_turn_streak: int = 3
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
    # Hellos, room creations and joins refused rate_limited for their address, and claims refused
    # claim_limit, by message type.
    address_limited: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("hello", "create_room", "join", "claim"), 0)
    )


class Tasks:
    """The shell's own tasks (store calls, closes): failures logged, waited for by ``flush``."""

    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task_failed", exc_info=task.exception())
