"""One server node's metrics in the Prometheus text format (``GET /metrics``; docs/metrics.md).

Each :class:`Metrics` has its own ``CollectorRegistry`` (never prometheus_client's global one),
so several servers in one process (the tests, ``plot practice``) keep apart.

The hot path pays for counters only: a move answered is a plain integer added to (and, for an
acknowledgement, one bucket of a histogram kept the same way), read into the families when
scraped (``_MoveCounts``: prometheus_client's own counters take a lock per increment, a few
microseconds a move); a store call one counter and one observation.
Everything that is a level rather than an event (connections, rooms by phase, queue depths,
the shell's frame counters) is read from the server when scraped, so it costs nothing between
scrapes. prometheus_client comes with the ``server`` extra: ``server.shell`` imports this module
only when metrics are on and the library is installed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Receipt of a move to its move_ok sent: ~0.1 ms on the memory store, a Redis round trip more on
# Redis, seconds only when the store struggles (the client resends after its own timeout).
ACK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STORE_BUCKETS = (0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PUBSUB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5)


@dataclass
class Snapshot:
    """The levels of a node at one scrape (RaceServer.metrics_snapshot)."""

    connections: Mapping[str, int] = field(default_factory=dict)  # by kind
    rooms: Mapping[str, int] = field(default_factory=dict)  # by phase
    queues: Mapping[str, int] = field(default_factory=dict)  # by queue
    frames_in: int = 0
    frames_out: int = 0
    dropped_frames: int = 0
    slow_disconnects: int = 0
    rate_limited: int = 0
    limited: Mapping[str, int] = field(default_factory=dict)  # refusals by the abuse limits, by limit
    connections_total: int = 0
    pubsub_published: int = 0  # several nodes (server/nodes.py); 0 on a single node
    pubsub_received: int = 0
    pubsub_gaps: int = 0


class _Levels(Collector):
    """What is read from the server at scrape time."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        now = self._snapshot()
        yield _gauge("plot_connections", "Open WebSocket connections, by kind", "kind", now.connections)
        yield _gauge("plot_rooms", "Rooms this node holds in memory, by phase", "phase", now.rooms)
        yield _gauge("plot_queue_depth", "Work waiting in the node's queues, by queue", "queue", now.queues)
        for name, text, value in (
            ("plot_connections_opened", "WebSocket connections accepted since start", now.connections_total),
            ("plot_frames_received", "Frames received from clients", now.frames_in),
            ("plot_frames_sent", "Frames written to clients (one per connection reached)", now.frames_out),
            ("plot_frames_dropped", "Progress frames skipped for a connection over its buffer", now.dropped_frames),
            ("plot_slow_disconnects", "Connections cut because they could not keep up", now.slow_disconnects),
            ("plot_rate_limited", "Connections closed for sending too fast", now.rate_limited),
        ):
            yield _counter(name, text, value)
        yield _labelled_counter(
            "plot_limited",
            "Refusals and closes by the per-address limits and the hello deadline (docs/reliability.md, Limits)",
            "limit",
            now.limited,
        )
        yield _labelled_counter(
            "plot_pubsub_messages",
            "Room events over Redis pub/sub between nodes, by direction",
            "direction",
            {"published": now.pubsub_published, "received": now.pubsub_received},
        )
        yield _counter("plot_pubsub_gaps", "Pub/sub gaps seen (every room held read back from Redis)", now.pubsub_gaps)


class _MoveCounts(Collector):
    """The moves answered, counted in plain integers on the hot path (one event loop feeds them)
    and served as prometheus_client would serve its own Counter and Histogram."""

    def __init__(self) -> None:
        self.accepted = 0
        self.duplicate = 0
        self.rejected: dict[str, int] = {}
        self.ack_buckets = [0] * (len(ACK_BUCKETS) + 1)  # the last: above every bound (+Inf)
        self.ack_sum = 0.0

    def collect(self) -> Iterable[Metric]:
        yield _counter("plot_moves_accepted", "Moves stored and acknowledged (move_ok)", self.accepted)
        yield _counter(
            "plot_moves_duplicate", "Resent moves answered with the current board, not applied again", self.duplicate
        )
        yield _labelled_counter(
            "plot_moves_rejected",
            "Moves refused (move_rejected, or an error answering a move), by code",
            "code",
            self.rejected,
        )
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*ACK_BUCKETS, None), self.ack_buckets, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound is None else repr(bound), cumulative))  # as Histogram writes le
        yield HistogramMetricFamily(
            "plot_move_ack_seconds",
            "From a move's receipt to its move_ok sent",
            buckets=buckets,
            sum_value=self.ack_sum,
        )


