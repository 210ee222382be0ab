"""Several server nodes on one Redis or one Redis Cluster: the pub/sub link between them
(docs/scaling.md, "Several nodes").

Each node holds, for every room one of its connections is in, a cache of the room (the core's
room state). The store is the authority: a room change is committed with the compare-and-set
on the room's version, and the node that committed it publishes the new version on the room's
channel (``ns:events:{CODE}``); every other node holding the room reads the room back from the
store (record and logs) and resynchronises its own connections. A move appended by the node
serving its racer is published on the same channel with its entry by the append's own script (in
the same step, only if it lands), and played on the other nodes' copies (leaderboards, spectators'
boards, the race's end).

The channels are heard through *shards*: on one Redis one subscription connection
(``SUBSCRIBE``/``PUBLISH``); on a cluster one connection per master holding rooms this node
holds, with sharded pub/sub (``SSUBSCRIBE``/``SPUBLISH``: the room's hash tag puts its channel
on its room's master, so a message crosses only that master). The slot map says which master
a room's channel is on; a room whose slot moved (failover, resharding) is subscribed on its new
master and read back.

Pub/sub is not durable. A shard's connection is never re-made behind our back: when it drops,
the node makes it again, subscribes its rooms again and reads back every room of that shard
once its subscription is confirmed. Besides that, each node publishes a heartbeat with a
sequence number through every shard (on a cluster a channel whose hash tag lands on that
master) every ``heartbeat_s`` and listens to it: a gap in the numbers (Redis cut a slow reader,
or restarted) reads that shard's rooms back, and no heartbeat for 3 s makes the connection again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

import hiredis
import msgspec
import redis
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
MESSAGE_KINDS = (b"message", b"smessage")  # a published message, as hiredis reads it: [kind, channel, data]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(NodeMessage)


def _log(level: int, event: str, **fields: object) -> None:
    log.log(level, event, extra={"fields": fields})


class _Shard:
    """One subscription connection: to the one Redis (name ``""``), or to one cluster master."""

    def __init__(self, name: str, beat_channel: str) -> None:
        self.name = name
        self.beat_channel = beat_channel
        self.rooms: set[str] = set()
        # Rooms whose messages may have been missed (subscribed late, or on a connection that
        # dropped): each is read back once its subscription is confirmed.
        self.late: set[str] = set()
        self.leaving: set[str] = set()  # channels this node unsubscribed (their confirmations are expected)
        self.pubsub: Any = None
        self.connected = asyncio.Event()
        self.ever_connected = False
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self.seq = 0
        self.heard = 0
        self.heard_at = time.monotonic()
        self.beats: dict[int, float] = {}  # heartbeat seq -> when it was published


class _Resubscribe(ConnectionError):
    """The shard's subscriptions no longer match the slot map (MOVED, or Redis unsubscribed a
    channel whose slot left the master): make the connection again on the current map."""


class NodeLink:
    """One node's pub/sub: ``await start()``, ``subscribe(code)`` before reading a room it will
    hold, ``publish(...)`` after committing, ``retain(...)`` to drop rooms it no longer holds."""

    def __init__(
        self,
        store: RedisStore,
        on_messages: Callable[[list[tuple[str, RoomVersion | Appended]]], None],
        on_missed: Callable[[Collection[str]], None],
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
        self._sharded = store.cluster
        self._on_messages = on_messages
        self._read_every_s = read_every_s
        self._on_missed = on_missed
        self._heartbeat_s = heartbeat_s
        self._subscribe_timeout_s = subscribe_timeout_s
        self._shards: dict[str, _Shard] = {}
        self._rooms: dict[str, str] = {}  # room code -> the shard hearing its channel
        self._unplaced: set[str] = set()  # rooms held while the slot map was unknown (placed by the heartbeat)
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.missed = 0  # gaps and dropped subscriptions seen (tests, logs and metrics)
        # For the node's metrics (server/metrics.py): room events published, room events of other
        # nodes received, and each heartbeat's trip through Redis (``on_lag``, seconds): the wait
        # every room event has between its publish and its receipt, measured on one clock.
        self.published = 0
        self.received = 0
        self._on_lag = on_lag

    async def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._beat()), asyncio.ensure_future(self._keep_alive())]
        if self._sharded:  # the masters' connections are made as rooms come
            with contextlib.suppress(StoreUnavailable, TimeoutError):
                await asyncio.wait_for(self._store.load_slot_map(), self._subscribe_timeout_s)
            return
        shard = self._shard("")
        assert shard is not None
        with contextlib.suppress(TimeoutError):  # Redis down now: the node serves, and subscribes later
            await asyncio.wait_for(shard.connected.wait(), self._subscribe_timeout_s)

    async def close(self) -> None:
        self._closed = True
        tasks = self._tasks + [shard.task for shard in self._shards.values() if shard.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _channel(self, code: str) -> str:
        return self._store.events_channel(code)

    def _code(self, channel: str) -> str | None:
        start, end = channel.find("{"), channel.rfind("}")
        return channel[start + 1 : end] if 0 <= start < end else None

    def shards(self) -> dict[str, set[str]]:
        """Each subscription connection (one Redis: ``""``; a cluster: a master) and the rooms it hears."""
        return {name: set(shard.rooms) for name, shard in self._shards.items()}

    def _shard(self, name: str) -> _Shard | None:
        """The shard of that name, its listener started; None if no heartbeat channel lands on it."""
        shard = self._shards.get(name)
        if shard is None:
            beat = self._store.beat_channel(self.node_id, name)
            if beat is None:
                return None
            shard = self._shards[name] = _Shard(name, beat)
            shard.task = asyncio.ensure_future(self._listen(shard))
        return shard

    # ---------------------------------------------------------------- subscriptions

    async def subscribe(self, code: str) -> None:
        """Listen to a room's channel; returns once Redis confirmed it (or after the timeout: the
        room is marked late, and read back once its subscription is confirmed)."""
        if code in self._rooms or code in self._unplaced:
            return
        name = self._store.shard_of(self._channel(code))
        shard = None if name is None else self._shard(name)
        if shard is None:  # the slot map is unknown (the cluster unreachable): the heartbeat places it
            self._unplaced.add(code)
            return
        channel = self._channel(code)
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(channel, []).append(confirmed)
        try:
            self._place(code, shard)
            await asyncio.wait_for(confirmed, self._subscribe_timeout_s)
        except (TimeoutError, redis.exceptions.RedisError, OSError) as exc:
            shard.late.add(code)
            _log(logging.WARNING, "node_subscribe_slow", room=code, shard=shard.name, error=repr(exc))
        finally:
            waiting = self._waiting.get(channel)
            if waiting is not None and confirmed in waiting:
                waiting.remove(confirmed)
                if not waiting:
                    del self._waiting[channel]

    def _place(self, code: str, shard: _Shard) -> None:
        """The room is heard through ``shard`` from now on: subscribed there now if its connection is
        up (else when it connects, with the shard's other rooms)."""
        self._rooms[code] = shard.name
        shard.rooms.add(code)
        if shard.pubsub is not None:
            self._spawn_subscribe(shard, [self._channel(code)])

    def _spawn_subscribe(self, shard: _Shard, channels: list[str]) -> None:
        pubsub = shard.pubsub

        async def send() -> None:
            with contextlib.suppress(redis.exceptions.RedisError, OSError):  # the listener sees the drop
                await self._send_subscribe(pubsub, channels)

        self._tasks.append(asyncio.ensure_future(send()))
        self._tasks = [task for task in self._tasks if not task.done()]

    async def _send_subscribe(self, pubsub: Any, channels: Sequence[str]) -> None:
        """SUBSCRIBE them all at once; on a cluster one SSUBSCRIBE each (they must share a slot)."""
        if not channels:
            return
        if not self._sharded:
            await pubsub.subscribe(*channels)
            return
        for channel in channels:
            await pubsub.ssubscribe(channel)

    async def _send_unsubscribe(self, shard: _Shard, channels: Sequence[str]) -> None:
        pubsub = shard.pubsub
        if pubsub is None or not channels:
            return
        shard.leaving.update(channels)
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            if not self._sharded:
                await pubsub.unsubscribe(*channels)
                return
            for channel in channels:
                await pubsub.sunsubscribe(channel)

    async def retain(self, keep: Callable[[str], bool]) -> None:
        """Unsubscribe from the rooms ``keep`` refuses (rooms this node no longer holds)."""
        self._unplaced = {code for code in self._unplaced if keep(code)}
        gone = [code for code in self._rooms if not keep(code)]
        by_shard: dict[str, list[str]] = {}
        for code in gone:
            name = self._rooms.pop(code)
            shard = self._shards.get(name)
            if shard is not None:
                shard.rooms.discard(code)
                shard.late.discard(code)
                by_shard.setdefault(name, []).append(self._channel(code))
        for name, channels in by_shard.items():
            await self._send_unsubscribe(self._shards[name], channels)

    def subscribed(self, code: str) -> bool:
        return code in self._rooms or code in self._unplaced

    async def _replace(self, *, refresh: bool) -> None:
        """On a cluster: every room on the master its slot is on now (``refresh``: the slot map
        read again first). A moved room is subscribed on its new master and read back; a shard
        whose heartbeat channel moved takes a new one; a master gone with no rooms is dropped."""
        if not self._sharded:
            return
        if refresh:
            with contextlib.suppress(StoreUnavailable):
                await self._store.load_slot_map(refresh=True)
        for code in sorted(self._unplaced):
            name = self._store.shard_of(self._channel(code))
            shard = None if name is None else self._shard(name)
            if shard is not None:
                self._unplaced.discard(code)
                shard.late.add(code)
                self._place(code, shard)
        for code, current in list(self._rooms.items()):
            name = self._store.shard_of(self._channel(code))
            if name is None or name == current:
                continue
            shard = self._shard(name)
            if shard is None:
                continue
            old = self._shards.get(current)
            if old is not None:
                old.rooms.discard(code)
                old.late.discard(code)
                await self._send_unsubscribe(old, [self._channel(code)])
            _log(logging.WARNING, "node_room_moved", room=code, shard=name, was=current)
            shard.late.add(code)
            self._place(code, shard)
        for shard in list(self._shards.values()):
            beat = self._store.beat_channel(self.node_id, shard.name)
            if beat is None and not shard.rooms:  # no longer a master holding slots
                shard.closed = True
                del self._shards[shard.name]
                if shard.task is not None:
                    shard.task.cancel()
            elif beat is not None and beat != shard.beat_channel:
                old_beat, shard.beat_channel, shard.heard = shard.beat_channel, beat, 0
                if shard.pubsub is not None:
                    self._spawn_subscribe(shard, [beat])
                    await self._send_unsubscribe(shard, [old_beat])

    # ---------------------------------------------------------------- publishing

    async def publish(self, messages: Sequence[tuple[str, RoomVersion | Appended]]) -> None:
        """Publish on the rooms' channels in one round trip (one per master on a cluster); a
        failure is logged, never raised (the other nodes catch up from the store when they next
        read the room or see a gap)."""
        try:
            await self._store.publish([(self._channel(code), _encoder.encode(msg)) for code, msg in messages])
        except StoreUnavailable as exc:
            _log(logging.WARNING, "node_publish_failed", messages=len(messages), error=str(exc))
        else:
            self.published += len(messages)

    def room_version(self, version: int) -> RoomVersion:
        return RoomVersion(self.node_id, version)

    def version_notice(self, version: int) -> bytes:
        """The message announcing a room's new version: the store publishes it on the room's channel
        in the same script as the save, and only if the save lands (Store.save_room's notice)."""
        return _encoder.encode(RoomVersion(self.node_id, version))

    def appended_notice(self, race: int, player: str, start: int, entry: bytes) -> bytes:
        """The message announcing a stored entry: the store publishes it on the room's channel in the
        same script as the append, and only if the entry lands (AppendRequest.notice)."""
        return _encoder.encode(Appended(self.node_id, race, player, start, entry))

    def noticed(self, count: int) -> None:
        """``count`` entries or room saves were stored with their notice (published by the store): counted."""
        self.published += count

    def deal_lease(self, code: str, race: int, ttl_s: float) -> Lease:
        """The lease on the winnable-deal search of a room's race, held in this node's name."""
        return Lease(self._store, self._store.deal_lease_key(code, race), self.node_id, ttl_s)

    # ---------------------------------------------------------------- the listeners

    async def _beat(self) -> None:
        while not self._closed:
            with contextlib.suppress(StoreUnavailable):
                if self._sharded and (self._unplaced or self._shards):
                    await self._store.load_slot_map()
                await self._replace(refresh=False)
            # One publish per shard, side by side: a master down loses only its own heartbeat.
            await asyncio.gather(*(self._beat_once(shard) for shard in list(self._shards.values())))
            for shard in list(self._shards.values()):
                self._check_heard(shard)
            await asyncio.sleep(self._heartbeat_s)

    async def _keep_alive(self) -> None:
        """Renew this node's liveness every heartbeat, apart from the heartbeats: a heartbeat's
        publish to a master that is down can take seconds (the cluster client's retries), longer
        than the liveness keys live, and the other nodes would take this node for dead."""
        while not self._closed:
            with contextlib.suppress(StoreUnavailable):
                await self._store.mark_alive(self.node_id, int(self.alive_ttl_s * 1000))
            await asyncio.sleep(self._heartbeat_s)

    async def _beat_once(self, shard: _Shard) -> None:
        shard.seq += 1  # counted even when the publish fails: the gap is then seen
        if self._on_lag is not None:
            if len(shard.beats) > 64:  # heartbeats lost on the way: never kept for ever
                shard.beats.clear()
            shard.beats[shard.seq] = time.perf_counter()
        with contextlib.suppress(StoreUnavailable):
            await self._store.publish([(shard.beat_channel, _encoder.encode(Heartbeat(self.node_id, shard.seq)))])

    async def gone(self, nodes: set[str]) -> set[str]:
        """Which of these nodes have let their liveness key expire (none if Redis does not answer)."""
        try:
            alive = await self._store.nodes_alive(sorted(nodes))
        except StoreUnavailable:
            return set()
        return nodes - alive

    async def _listen(self, shard: _Shard) -> None:
        delay = 0.05
        while not self._closed and not shard.closed:
            pubsub: Any = None
            try:
                pubsub = self._store.subscriber(shard.name)
                rooms = set(shard.rooms)
                await self._send_subscribe(pubsub, [shard.beat_channel, *(self._channel(code) for code in rooms)])
                if shard.ever_connected:  # messages published while it was down are lost
                    self.missed += 1
                    shard.late |= rooms
                    shard.heard = 0
                    _log(logging.WARNING, "node_pubsub_reconnected", shard=shard.name, rooms=len(rooms))
                shard.pubsub = pubsub
                shard.ever_connected = True
                shard.leaving.clear()
                meanwhile = shard.rooms - rooms  # placed while this connection was being made
                await self._send_subscribe(pubsub, [self._channel(code) for code in meanwhile])
                shard.connected.set()
                shard.heard_at = time.monotonic()
                await self._read(shard, pubsub)
            except (redis.exceptions.RedisError, StoreUnavailable, OSError, ConnectionError) as exc:
                _log(logging.WARNING, "node_pubsub_lost", shard=shard.name, error=str(exc), retry_s=delay)
            except Exception as exc:  # a bug: logged, and the subscription made again (never left dead)
                log.exception("node_pubsub_failed", extra={"fields": {"shard": shard.name, "error": repr(exc)}})
            finally:
                shard.pubsub = None
                shard.connected.clear()
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await self._store.close_subscriber(pubsub)
            if not self._closed and not shard.closed:
                await self._replace(refresh=True)  # a failover or a moved slot: each room to its master
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)

    async def _read(self, shard: _Shard, pubsub: Any) -> None:
        """Read the shard's connection raw, in batches: its bytes go through a hiredis reader, and
        after each read the socket is left unread for ``read_every_s`` (the transport paused: the
        kernel holds what comes), so the messages of that time come in one wake-up and reach the
        node in one call (``on_messages``). redis-py's ``get_message`` cost ~50 us of CPU per
        message (a coroutine chain and a timeout each); this costs a few per message."""
        reader, writer = stream_of(pubsub.connection)
        parser = hiredis.Reader()
        while not self._closed and not shard.closed:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError("Redis closed the subscription's connection")
            parser.feed(data)
            batch: list[tuple[str, RoomVersion | Appended]] = []
            try:
                while (reply := parser.gets()) is not False:
                    if type(reply) is list and len(reply) == 3 and reply[0] in MESSAGE_KINDS:
                        self._message(shard, reply[1], reply[2], batch)  # nearly every reply: no dict, no str
                        continue
                    if isinstance(reply, Exception):  # an error reply: MOVED, an SSUBSCRIBE on a stale slot map
                        raise _Resubscribe(f"Redis answered the subscription with an error: {reply}")
                    message = as_message(reply)
                    if message is not None:
                        self._received(shard, message, batch)
            finally:  # what was read is handed over, also when a reply makes the shard reconnect
                if batch:
                    self._on_messages(batch)
            if self._read_every_s > 0:
                # A ReadTransport by its methods (uvloop's transports do not subclass asyncio's)
                transport = cast(asyncio.ReadTransport, writer.transport)
                transport.pause_reading()
                try:
                    await asyncio.sleep(self._read_every_s)
                finally:
                    if not transport.is_closing():
                        transport.resume_reading()

    def _check_heard(self, shard: _Shard) -> None:
        """No heartbeat through the shard's subscription for too long (Redis stopped sending to it
        without closing it): drop the connection, so its listener makes it again and reads back."""
        pubsub = shard.pubsub
        if pubsub is None or time.monotonic() - shard.heard_at <= max(3.0, 6 * self._heartbeat_s):
            return
        _log(logging.WARNING, "node_pubsub_lost", shard=shard.name, error="no heartbeat through the subscription")
        shard.heard_at = time.monotonic()
        with contextlib.suppress(ConnectionError):
            stream_of(pubsub.connection)[1].transport.abort()

    def _received(
        self, shard: _Shard, message: dict[str, Any], batch: list[tuple[str, RoomVersion | Appended]]
    ) -> None:
        kind = message.get("type")
        raw_channel = message.get("channel")
        channel = raw_channel.decode() if isinstance(raw_channel, bytes) else str(raw_channel)
        if kind in ("subscribe", "ssubscribe"):
            for future in self._waiting.pop(channel, []):
                if not future.done():
                    future.set_result(None)
            code = self._code(channel)
            if code is not None and code in shard.late and channel == self._channel(code):
                shard.late.discard(code)
                self._on_missed([code])
            return
        if kind in ("unsubscribe", "sunsubscribe"):
            if channel in shard.leaving:
                shard.leaving.discard(channel)
            elif self._sharded:  # Redis dropped it: its slot left this master
                raise _Resubscribe(f"{channel} unsubscribed by the cluster (its slot moved)")
            return
        if kind in ("message", "smessage"):
            data = message.get("data")
            self._message(shard, raw_channel if isinstance(raw_channel, bytes) else channel.encode(), data, batch)

    def _message(
        self, shard: _Shard, channel: bytes, data: object, batch: list[tuple[str, RoomVersion | Appended]]
    ) -> None:
        """A published message: another node's room event goes into ``batch``; our heartbeat is checked."""
        try:
            decoded = _decoder.decode(data if isinstance(data, bytes) else b"")
        except msgspec.DecodeError:
            _log(logging.ERROR, "node_message_unreadable", channel=channel.decode(errors="replace"))
            return
        if isinstance(decoded, Heartbeat):
            if decoded.node != self.node_id or channel.decode(errors="replace") != shard.beat_channel:
                return
            shard.heard_at = time.monotonic()
            sent = shard.beats.pop(decoded.seq, None)
            if sent is not None and self._on_lag is not None:
                self._on_lag(time.perf_counter() - sent)
            gap = shard.heard != 0 and decoded.seq != shard.heard + 1
            shard.heard = decoded.seq
            if gap:
                self.missed += 1
                _log(logging.WARNING, "node_pubsub_gap", shard=shard.name, rooms=len(shard.rooms))
                self._on_missed(set(shard.rooms))
            return
        if decoded.node == self.node_id:
            return  # our own
        start, end = channel.find(b"{"), channel.rfind(b"}")  # the room's code is the channel's hash tag
        if 0 <= start < end:
            self.received += 1
            batch.append((channel[start + 1 : end].decode(errors="replace"), decoded))


def as_message(reply: object) -> dict[str, Any] | None:
    """A pub/sub reply as hiredis reads it (``[kind, channel, data]``), in redis-py's message shape."""
    if not isinstance(reply, list) or len(reply) != 3 or not isinstance(reply[0], bytes):
        _log(logging.ERROR, "node_reply_unexpected", reply=repr(reply)[:200])
        return None
    return {"type": reply[0].decode(), "channel": reply[1], "data": reply[2]}


def stream_of(connection: object) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The socket's streams of a connected redis-py connection (it connected, authenticated and
    subscribed; the node reads the socket itself from then on, and sends commands through it)."""
    reader = getattr(connection, "_reader", None)
    writer = getattr(connection, "_writer", None)
    if not isinstance(reader, asyncio.StreamReader) or not isinstance(writer, asyncio.StreamWriter):
        raise ConnectionError(f"this redis-py ({redis.__version__}) connection has no socket streams to read")
    return reader, writer


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
