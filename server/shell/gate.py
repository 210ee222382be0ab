"""The connection gate: what a connection may send, and each message decoded into a core event.

A WebSocket upgrade is refused while the server stops, is full, or the address holds its cap of
connections. Each message is counted against the connection's rate (pings and pongs too, in
:class:`PlotConnection`), decoded (a bad frame becomes an error reply here, never an exception
further in), checked against its address's budgets (hellos, room creations, failed joins), and
a move with the append pipeline's condition (``load``, which the core answers ``busy`` on); what
passes goes to the core.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Event as WsEvent

from server.core.events import ClientEvent, Connected, Disconnected, HelloEvent
from server.limits import AddressLimits, AnswerBudgets, TokenBucket, address_key
from server.proxy import ProxiedConnection
from server.shell.appends import AppendPipeline
from server.shell.config import ServerStats, log, log_event, now_ms
from server.shell.delivery import Conn, Delivery, close_ws
from server.shell.part import Part, ShellContext
from server.store.base import StoreUnavailable
from shared import protocol as p


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
        if self.bucket is not None and opcode in (Opcode.PING, Opcode.PONG) and not self.bucket.allow():
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


class Gate(Part):
    """Connections in: the upgrade check, each connection's life, and every message it sends."""

    def __init__(
        self,
        ctx: ShellContext,
        stats: ServerStats,
        delivery: Delivery,
        appends: AppendPipeline,
        limits: AddressLimits,
        answers: AnswerBudgets,
    ) -> None:
        super().__init__(ctx)
        self.stats = stats
        self.delivery = delivery
        self.appends = appends
        self.limits = limits
        self.answers = answers
        self.closing = False
        self.timed = False  # move receipts are kept for the latency metric (metrics on)

    def refuse(self, connection: ServerConnection) -> Response | None:
        """The upgrade's check: a refusal (503, 429), or None to go on with the handshake."""
        if self.closing:
            return connection.respond(503, "the server is shutting down\n")
        if len(self.delivery.conns) >= self.config.max_connections:
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

    async def handler(self, ws: ServerConnection) -> None:
        plot_ws = ws if isinstance(ws, PlotConnection) else None
        bucket = plot_ws.bucket if plot_ws is not None else None
        address = plot_ws.address if plot_ws is not None else "local"
        conn = self.delivery.open(ws, bucket or TokenBucket(self.config.rate_per_s, self.config.burst), address)
        deadline = asyncio.get_running_loop().call_later(self.config.limits.hello_timeout_s, self._hello_overdue, conn)
        if self.config.socket_sndbuf is not None:
            sock = ws.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_sndbuf)
        self.dispatch(Connected(conn.id, now_ms()))
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
            self.delivery.ended(conn)
            self.dispatch(Disconnected(conn.id, now_ms()))

    def _on_message(self, conn: Conn, frame: str | bytes) -> None:
        """One message from a connection: counted against its rate, then handled. Past the rate it
        is answered rate_limited and closed (1008); what comes meanwhile is read and dropped, so the
        close handshake is never stuck behind a full queue."""
        if conn.limited:
            return
        self.stats.frames_in += 1
        if not conn.bucket.allow():
            conn.limited = True
            self.stats.rate_limited += 1
            limit = f"{self.config.rate_per_s:g} messages per second"
            self.delivery.reply(conn, p.Error(code=p.RATE_LIMITED, message=f"too many messages (limit {limit})"))
            log_event(logging.WARNING, "rate_limited", conn=conn.id, player=conn.player)
            self.tasks.spawn(close_ws(conn.ws, 1008, "rate limit exceeded"))
            return
        self._on_frame(conn, frame)

    def _hello_overdue(self, conn: Conn) -> None:
        """The hello deadline: a connection that has said nothing useful gives its slot back."""
        if conn.hello_seen or conn.cut or conn.id not in self.delivery.conns:
            return
        self.stats.hello_timeouts += 1
        timeout = self.config.limits.hello_timeout_s
        log_event(logging.INFO, "hello_timeout", conn=conn.id, address=conn.address, seconds=timeout)
        self.tasks.spawn(close_ws(conn.ws, 1008, f"no hello within {timeout:g} s"))

    def _address_limited(self, conn: Conn, msg: p.ClientMessage) -> p.Error | None:
        """The per-address budgets (server/limits.py): a hello, a room creation or a join past
        its address's budget is answered rate_limited with a retry hint, and never reaches the core."""
        limits = self.config.limits
        if isinstance(msg, p.Claim) and conn.player is not None:
            wait = self.limits.take_claim(conn.address)
            if wait == 0.0:
                return None
            self.stats.address_limited["claim"] += 1
            log_event(logging.WARNING, "address_limited", conn=conn.id, address=conn.address, what="claims")
            retry_ms = max(1, round(wait * 1000))
            return p.Error(
                code=p.CLAIM_LIMIT,
                message=f"too many name claims from your address (limit {limits.claims_per_hour} an hour): "
                f"try again in {wait / 60:.0f} min; retry_ms={retry_ms}",
                ref="claim",
            )
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

    def _on_frame(self, conn: Conn, frame: str | bytes) -> None:
        msg: p.ClientMessage | None = None
        try:
            if isinstance(frame, str):
                raise p.ProtocolError(p.MALFORMED, "messages are binary MessagePack frames, not text")
            msg = p.decode_client(frame)
            if isinstance(msg, p.Move):  # most frames: none of the checks below concerns a move
                # The pipeline's condition goes with the move; the core answers it busy on it.
                load = self.appends.load() if conn.player is not None else None
                if self.timed and load is None:  # a move refused busy has no latency to measure
                    if len(conn.moves_in) >= 1024:  # answers that never came (cannot happen; never grows for ever)
                        conn.moves_in.clear()
                    conn.moves_in[msg.id] = time.perf_counter()
                self.dispatch(ClientEvent(conn.id, msg, now_ms(), load))
                return
            if isinstance(msg, p.Hello):
                conn.hello_seen = True
            limited = self.answers.refusal(conn, msg) or self._address_limited(conn, msg)
            if limited is not None:
                self.delivery.reply(conn, limited)
                return
            if isinstance(msg, p.Hello):
                self.dispatch(HelloEvent(conn.id, msg, now_ms()))
                return
            self.dispatch(ClientEvent(conn.id, msg, now_ms()))
            if isinstance(msg, p.Join) and conn.player is not None:
                if self.core.is_member(msg.code, conn.player):
                    self.limits.join_succeeded(conn.address)  # only failed joins spend the budget
                elif not self.core.has_room(msg.code):
                    conn.join_pending = msg.code  # decided once the room is loaded
        except p.ProtocolError as exc:
            self.delivery.reply(conn, exc.to_message())
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=conn.id, error=str(exc))
            ref = None if msg is None else p.message_type(msg)
            self.delivery.reply(
                conn, p.Error(code=p.STORE_UNAVAILABLE, message="the store did not answer: retry", ref=ref)
            )
        except Exception:
            ref = None if msg is None else p.message_type(msg)
            log.exception("frame_failed", extra={"fields": {"conn": conn.id, "type": ref}})
            self.delivery.reply(conn, p.Error(code=p.INTERNAL, message="the server failed on this message", ref=ref))

    def room_loaded(self, code: str) -> None:
        """A room was loaded: the joins that waited for it are decided (a failed one spends its budget)."""
        for conn in self.delivery.conns.values():
            if conn.join_pending == code:
                conn.join_pending = None
                if conn.player is not None and self.core.is_member(code, conn.player):
                    self.limits.join_succeeded(conn.address)


__all__ = ["Gate", "PlotConnection", "Request"]