def _gauge(name: str, text: str, label: str, values: Mapping[str, int]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, text, labels=[label])
    for key, value in sorted(values.items()):
        gauge.add_metric([key], value)
    return gauge


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    counter = CounterMetricFamily(name, text)
    counter.add_metric([], value)
    return counter


def _labelled_counter(name: str, text: str, label: str, values: Mapping[str, int]) -> CounterMetricFamily:
    counter = CounterMetricFamily(name, text, labels=[label])
    for key, value in sorted(values.items()):
        counter.add_metric([key], value)
    return counter


class Metrics:
    """The counters and histograms the server feeds, and the text a scrape returns."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.moves = _MoveCounts()
        r.register(self.moves)
        self.store_calls = Counter(
            "plot_store_calls", "Calls to Redis, by store operation (a call: one round trip, or one pipeline)",
            ["op"], registry=r,
        )  # fmt: skip
        self.store_errors = Counter(
            "plot_store_errors", "Calls to Redis that failed (StoreUnavailable), by store operation", ["op"],
            registry=r,
        )  # fmt: skip
        self.store_seconds = Histogram(
            "plot_store_call_seconds", "Duration of calls to Redis, by store operation", ["op"],
            buckets=STORE_BUCKETS, registry=r,
        )  # fmt: skip
        self.pubsub_lag = Histogram(
            "plot_pubsub_lag_seconds", "A heartbeat's trip through Redis pub/sub, publish to receipt (several nodes)",
            buckets=PUBSUB_BUCKETS, registry=r,
        )  # fmt: skip
        r.register(_Levels(snapshot))
        self._store: dict[str, tuple[Counter, Histogram]] = {}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ---------------------------------------------------------------- fed by the server

    def accepted(self, seconds: float | None, duplicate: bool) -> None:
        moves = self.moves
        if duplicate:
            moves.duplicate += 1
            return
        moves.accepted += 1
        if seconds is not None:
            # A bound is the bucket's upper end, included (prometheus_client's le): bisect_left.
            moves.ack_buckets[bisect_left(ACK_BUCKETS, seconds)] += 1
            moves.ack_sum += seconds

    def rejected(self, code: str) -> None:
        rejected = self.moves.rejected
        rejected[code] = rejected.get(code, 0) + 1

    def store_call(self, op: str, seconds: float, failed: bool) -> None:
        """A store's observer (server.store.base.StoreObserver)."""
        children = self._store.get(op)
        if children is None:
            children = self._store[op] = (self.store_calls.labels(op), self.store_seconds.labels(op))
        children[0].inc()
        children[1].observe(seconds)
        if failed:
            self.store_errors.labels(op).inc()


class _Families(Collector):
    """Metric families already built (a merge of several workers' scrapes)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


def merge_workers(scrapes: Mapping[int, bytes | None], workers: int) -> bytes:
    """One host's ``plot-server --workers N`` as one scrape: every worker's series, each with a
    ``worker`` label (its slot, 0 to N-1), and ``plot_worker_up`` 1 for each worker that answered,
    0 for one that did not (dead, restarting). Whichever worker takes the scrape's connection on
    the shared port answers for all (a scrape of one worker, chosen by the kernel, would make
    every counter jump between workers' values)."""
    families: dict[str, Metric] = {}
    for slot in sorted(scrapes):
        scrape = scrapes[slot]
        if scrape is None:
            continue
        for family in text_string_to_metric_families(scrape.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples += [
                sample._replace(labels={**sample.labels, "worker": str(slot)}) for sample in family.samples
            ]
    up = GaugeMetricFamily(
        "plot_worker_up", "1 for each worker of this host that answered this scrape, 0 otherwise", labels=["worker"]
    )
    for slot in range(workers):
        up.add_metric([str(slot)], 0 if scrapes.get(slot) is None else 1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*families.values(), up]))
    return generate_latest(registry)
