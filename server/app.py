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
import json
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from server.core import CoreConfig, ServerCore
from server.core.events import (
    Bind,
    BlockedChecked,
    CheckBlocked,
    ClientEvent,
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
    ListRooms,
    LoadRoom,
    LogReloaded,
    LookupToken,
    MovePersisted,
    MovePersistFailed,
    Note,
    PersistMove,
    PlayerRegistered,
    RegisterFailed,
    RegisterPlayer,
    ReloadLog,
    Reply,
    RoomCreated,
    RoomCreateFailed,
    RoomLoaded,
    RoomsListed,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Tick,
    TokenLooked,
    Wake,
)
from server.core.records import (
    LogEntry,
    PlayerRecord,
    RoomRecord,
    decode_entry,
    decode_player,
    decode_room,
    encode_record,
)
from server.fanout import Fanout, LocalFanout
from server.store.base import Store, StoreUnavailable
from server.winnable import DealFinder, WinnableConfig
from shared import protocol as p

log = logging.getLogger("plot.server")
NOTE_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_event(level: int, event: str, **fields: object) -> None:
    """A structured log line: the event name plus fields (rendered as JSON by the CLI's formatter)."""
    log.log(level, event, extra={"fields": fields})


def now_ms() -> int:
    return int(time.time() * 1000)


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
    ping_interval: float | None = 20.0
    ping_timeout: float | None = 20.0
    socket_sndbuf: int | None = None  # kernel send buffer per connection (None: the system's)
    tls_cert: str | None = None
    tls_key: str | None = None
    list_limit: int = 100
    shutdown_retry_ms: int = 3000
    flush_timeout_s: float = 5.0
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


