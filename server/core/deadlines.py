"""Time: one table of a room's deadlines (:meth:`DeadlinesMixin._deadlines`) feeds both the tick,
which fires those that are due, and the room's next wake-up, the earliest of them. A deadline
added here is therefore both scheduled and handled, or neither.

Leaderboards are not in that table: they tick on the node's shared leaderboard tick (one timer and
one event for every room whose leaderboard is due, ``LeaderboardTick``), not on one timer per room.
A room's leaderboard due (:meth:`DeadlinesMixin._leaderboard_due`) feeds both that tick and the
node's next one, the earliest of every room's. The intervals count in whole slots of
``leaderboard_interval_ms`` (from the epoch), and every room ticks on the slots' edges: the node
ticks at most once per slot, whatever its rooms, and a change waits less than one slot."""

from __future__ import annotations

import enum
from typing import NamedTuple

from server.core.base import CoreBase
from server.core.state import LOG_REREADING, LOG_RETRYING, Audience, RaceState, RoomState
from shared import protocol as p
from shared.engine import RESIGN


class Due(enum.Enum):
    """What a deadline is for. The tick handles due deadlines in this order."""

    START = "start"  # the countdown is over: the race begins
    RACER_WRITE = "racer_write"  # a racer's failed write: retry after the back-off, or give up
    FORFEIT = "forfeit"  # a racer disconnected past the grace period resigns
    TIME_LIMIT = "time_limit"  # the race's time limit
    BOARDS = "boards"  # spectators' delayed boards reveal the next entries
    MEMBER_GONE = "member_gone"  # a disconnected member (not racing) is removed
    IDLE = "idle"  # a lobby or finished room nobody touches closes
    SPECTATOR_COUNT = "spectator_count"  # the coalesced snapshot with the new spectator count


ORDER = {due: i for i, due in enumerate(Due)}


class Deadline(NamedTuple):  # a tuple: a table is built on every event that touches the room
    at: int  # server ms
    due: Due
    subject: str | None = None  # the player it concerns, if any


