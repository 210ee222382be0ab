"""Time: a room's deadlines, fired by its tick and scheduling its next wake-up."""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.state import (
    RoomState,
)
from shared import protocol as p
from shared.engine import RESIGN


class DeadlinesMixin(CoreBase):
    def _tick(self, code: str, now: int) -> None:
        room = self.rooms.get(code)
        if room is None:
            return
        self._touched.add(code)
        room.wake_at = None  # this wake is spent; _finish schedules the next
        race = room.race
        if room.phase == p.COUNTDOWN and race is not None and now >= race.record.starts_at:
            self._begin(room, now)
        if room.phase == p.RACING and race is not None:
            for racer in race.racers.values():
                if racer.forfeit_at is not None and now >= racer.forfeit_at and not race.ending:
                    racer.forfeit_at = None
                    self._note("forfeit", room=code, player=racer.info.player_id)
                    self._system_entry(room, racer, RESIGN, now)
            if race.record.ends_at is not None and now >= race.record.ends_at:
                self._end_race(room, now, "time")
            else:
                self._check_race_over(room, now)
        if room.phase == p.RACING and race is not None:
            if race.lb_dirty and now >= race.lb_last_ms + self.config.leaderboard_interval_ms:
                race.lb_dirty = False
                race.lb_last_ms = now
                self._send(room.member_ids(), self._leaderboard(race, final=False), droppable=True)
            spectators = room.spectator_ids()
            if room.boards_delay_ms is not None and now >= race.boards_last_ms + self.config.boards_interval_ms:
                boards = self._boards_message(room, now, advance=True)
                if boards is not None:
                    race.boards_last_ms = now
                    self._send(spectators, boards, droppable=True)
        # Members who went away: removed after a grace period (racers of a running race stay:
        # they forfeit instead, and may come back for the results).
        for pid, member in list(room.members.items()):
            if member.left_ms is None or now < member.left_ms + self.config.member_grace_ms:
                continue
            racing = room.phase in (p.COUNTDOWN, p.RACING) and race is not None and pid in race.racers
            if not racing:
                self._remove_member(room, pid, now)
                if code not in self.rooms:
                    return
        if room.phase in (p.LOBBY, p.RESULTS) and now >= room.last_activity_ms + self.config.lobby_idle_ms:
            self._close_room(room, reason="idle")
            return
        if room.snapshot_dirty and now >= room.snapshot_last_ms + self.config.spectators_interval_ms:
            # The spectator count, coalesced: one snapshot for any number of comings and goings.
            room.snapshot_dirty = False
            room.snapshot_last_ms = now
            self._send_room(room, droppable=True)

    def _next_wake(self, room: RoomState) -> int | None:
        times: list[int] = []
        race = room.race
        if room.phase == p.COUNTDOWN and race is not None:
            times.append(race.record.starts_at)
        if room.phase == p.RACING and race is not None:
            if race.record.ends_at is not None and not race.ending:
                times.append(race.record.ends_at)
            if race.lb_dirty:
                times.append(race.lb_last_ms + self.config.leaderboard_interval_ms)
            times.extend(r.forfeit_at for r in race.racers.values() if r.forfeit_at is not None and not r.game.over)
            reveal = self._next_reveal(room)
            if reveal is not None:
                times.append(reveal)
        for pid, member in room.members.items():
            if member.left_ms is not None:
                racing = room.phase in (p.COUNTDOWN, p.RACING) and race is not None and pid in race.racers
                if not racing:
                    times.append(member.left_ms + self.config.member_grace_ms)
        if room.phase in (p.LOBBY, p.RESULTS):
            times.append(room.last_activity_ms + self.config.lobby_idle_ms)
        if room.snapshot_dirty:
            times.append(room.snapshot_last_ms + self.config.spectators_interval_ms)
        return min(times) if times else None
