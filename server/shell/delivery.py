"""Delivery: the connection registry, frames out without waiting for any reader, slow readers cut.

Every open connection is a :class:`Conn`; a bound one speaks for a player (``Bind``), and a
message to players goes to every connection bound to each. ``broadcast()`` has no backpressure,
so each connection's kernel-side buffer is checked as frames go out and on a timer: over the soft
limit a connection misses droppable (progress) frames, the next one replaces them; over the hard
limit, or over the soft one for longer than ``slow_grace_s``, it cannot keep up and is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection, broadcast

from server.limits import AnswerBudgets, ByteBudget, TokenBucket
from server.shell.config import ServerConfig, ServerStats, Tasks, log_event
from shared import protocol as p

if TYPE_CHECKING:
    from server.metrics import Metrics

MOVE_ANSWERS = (p.MoveOk, p.MoveRejected)  # a tuple: ``A | B`` in isinstance builds a union at each call


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


def results_key(results: p.Results) -> str:
    """What tells one race's results from another's for a connection: the race's commitment, and
    whether its rating changes are in (a rated race's results go out again with them)."""
    return results.commitment + (":rated" if results.ratings else "")


class Delivery:
    """The open connections (``conns``), each player's (``conns_of``), and every frame out."""

    def __init__(
        self, config: ServerConfig, stats: ServerStats, metrics: Metrics | None, tasks: Tasks, answers: AnswerBudgets
    ) -> None:
        self.config = config
        self.tasks = tasks
        self.answers = answers  # every frame written is reported to the answer budgets
        self.stats = stats
        self.metrics = metrics
        self.conns: dict[int, Conn] = {}
        self.player_conns: dict[str, set[int]] = {}
        self._ids = itertools.count(1)
        self._watch: asyncio.Task[None] | None = None
        self.on_check: Callable[[], None] = lambda: None  # also run on the buffer timer (address limits' pruning)

    # ------------------------------------------------------------------ the registry

    def open(self, ws: ServerConnection, bucket: TokenBucket, address: str) -> Conn:
        conn = Conn(next(self._ids), ws, bucket, address, answers=self.answers.for_connection())
        self.conns[conn.id] = conn
        self.stats.connections += 1
        return conn

    def ended(self, conn: Conn) -> None:
        self.conns.pop(conn.id, None)
        self.unbind(conn)

    def bind(self, conn_id: int, player_id: str) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None:
            conn.player = player_id
            self.player_conns.setdefault(player_id, set()).add(conn_id)

    def unbind(self, conn: Conn) -> None:
        """The connection no longer speaks for its player: frames to the player skip it."""
        if conn.player is None:
            return
        conns = self.player_conns.get(conn.player)
        if conns is not None:
            conns.discard(conn.id)
            if not conns:
                del self.player_conns[conn.player]
        conn.player = None

    def close(self, conn_id: int, code: int, reason: str) -> None:
        """Unbind the connection, then close it after what was already written to it (the frames
        before the close frame are delivered)."""
        conn = self.conns.get(conn_id)
        if conn is None:
            return
        self.unbind(conn)
        self.tasks.spawn(close_ws(conn.ws, code, reason))

    def reaches(self, players: tuple[str, ...]) -> bool:
        """Would a frame to ``players`` reach any connection here? (Several nodes: most frames of a
        shared room are addressed to members on other nodes too, some to none here.)"""
        player_conns = self.player_conns
        return any(player in player_conns for player in players)

    # ------------------------------------------------------------------ frames out

    def to_players(self, players: tuple[str, ...], message: p.ServerMessage, droppable: bool) -> None:
        if len(players) == 1 and type(message) is p.MoveOk:  # most frames: a racer's acknowledgement
            conns_of = self.player_conns.get(players[0])
            if conns_of:
                self.deliver(list(conns_of), p.encode(message), droppable)
        elif isinstance(message, p.Results):
            self._send_results(players, message)
        elif self.reaches(players):  # never encoded for nobody
            conns: list[int] = []
            for player in players:
                conns.extend(self.player_conns.get(player, ()))
            self.deliver(conns, p.encode(message), droppable)
        if self.metrics is not None and isinstance(message, p.MoveOk):
            self._count_ok(players, message)  # to all the racer's connections

    def to_conn(self, conn_id: int, message: p.ServerMessage) -> None:
        target = self.conns.get(conn_id)
        if target is None:
            return
        if isinstance(message, p.Results):
            if target.results_seen == results_key(message):
                return  # it has them (a read-back's fresh snapshot sends them again)
            target.results_seen = results_key(message)
        self.reply(target, message)

    def frame_to_conn(self, conn_id: int, message: p.ServerMessage, frame: bytes) -> None:
        """``message`` to one connection, encoded already (``frame``: the core's busy answers)."""
        target = self.conns.get(conn_id)
        if target is not None:
            self.reply(target, message, frame)

    def reply(self, conn: Conn, message: p.ServerMessage, frame: bytes | None = None) -> None:
        if isinstance(message, p.Error):
            self.stats.errors_sent += 1
        self.deliver([conn.id], p.encode(message) if frame is None else frame, False)
        if self.metrics is not None and (
            isinstance(message, MOVE_ANSWERS) or (isinstance(message, p.Error) and message.id is not None)
        ):
            self._count_answer(conn, message)

    def _send_results(self, players: tuple[str, ...], results: p.Results) -> None:
        """A race's results, once per connection: several nodes read a room back after every change
        another node makes, and each read-back sends its local members the results again."""
        key = results_key(results)
        targets = [
            conn
            for player in players
            for cid in self.player_conns.get(player, ())
            if (conn := self.conns.get(cid)) is not None and conn.results_seen != key
        ]
        for conn in targets:
            conn.results_seen = key
        if targets:
            self.deliver([conn.id for conn in targets], p.encode(results), False)

    def deliver(self, conn_ids: list[int], frame: bytes, droppable: bool) -> None:
        """Write ``frame`` to these connections without waiting for any of them (see the module)."""
        targets: list[ServerConnection] = []
        clock = time.monotonic()
        for cid in conn_ids:
            conn = self.conns.get(cid)
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

    def broadcast_all(self, frame: bytes) -> None:
        broadcast([c.ws for c in self.conns.values()], frame)

    # ------------------------------------------------------------------ slow readers

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

    def start(self) -> None:
        self._watch = asyncio.ensure_future(self._watch_buffers())

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def _watch_buffers(self) -> None:
        """Every connection's write buffer on a timer, not only when a game message goes out:
        a client that never reads while the server answers it (pongs, errors) is cut too."""
        while True:
            await asyncio.sleep(self.config.buffer_check_s)
            clock = time.monotonic()
            for conn in list(self.conns.values()):
                if not conn.cut:
                    self._buffer_state(conn, clock)
            self.on_check()

    def _cut(self, conn: Conn, buffered: int) -> None:
        conn.cut = True
        self.stats.slow_disconnects += 1
        log_event(logging.WARNING, "too_slow", conn=conn.id, player=conn.player, buffered=buffered)
        conn.ws.transport.abort()

    # ------------------------------------------------------------------ move latency (metrics on)

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
            for cid in self.player_conns.get(player, ()):
                conn = self.conns.get(cid)
                sent = conn.moves_in.pop(message.id, None) if conn is not None else None
                if sent is not None:
                    received = sent
        self.metrics.accepted(None if received is None else time.perf_counter() - received, message.duplicate)


async def close_ws(ws: ServerConnection, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code, reason)
