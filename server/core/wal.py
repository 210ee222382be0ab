"""Each racer's write-ahead move log: validate, persist, then apply and acknowledge."""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.events import (
    BlockedChecked,
    CheckBlocked,
    LogReloaded,
    MovePersisted,
    MovePersistFailed,
    PersistMove,
    ReloadLog,
)
from server.core.records import (
    LogEntry,
)
from server.core.state import (
    PendingMove,
    PlayerState,
    RacerState,
    RoomState,
)
from shared import protocol as p
from shared.engine import RESIGN, UNDO, Game, IllegalMove, view_hash


class RacerLogMixin(CoreBase):
    def _move(self, conn: int, player: PlayerState, msg: p.Move, now: int) -> None:
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is None:
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
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.WRONG_PHASE, reason="you are not racing in this race"))
            return
        room.last_activity_ms = now
        seq = racer.ids.get(msg.id)
        if seq is not None:
            # A retry (lost ack, reconnect): never applied twice; answer with the current board.
            view = racer.game.view()
            ok = p.MoveOk(
                id=msg.id,
                seq=racer.log_length,
                t_ms=racer.times[seq - 1] if 0 < seq <= len(racer.times) else 0,
                view=view,
                view_hash=view_hash(view),
                duplicate=True,
            )
            self._reply(conn, ok)
            return
        if msg.id in racer.pending_ids:
            return  # the same move is already on its way to the store; its ack will come
        racer.pending_ids.add(msg.id)
        racer.queue.append(PendingMove(msg.id, msg.move, conn))
        self._pump(room, racer, now)

    def _system_entry(self, room: RoomState, racer: RacerState, move: str, now: int) -> None:
        if racer.game.over or room.race is None or room.race.ending:
            return
        if any(q.id is None and q.move == move for q in racer.queue) or (
            racer.inflight is not None and racer.inflight.id is None
        ):
            return
        racer.queue.append(PendingMove(None, move, None))
        self._pump(room, racer, now)

    def _pump(self, room: RoomState, racer: RacerState, now: int) -> None:
        """Start the next queued move's write, if none is in flight."""
        race = room.race
        assert race is not None
        while racer.inflight is None and not racer.reloading and racer.queue:
            pending = racer.queue.popleft()
            candidate: Game | None = None
            if pending.move in (UNDO, RESIGN):
                candidate = racer.game.copy()  # rare entries: checked by playing them on a copy
                try:
                    candidate.play(pending.move)
                except IllegalMove as exc:
                    self._reject(racer, pending, p.ILLEGAL_MOVE, exc.reason)
                    continue
            else:
                # A plain move: checked without copying the game (the engine's own check, as play
                # makes it); played on the racer's game when the store holds it. Nothing changes
                # that game's position while its one write is in flight.
                reason = racer.game.reason_illegal(pending.move)
                if reason is not None:
                    self._reject(racer, pending, p.ILLEGAL_MOVE, reason)
                    continue
            t_ms = max(0, now - race.record.starts_at)
            if racer.times:
                t_ms = max(t_ms, racer.times[-1])  # times never go backwards in a log
            racer.inflight = pending
            racer.candidate = candidate
            racer.inflight_t = t_ms
            entry = LogEntry(move=pending.move, t_ms=t_ms, id=pending.id)
            self._out.append(PersistMove(room.code, race.record.number, racer.info.player_id, racer.log_length, entry))

    def _reject(self, racer: RacerState, pending: PendingMove, code: str, reason: str) -> None:
        if pending.id is not None:
            racer.pending_ids.discard(pending.id)
            if pending.conn is not None:
                self._reply(pending.conn, p.MoveRejected(id=pending.id, code=code, reason=reason))

    def _racer_for(self, code: str, race_no: int, pid: str) -> tuple[RoomState, RacerState] | None:
        room = self.rooms.get(code)
        if room is None or room.race is None or room.race.record.number != race_no:
            return None
        racer = room.race.racers.get(pid)
        return None if racer is None else (room, racer)

    def _move_persisted(self, ev: MovePersisted) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, racer = found
        race = room.race
        assert race is not None
        pending = racer.inflight
        if pending is None or ev.length != racer.log_length + 1:
            self._note("persist_mismatch", room=ev.code, player=ev.player_id, length=ev.length)
            return
        self._touched.add(room.code)
        before = racer.game.foundation_cards
        game = racer.candidate
        if game is None:
            game = racer.game
            try:
                game.play(pending.move)
            except IllegalMove:
                # Cannot happen (checked against this very position): were it to, the log holds an
                # entry this game refuses, so rebuild the racer from the log as after a failed write.
                self._note("persist_unplayable", room=ev.code, player=ev.player_id, length=ev.length)
                racer.inflight = None
                racer.reloading = True
                racer.uncertain = pending
                self._out.append(ReloadLog(room.code, ev.race, ev.player_id))
                return
        racer.game = game
        racer.times.append(racer.inflight_t)
        racer.log_length += 1
        if game.foundation_cards != before:
            racer.cards_ms = racer.inflight_t
        racer.inflight = None
        racer.candidate = None
        if pending.id is not None:
            racer.pending_ids.discard(pending.id)
            racer.ids[pending.id] = racer.log_length
            view = game.view()
            ok = p.MoveOk(
                id=pending.id, seq=racer.log_length, t_ms=racer.inflight_t, view=view, view_hash=view_hash(view)
            )
            self._send((racer.info.player_id,), ok)
        race.lb_dirty = True
        race.boards_dirty = True
        if game.over:
            self._note("racer_done", room=room.code, player=racer.info.player_id, status=game.status)
        self._settle_blocked(room, racer, ev.now)
        self._pump(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _move_persist_failed(self, ev: MovePersistFailed) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, racer = found
        pending = racer.inflight
        if pending is None:
            return
        self._touched.add(room.code)
        racer.inflight = None
        racer.candidate = None
        racer.reloading = True
        if ev.conflict:
            # Someone else appended to this log (another process, a stale view): reload it, then
            # retry this move against the real position (its id may turn out to be applied already).
            racer.queue.appendleft(pending)
        else:
            # The store stopped answering mid-write: the entry may or may not have landed. Only the
            # reloaded log can tell, so neither acknowledge nor reject before that.
            racer.uncertain = pending
        self._out.append(ReloadLog(room.code, ev.race, ev.player_id))

    def _log_reloaded(self, ev: LogReloaded) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, old = found
        race = room.race
        assert race is not None
        self._touched.add(room.code)
        racer = self._replay_racer(old.info, race.record, ev.entries)
        racer.queue = old.queue
        racer.forfeit_at = old.forfeit_at
        racer.delayed, racer.delayed_n = old.delayed, min(old.delayed_n, len(racer.times))
        racer.blocked_asked, racer.blocked_at = old.blocked_asked, old.blocked_at
        race.racers[ev.player_id] = racer
        uncertain = old.uncertain
        if uncertain is not None:
            landed = (
                uncertain.id in racer.ids
                if uncertain.id is not None
                else racer.log_length > old.log_length and racer.game.entries[-1:] == [uncertain.move]
            )
            if landed:
                if uncertain.id is not None:
                    view = racer.game.view()
                    ok = p.MoveOk(
                        id=uncertain.id,
                        seq=racer.log_length,
                        t_ms=racer.times[-1] if racer.times else 0,
                        view=view,
                        view_hash=view_hash(view),
                    )
                    self._send((ev.player_id,), ok)
            elif uncertain.id is None:
                racer.queue.appendleft(uncertain)  # a forfeit or leave: try again
            else:
                self._reject(racer, uncertain, p.STORE_UNAVAILABLE, "the store did not answer: the move was not played")
        # Queued moves whose id the reloaded log already holds were applied: acknowledge them.
        for pending in list(racer.queue):
            if pending.id is not None and pending.id in racer.ids:
                racer.queue.remove(pending)
                view = racer.game.view()
                seq = racer.ids[pending.id]
                ok = p.MoveOk(
                    id=pending.id,
                    seq=racer.log_length,
                    t_ms=racer.times[seq - 1] if 0 < seq <= len(racer.times) else 0,
                    view=view,
                    view_hash=view_hash(view),
                    duplicate=True,
                )
                self._send((ev.player_id,), ok)
            elif pending.id is not None:
                racer.pending_ids.add(pending.id)
        race.lb_dirty = True
        race.boards_dirty = True
        if race.ending and room.phase == p.RACING:
            while racer.queue:
                self._reject(racer, racer.queue.popleft(), p.WRONG_PHASE, "the race is over")
        self._settle_blocked(room, racer, ev.now)
        self._pump(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _settle_blocked(self, room: RoomState, racer: RacerState, now: int) -> None:
        """The budgeted check after a move (or a replay) left the racer's position undecided:
        end the game if an exact answer already covers it, else ask the shell (one check per
        racer in flight; the answer's handler asks again for a newer position)."""
        race = room.race
        game = racer.game
        if race is None or not game.blocked_pending or racer.inflight is not None or racer.reloading:
            return  # a move in flight: settled when it lands, on the position it makes
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
        race.boards_dirty = True
        self._note("racer_done", room=room.code, player=pid, status=racer.game.status)
        if room.phase == p.RESULTS:
            race.final_rows = self._rows(race, final=True)  # a room rebuilt after the race: its final status
        elif room.phase == p.RACING:
            self._send((pid,), self._race_start(room, racer, now))  # the racer's board, now blocked
