"""Several server nodes on one Redis: the pub/sub link between them (docs/scaling.md, "Several nodes").

Each node holds, for every room one of its connections is in, a cache of the room (the core's
room state). The store is the authority: a room change is committed with the compare-and-set
on the room's version, and the node that committed it publishes the new version on the room's
channel (``ns:events:{CODE}``); every other node holding the room reads the room back from the
store (record and logs) and resynchronises its own connections. A move appended by the node
serving its racer is published on the same channel with its entry by the append's own script (in
the same step, only if it lands), and played on the other nodes' copies (leaderboards, spectators'
boards, the race's end).

Pub/sub is not durable. When redis-py makes the subscription's connection again, and besides
that, each node publishes a heartbeat with a sequence number on its own
channel (``ns:process:NODE``) every ``heartbeat_s`` and listens to it: a gap in the numbers (the
subscription connection dropped and came back, Redis restarted, or Redis cut a slow reader)
means messages may have been lost, and ``on_missed`` reloads every room the node holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import redis.exceptions

from server.store.base import StoreUnavailable
from server.store.redis import RedisStore

log = logging.getLogger("plot.server")


class RoomVersion(msgspec.Struct, tag="v", array_like=True):
    """A node committed version ``version`` of the room."""

    node: str
    version: int


class Appended(msgspec.Struct, tag="m", array_like=True):
    """A node stored ``entry`` (an encoded LogEntry) at index ``start`` of a racer's log."""

    node: str
    race: int
    player: str
    start: int
    entry: bytes


class Heartbeat(msgspec.Struct, tag="h", array_like=True):
    node: str
    seq: int


NodeMessage = RoomVersion | Appended | Heartbeat
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(NodeMessage)


def _log(level: int, event: str, **fields: object) -> None:
    log.log(level, event, extra={"fields": fields})


