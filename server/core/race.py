"""The race lifecycle: start, deal search, countdown, racing, end, results, rematch, with an
explicit table of the allowed phase transitions (:data:`PHASE_TRANSITIONS`)."""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.daily_rules import daily_room
from server.core.events import (
    DealFound,
    FindDeal,
    Send,
)
from server.core.ratings import race_is_rated
from server.core.records import (
    RaceRecord,
    RacerInfo,
)
from server.core.state import (
    LogState,
    RoomState,
)
from shared import protocol as p
from shared.fairplay import commitment

# The race lifecycle: which phase may follow which, and on what. Anything else is a bug (the
# core raises; the error state rebuilds the room from the store).
PHASE_TRANSITIONS: dict[str, frozenset[str]] = {
    p.LOBBY: frozenset({p.DEALING, p.COUNTDOWN}),  # start (a winnable_only room deals first)
    p.DEALING: frozenset({p.COUNTDOWN, p.LOBBY}),  # a deal proved winnable / none, cancelled, no racer left
    p.COUNTDOWN: frozenset({p.RACING, p.LOBBY}),  # the start signal / cancelled, no racer left
    p.RACING: frozenset({p.RESULTS}),  # every game over, the time limit, the host ends it
    p.RESULTS: frozenset({p.LOBBY}),  # rematch
}


