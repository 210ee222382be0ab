"""Each racer's write-ahead move log, an explicit state machine (:class:`LogState`).

A valid move becomes the racer's *head* and a ``PersistMove`` effect; it is applied and
acknowledged only once the store holds it (``MovePersisted``). Moves behind the head wait in
the racer's queue, in order: moves are positional, so none is written before the head is
decided. A failed write is decided by re-reading the log (``ReloadLog``): the head landed
(acknowledged), or it did not (written again after a back-off, re-checked against the log's
position), or the store stays silent past ``CoreConfig.store_outage_ms`` (the head and the
queue are answered ``store_unavailable``; the racer's board is resent once the log is read).
The queue is bounded (``CoreConfig.max_queued_moves``): a move past it is answered ``busy`` at once.

``busy`` is decided here, and only here: a racer's queue past its bound, or a move whose event
says the shell's append pipeline is backed up (``ClientEvent.load``, :class:`PipelineBusy`).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from server.core.base import CoreBase
from server.core.events import (
    BlockedChecked,
    CheckBlocked,
    LogReloaded,
    MovePersisted,
    MovePersistFailed,
    PersistMove,
    ReloadLog,
    RemoteMoves,
    Reply,
)
from server.core.records import (
    LogEntry,
)
from server.core.state import (
    LOG_IDLE,
    LOG_OUTAGE,
    LOG_WRITING,
    LogState,
    PendingMove,
    PlayerState,
    RacerState,
    RaceState,
    RoomState,
)
from shared import protocol as p
from shared.engine import PLAYING, RESIGN, UNDO, IllegalMove

OUTAGE_REASON = (
    "the store did not answer in time: this move may or may not have been stored; "
    "resend it with the same id once the server sends your board again (race_start)"
)


def busy_answer(move_id: int, why: str, retry_ms: int) -> p.MoveRejected:
    """A move refused ``busy``, the one form of it: why, and when to send it again (the same id)."""
    reason = f"{why}: send it again (same id) in {retry_ms} ms; retry_ms={retry_ms}"
    return p.MoveRejected(id=move_id, code=p.BUSY, reason=reason)


PIPELINE_BUSY_WHY = {"store": "the server is busy writing moves", "loop": "the server is busy taking on moves"}
BUSY_SPREAD = 16  # retry hints per cause, evenly over the spread
_INT_ENCODER = msgspec.msgpack.Encoder()


class PipelineBusy:
    """The answers to moves refused because the append pipeline is backed up, each encoded once.

    Per cause, ``BUSY_SPREAD`` retry hints evenly over half to one and a half times
    ``busy_retry_ms``, one drawn at random per refusal (so that the moves refused in one turn do
    not all come back in one turn). Each answer's frame is kept as the bytes before and after the
    move id's value: a refusal costs the id's encoding and a join, not a reason string and an
    encode of the whole message (a refusal is the overloaded server's commonest answer)."""

    def __init__(self, retry_ms: int, pick: Callable[[int], int]) -> None:
        self._pick = pick
        self._answers: dict[str, list[tuple[str, bytes, bytes]]] = {}
        for cause, why in PIPELINE_BUSY_WHY.items():
            hints = [max(1, round(retry_ms * (0.5 + (i + 0.5) / BUSY_SPREAD))) for i in range(BUSY_SPREAD)]
            self._answers[cause] = [self._split(busy_answer(0, why, retry)) for retry in hints]

    @staticmethod
    def _split(answer: p.MoveRejected) -> tuple[str, bytes, bytes]:
        frame = p.encode(answer)  # id 0: one byte, right after the key "id"
        key = _INT_ENCODER.encode("id")
        at = frame.index(key) + len(key)
        assert frame[at] == 0, "a move_rejected frame holds its id right after the key"
        return answer.reason, frame[:at], frame[at + 1 :]

    def reply(self, conn: int, move_id: int, cause: str) -> Reply:
        answers = self._answers[cause]
        reason, head, tail = answers[self._pick(len(answers))]
        message = p.MoveRejected(id=move_id, code=p.BUSY, reason=reason)
        return Reply(conn, message, b"".join((head, _INT_ENCODER.encode(move_id), tail)))


class RacerLogMixin(CoreBase):
    # ---------------------------------------------------------------- moves in

    def _move(self, conn: int, player: PlayerState, msg: p.Move, now: int) -> None:
        code = player.room
        room = self.rooms.get(code) if code is not None else None
        if room is None:
            if code is not None and code in self._loading:
                why = "your room is being reloaded from the store: resend the move"
                self._reply(conn, p.MoveRejected(id=msg.id, code=p.STORE_UNAVAILABLE, reason=why))
                return
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.NOT_IN_ROOM, reason="you are not in a room"))
            return
        race = room.race
        if room.phase != p.RACING or race is None or race.ending:
            over = room.phase == p.RESULTS or (race is not None and race.ending)
            why = "the race is over" if over else "the race has not started"
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.WRONG_PHASE, reason=why))
            return
        racer = race.racers.get(player.player_id)
        if racer is None:
            why = "you are not racing in this race (spectators do not move)"
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.WRONG_PHASE, reason=why))
            return
        room.last_activity_ms = now
        seq = racer.ids.get(msg.id)
        if seq is not None:
            applied = racer.id_moves.get(msg.id)
            if applied is not None and applied != msg.move:
                self._refuse_reused_id(conn, msg, applied)
                return
            # A retry (lost ack, reconnect): never applied twice; answer with the current board.
            self._reply(conn, self._move_ok(racer, msg.id, seq, duplicate=True))
            return
        queued = racer.pending_ids.get(msg.id)
        if queued is not None:
            if queued != msg.move:
                self._refuse_reused_id(conn, msg, queued)
            elif racer.state is LOG_OUTAGE:
                # The outage's head, answered store_unavailable already and still undecided (only
                # the log can tell whether it landed): every resend gets that answer again.
                self._reply(conn, p.MoveRejected(id=msg.id, code=p.STORE_UNAVAILABLE, reason=OUTAGE_REASON))
            return  # else the same move is already on its way to the store; its answer will come
        if racer.state is LOG_OUTAGE:
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.STORE_UNAVAILABLE, reason=OUTAGE_REASON))
            return
        limit = self.config.max_queued_moves
        if limit and len(racer.queue) >= limit:
            # A client far ahead of its answers: refused before it costs a check or a write, and
            # nothing queued is touched (docs/protocol.md, busy).
            why = f"too many of your moves are waiting ({limit} queued behind the one being written)"
            self._reply(conn, busy_answer(msg.id, why, self.config.queue_retry_ms))
            return
        racer.pending_ids[msg.id] = msg.move
        racer.queue.append(PendingMove(msg.id, msg.move, conn))
        self._pump(room, racer, now)

    def _refuse_reused_id(self, conn: int, msg: p.Move, other: str) -> None:
        why = f"field 'id' of move: id {msg.id} belongs to the move {other!r}; a new move needs an unused id"
        self._reply(conn, p.MoveRejected(id=msg.id, code=p.BAD_FIELD, reason=why))

    def _move_ok(self, racer: RacerState, move_id: int, seq: int, duplicate: bool) -> p.MoveOk:
        """An acknowledgement with the whole board (a duplicate, a move found stored by a re-read):
        the client's board may be any number of entries behind."""
        game = racer.game
        return p.MoveOk(
            id=move_id,
            seq=racer.log_length,
            t_ms=racer.times[seq - 1] if 0 < seq <= len(racer.times) else 0,
            check=game.check,
            view=game.view(),
            duplicate=duplicate,
        )

    def _system_entry(self, room: RoomState, racer: RacerState, move: str, now: int) -> None:
        if racer.game.over or room.race is None or room.race.ending:
            return
        if any(q.id is None and q.move == move for q in racer.queue) or (
            racer.head is not None and racer.head.id is None
        ):
            return
        racer.queue.append(PendingMove(None, move, None))
        self._pump(room, racer, now)

    # ---------------------------------------------------------------- the head

    def _pump(self, room: RoomState, racer: RacerState, now: int) -> None:
        """Write the next queued move, if the log has no head."""
        while racer.state is LOG_IDLE and racer.queue:
            pending = racer.queue.popleft()
            if self._check_head(racer, pending):
                racer.head = pending
                self._write_head(room, racer, now)

    def _check_head(self, racer: RacerState, pending: PendingMove) -> bool:
        """Is this move legal on the racer's position? (Refused with the reason if not.)"""
        game = racer.game
        if game.over:
            self._reject(racer, pending, p.WRONG_PHASE, f"your game is over ({game.status})")
            return False
        checked: tuple[int, int] | None = None
        if pending.move in (UNDO, RESIGN):
            # Checked on the racer's position without copying the game (a copy costs the whole
            # log, and a racer may undo every other move); played when the store holds it.
            reason = game.reason_illegal(pending.move)
            if reason is not None:
                self._reject(racer, pending, p.ILLEGAL_MOVE, reason)
                return False
        else:
            # A plain move: checked once, without copying the game; played on the racer's game
            # when the store holds it (play_checked, no second check). Nothing changes that
            # game's position while its one write is in flight.
            try:
                checked = game.check_move(pending.move)
            except IllegalMove as exc:
                self._reject(racer, pending, p.ILLEGAL_MOVE, exc.reason)
                return False
        racer.checked = checked
        racer.checked_at = len(game.entries)
        return True

    def _write_head(self, room: RoomState, racer: RacerState, now: int) -> None:
        race = room.race
        head = racer.head
        assert race is not None and head is not None
        t_ms = max(0, now - race.record.starts_at)
        if racer.times:
            t_ms = max(t_ms, racer.times[-1])  # times never go backwards in a log
        racer.move_to(LOG_WRITING)
        racer.retry_at = None
        racer.head_length = racer.log_length
        racer.head_t = t_ms
        entry = LogEntry(move=head.move, t_ms=t_ms, id=head.id)
        self._out.append(PersistMove(room.code, race.record.number, racer.info.player_id, racer.log_length, entry))

    def _clear_head(self, racer: RacerState) -> None:
        racer.head = None
        racer.last_failure = None
        racer.checked = None
        racer.attempts = 0
        racer.retry_at = None
        racer.give_up_at = None

    def _reject(self, racer: RacerState, pending: PendingMove, code: str, reason: str) -> None:
        if pending.id is not None:
            racer.pending_ids.pop(pending.id, None)
            if pending.conn is not None:
                self._reply(pending.conn, p.MoveRejected(id=pending.id, code=code, reason=reason))

    def _reject_queue(self, racer: RacerState, code: str, reason: str, keep_system: bool = False) -> None:
        kept = [q for q in racer.queue if keep_system and q.id is None]
        for pending in racer.queue:
            if not (keep_system and pending.id is None):
                self._reject(racer, pending, code, reason)
        racer.queue.clear()
        racer.queue.extend(kept)

    def _racer_for(self, code: str, race_no: int, pid: str) -> tuple[RoomState, RacerState] | None:
        room = self.rooms.get(code)
        if room is None or room.race is None or room.race.record.number != race_no:
            return None
        racer = room.race.racers.get(pid)
        return None if racer is None else (room, racer)

    # ---------------------------------------------------------------- the store's answers

    def _move_persisted(self, ev: MovePersisted) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            self._loading_answer(ev.code, ev.player_id)
            return
        room, racer = found
        race = room.race
        assert race is not None
        pending = racer.head
        if racer.state is not LOG_WRITING or pending is None or ev.length != racer.head_length + 1:
            self._note("persist_mismatch", room=ev.code, player=ev.player_id, length=ev.length)
            return
        self._touched.add(room.code)
        if racer.log_length != racer.head_length:
            # The log was re-read meanwhile (a rebuilt room) and may hold the entry already.
            self._reread(room, racer)
            return
        old = racer.game
        before, status_before = old.foundation_cards, old.status
        checked = racer.checked if len(old.entries) == racer.checked_at else None
        game = old
        try:
            changes, stock, reserve = game.play_answered(pending.move, checked)
        except IllegalMove:
            # Cannot happen (checked against this very position): were it to, the log holds an
            # entry this game refuses, so rebuild the racer from the log as after a failed write.
            self._note("persist_unplayable", room=ev.code, player=ev.player_id, length=ev.length)
            self._reread(room, racer)
            return
        racer.times.append(racer.head_t)
        racer.log_length += 1
        if game.foundation_cards != before:
            racer.cards_ms = racer.head_t
        self._clear_head(racer)
        racer.move_to(LOG_IDLE)
        if pending.id is not None:
            racer.pending_ids.pop(pending.id, None)
            racer.ids[pending.id] = racer.log_length
            racer.id_moves[pending.id] = pending.move
            ok = p.MoveOk(
                id=pending.id,
                seq=racer.log_length,
                t_ms=racer.times[-1],
                check=game.check,
                changes=changes,
                stock=stock,
                reserve=reserve,
                status=None if game.status == PLAYING else game.status,
            )
            self._send((racer.info.player_id,), ok)
        self._progressed(race, game.foundation_cards != before or game.status != status_before)
        if game.over:
            self._note("racer_done", room=room.code, player=racer.info.player_id, status=game.status)
            self._reject_queue(racer, p.WRONG_PHASE, f"your game is over ({game.status})")
        self._settle_blocked(room, racer, ev.now)
        self._pump(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _progressed(self, race: RaceState, shown: bool) -> None:
        """A racer's log grew. A leaderboard row goes out when its cards, status, rank (which
        follows from the cards and statuses) or presence changed: only then does the room need
        its next leaderboard tick (``shown``). Otherwise nothing a partial leaderboard would carry
        changed (most moves send no card home), and only the rows' moves and times lag: the
        feeds are marked stale, so their whole leaderboard follows within ``leaderboard_full_ms``
        as after a partial one, with no tick meanwhile."""
        if shown:
            race.lb_dirty = True
        else:
            race.racers_feed.stale = True
            race.spectators_feed.stale = True

    def _move_persist_failed(self, ev: MovePersistFailed) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            self._loading_answer(ev.code, ev.player_id)
            return
        room, racer = found
        if racer.state is not LogState.WRITING or racer.head is None:
            return
        self._touched.add(room.code)
        self._note("persist_failed", room=ev.code, player=ev.player_id, reason=ev.reason, level="warning")
        racer.attempts += 1
        racer.last_failure = ev.reason
        if racer.give_up_at is None:
            racer.give_up_at = ev.now + self.config.store_outage_ms
        if ev.reason == "gone":
            # The room or the race is not in the store: never retried as such. The room is rebuilt
            # from whatever the store has (closed if nothing); the rebuilt racer re-reads its log.
            self._rebuild_room(room.code, ev.now, why="gone")
            self._loading[room.code].answered.add(ev.player_id)
            return
        # uncertain: the entry may or may not have landed; conflict: the log moved. Either way only
        # the log can tell: re-read it before anything else is decided for this racer.
        self._reread(room, racer)

    def _reread(self, room: RoomState, racer: RacerState) -> None:
        race = room.race
        assert race is not None
        racer.move_to(LogState.REREADING)
        self._out.append(ReloadLog(room.code, race.record.number, racer.info.player_id))

    def _log_reloaded(self, ev: LogReloaded) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, old = found
        if old.state not in (LogState.REREADING, LogState.OUTAGE):
            return  # a stale re-read: the racer has moved on
        race = room.race
        assert race is not None
        self._touched.add(room.code)
        racer = self._replay_racer(old.info, race.record, ev.entries)
        self._carry_over(old, racer)
        race.racers[ev.player_id] = racer
        self._settle_head(room, racer, old.log_length, ev.now)

    def _remote_moves(self, ev: RemoteMoves) -> None:
        """Several nodes: another node stored these entries of a racer it serves. Played on this
        node's copy of the racer's game (for the leaderboard, spectators' boards, the race's end);
        entries already known are skipped; a gap (a lost pub/sub message) re-reads the log."""
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, racer = found
        race = room.race
        assert race is not None
        if racer.state is not LogState.IDLE or racer.head is not None or racer.queue:
            return  # this node writes to the log too (the racer's other seat): its own writes read it
        if ev.start + len(ev.entries) <= racer.log_length:
            return  # known already
        self._touched.add(room.code)
        if ev.start > racer.log_length:
            self._reread(room, racer)
            return
        game = racer.game
        shown_before = (game.foundation_cards, game.status)
        for entry in ev.entries[racer.log_length - ev.start :]:
            before = game.foundation_cards
            try:
                game.play(entry.move)
            except IllegalMove:
                self._note("remote_move_unplayable", room=room.code, player=ev.player_id, level="warning")
                self._reread(room, racer)
                return
            racer.log_length += 1
            racer.times.append(entry.t_ms)
            if game.foundation_cards != before:
                racer.cards_ms = entry.t_ms
            if entry.id is not None:
                racer.ids[entry.id] = racer.log_length
                racer.id_moves[entry.id] = entry.move
            if game.over:
                break
        self._progressed(race, (game.foundation_cards, game.status) != shown_before)
        if game.over:
            self._note("racer_done", room=room.code, player=ev.player_id, status=game.status)
        self._settle_blocked(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _board_after_reread(self, room: RoomState, racer: RacerState, conn: int) -> bool:
        """Several nodes: a racer's seat moved to this node. Every acknowledged entry is in the store,
        but this node's copy may lag it by entries still on their way over pub/sub: the racer's board
        goes to ``conn`` once its log is re-read (True), never from the copy. False: this node writes
        the racer's log itself (a write in flight or queued), so its copy is the log."""
        if racer.state is LogState.IDLE and not racer.queue:
            self._reread(room, racer)
        elif racer.state is not LogState.REREADING:
            return False
        racer.boards_owed.append(conn)
        return True

    def _carry_over(self, old: RacerState, racer: RacerState) -> None:
        """What a re-read racer keeps from before: its queue, head and clocks (its game comes from the log)."""
        racer.queue = old.queue
        racer.pending_ids = {q.id: q.move for q in old.queue if q.id is not None}
        racer.head, racer.head_length, racer.head_t = old.head, old.head_length, old.head_t
        if old.head is not None and old.head.id is not None:
            racer.pending_ids[old.head.id] = old.head.move
        racer.attempts, racer.give_up_at, racer.retry_at = old.attempts, old.give_up_at, old.retry_at
        racer.last_failure = old.last_failure
        racer.state = old.state
        racer.forfeit_at = old.forfeit_at
        racer.delayed, racer.delayed_n = old.delayed, min(old.delayed_n, len(racer.times))
        racer.blocked_asked, racer.blocked_at = old.blocked_asked, old.blocked_at
        racer.boards_owed = old.boards_owed

    def _settle_head(self, room: RoomState, racer: RacerState, length_before: int, now: int) -> None:
        """The log has just been read: decide the head (landed or not), answer what the log already
        holds, and go on. ``length_before``: the log length the racer knew before the read."""
        race = room.race
        assert race is not None
        pid = racer.info.player_id
        was_outage = racer.state is LogState.OUTAGE
        head = racer.head
        if head is not None and racer.state is not LogState.WRITING:
            landed = (
                head.id in racer.ids
                if head.id is not None
                else racer.log_length > length_before and racer.game.entries[-1:] == [head.move]
            )
            if landed:
                if head.id is not None:
                    racer.pending_ids.pop(head.id, None)
                    if not was_outage:  # answered already when the outage began
                        # After a conflict another writer stored this id: a duplicate, as a resend is.
                        duplicate = racer.last_failure == "conflict"
                        self._send((pid,), self._move_ok(racer, head.id, racer.ids[head.id], duplicate))
                self._clear_head(racer)
                racer.state = LogState.IDLE
            elif was_outage or now >= (racer.give_up_at or now + 1) or race.ending:
                if not was_outage:
                    if race.ending:
                        self._reject(racer, head, p.WRONG_PHASE, "the race is over")
                    else:
                        self._reject(racer, head, p.STORE_UNAVAILABLE, OUTAGE_REASON)
                elif head.id is not None:
                    # Answered when the outage began, and not in the log: the id is free to be sent again.
                    racer.pending_ids.pop(head.id, None)
                self._clear_head(racer)
                racer.state = LogState.IDLE
            else:
                racer.move_to(LogState.RETRYING)
                delay = min(self.config.retry_max_ms, self.config.retry_first_ms * 2 ** max(0, racer.attempts - 1))
                racer.retry_at = now + delay
        elif head is None and racer.state is not LogState.WRITING:
            racer.state = LogState.IDLE
        # Queued moves whose id the log already holds were applied: acknowledge them.
        for pending in list(racer.queue):
            if pending.id is not None and pending.id in racer.ids:
                racer.queue.remove(pending)
                racer.pending_ids.pop(pending.id, None)
                self._send((pid,), self._move_ok(racer, pending.id, racer.ids[pending.id], duplicate=True))
        race.lb_dirty = True
        if race.ending and room.phase == p.RACING:
            self._reject_queue(racer, p.WRONG_PHASE, "the race is over")
        if was_outage and room.phase == p.RACING:
            self._send((pid,), self._race_start(room, racer, now))  # its board, as the log has it
        owed, racer.boards_owed = racer.boards_owed, []
        for conn in owed:  # a seat moved here: its board, as the log has it
            if self.conns.get(conn) == pid and room.phase == p.RACING and not was_outage:
                self._reply(conn, self._race_start(room, racer, now))
        self._settle_blocked(room, racer, now)
        self._pump(room, racer, now)
        self._check_race_over(room, now)

    def _racer_due(self, room: RoomState, racer: RacerState, now: int) -> None:
        """A racer's write deadline came (from the room's deadline table): retry, or give up."""
        race = room.race
        assert race is not None
        if racer.state is LogState.REREADING and racer.give_up_at is not None and now >= racer.give_up_at:
            # The log cannot be read: answer the head and the queue now (store_unavailable); moves that
            # come meanwhile are answered at once. The re-read goes on; its result resyncs the racer.
            racer.move_to(LogState.OUTAGE)
            self._note("racer_outage", room=room.code, player=racer.info.player_id, level="warning")
            if racer.head is not None:
                self._reject(racer, racer.head, p.STORE_UNAVAILABLE, OUTAGE_REASON)
                if racer.head.id is not None:
                    racer.pending_ids[racer.head.id] = racer.head.move  # until the log tells
            self._reject_queue(racer, p.STORE_UNAVAILABLE, OUTAGE_REASON, keep_system=True)
            return
        if racer.state is not LogState.RETRYING or racer.retry_at is None or now < racer.retry_at:
            return
        head = racer.head
        assert head is not None
        if race.ending or (racer.give_up_at is not None and now >= racer.give_up_at):
            code, why = (p.WRONG_PHASE, "the race is over") if race.ending else (p.STORE_UNAVAILABLE, OUTAGE_REASON)
            self._reject(racer, head, code, why)
            self._clear_head(racer)
            racer.move_to(LogState.IDLE)
            if not race.ending:
                self._reject_queue(racer, p.STORE_UNAVAILABLE, OUTAGE_REASON, keep_system=True)
            self._pump(room, racer, now)
            self._check_race_over(room, now)
            return
        if self._check_head(racer, head):
            self._write_head(room, racer, now)
        else:  # the log moved under it: the head is refused, the queue goes on
            self._clear_head(racer)
            racer.move_to(LogState.IDLE)
            self._pump(room, racer, now)

    def _settle_blocked(self, room: RoomState, racer: RacerState, now: int) -> None:
        """The budgeted check after a move (or a replay) left the racer's position undecided:
        end the game if an exact answer already covers it, else ask the shell (one check per
        racer in flight; the answer's handler asks again for a newer position)."""
        race = room.race
        game = racer.game
        if race is None or not game.blocked_pending or not racer.settled:
            return  # a write in flight or in doubt: settled once the log is known, on its position
        entries = game.entries
        known = racer.blocked_at
        if known is not None and known <= len(entries) and UNDO not in entries[known:]:
            # Exact, though asked about an earlier position: from a blocked position with the stock
            # empty every move (undo aside) keeps it blocked, since no sequence of moves from there
            # puts a card on a foundation, so every position reached by moves alone is blocked too.
            game.resolve_blocked(True)
            self._racer_blocked(room, racer, now)
            return
        if racer.blocked_asked is not None:
            return
        racer.blocked_asked = len(entries)
        rec = race.record
        self._out.append(
            CheckBlocked(room.code, rec.number, racer.info.player_id, len(entries), rec.deal, tuple(entries), rec.undo)
        )
        self._note("blocked_check", room=room.code, player=racer.info.player_id, entries=len(entries))

    def _blocked_checked(self, ev: BlockedChecked) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            self._note("blocked_check_stale", room=ev.code, race=ev.race, player=ev.player_id)
            return
        room, racer = found
        self._touched.add(room.code)
        if racer.blocked_asked == ev.length:
            racer.blocked_asked = None
        game = racer.game
        self._note("blocked_checked", room=room.code, player=ev.player_id, entries=ev.length, blocked=ev.blocked)
        if ev.blocked is None:
            return  # the check failed: the racer's next move asks again (no retry loop on a dying worker)
        if ev.blocked:
            # Keep the newest: wherever an older one applies (no undo since), so does it.
            if racer.blocked_at is None or ev.length > racer.blocked_at:
                racer.blocked_at = ev.length
        elif ev.length == len(game.entries) and game.blocked_pending:
            game.resolve_blocked(False)  # this very position: not blocked, play on
        self._settle_blocked(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _racer_blocked(self, room: RoomState, racer: RacerState, now: int) -> None:
        """The exact check ended a racer's game: as a blocked move would have (leaderboard, race end)."""
        race = room.race
        assert race is not None
        pid = racer.info.player_id
        self._touched.add(room.code)
        race.lb_dirty = True
        self._note("racer_done", room=room.code, player=pid, status=racer.game.status)
        if room.phase == p.RESULTS:
            race.final_rows = self._rows(race, final=True)  # a room rebuilt after the race: its final status
        elif room.phase == p.RACING:
            self._send((pid,), self._race_start(room, racer, now))  # the racer's board, now blocked
