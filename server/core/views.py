"""What members see: room snapshots, a resuming client's catch-up, spectators' delayed boards."""

from __future__ import annotations

import contextlib

import msgspec

from server.core.base import CoreBase
from server.core.state import (
    MemberState,
    RacerState,
    RoomState,
    rules_of,
)
from shared import protocol as p
from shared.engine import BLOCKED, PLAYING, Game, IllegalMove, View, view_hash


class ViewsMixin(CoreBase):
    def _snapshot(self, conn: int, room: RoomState, player_id: str, now: int, board: bool = True) -> None:
        """What a client needs besides the room to catch up: countdown, own board, leaderboard, results.
        ``board`` False: a racer's own board comes later (once its log is re-read: _board_after_reread)."""
        race = room.race
        if race is None:
            return
        rec = race.record
        if room.phase == p.COUNTDOWN:
            self._reply(conn, p.Countdown(race=rec.number, starts_at=rec.starts_at, server_time=now))
        elif room.phase == p.RACING:
            racer = race.racers.get(player_id)
            if board or racer is None:
                self._reply(conn, self._race_start(room, racer, now))
            self._reply(conn, self._leaderboard(race, final=False))
            if racer is None and room.boards_delay_ms is not None:
                boards = self._boards_message(room, now, advance=False)
                if boards is not None:
                    self._reply(conn, boards)
        elif room.phase == p.RESULTS:
            self._reply(conn, self._end_message(room))

    def _sync(self, conn: int, room: RoomState, player_id: str, now: int) -> None:
        """A racer's board diverged (docs/protocol.md, "Small acknowledgements"): its whole board again."""
        race = room.race
        if room.phase != p.RACING or race is None:
            self._error(conn, p.WRONG_PHASE, f"there is no race to sync; the room is in {room.phase}", "sync")
            return
        self._reply(conn, self._race_start(room, race.racers.get(player_id), now))

    def _race_start(self, room: RoomState, racer: RacerState | None, now: int) -> p.RaceStart:
        race = room.race
        assert race is not None
        rec = race.record
        view = None if racer is None else racer.game.view()
        return p.RaceStart(
            race=rec.number,
            commitment=rec.commitment,
            chosen_deal=rec.chosen_deal,
            started_at=rec.starts_at,
            ends_at=rec.ends_at,
            undo=rec.undo,
            server_time=now,
            view=view,
            seq=0 if racer is None else racer.log_length,
            view_hash=None if view is None else view_hash(view),
            check=None if racer is None else racer.game.check,
        )

    def _member(self, m: MemberState) -> p.Member:
        return p.Member(
            player_id=m.player_id,
            name=m.name,
            role=m.role,
            ready=m.ready,
            bot=m.bot,
            connected=self._present(m, m.player_id),
            muted=m.muted,
            claimed=m.profile_id is not None,
        )

    def _room_shared(self, room: RoomState) -> p.Room:
        """The snapshot every member shares: the racers and the host, and the spectator count."""
        race = room.race
        timed = race is not None and room.phase in (p.COUNTDOWN, p.RACING)
        shown = [self._member(m) for m in room.members.values() if self._shown(room, m)]
        return p.Room(
            code=room.code,
            version=room.version,
            host=room.host,
            phase=room.phase,
            race=room.race_number,
            rules=rules_of(room.options),
            chosen_deal=room.chosen_deal,
            leak_proof=room.leak_proof,
            members=shown,
            starts_at=race.record.starts_at if timed and race is not None else None,
            ends_at=race.record.ends_at if timed and race is not None else None,
            spectators=sum(1 for m in room.members.values() if m.role == p.SPECTATOR),
            ghosts=self._ghost_entries(room),
        )

    def _with_self(self, shared: p.Room, member: MemberState, seat: int) -> p.Room:
        """``shared`` with a spectator it does not list put in its seat (``seat`` listed members come before)."""
        members = list(shared.members)
        members.insert(seat, self._member(member))
        return msgspec.structs.replace(shared, members=members)

    def _room_message(self, room: RoomState, recipient: str) -> p.Room:
        """The snapshot for one member: the shared one, plus the recipient itself if it is not listed."""
        shared = self._room_shared(room)
        member = room.members.get(recipient)
        if member is None or self._shown(room, member):
            return shared
        seat = 0
        for pid, m in room.members.items():
            if pid == recipient:
                break
            seat += self._shown(room, m)
        return self._with_self(shared, member, seat)

    def _send_room(self, room: RoomState, droppable: bool) -> None:
        """The room snapshot to every member: one shared frame for the racers and the host, and each
        other spectator its own (the shared one plus itself: at most 18 entries, whatever the audience)."""
        shared = self._room_shared(room)
        self._send(tuple(m.player_id for m in shared.members), shared, droppable)
        seat = 0  # listed members seated before the one at hand
        for pid, member in room.members.items():
            if self._shown(room, member):
                seat += 1
            else:
                self._send((pid,), self._with_self(shared, member, seat), droppable)

    def _boards_message(self, room: RoomState, now: int, advance: bool) -> p.Boards | None:
        """Spectators' boards ``delay`` behind the race (only rooms that are not leak-proof)."""
        race = room.race
        delay = room.boards_delay_ms
        if race is None or delay is None:
            return None
        as_of = max(0, now - race.record.starts_at - delay)
        changed = False
        for racer in race.racers.values():
            if racer.delayed is None:
                racer.delayed = Game(race.record.deal, undo=race.record.undo)
                racer.delayed_n = 0
                changed = True
            if advance:
                entries = racer.game.entries
                while racer.delayed_n < len(racer.times) and racer.times[racer.delayed_n] <= as_of:
                    with contextlib.suppress(IllegalMove):  # cannot happen: the live game accepted it
                        racer.delayed.play(entries[racer.delayed_n], check_blocked=False)
                    racer.delayed_n += 1
                    changed = True
                # No blocked search here: caught up, the board is the live game's position, so its status too.
                delayed = racer.delayed
                if racer.delayed_n == len(entries) and racer.game.status == BLOCKED and delayed.status == PLAYING:
                    delayed.resolve_blocked(True)
                    changed = True
        ghosts_changed, ghost_boards = self._ghost_boards(race, as_of, advance)
        if advance and not changed and not ghosts_changed:
            return None
        boards: dict[str, View] = {}
        for pid, racer in race.racers.items():
            assert racer.delayed is not None
            boards[pid] = racer.delayed.view()
        boards.update(ghost_boards)  # the ghosts' too, as far behind: only where the racers' are shown
        return p.Boards(race=race.record.number, delay_ms=delay, as_of_ms=as_of, boards=boards)

    def _next_reveal(self, room: RoomState) -> int | None:
        race = room.race
        delay = room.boards_delay_ms
        if race is None or delay is None:
            return None
        times = [
            r.times[r.delayed_n] for r in race.racers.values() if r.delayed is not None and r.delayed_n < len(r.times)
        ]
        first = any(r.delayed is None for r in race.racers.values())
        ghost_times, ghost_first = self._ghost_reveals(race)
        times += ghost_times
        first = first or ghost_first
        # A caught-up delayed board whose live game the exact check has since found blocked.
        lagging = any(
            r.delayed is not None
            and r.delayed_n == len(r.game.entries)
            and r.game.status == BLOCKED
            and r.delayed.status == PLAYING
            for r in race.racers.values()
        )
        if not times and not first and not lagging:
            return None
        at = race.record.starts_at + delay + (min(times) if times else 0)
        return max(at, race.boards_last_ms + self.config.boards_interval_ms)