class NodeLink:
    """One node's pub/sub: ``await start()``, ``subscribe(code)`` before reading a room it will
    hold, ``publish(...)`` after committing, ``retain(...)`` to drop rooms it no longer holds."""

    def __init__(
        self,
        store: RedisStore,
        on_message: Callable[[str, RoomVersion | Appended], None],
        on_missed: Callable[[], None],
        *,
        node_id: str | None = None,
        heartbeat_s: float = 0.5,
        alive_ttl_s: float = 3.0,
        subscribe_timeout_s: float = 2.0,
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        self.node_id = node_id or secrets.token_hex(6)
        self.alive_ttl_s = alive_ttl_s
        self._store = store
        self._on_message = on_message
        self._on_missed = on_missed
        self._heartbeat_s = heartbeat_s
        self._subscribe_timeout_s = subscribe_timeout_s
        self._own = store.process_channel(self.node_id)
        self._rooms: set[str] = set()
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._pubsub: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._connected = asyncio.Event()
        self._seq = 0
        self._heard = 0
        self._heard_at = time.monotonic()
        self.missed = 0  # times a gap was seen (tests, logs and metrics)
        # For the node's metrics (server/metrics.py): room events published, room events of other
        # nodes received, and each heartbeat's trip through Redis (``on_lag``, seconds): the wait
        # every room event has between its publish and its receipt, measured on one clock.
        self.published = 0
        self.received = 0
        self._on_lag = on_lag
        self._beats: dict[int, float] = {}  # heartbeat seq -> when it was published

    async def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._listen()), asyncio.ensure_future(self._beat())]
        with contextlib.suppress(TimeoutError):  # Redis down now: the node serves, and subscribes later
            await asyncio.wait_for(self._connected.wait(), self._subscribe_timeout_s)

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _channel(self, code: str) -> str:
        return self._store.events_channel(code)

    def _code(self, channel: str) -> str | None:
        start, end = channel.find("{"), channel.rfind("}")
        return channel[start + 1 : end] if 0 <= start < end else None

    # ---------------------------------------------------------------- subscriptions

    async def subscribe(self, code: str) -> None:
        """Listen to a room's channel; returns once Redis confirmed it (or after the timeout: the
        listener subscribes it again on its next connection, and a gap there reloads the room)."""
        if code in self._rooms:
            return
        self._rooms.add(code)
        if self._pubsub is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._connected.wait(), self._subscribe_timeout_s)
            return  # the listener subscribed it with the others when it connected
        pubsub = self._pubsub
        channel = self._channel(code)
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(channel, []).append(confirmed)
        try:
            await pubsub.subscribe(channel)
            await asyncio.wait_for(confirmed, self._subscribe_timeout_s)
        except (TimeoutError, redis.exceptions.RedisError, OSError) as exc:
            _log(logging.WARNING, "node_subscribe_slow", room=code, error=repr(exc))
        finally:
            waiting = self._waiting.get(channel)
            if waiting is not None and confirmed in waiting:
                waiting.remove(confirmed)
                if not waiting:
                    del self._waiting[channel]

    async def retain(self, keep: Callable[[str], bool]) -> None:
        """Unsubscribe from the rooms ``keep`` refuses (rooms this node no longer holds)."""
        gone = [code for code in self._rooms if not keep(code)]
        if not gone:
            return
        self._rooms.difference_update(gone)
        pubsub = self._pubsub
        if pubsub is not None:
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                await pubsub.unsubscribe(*(self._channel(code) for code in gone))

    def subscribed(self, code: str) -> bool:
        return code in self._rooms

    # ---------------------------------------------------------------- publishing

    async def publish(self, messages: Sequence[tuple[str, RoomVersion | Appended]]) -> None:
        """Publish on the rooms' channels in one round trip; a failure is logged, never raised (the
        other nodes catch up from the store when they next read the room or see a gap)."""
        try:
            await self._store.publish([(self._channel(code), _encoder.encode(msg)) for code, msg in messages])
        except StoreUnavailable as exc:
            _log(logging.WARNING, "node_publish_failed", messages=len(messages), error=str(exc))
        else:
            self.published += len(messages)

    def room_version(self, version: int) -> RoomVersion:
        return RoomVersion(self.node_id, version)

    def appended_notice(self, race: int, player: str, start: int, entry: bytes) -> bytes:
        """The message announcing a stored entry: the store publishes it on the room's channel in the
        same script as the append, and only if the entry lands (AppendRequest.notice)."""
        return _encoder.encode(Appended(self.node_id, race, player, start, entry))

    def noticed(self, count: int) -> None:
        """``count`` entries were stored with their notice (published by the store): counted."""
        self.published += count

    def deal_lease(self, code: str, race: int, ttl_s: float) -> Lease:
        """The lease on the winnable-deal search of a room's race, held in this node's name."""
        return Lease(self._store, self._store.deal_lease_key(code, race), self.node_id, ttl_s)

    # ---------------------------------------------------------------- the listener

    async def _beat(self) -> None:
        while not self._closed:
            self._seq += 1  # counted even when the publish fails: the gap is then seen
            if self._on_lag is not None:
                if len(self._beats) > 64:  # heartbeats lost on the way: never kept for ever
                    self._beats.clear()
                self._beats[self._seq] = time.perf_counter()
            with contextlib.suppress(StoreUnavailable):
                await self._store.publish([(self._own, _encoder.encode(Heartbeat(self.node_id, self._seq)))])
            with contextlib.suppress(StoreUnavailable):  # after the heartbeat: its trip is the lag measured
                await self._store.mark_alive(self.node_id, int(self.alive_ttl_s * 1000))
            await asyncio.sleep(self._heartbeat_s)

    async def gone(self, nodes: set[str]) -> set[str]:
        """Which of these nodes have let their liveness key expire (none if Redis does not answer)."""
        try:
            alive = await self._store.nodes_alive(sorted(nodes))
        except StoreUnavailable:
            return set()
        return nodes - alive

    async def _listen(self) -> None:
        delay = 0.05
        while not self._closed:
            pubsub = self._store.pubsub()
            try:
                rooms = set(self._rooms)
                await pubsub.subscribe(self._own, *(self._channel(code) for code in rooms))
                self._pubsub = pubsub
                if pubsub.connection is not None:  # redis-py reconnects on its own: hear of it
                    pubsub.connection.register_connect_callback(self._reconnected)
                late = self._rooms - rooms  # asked for while this connection was being made
                if late:
                    await pubsub.subscribe(*(self._channel(code) for code in late))
                self._connected.set()
                self._heard_at = time.monotonic()
                while not self._closed:
                    message = await pubsub.get_message(ignore_subscribe_messages=False, timeout=1.0)
                    if message is not None:
                        delay = 0.05
                        self._received(message)
                    if time.monotonic() - self._heard_at > max(3.0, 6 * self._heartbeat_s):
                        raise ConnectionError("no heartbeat through the subscription: reconnecting")
            except (redis.exceptions.RedisError, OSError, ConnectionError) as exc:
                _log(logging.WARNING, "node_pubsub_lost", error=str(exc), retry_s=delay)
            finally:
                self._pubsub = None
                self._connected.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            if not self._closed:
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)

    async def _reconnected(self, connection: object) -> None:
        """redis-py made the subscription's connection again (after its own resubscription, which
        runs first): messages published meanwhile are lost, so every room held is read back."""
        self.missed += 1
        _log(logging.WARNING, "node_pubsub_reconnected", rooms=len(self._rooms))
        asyncio.get_running_loop().call_soon(self._on_missed)

    def _received(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        raw_channel = message.get("channel")
        channel = raw_channel.decode() if isinstance(raw_channel, bytes) else str(raw_channel)
        if kind == "subscribe":
            for future in self._waiting.pop(channel, []):
                if not future.done():
                    future.set_result(None)
            return
        if kind != "message":
            return
        data = message.get("data")
        try:
            decoded = _decoder.decode(data if isinstance(data, bytes) else b"")
        except msgspec.DecodeError:
            _log(logging.ERROR, "node_message_unreadable", channel=channel)
            return
        if isinstance(decoded, Heartbeat):
            if decoded.node != self.node_id:
                return
            self._heard_at = time.monotonic()
            sent = self._beats.pop(decoded.seq, None)
            if sent is not None and self._on_lag is not None:
                self._on_lag(time.perf_counter() - sent)
            gap = self._heard != 0 and decoded.seq != self._heard + 1
            self._heard = decoded.seq
            if gap:
                self.missed += 1
                _log(logging.WARNING, "node_pubsub_gap", rooms=len(self._rooms))
                self._on_missed()
            return
        if decoded.node == self.node_id:
            return  # our own
        code = self._code(channel)
        if code is not None:
            self.received += 1
            self._on_message(code, decoded)


class Lease:
    """A lease in Redis (``SET NX PX``, renewed by its holder): one node at a time does a job (the
    winnable-deal search of a room's race). The holder is the node's id, so a node taking its own
    lease again (a new search after its room was read back) renews it. It is renewed every third
    of its time to live while kept; a holder that dies or stops lets it lapse, and another node
    takes it. ``held`` turns False when a renewal finds another holder, or none answered for a
    whole time to live (the store unreachable): the job should stop. Losing it is never unsafe,
    only wasteful: what the job commits goes through the room's compare-and-set."""

    def __init__(self, store: RedisStore, key: str, holder: str, ttl_s: float) -> None:
        self.key = key
        self.holder = holder
        self.held = False
        self._store = store
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._renewed = 0.0
        self._keeper: asyncio.Task[None] | None = None

    async def take(self) -> bool:
        """Try once: True when this holder has the lease now (never raises: an unreachable store is False)."""
        try:
            self.held = await self._store.take_lease(self.key, self.holder, self._ttl_ms)
        except StoreUnavailable:
            self.held = False
        if self.held:
            self._renewed = time.monotonic()
        return self.held

    def keep(self) -> None:
        """Renew it in the background until ``stop``."""
        if self._keeper is None:
            self._keeper = asyncio.ensure_future(self._renew())

    async def stop(self, release: bool = False) -> None:
        """Stop renewing; ``release``: give it up now (else it lapses after its time to live)."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if release and self.held:
            self.held = False
            with contextlib.suppress(StoreUnavailable):
                await self._store.drop_lease(self.key, self.holder)

    async def _renew(self) -> None:
        ttl_s = self._ttl_ms / 1000
        while self.held:
            await asyncio.sleep(ttl_s / 3)
            try:
                self.held = await self._store.take_lease(self.key, self.holder, self._ttl_ms)
            except StoreUnavailable:
                self.held = time.monotonic() - self._renewed < ttl_s  # may have lapsed meanwhile
            else:
                self._renewed = time.monotonic()
            if not self.held:
                _log(logging.WARNING, "lease_lost", key=self.key)
