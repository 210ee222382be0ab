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
from typing import cast

import hiredis
import msgspec
import redis
import redis.exceptions
from redis.asyncio.connection import AbstractConnection

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
        on_messages: Callable[[list[tuple[str, RoomVersion | Appended]]], None],
        on_missed: Callable[[], None],
        *,
        node_id: str | None = None,
        heartbeat_s: float = 0.5,
        alive_ttl_s: float = 3.0,
        subscribe_timeout_s: float = 2.0,
        read_every_s: float = 0.02,
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        self.node_id = node_id or secrets.token_hex(6)
        self.alive_ttl_s = alive_ttl_s
        self._store = store
        self._on_messages = on_messages
        self._on_missed = on_missed
        self._heartbeat_s = heartbeat_s
        self._subscribe_timeout_s = subscribe_timeout_s
        self._read_every_s = read_every_s
        self._own = store.process_channel(self.node_id)
        self._rooms: set[str] = set()
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._connection: AbstractConnection | None = None  # the subscription's, while connected
        self._writer: asyncio.StreamWriter | None = None
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
        if self._writer is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._connected.wait(), self._subscribe_timeout_s)
            return  # the listener subscribed it with the others when it connected
        channel = self._channel(code)
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(channel, []).append(confirmed)
        try:
            self._command("SUBSCRIBE", channel)
            await asyncio.wait_for(confirmed, self._subscribe_timeout_s)
        except (TimeoutError, OSError) as exc:
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
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._command("UNSUBSCRIBE", *(self._channel(code) for code in gone))

    def subscribed(self, code: str) -> bool:
        return code in self._rooms

    def _command(self, *args: str) -> None:
        """Write a command on the subscription's connection (its answers come to the listener)."""
        writer, connection = self._writer, self._connection
        if writer is None or connection is None:
            raise OSError("the subscription is not connected")
        writer.write(b"".join(connection.pack_command(*args)))

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
            self._check_heard()
            await asyncio.sleep(self._heartbeat_s)

    async def gone(self, nodes: set[str]) -> set[str]:
        """Which of these nodes have let their liveness key expire (none if Redis does not answer)."""
        try:
            alive = await self._store.nodes_alive(sorted(nodes))
        except StoreUnavailable:
            return set()
        return nodes - alive

    async def _listen(self) -> None:
        """The subscription: its own connection, read raw (a hiredis reader over the socket's bytes)
        and in batches: after each read the socket is left unread for ``read_every_s``, so the
        messages of that time arrive in one wake-up and go to the node in one call (``on_messages``).
        redis-py's PubSub cost ~50 us of CPU per message (a coroutine chain and a timeout each);
        this costs a few per message plus one wake-up per batch. A new connection after the first
        means messages may have been lost meanwhile: every room held is read back (``on_missed``)."""
        delay = 0.05
        connected_before = False
        while not self._closed:
            connection = self._store.subscriber_connection()
            try:
                await connection.connect()  # type: ignore[no-untyped-call]
                reader, writer = stream_of(connection)
                parser = hiredis.Reader()
                self._connection, self._writer = connection, writer
                rooms = set(self._rooms)  # rooms added from here on subscribe on their own (_writer is set)
                self._command("SUBSCRIBE", self._own, *(self._channel(code) for code in rooms))
                self._connected.set()
                self._heard_at = time.monotonic()
                if connected_before:  # messages published while the subscription was down are lost
                    self.missed += 1
                    _log(logging.WARNING, "node_pubsub_reconnected", rooms=len(self._rooms))
                    asyncio.get_running_loop().call_soon(self._on_missed)
                connected_before = True
                delay = 0.05
                while not self._closed:
                    data = await reader.read(1 << 16)
                    if not data:
                        raise ConnectionError("Redis closed the subscription's connection")
                    parser.feed(data)
                    self._received(parser)
                    if self._read_every_s > 0:
                        # A ReadTransport by its methods (uvloop's transports do not subclass asyncio's)
                        transport = cast(asyncio.ReadTransport, writer.transport)
                        transport.pause_reading()  # the kernel holds what comes meanwhile: one wake-up for it all
                        try:
                            await asyncio.sleep(self._read_every_s)
                        finally:
                            if not transport.is_closing():
                                transport.resume_reading()
            except (redis.exceptions.RedisError, OSError, ConnectionError) as exc:
                _log(logging.WARNING, "node_pubsub_lost", error=str(exc), retry_s=delay)
            except Exception as exc:  # a bug: logged, and the subscription made again (never left dead)
                log.exception("node_pubsub_failed", extra={"fields": {"error": repr(exc), "retry_s": delay}})
            finally:
                self._connection = self._writer = None
                self._connected.clear()
                with contextlib.suppress(Exception):
                    await connection.disconnect()
            if not self._closed:
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)

    def _check_heard(self) -> None:
        """No heartbeat through the subscription for too long (Redis stopped sending to it without
        closing it): drop the connection, so the listener makes a new one and reads every room back."""
        writer = self._writer
        if writer is None or time.monotonic() - self._heard_at <= max(3.0, 6 * self._heartbeat_s):
            return
        _log(logging.WARNING, "node_pubsub_lost", error="no heartbeat through the subscription: reconnecting")
        self._heard_at = time.monotonic()
        writer.transport.abort()

    def _received(self, parser: hiredis.Reader) -> None:
        """Every whole reply the parser holds: subscriptions confirmed, heartbeats, and the other
        nodes' room events, handed over in one batch."""
        batch: list[tuple[str, RoomVersion | Appended]] = []
        gap = False
        while (reply := parser.gets()) is not False:
            if not isinstance(reply, list) or len(reply) != 3:
                _log(logging.ERROR, "node_reply_unexpected", reply=repr(reply)[:200])
                continue
            kind, raw_channel, data = reply
            channel = raw_channel.decode() if isinstance(raw_channel, bytes) else str(raw_channel)
            if kind == b"subscribe":
                for future in self._waiting.pop(channel, []):
                    if not future.done():
                        future.set_result(None)
                continue
            if kind != b"message":
                continue
            try:
                decoded = _decoder.decode(data if isinstance(data, bytes) else b"")
            except msgspec.DecodeError:
                _log(logging.ERROR, "node_message_unreadable", channel=channel)
                continue
            if isinstance(decoded, Heartbeat):
                gap = self._heartbeat(decoded) or gap
                continue
            if decoded.node == self.node_id:
                continue  # our own
            code = self._code(channel)
            if code is not None:
                self.received += 1
                batch.append((code, decoded))
        if batch:
            self._on_messages(batch)
        if gap:
            self._on_missed()

    def _heartbeat(self, beat: Heartbeat) -> bool:
        """One of this node's heartbeats came back: is there a gap before it (messages lost)?"""
        if beat.node != self.node_id:
            return False
        self._heard_at = time.monotonic()
        sent = self._beats.pop(beat.seq, None)
        if sent is not None and self._on_lag is not None:
            self._on_lag(time.perf_counter() - sent)
        gap = self._heard != 0 and beat.seq != self._heard + 1
        self._heard = beat.seq
        if gap:
            self.missed += 1
            _log(logging.WARNING, "node_pubsub_gap", rooms=len(self._rooms))
        return gap


def stream_of(connection: AbstractConnection) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The socket's streams of a connected redis-py connection (it connected, authenticated and
    chose the protocol; the subscription reads and writes the socket itself from then on)."""
    reader = getattr(connection, "_reader", None)
    writer = getattr(connection, "_writer", None)
    if not isinstance(reader, asyncio.StreamReader) or not isinstance(writer, asyncio.StreamWriter):
        raise ConnectionError(f"this redis-py ({redis.__version__}) connection has no socket streams to read")
    return reader, writer