@dataclass(slots=True)
class Conn:
    id: int
    ws: ServerConnection
    bucket: TokenBucket
    player: str | None = None
    over_since: float | None = None
    cut: bool = False


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
        self.core = core or ServerCore(self.config.core)
        self.store_name = store_name
        self.stats = ServerStats()
        self.fanout = fanout or LocalFanout(self._conns_of, self._deliver)
        self._conns: dict[int, Conn] = {}
        self._player_conns: dict[str, set[int]] = {}
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self._closing = False
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._room_ops: dict[str, deque[tuple[str, object]]] = {}
        self._room_workers: dict[str, asyncio.Task[None]] = {}
        self._store_versions: dict[str, int | None] = {}
        self._player_saves: dict[str, SavePlayer] = {}
        self._player_workers: dict[str, asyncio.Task[None]] = {}
        self.deal_finder = DealFinder(self.config.winnable)  # its worker process starts with the first search
        self._searches: set[asyncio.Task[None]] = set()

    # ================================================================ lifecycle

    async def start(self) -> None:
        ssl_context: ssl.SSLContext | None = None
        if self.config.tls_cert:
            ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ssl_context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        self._server = await serve(
            self._handler,
            self.config.host,
            self.config.port,
            compression=None,
            max_size=self.config.max_frame,
            max_queue=4,
            ping_interval=self.config.ping_interval,
            ping_timeout=self.config.ping_timeout,
            process_request=self._process_request,
            ssl=ssl_context,
            server_header="plot-server",
        )
        log_event(
            logging.INFO,
            "server_started",
            host=self.config.host,
            port=self.port,
            store=self.store_name,
            tls=ssl_context is not None,
        )

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
        log_event(logging.INFO, "server_stopping", reason=reason, connections=len(self._conns))
        frame = p.encode(p.Shutdown(reason=reason, retry_after_ms=self.config.shutdown_retry_ms))
        broadcast([c.ws for c in self._conns.values()], frame)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for search in self._searches:
            search.cancel()  # a room still dealing is stored so: a restarted server searches again
        self.deal_finder.shutdown()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.flush(self.config.flush_timeout_s)
        log_event(logging.INFO, "server_stopped")

    async def flush(self, timeout: float) -> None:
        """Wait for pending store writes (moves, rooms, players)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [t for t in (*self._tasks, *self._room_workers.values(), *self._player_workers.values())]
            if not pending:
                return
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        log_event(logging.WARNING, "flush_timeout", rooms=list(self._room_workers))

    # ================================================================ HTTP

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            healthy = True
            try:
                await asyncio.wait_for(self.store.ping(), 2.0)
            except (StoreUnavailable, TimeoutError, OSError):
                healthy = False
            body = {
                "status": "ok" if healthy else "unavailable",
                "store": self.store_name,
                "store_ok": healthy,
                "connections": len(self._conns),
                "rooms": len(self.core.rooms),
                "protocol": p.PROTOCOL_VERSION,
            }
            response = connection.respond(200 if healthy else 503, json.dumps(body) + "\n")
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        if self._closing:
            return connection.respond(503, "the server is shutting down\n")
        if len(self._conns) >= self.config.max_connections:
            return connection.respond(503, "the server is full: try again later\n")
        return None

    # ================================================================ connections

    async def _handler(self, ws: ServerConnection) -> None:
        conn = Conn(next(self._ids), ws, TokenBucket(self.config.rate_per_s, self.config.burst))
        if self.config.socket_sndbuf is not None:
            sock = ws.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_sndbuf)
        self._conns[conn.id] = conn
        self.stats.connections += 1
        self._dispatch(Connected(conn.id, now_ms()))
        try:
            async for frame in ws:
                self.stats.frames_in += 1
                if not conn.bucket.take():
                    self.stats.rate_limited += 1
                    limit = f"{self.config.rate_per_s:g} messages per second"
                    self._reply(conn, p.Error(code=p.RATE_LIMITED, message=f"too many messages (limit {limit})"))
                    log_event(logging.WARNING, "rate_limited", conn=conn.id, player=conn.player)
                    closer = asyncio.ensure_future(ws.close(1008, "rate limit exceeded"))
                    async for _ignored in ws:  # drain, or a full incoming queue would stall the close handshake
                        pass
                    await closer
                    break
                await self._on_frame(conn, frame)
        except ConnectionClosed:
            pass
        finally:
            self._conns.pop(conn.id, None)
            if conn.player is not None:
                conns = self._player_conns.get(conn.player)
                if conns is not None:
                    conns.discard(conn.id)
                    if not conns:
                        del self._player_conns[conn.player]
            self._dispatch(Disconnected(conn.id, now_ms()))

    async def _on_frame(self, conn: Conn, frame: str | bytes) -> None:
        ref: str | None = None
        try:
            if isinstance(frame, str):
                raise p.ProtocolError(p.MALFORMED, "messages are binary MessagePack frames, not text")
            msg = p.decode_client(frame)
            ref = p.message_type(msg)
            if isinstance(msg, p.Hello):
                self._dispatch(HelloEvent(conn.id, msg, now_ms()))
                return
            self._dispatch(ClientEvent(conn.id, msg, now_ms()))
        except p.ProtocolError as exc:
            self._reply(conn, exc.to_message())
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=conn.id, error=str(exc))
            self._reply(conn, p.Error(code=p.STORE_UNAVAILABLE, message="the store did not answer: retry", ref=ref))
        except Exception:
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
        self._execute(effects)

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self.fanout.publish(None, effect.players, p.encode(effect.message), effect.droppable)
            elif isinstance(effect, Reply):
                target = self._conns.get(effect.conn)
                if target is not None:
                    self._reply(target, effect.message)
            elif isinstance(effect, PersistMove):
                self._spawn(self._persist(effect))
            elif isinstance(effect, Wake):
                self._wake(effect.code, effect.at_ms)
            elif isinstance(effect, SaveRoom):
                self._room_op(effect.code, "save", effect.record)
            elif isinstance(effect, Note):
                log_event(NOTE_LEVELS[effect.level], effect.event, **effect.fields)
            elif isinstance(effect, Bind):
                bound = self._conns.get(effect.conn)
                if bound is not None:
                    bound.player = effect.player_id
                    self._player_conns.setdefault(effect.player_id, set()).add(effect.conn)
            elif isinstance(effect, SavePlayer):
                self._save_player(effect)
            elif isinstance(effect, RegisterPlayer):
                self._spawn(self._register(effect))
            elif isinstance(effect, CreateRoomRecord):
                self._spawn(self._create_room(effect))
            elif isinstance(effect, SetListed):
                self._room_op(effect.code, "listed", effect.listed)
            elif isinstance(effect, ExpireRoom):
                self._room_op(effect.code, "expire", effect.seconds)
            elif isinstance(effect, ReloadLog):
                self._spawn(self._reload(effect))
            elif isinstance(effect, FindDeal):
                search = asyncio.ensure_future(self._find_deal(effect))
                self._searches.add(search)
                search.add_done_callback(self._searches.discard)
            elif isinstance(effect, CheckBlocked):
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
                if effect.code not in self._room_workers:
                    self._store_versions.pop(effect.code, None)
            else:
                assert_never(effect)

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
        self._dispatch(Tick(code, now_ms()))

    # ================================================================ frames out

    def _conns_of(self, player: str) -> set[int]:
        return self._player_conns.get(player, set())

    def _reply(self, conn: Conn, message: p.ServerMessage) -> None:
        if isinstance(message, p.Error):
            self.stats.errors_sent += 1
        self._deliver([conn.id], p.encode(message), False)

    def _deliver(self, conn_ids: list[int], frame: bytes, droppable: bool) -> None:
        """Write ``frame`` to these connections without waiting for any of them (``broadcast``).

        broadcast() has no backpressure, so the buffers are checked here: a connection over the
        soft limit misses droppable (progress) frames, the next one replaces them; one over the
        hard limit, or over the soft limit for too long, cannot keep up and is cut."""
        targets: list[ServerConnection] = []
        clock = time.monotonic()
        soft, hard = self.config.write_soft_limit, self.config.write_hard_limit
        for cid in conn_ids:
            conn = self._conns.get(cid)
            if conn is None or conn.cut:
                continue
            buffered = conn.ws.transport.get_write_buffer_size()
            if buffered > soft:
                if conn.over_since is None:
                    conn.over_since = clock
                if buffered > hard or clock - conn.over_since > self.config.slow_grace_s:
                    self._cut(conn, buffered)
                    continue
                if droppable:
                    self.stats.dropped_frames += 1
                    continue
            else:
                conn.over_since = None
            targets.append(conn.ws)
        if targets:
            self.stats.frames_out += len(targets)
            broadcast(targets, frame)

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
        delay = 0.05
        while True:
            try:
                loaded = await self.store.load_room(code)
                record: RoomRecord | None = None
                version: int | None = None
                logs: dict[str, list[LogEntry]] = {}
                if loaded is not None:
                    data, version = loaded
                    try:
                        record = decode_room(data)
                    except msgspec.DecodeError:
                        log_event(logging.ERROR, "room_record_unreadable", room=code)
                if record is not None and record.race is not None and record.members and not record.closed:
                    for racer in record.race.racers:
                        raw = await self.store.load_moves(code, record.race.number, racer.player_id)
                        logs[racer.player_id] = self._decode_entries(code, raw)
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
            self._dispatch(RoomLoaded(code, record, logs, now_ms()))
            return

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
                loaded = await self.store.load_room(code)
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

    async def _persist(self, effect: PersistMove) -> None:
        event: Event
        try:
            appended = await self.store.append_move(
                effect.code, effect.race, effect.player_id, effect.expected_length, encode_record(effect.entry)
            )
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "append_failed", room=effect.code, player=effect.player_id, error=str(exc))
            event = MovePersistFailed(effect.code, effect.race, effect.player_id, "uncertain", now_ms())
        else:
            if appended:
                event = MovePersisted(effect.code, effect.race, effect.player_id, effect.expected_length + 1, now_ms())
            else:
                log_event(logging.WARNING, "append_conflict", room=effect.code, player=effect.player_id)
                event = MovePersistFailed(effect.code, effect.race, effect.player_id, "conflict", now_ms())
        self._dispatch(event)

    async def _find_deal(self, effect: FindDeal) -> None:
        """A winnable deal for a room, from the worker process; the event loop only waits for it."""
        outcome = await self.deal_finder.find()
        log_event(
            logging.INFO if outcome.deal is not None else logging.WARNING,
            "deal_search_finished",
            room=effect.code,
            race=effect.race,
            found=outcome.deal is not None,
            seconds=round(outcome.seconds, 3),
            positions=outcome.positions,
            detail=outcome.detail,
        )
        self._dispatch(DealFound(effect.code, effect.race, effect.search, outcome.deal, now_ms(), outcome.detail))

    async def _check_blocked(self, effect: CheckBlocked) -> None:
        """The exact blocked check of a racer's position, in the worker process (it may take seconds)."""
        started = time.monotonic()
        blocked = await self.deal_finder.blocked(effect.deal, effect.entries, effect.undo)
        log_event(
            logging.INFO if blocked is not None else logging.WARNING,
            "blocked_check_finished",
            room=effect.code,
            player=effect.player_id,
            entries=effect.length,
            blocked=blocked,
            seconds=round(time.monotonic() - started, 3),
        )
        self._dispatch(BlockedChecked(effect.code, effect.race, effect.player_id, effect.length, blocked, now_ms()))

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
        event: Event
        try:
            created = await self.store.create_room(code, encode_record(effect.record))
        except StoreUnavailable:
            event = RoomCreateFailed(effect.conn, effect.record, False, now_ms())
        else:
            if created:
                self._store_versions[code] = 1
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
        delay = 0.05
        try:
            while pid in self._player_saves:
                effect = self._player_saves[pid]
                try:
                    data = encode_record(effect.record)
                    await self.store.put_player(pid, effect.token_hash, data, ttl_s=effect.ttl_s)
                except StoreUnavailable:
                    await asyncio.sleep(delay)
                    delay = min(2.0, delay * 2)
                    continue
                if self._player_saves.get(pid) is effect:
                    del self._player_saves[pid]
        finally:
            self._player_workers.pop(pid, None)

    def _room_op(self, code: str, kind: str, value: object) -> None:
        ops = self._room_ops.setdefault(code, deque())
        if kind == "save" and ops and ops[-1][0] == "save":
            ops[-1] = (kind, value)  # latest wins
        else:
            ops.append((kind, value))
        if code not in self._room_workers:
            self._room_workers[code] = asyncio.ensure_future(self._room_worker(code))

    async def _room_worker(self, code: str) -> None:
        """One room's writes, in order (a save never lands after the expiry that followed it)."""
        ops = self._room_ops[code]
        delay = 0.05
        try:
            while ops:
                kind, value = ops[0]
                try:
                    if kind == "save":
                        assert isinstance(value, RoomRecord)
                        await self._save_room(code, value)
                    elif kind == "listed":
                        await self.store.set_listed(code, bool(value))
                    elif kind == "expire":
                        assert value is None or isinstance(value, int | float)
                        await self.store.expire_room(code, value)
                except StoreUnavailable as exc:
                    if kind == "save":
                        self._store_versions[code] = None  # it may have landed: reload the version
                    log_event(logging.WARNING, "room_write_failed", room=code, op=kind, error=str(exc))
                    await asyncio.sleep(delay)
                    delay = min(2.0, delay * 2)
                    continue
                delay = 0.05
                ops.popleft()
        finally:
            self._room_workers.pop(code, None)
            if not ops:
                self._room_ops.pop(code, None)
                if not self.core.has_room(code):
                    self._store_versions.pop(code, None)

    async def _save_room(self, code: str, record: RoomRecord) -> None:
        data = encode_record(record)
        version = self._store_versions.get(code)
        if version is not None:
            new = await self.store.save_room(code, data, version)
            if new is not None:
                self._store_versions[code] = new
                return
            log_event(logging.WARNING, "room_save_conflict", room=code, expected=version)
        loaded = await self.store.load_room(code)
        if loaded is None:
            # Expired or deleted under us while still in use: store it afresh.
            if await self.store.create_room(code, data):
                self._store_versions[code] = 1
                if not record.options.private and record.members:
                    await self.store.set_listed(code, True)
            return
        new = await self.store.save_room(code, data, loaded[1])
        self._store_versions[code] = new


async def run_server(server: RaceServer, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then shut down cleanly."""
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop()
        with contextlib.suppress(StoreUnavailable):
            await server.store.close()
