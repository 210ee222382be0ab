"""The move append pipeline: group commit to the store, its backlog, and the levels it reports.

Its condition (``load``: the store's writes backed up, or the loop's turn full) goes with each
move to the core, which decides the move's ``busy`` answer (server/core/wal.py, the one rule).

Every accepted move is a ``PersistMove``: queued at once (a retried write comes from the core only
when its own back-off is over, so no second delay is added here), sent with the others of its
event-loop turn as one batch (one store round trip) of up to ``append_batch_max``, with at most
``append_batches_in_flight`` out at once; the rest waits for a batch to come back, so batches
grow with the load. Each entry is its own compare-and-set: one failed entry fails only its move.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from server.core.events import MovePersisted, MovePersistFailed, MovesAnswered, PersistMove
from server.core.records import encode_record
from server.shell.config import log, log_event, now_ms
from server.shell.part import Part, ShellContext
from server.store.base import AppendRequest, AppendResult, StoreUnavailable

TURN_GAP_S = 0.05  # turns with moves further apart than this are not one backlog (busy_turn_streak)


class AppendPipeline(Part):
    """``load`` on a move's arrival (the condition the core answers ``busy`` on), ``enqueue`` its
    write; ``backlog`` and ``batches_in_flight`` are the levels /metrics reports."""

    def __init__(self, ctx: ShellContext) -> None:
        super().__init__(ctx)
        self.backlog = 0  # moves queued, backing off or in flight to the store
        self.batches_in_flight = 0
        self._queue: list[PersistMove] = []  # waiting for the next batch
        # id of each batch in flight -> when it was sent. Batches are sent in time order, so the
        # first one left in this (insertion-ordered) dict is the oldest in flight.
        self._batch_starts: dict[int, float] = {}
        self._batch_ids = itertools.count()
        self._flush_scheduled = False
        self._turn_moves = 0  # moves that arrived in this turn of the event loop (_end_turn resets it)
        self._big_turns = 0  # turns in a row, back to back, with at least busy_turn_moves moves each
        self._turn_ended = 0.0  # when the last turn with moves ended (time.monotonic)

    @property
    def idle(self) -> bool:
        """Nothing queued for a batch (batches in flight are the shell's tasks)."""
        return not self._queue

    # ------------------------------------------------------------------ the pipeline's condition

    def load(self) -> str | None:
        """A new move from a bound connection arrived: counted in its turn, and the condition it
        finds (``busy``), which goes to the core with the move (``ClientEvent.load``)."""
        if self.config.busy_turn_moves:  # the loop's share is off by default: no count then
            self._count_turn_move()
        return self.busy()

    def busy(self) -> str | None:
        """Whether the pipeline is backed up (None: it is not): "store", the store's writes are
        backed up; "loop", this turn of the event loop has taken on its share of moves already."""
        limit = self.config.busy_turn_moves
        if limit and self._turn_moves > limit and self._big_turns >= self.config.busy_turn_streak:
            return "loop"
        if self.backlog >= self.config.append_backlog_limit:
            return "store"
        stall = self.config.append_stall_ms / 1000
        if self._batch_starts and time.monotonic() - next(iter(self._batch_starts.values())) > stall:
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

    # ------------------------------------------------------------------ group commit

    def enqueue(self, effect: PersistMove) -> None:
        self.backlog += 1
        self._queue.append(effect)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        size = self.config.append_batch_max
        while self._queue and self.batches_in_flight < self.config.append_batches_in_flight:
            batch = self._queue[:size]
            del self._queue[:size]
            self.batches_in_flight += 1
            self.tasks.spawn(self._write_batch(batch))

    async def _write_batch(self, batch: list[PersistMove]) -> None:
        """Append a batch, then hand the core each move's own outcome (one ``MovesAnswered``)."""
        results: list[AppendResult | StoreUnavailable]
        batch_id = next(self._batch_ids)
        self._batch_starts[batch_id] = time.monotonic()
        try:
            requests = [self._request(e) for e in batch]
            results = await self.store.append_moves(requests)
        except StoreUnavailable as exc:
            results = [exc] * len(batch)
        except Exception as exc:  # a bug: nothing was written (requests are checked first); settle by reload
            log.exception("append_batch_failed", extra={"fields": {"moves": len(batch)}})
            results = [StoreUnavailable(repr(exc))] * len(batch)
        finally:
            del self._batch_starts[batch_id]
            self.batches_in_flight -= 1
            self.backlog -= len(batch)
            if self._queue and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
        appended = AppendResult.APPENDED  # once: an Enum member read through its class is slow (gate.py)
        self.link.noticed(sum(1 for result in results if result is appended))
        now = now_ms()  # one answer for the whole batch: the same moment for each of its moves
        answers: list[MovePersisted | MovePersistFailed] = []
        for effect, result in zip(batch, results, strict=True):
            event: MovePersisted | MovePersistFailed
            if result is appended:
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
            answers.append(event)
        # The batch's answers as one core event (its per-event work once, not once per move).
        self.dispatch(answers[0] if len(answers) == 1 else MovesAnswered(tuple(answers), now))

    def _request(self, effect: PersistMove) -> AppendRequest:
        entry = encode_record(effect.entry)
        # Several nodes: the other nodes hear of the entry from the append itself (its notice).
        notice = self.link.appended_notice(effect.race, effect.player_id, effect.expected_length, entry)
        return AppendRequest(effect.code, effect.race, effect.player_id, effect.expected_length, entry, notice)
