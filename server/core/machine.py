"""The room core: a pure state machine for players, rooms and races.

Events in (:mod:`server.core.events`), effects out. No sockets, no asyncio, no clock: every
event carries the time, and randomness (room codes, deals, salts, ids, tokens) comes from an
injectable :class:`Entropy`. The shell (server/app.py) decodes frames into events, calls
:meth:`ServerCore.handle`, and carries out the effects: sends, store writes, timers.

Moves are write-ahead: a valid move becomes a ``PersistMove`` effect and is applied and
acknowledged only on ``MovePersisted``. One write per racer is in flight; later moves wait in
that racer's queue, in order. Room state is written behind (``SaveRoom``, latest wins); the
move logs plus the room record are enough to rebuild everything (:meth:`ServerCore.load_room`).
"""

from __future__ import annotations

from server.core.deadlines import DeadlinesMixin
from server.core.events import (
    BlockedChecked,
    ClientEvent,
    Connected,
    DealFound,
    Disconnected,
    Effect,
    Event,
    HelloEvent,
    LogReloaded,
    MovePersisted,
    MovePersistFailed,
    PlayerRegistered,
    RegisterFailed,
    RoomCreated,
    RoomCreateFailed,
    Tick,
)
from server.core.lobby import LobbyMixin
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
    summary_from_record,
)
from server.core.views import ViewsMixin
from server.core.wal import RacerLogMixin
from shared import protocol as p

__all__ = ["CoreConfig", "Entropy", "ServerCore", "summary_from_record"]


class ServerCore(LobbyMixin, RaceMixin, RacerLogMixin, RankingMixin, ViewsMixin, DeadlinesMixin, RebuildMixin):
    """Every room and player this process serves. ``handle(event) -> effects``."""

    def handle(self, event: Event) -> list[Effect]:
        self._out = []
        self._touched = set()
        if isinstance(event, ClientEvent):
            self._client(event)
        elif isinstance(event, MovePersisted):
            self._move_persisted(event)
        elif isinstance(event, Tick):
            self._tick(event.code, event.now)
        elif isinstance(event, Connected):
            self.conns[event.conn] = None
        elif isinstance(event, HelloEvent):
            self._hello(event)
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
        elif isinstance(event, DealFound):
            self._deal_found(event)
        elif isinstance(event, BlockedChecked):
            self._blocked_checked(event)
        return self._finish()

    def load_room(self, record: RoomRecord, logs: dict[str, list[LogEntry]], now: int) -> list[Effect]:
        """Rebuild a room from the store (after a restart, or one another process made):
        the record plus every racer's move log of the current race."""
        self._out = []
        self._touched = set()
        if record.code not in self.rooms:
            room = self._room_from_record(record, logs, now)
            self.rooms[room.code] = room
            self._touched.add(room.code)
            self._note("room_loaded", room=room.code, phase=room.phase, race=room.race_number)
            if room.phase == p.DEALING:
                self._find_deal(room)  # the search of the process that stored it is gone: search again
            if room.race is not None:
                # The replay decided blocked within the budget; what it left undecided is asked again.
                for racer in room.race.racers.values():
                    self._settle_blocked(room, racer, now)
        return self._finish()

    def has_room(self, code: str) -> bool:
        return code in self.rooms

    def summary(self, code: str) -> p.RoomSummary | None:
        room = self.rooms.get(code)
        return None if room is None else summary_from_record(self._record(room))
