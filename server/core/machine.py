"""The room core: a pure state machine for players, rooms and races.

Events in (:mod:`server.core.events`), effects out. No sockets, no asyncio, no clock: every
event carries the time, and randomness (room codes, deals, salts, ids, tokens) comes from an
injectable :class:`Entropy`. The shell (server/shell/) decodes frames into events, calls
:meth:`ServerCore.handle`, and carries out the effects: sends, store writes, timers.

Moves are write-ahead: a valid move becomes a ``PersistMove`` effect and is applied and
acknowledged only on ``MovePersisted``. One write per racer is in flight; later moves wait in
that racer's queue, in order. Room state is written behind (``SaveRoom``, latest wins); the
move logs plus the room record are enough to rebuild everything (:meth:`ServerCore.load_room`).
"""

from __future__ import annotations

import traceback
from typing import assert_never

from server.core.chat import ChatMixin
from server.core.daily import DailyMixin
from server.core.deadlines import DeadlinesMixin
from server.core.events import (
    BlockedChecked,
    BoardRead,
    ClientEvent,
    Connected,
    DailyDealFound,
    DailyTick,
    DayLoaded,
    DealFound,
    Disconnected,
    DropRoom,
    Effect,
    Event,
    HelloEvent,
    LeaderboardTick,
    LogReloaded,
    MovePersisted,
    MovePersistFailed,
    MovesAnswered,
    NodesGone,
    PlayerRegistered,
    ProfileClaimed,
    ProfileLooked,
    ProfileRead,
    ProfileRenamed,
    RaceRated,
    RatingsRead,
    RegisterFailed,
    RemoteBatch,
    RemoteMoves,
    RoomChanged,
    RoomCreated,
    RoomCreateFailed,
    RoomLoaded,
    RoomSaved,
    RoomsListed,
    RoomStale,
    StandingRead,
    Tick,
    TokenLooked,
)
from server.core.ghosts import GhostsMixin
from server.core.loading import LoadingMixin
from server.core.lobby import LobbyMixin
from server.core.profiles import ProfilesMixin
from server.core.race import RaceMixin
from server.core.ranking import RankingMixin
from server.core.rebuild import RebuildMixin
from server.core.records import (
    LogEntry,
    RoomRecord,
)
from server.core.state import (
    CoreConfig,
    Entropy,
    LogSnapshot,
    LogState,
    summary_from_record,
)
from server.core.views import ViewsMixin
from server.core.wal import PipelineBusy, RacerLogMixin
from shared import protocol as p

__all__ = ["CoreConfig", "Entropy", "ServerCore", "summary_from_record"]


# Events about one racer's log. A tuple, not ``A | B | ...``: that union is built anew at each call
# (four objects, about a microsecond), and this test runs on every event.
# The phases of a landed save that hold the current race's record.
RACE_STORED = (p.COUNTDOWN, p.RACING, p.RESULTS)
ONE_RACER_EVENTS = (MovePersisted, MovePersistFailed, LogReloaded, BlockedChecked, RemoteMoves)
BATCH_EVENTS = (MovesAnswered, RemoteBatch)  # a tuple: ``A | B`` in isinstance builds a union at each call