class DeadlinesMixin(CoreBase):
    def _deadlines(self, room: RoomState) -> list[Deadline]:
        table: list[Deadline] = []
        race = room.race
        config = self.config
        if room.phase == p.COUNTDOWN and race is not None and not race.unstored:
            table.append(Deadline(race.record.starts_at, Due.START))
        if room.phase == p.RACING and race is not None:
            for pid, racer in race.racers.items():
                if racer.state is LOG_RETRYING and racer.retry_at is not None:
                    table.append(Deadline(racer.retry_at, Due.RACER_WRITE, pid))
                elif racer.state is LOG_REREADING and racer.give_up_at is not None:
                    table.append(Deadline(racer.give_up_at, Due.RACER_WRITE, pid))
                if racer.forfeit_at is not None and not racer.game.over and not race.ending:
                    table.append(Deadline(racer.forfeit_at, Due.FORFEIT, pid))
            if race.record.ends_at is not None and not race.ending:
                table.append(Deadline(race.record.ends_at, Due.TIME_LIMIT))
            reveal = self._next_reveal(room)
            if reveal is not None:
                table.append(Deadline(reveal, Due.BOARDS))
        for pid, member in room.members.items():
            if member.left_ms is not None:
                racing = room.phase in (p.COUNTDOWN, p.RACING) and race is not None and pid in race.racers
                if not racing:
                    # A watching host keeps its room (and the host's role) through a dropped connection.
                    at_once = member.role == p.SPECTATOR and pid != room.host
                    grace = config.spectator_grace_ms if at_once else config.member_grace_ms
                    table.append(Deadline(member.left_ms + grace, Due.MEMBER_GONE, pid))
        if room.phase in (p.LOBBY, p.RESULTS):
            table.append(Deadline(room.last_activity_ms + config.lobby_idle_ms, Due.IDLE))
        if room.snapshot_dirty:
            table.append(Deadline(room.snapshot_last_ms + config.spectators_interval_ms, Due.SPECTATOR_COUNT))
        return table

    def _next_wake(self, room: RoomState) -> int | None:
        return min((d.at for d in self._deadlines(room)), default=None)

    def _tick(self, code: str, now: int) -> None:
        room = self.rooms.get(code)
        if room is None:
            return
        self._touched.add(code)
        room.wake_at = None  # this wake is spent; _finish schedules the next
        due = sorted((d for d in self._deadlines(room) if d.at <= now), key=lambda d: ORDER[d.due])
        for deadline in due:
            if self.rooms.get(code) is not room:
                return  # the room closed
            self._fire(room, deadline, now)
        if self.rooms.get(code) is room and room.phase == p.RACING:
            self._check_race_over(room, now)

    def _slot(self, at: int) -> int:
        """The start of the leaderboard slot ``at`` falls in: an interval counted from a slot's start
        ends on a later slot's edge, where every room of the node ticks (one shared tick)."""
        interval = self.config.leaderboard_interval_ms
        return at - at % interval if interval > 0 else at

    def _leaderboard_due(self, race: RaceState) -> int | None:
        """The room's next leaderboard tick. While figures change, one at most every
        ``leaderboard_interval_ms`` (counted from the slot of the last): each compares them for the
        racers, and for the spectators once their own interval has run since their last frame (so
        both share the tick and its rows). Otherwise: changes the spectators are still owed, and
        each audience's whole leaderboard ``leaderboard_full_ms`` after its last while rows lag.
        A time already past goes on the next slot's edge (:meth:`_schedule_leaderboard`).

        A race's ghosts (ghosts.py) are due here too: the slot edge at or after their next
        recorded entry, where the tick plays it and shows it, as a live racer's move is shown on the
        tick after it (one shared tick for every ghost of the node, not a wake-up per entry)."""
        config = self.config
        dues: list[int] = []
        if race.ghosts and not race.ending:
            ghost_at = self._next_ghost_entry(race)
            if ghost_at is not None:
                edge = self._slot(ghost_at)
                dues.append(edge if edge == ghost_at else edge + config.leaderboard_interval_ms)
        if race.lb_dirty:
            return min([self._slot(race.lb_checked_ms) + config.leaderboard_interval_ms, *dues])
        for feed, interval in (
            (race.racers_feed, config.leaderboard_interval_ms),
            (race.spectators_feed, config.spectator_leaderboard_interval_ms),
        ):
            if feed.behind:
                dues.append(self._slot(feed.sent_ms) + interval)
            elif feed.stale:  # never sooner than the feed's interval after its last frame either
                dues.append(
                    max(self._slot(feed.full_ms) + config.leaderboard_full_ms, self._slot(feed.sent_ms) + interval)
                )
        return min(dues) if dues else None

    def _schedule_leaderboard(self, code: str, now: int, ticked: bool = False) -> int | None:
        """Keep the room's leaderboard due in the node's schedule (none once it is not racing). A
        due already past that was not scheduled so (a change after a quiet spell) waits for the
        next slot's edge, the shared tick of every room; one scheduled so waits for its tick (a
        late timer: not put off again). ``ticked``: the room ticked at ``now`` in this event, so its
        next is at least a slot later (whatever the feeds say: a shared tick never spins on a room)."""
        room = self.rooms.get(code)
        race = room.race if room is not None else None
        due = self._leaderboard_due(race) if room is not None and race is not None and room.phase == p.RACING else None
        if due is None:
            self._leaderboards.pop(code, None)
            return None
        if due <= now:
            scheduled = self._leaderboards.get(code)
            if ticked or scheduled is None or scheduled > now:
                due = self._slot(now) + self.config.leaderboard_interval_ms
        self._leaderboards[code] = due
        return due

    def _leaderboard_ticks(self, now: int) -> None:
        """The node's shared leaderboard tick: every room whose leaderboard is due by now ticks, in
        this one event (should one raise, it and the rooms that ticked before it are rebuilt from
        the store, the error state; the others tick in the next one, at once). Nothing else of a
        room changes here, so its deadline table is not walked again."""
        self._leaderboard_wake = None  # this wake is spent; _finish schedules the next
        self._shared_tick_at = now
        for code in [code for code, at in self._leaderboards.items() if at <= now]:
            self._ticked.add(code)
            room = self.rooms.get(code)
            if room is not None and room.race is not None and room.phase == p.RACING:
                self._leaderboard_tick(room, room.race, now)

    def _leaderboard_tick(self, room: RoomState, race: RaceState, now: int) -> None:
        """The room's leaderboard tick: each audience whose feed is due gets the rows changed since
        its own last frame, in one frame (the rows are ranked once for both); the spectators'
        changes wait for the first tick their interval allows. Its ghosts' entries due by now are
        played first (ghosts.py)."""
        config = self.config
        if race.ghosts:
            self._advance_ghosts(room, now)
        dirty = race.lb_dirty and now >= self._slot(race.lb_checked_ms) + config.leaderboard_interval_ms
        rows: list[p.LeaderboardRow] | None = None
        for audience, feed, interval in (
            (Audience.RACERS, race.racers_feed, config.leaderboard_interval_ms),
            (Audience.SPECTATORS, race.spectators_feed, config.spectator_leaderboard_interval_ms),
        ):
            whole_due = feed.stale and now >= self._slot(feed.full_ms) + config.leaderboard_full_ms
            if not (dirty or feed.behind or whole_due):
                continue
            if now < self._slot(feed.sent_ms) + interval:
                feed.behind = True
                continue
            players = room.audience_ids(audience)
            if self.config.shared_rooms:
                # Several nodes: a feed is built for the members connected here only; another
                # node builds its own members' (in a room spread over two, often a whole audience
                # is on the other node: the spectators of a room whose racers are all here).
                players = tuple(pid for pid in players if self._connected(pid))
            if not players:
                feed.reset(now)
                continue
            feed.behind = False
            if rows is None:
                rows = self._rows(race, final=False)
            board = self._leaderboard_update(race, feed, rows, now)
            if board is not None:
                feed.sent_ms = now
                self._send(players, board, droppable=True)
        if dirty:
            race.lb_dirty = False
            race.lb_checked_ms = now
            self._announce_finishes(room, race, rows)
            self._daily_progress(room)

    def _fire(self, room: RoomState, deadline: Deadline, now: int) -> None:
        race = room.race
        due, pid = deadline.due, deadline.subject
        if due is Due.START:
            if room.phase == p.COUNTDOWN:
                self._begin(room, now)
        elif due is Due.RACER_WRITE:
            racer = race.racers.get(pid) if race is not None and pid is not None else None
            if racer is not None and room.phase == p.RACING:
                self._racer_due(room, racer, now)
        elif due is Due.FORFEIT:
            racer = race.racers.get(pid) if race is not None and pid is not None else None
            ending = race is None or race.ending
            if racer is not None and racer.forfeit_at is not None and room.phase == p.RACING and not ending:
                racer.forfeit_at = None
                self._note("forfeit", room=room.code, player=pid)
                self._system_entry(room, racer, RESIGN, now)
        elif due is Due.TIME_LIMIT:
            if room.phase == p.RACING and race is not None:
                self._end_race(room, now, "time")
        elif due is Due.BOARDS:
            if room.phase == p.RACING and race is not None:
                boards = self._boards_message(room, now, advance=True)
                if boards is not None:
                    race.boards_last_ms = now
                    self._send(room.spectator_ids(), boards, droppable=True)
        elif due is Due.MEMBER_GONE:
            # Members who went away: removed after a grace period (racers of a running race stay:
            # they forfeit instead, and may come back for the results).
            if pid is not None and pid in room.members and room.members[pid].left_ms is not None:
                self._remove_member(room, pid, now)
        elif due is Due.IDLE:
            if room.phase in (p.LOBBY, p.RESULTS):
                self._close_room(room, reason="idle")
        elif due is Due.SPECTATOR_COUNT and room.snapshot_dirty:
            # The spectator count, coalesced: one snapshot for any number of comings and goings.
            room.snapshot_dirty = False
            room.snapshot_last_ms = now
            self._send_room(room, droppable=True)