class RaceMixin(CoreBase):
    def _set_phase(self, room: RoomState, phase: str) -> None:
        if phase not in PHASE_TRANSITIONS[room.phase]:
            raise RuntimeError(f"room {room.code}: phase {room.phase} -> {phase} is not allowed")
        room.phase = phase

    def _start(self, conn: int, room: RoomState, pid: str, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may start the race", "start")
            return
        if room.phase == p.DEALING:
            self._error(conn, p.WRONG_PHASE, "already starting: the server is finding a winnable deal", "start")
            return
        if room.phase != p.LOBBY:
            self._error(conn, p.WRONG_PHASE, f"start is for the lobby; the room is in {room.phase}", "start")
            return
        racers = [room.members[r] for r in room.racer_ids()]
        if not racers:
            self._error(conn, p.NOT_READY, "there is no racer in the room", "start")
            return
        waiting = [m.name for m in racers if not m.ready and m.player_id != pid]
        if waiting:
            self._error(conn, p.NOT_READY, "not ready yet: " + ", ".join(waiting), "start")
            return
        if room.options.winnable_only and room.pending_deal is None:
            # The deal comes from a solver search that the shell runs away from the event loop:
            # the countdown starts when it is found (DealFound). The racers are fixed meanwhile.
            self._set_phase(room, p.DEALING)
            self._find_deal(room)
            self._note("deal_search", room=room.code, race=room.race_number, search=room.search, racers=len(racers))
            self._changed(room)
            return
        chosen = room.pending_deal is not None
        deal = room.pending_deal if room.pending_deal is not None else self.entropy.deal()
        self._countdown(room, deal, chosen, now)

    def _find_deal(self, room: RoomState) -> None:
        self._searches += 1
        room.search = self._searches
        self._out.append(FindDeal(room.code, room.race_number, room.search))

    def _cancel_search(self, room: RoomState) -> None:
        """Back to the lobby from dealing (the host ended it, or no racer is left); a late answer is ignored."""
        self._note("deal_search_cancelled", room=room.code, race=room.race_number, search=room.search)
        room.search = 0
        self._set_phase(room, p.LOBBY)

    def _deal_found(self, ev: DealFound) -> None:
        room = self.rooms.get(ev.code)
        if room is None or not self.awaits_search(ev.code, ev.race, ev.search):
            self._note("deal_search_stale", room=ev.code, race=ev.race, search=ev.search)
            return
        self._touched.add(room.code)
        room.search = 0
        room.last_activity_ms = ev.now
        if ev.deal is None or not room.racer_ids():
            self._set_phase(room, p.LOBBY)
            self._note("deal_search_failed", room=room.code, race=ev.race, detail=ev.detail)
            self._changed(room)
            if ev.deal is None and ev.busy:
                why = f"the server is busy finding deals for other rooms ({ev.detail}): the room is back in "
                why += "the lobby; the host may start again in a moment"
                self._send(room.member_ids(), p.Error(code=p.SERVER_BUSY, message=why, ref="start"))
            elif ev.deal is None:
                # Never a deal that was not proved winnable: the room promised that. Readiness is kept,
                # so the host can simply start again.
                why = "no deal was proved winnable within the server's budget"
                why += f" ({ev.detail})" if ev.detail else ""
                why += ": the room is back in the lobby; the host may start again"
                self._send(room.member_ids(), p.Error(code=p.NO_WINNABLE_DEAL, message=why, ref="start"))
            return
        self._note("deal_search_done", room=room.code, race=ev.race, search=ev.search)
        self._countdown(room, ev.deal, False, ev.now)

    def _countdown(self, room: RoomState, deal: int, chosen: bool, now: int) -> None:
        """Fix the race (deal, salt, commitment, racers) and start its countdown."""
        racers = [room.members[r] for r in room.racer_ids()]
        salt = self.entropy.salt()
        starts_at = now + self.config.countdown_ms
        limit = room.options.time_limit
        record = RaceRecord(
            number=room.race_number,
            deal=deal,
            salt=salt,
            commitment=commitment(deal, salt),
            chosen_deal=chosen,
            undo=room.options.undo,
            starts_at=starts_at,
            ends_at=None if limit is None else starts_at + limit * 1000,
            # The room's ghosts are of its chosen deal (ghosts.py refuses any other), so of this one.
            ghosts=list(room.ghosts) if chosen and deal == room.pending_deal else [],
            racers=[
                RacerInfo(
                    player_id=m.player_id, name=m.name, bot=m.bot, token_hash=m.token_hash, profile_id=m.profile_id
                )
                for m in racers
            ],
            rated=race_is_rated(room.options.rated, [(m.player_id, m.bot, m.profile_id) for m in racers]),
        )
        room.race = self._race_from_record(room, record, {}, now)
        room.race.unstored = True  # until its save lands (RoomSaved): the start waits for it
        self._set_phase(room, p.COUNTDOWN)
        self._expire(room.code, self.config.room_ttl_s)
        self._note("race_countdown", room=room.code, race=record.number, racers=len(racers), chosen_deal=chosen)
        self._changed(room)
        self._announce(room, room.member_ids(), p.Countdown(race=record.number, starts_at=starts_at, server_time=now))

    def _cancel_countdown(self, room: RoomState) -> None:
        self._set_phase(room, p.LOBBY)
        room.race = None
        self._note("race_cancelled", room=room.code, race=room.race_number)

    def _begin(self, room: RoomState, now: int) -> None:
        race = room.race
        assert race is not None
        self._set_phase(room, p.RACING)
        race.lb_dirty = True
        for racer in race.racers.values():
            member = room.members.get(racer.info.player_id)
            away = member is not None and member.left_ms is not None
            if away and racer.forfeit_at is None and daily_room(room.code) is None:
                racer.forfeit_at = now + self.config.grace_ms
        self._note("race_start", room=room.code, race=race.record.number, commitment=race.record.commitment)
        self._changed(room)
        for pid in room.members:
            self._announce(room, (pid,), self._race_start(room, race.racers.get(pid), now))

    def _end_request(self, conn: int, room: RoomState, pid: str, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may end the race", "end_race")
            return
        if room.phase == p.COUNTDOWN:
            self._cancel_countdown(room)
            self._changed(room)
        elif room.phase == p.DEALING:
            self._cancel_search(room)
            self._changed(room)
        elif room.phase == p.RACING:
            self._end_race(room, now, "host")
        else:
            self._error(conn, p.WRONG_PHASE, f"there is no race to end; the room is in {room.phase}", "end_race")

    def _end_race(self, room: RoomState, now: int, why: str) -> None:
        race = room.race
        assert race is not None
        if not race.ending:
            race.ending = True
            self._note("race_ending", room=room.code, race=race.record.number, why=why)
            for racer in race.racers.values():
                while racer.queue:
                    pending = racer.queue.popleft()
                    self._reject(racer, pending, p.WRONG_PHASE, "the race is over")
                if racer.state is LogState.RETRYING and racer.head is not None:
                    self._reject(racer, racer.head, p.WRONG_PHASE, "the race is over")  # never stored
                    self._clear_head(racer)
                    racer.move_to(LogState.IDLE)
        if any(not r.settled for r in race.racers.values()):
            return  # finished when the writes in flight land: the results must match the logs
        self._finalize(room, now)

    def _finalize(self, room: RoomState, now: int) -> None:
        race = room.race
        assert race is not None
        race.record.ended_at = now
        race.record.log_lengths = {pid: racer.log_length for pid, racer in race.racers.items()}
        race.final_rows = self._rows(race, final=True)
        self._set_phase(room, p.RESULTS)
        room.last_activity_ms = now
        for member in room.members.values():
            member.ready = False
        self._expire(room.code, self.config.room_ttl_s)
        self._note(
            "race_results",
            room=room.code,
            race=race.record.number,
            ranking=[row.player_id for row in race.final_rows],
        )
        self._announce_finishes(room, race, race.final_rows, final=True)  # the games that ended since the last tick
        self._changed(room)
        # Sent once the save that ends the race has landed: on several nodes another node may end it
        # too, and only the copy the store keeps is announced (a lost save's node reads it back and
        # sends the stored results instead; docs/scaling.md, "Room changes").
        if daily_room(room.code) is not None:
            self._daily_finalized(room)  # never the results: the day's deal stays hidden until its reveal
        else:
            room.after_save.append(Send(room.member_ids(), self._results(room)))

    def _check_race_over(self, room: RoomState, now: int) -> None:
        race = room.race
        if room.phase != p.RACING or race is None:
            return
        if race.ending:
            self._end_race(room, now, "time")
        elif all(r.game.over and not r.busy for r in race.racers.values()):
            self._end_race(room, now, "all_done")

    def _rematch(self, conn: int, room: RoomState, pid: str, deal: int | None, now: int, ghosts: bool = False) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may call a rematch", "rematch")
            return
        if room.phase != p.RESULTS:
            self._error(conn, p.WRONG_PHASE, "a rematch follows a finished race", "rematch")
            return
        if deal is not None and room.options.winnable_only:
            why = "field 'deal' of rematch: this room deals only deals the solver proves winnable, never a chosen one"
            self._error(conn, p.BAD_FIELD, why, "rematch")
            return
        if deal is not None and ghosts:
            why = "field 'deal' of rematch: a rematch with ghosts is on the last race's deal, never another"
            self._error(conn, p.BAD_FIELD, why, "rematch")
            return
        last = room.race
        assert last is not None
        # A ghost rematch: the same deal, the last race's racers as ghosts. Any other: no ghosts
        # (they raced the last deal); the host may add some for the next.
        room.ghosts = self._ghosts_of_race(last) if ghosts else []
        room.ghost_upload = None
        self._set_phase(room, p.LOBBY)
        room.race = None
        room.race_number += 1
        room.pending_deal = last.record.deal if ghosts else deal
        for member in room.members.values():
            member.ready = False
        self._expire(room.code, self.config.room_ttl_s)
        self._changed(room)