class ServerCore(
    LobbyMixin,
    LoadingMixin,
    RaceMixin,
    RacerLogMixin,
    RankingMixin,
    ViewsMixin,
    DeadlinesMixin,
    RebuildMixin,
    ChatMixin,
    GhostsMixin,
    DailyMixin,
    ProfilesMixin,
):
    """Every room and player this process serves. ``handle(event) -> effects``.

    Complete and safe on error, the way h11 moves to an error state: an exception inside a
    handler never leaves the core. The effects of that event are dropped, the rooms it touched
    are dropped from memory and rebuilt from the store (their racers resynchronised, their queued
    moves carried over), a client message is answered ``internal``, and one ``core_failed`` note
    (level error) carries the cause."""

    def __init__(self, config: CoreConfig | None = None, entropy: Entropy | None = None) -> None:
        super().__init__(config, entropy)
        self._pipeline_busy = PipelineBusy(self.config.busy_retry_ms, self.entropy.spread)

    def handle(self, event: Event) -> list[Effect]:
        # A move of a bound connection while the append pipeline is backed up (wal.py, the busy
        # rule): degrade, never collapse. A fast explicit answer before any work, instead of a
        # queue that grows into time-outs and reloads; the move is not played, nothing changes.
        if (
            type(event) is ClientEvent
            and event.load is not None
            and type(event.msg) is p.Move
            and self.conns.get(event.conn) is not None
        ):
            return [self._pipeline_busy.reply(event.conn, event.msg.id, event.load)]
        self._out = []
        self._touched = set()
        self._now = event.now
        subjects, before = self._before(event)
        try:
            self._dispatch(event)
            out = self._finish()
            if self.config.shared_rooms and isinstance(event, ClientEvent):
                self._keep_command(event, out)
            return out
        except Exception as exc:  # the error state: see the class docstring
            return self._failed(event, exc, subjects, before)

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, ClientEvent):
            self._client(event)
        elif isinstance(event, MovesAnswered):
            for answer in event.answers:
                if isinstance(answer, MovePersisted):
                    self._move_persisted(answer)
                else:
                    self._move_persist_failed(answer)
        elif isinstance(event, MovePersisted):
            self._move_persisted(event)
        elif isinstance(event, Tick):
            self._tick(event.code, event.now)
        elif isinstance(event, LeaderboardTick):
            self._leaderboard_ticks(event.now)
        elif isinstance(event, RemoteBatch):
            for run in event.runs:
                self._remote_moves(run)
        elif isinstance(event, Connected):
            self.conns[event.conn] = None
        elif isinstance(event, HelloEvent):
            self._hello(event)
        elif isinstance(event, TokenLooked):
            self._token_looked(event)
        elif isinstance(event, RoomLoaded):
            self._room_loaded(event)
        elif isinstance(event, RoomsListed):
            self._rooms_listed(event)
        elif isinstance(event, PlayerRegistered):
            self._registered(event)
        elif isinstance(event, RegisterFailed):
            self._error(event.conn, p.STORE_UNAVAILABLE, "the server could not store your player; try again", "hello")
        elif isinstance(event, RoomCreated):
            self._room_created(event)
        elif isinstance(event, RoomCreateFailed):
            self._room_create_failed(event)
        elif isinstance(event, MovePersistFailed):
            self._move_persist_failed(event)
        elif isinstance(event, LogReloaded):
            self._log_reloaded(event)
        elif isinstance(event, Disconnected):
            self._disconnected(event)
            self._daily_forget(event.conn)
        elif isinstance(event, DealFound):
            self._deal_found(event)
        elif isinstance(event, BlockedChecked):
            self._blocked_checked(event)
        elif isinstance(event, RoomChanged):
            self._room_changed(event)
        elif isinstance(event, RoomSaved):
            self._room_saved(event)
        elif isinstance(event, RoomStale):
            self._room_stale(event)
        elif isinstance(event, RemoteMoves):
            self._remote_moves(event)
        elif isinstance(event, NodesGone):
            self._nodes_gone(event)
        elif isinstance(event, DailyTick):
            self._daily_tick(event)
        elif isinstance(event, DayLoaded):
            self._day_loaded(event)
        elif isinstance(event, DailyDealFound):
            self._daily_deal_found(event)
        elif isinstance(event, BoardRead):
            self._board_read(event)
        elif isinstance(event, ProfileRead):
            self._profile_read(event)
        elif isinstance(event, StandingRead):
            self._standing_read(event)
        elif isinstance(event, ProfileLooked):
            self._profile_looked(event)
        elif isinstance(event, ProfileClaimed):
            self._profile_claimed(event)
        elif isinstance(event, ProfileRenamed):
            self._profile_renamed(event)
        elif isinstance(event, RaceRated):
            self._race_rated(event)
        elif isinstance(event, RatingsRead):
            self._ratings_read(event)
        else:
            assert_never(event)

    def _room_saved(self, event: RoomSaved) -> None:
        room = self.rooms.get(event.code)
        if room is None:
            return
        race = room.race
        if race is not None and race.unstored and event.race == race.record.number and event.phase in RACE_STORED:
            race.unstored = False  # the race record is stored: its start is in the deadline table again
            self._touched.add(room.code)
        self._rate_when_stored(room, event.phase, event.race)
        if self.config.shared_rooms:
            room.shown = (event.phase, event.race)
            # Its last member here may have just left (the save recorded it): the room's node is
            # another one now, and this one stops applying its moves at once.
            self._release_if_held_elsewhere(room)

    def _before(self, event: Event) -> tuple[set[str], dict[str, dict[str, LogSnapshot | None]]]:
        """Taken before an event is handled, for the error state: the rooms it may change, and their
        racers' write-ahead state (a few fields each, no game), so that a failure rebuilds from a
        consistent state, not a half-changed one. An event about one racer's log (a store answer,
        its move: most events) may change only that racer's, so only it is taken."""
        only: str | None
        code: str | None
        if isinstance(event, BATCH_EVENTS):  # only the racers it names are played on
            batch: dict[str, dict[str, LogSnapshot | None]] = {}
            for run in event.runs if isinstance(event, RemoteBatch) else event.answers:
                room = self.rooms.get(run.code)
                taken = batch.setdefault(run.code, {})
                if room is not None and room.race is not None and room.phase == p.RACING:
                    racer = room.race.racers.get(run.player_id)
                    if racer is not None:
                        taken[run.player_id] = racer.log_snapshot()
            return set(batch), batch
        if isinstance(event, ONE_RACER_EVENTS):
            code, only = event.code, event.player_id
        elif isinstance(event, ClientEvent) and isinstance(event.msg, p.Move):
            only = self.conns.get(event.conn)
            player = self.players.get(only) if only is not None else None
            code = player.room if player is not None else None
        else:
            subjects = self._subject_rooms(event)
            before: dict[str, dict[str, LogSnapshot | None]] = {}
            for subject in subjects:
                room = self.rooms.get(subject)
                if room is not None and room.race is not None and room.phase == p.RACING:
                    before[subject] = {pid: racer.log_snapshot() for pid, racer in room.race.racers.items()}
            return subjects, before
        if code is None:
            return set(), {}
        room = self.rooms.get(code)
        if room is None or room.race is None or room.phase != p.RACING or only is None:
            return {code}, {}
        racer = room.race.racers.get(only)
        return {code}, {code: {} if racer is None else {only: racer.log_snapshot()}}

    def _subject_rooms(self, event: Event) -> set[str]:
        """The rooms an event may change."""
        rooms: set[str] = set()
        code = getattr(event, "code", None)
        if isinstance(code, str):
            rooms.add(code)
        conn = getattr(event, "conn", None)
        if isinstance(conn, int):
            pid = self.conns.get(conn)
            player = self.players.get(pid) if pid is not None else None
            if player is not None and player.room is not None:
                rooms.add(player.room)
        if isinstance(event, ClientEvent) and isinstance(event.msg, p.Join):
            rooms.add(p.normalize_room_code(event.msg.code))
        return rooms

    def _failed(
        self, event: Event, exc: Exception, subjects: set[str], before: dict[str, dict[str, LogSnapshot | None]]
    ) -> list[Effect]:
        self._out = []  # nothing half-done goes out
        rooms = sorted((subjects | self._touched | self._ticked) & set(self.rooms))
        now = getattr(event, "now", 0)
        self._note(
            "core_failed",
            level="error",
            on=type(event).__name__,
            rooms=rooms,
            error=f"{type(exc).__name__}: {exc}",
            trace="".join(traceback.format_exception(exc)),
        )
        if isinstance(event, ClientEvent | HelloEvent) and event.conn in self.conns:
            # A message that broke its handler is not tried again (the state from before it is kept).
            move_id = event.msg.id if isinstance(event, ClientEvent) and isinstance(event.msg, p.Move) else None
            kind = p.message_type(event.msg)
            self._error(event.conn, p.INTERNAL, "the server failed on this message: nothing happened", kind, move_id)
        self._touched = set()
        if isinstance(event, RoomLoaded):
            # Rebuilding the room itself failed: never loop on it. What waited for it is answered.
            self._loading.pop(event.code, None)
            self.rooms.pop(event.code, None)
            self._out.append(DropRoom(event.code))
            return self._finish()
        for code in rooms:
            self._rebuild_room(code, now, why="failed", racers=before.get(code, {}))
            answers = event.answers if isinstance(event, MovesAnswered) else (event,)
            for answer in answers:
                if isinstance(answer, MovePersisted | MovePersistFailed) and answer.code == code:
                    self._loading[code].answered.add(answer.player_id)  # that answer is lost with the event
        return self._finish()

    def load_room(self, record: RoomRecord, logs: dict[str, list[LogEntry]], now: int) -> list[Effect]:
        """Rebuild a room from the store (after a restart, or one another process made): the
        record plus every racer's move log of the current race, as the answer to a LoadRoom."""
        return self.handle(RoomLoaded(record.code, record, logs, now))

    def has_room(self, code: str) -> bool:
        return code in self.rooms

    def remote_nodes(self) -> set[str]:
        """Several nodes: the other nodes the rooms held here record members as connected to."""
        return {
            m.node
            for room in self.rooms.values()
            for m in room.members.values()
            if m.left_ms is None and m.node and m.node != self.config.node_id
        }

    def holds(self, code: str) -> bool:
        """Does this process hold the room, or is it loading it?"""
        return code in self.rooms or code in self._loading

    # ------------------------------------------------------------------ read-only queries (metrics, health)

    def room_count(self) -> int:
        return len(self.rooms)

    def phase_counts(self) -> dict[str, int]:
        """The rooms held here, by phase."""
        counts: dict[str, int] = {}
        for room in self.rooms.values():
            counts[room.phase] = counts.get(room.phase, 0) + 1
        return counts

    def connection_kind(self, player_id: str | None) -> str:
        """What a connection bound to this player is: anonymous (no player), lobby (in no room
        here), or racer or spectator (its role in its room)."""
        player = self.players.get(player_id) if player_id is not None else None
        if player is None:
            return "anonymous"
        room = self.rooms.get(player.room) if player.room is not None else None
        member = room.members.get(player.player_id) if room is not None else None
        if member is None:
            return "lobby"
        return p.SPECTATOR if member.role == p.SPECTATOR else p.RACER

    def room_record(self, code: str) -> RoomRecord | None:
        """The room held here as it would be stored now (members, version, phase, race)."""
        room = self.rooms.get(code)
        return None if room is None else self._record(room)

    def racer_log(self, code: str, player_id: str) -> tuple[LogState, int] | None:
        """A racer's write-ahead state and the length of its log as this node knows it."""
        room = self.rooms.get(code)
        racer = room.race.racers.get(player_id) if room is not None and room.race is not None else None
        return None if racer is None else (racer.state, racer.log_length)

    def knows_player(self, player_id: str) -> bool:
        """Is the player in memory here (connected, or a member of a room held here)?"""
        return player_id in self.players

    def profile_of(self, player_id: str) -> str | None:
        """The profile (claimed name, docs/players.md) a player in memory here is bound to, or None."""
        player = self.players.get(player_id)
        return None if player is None else player.profile_id

    def player_connections(self, player_id: str) -> int:
        """The connections bound to the player here (0 for a player not in memory)."""
        player = self.players.get(player_id)
        return 0 if player is None else len(player.conns)

    def is_member(self, code: str, player_id: str) -> bool:
        """Is the player a member of the room held here (a join succeeded)?"""
        room = self.rooms.get(code)
        return room is not None and player_id in room.members

    def summary(self, code: str) -> p.RoomSummary | None:
        room = self.rooms.get(code)
        return None if room is None else summary_from_record(self._record(room))
