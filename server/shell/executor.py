"""The one dispatch of the core's effects, shared by the real shell (server/shell/effects.py), the
test shell (server/testing/shell.py) and the fuzzer's runner (server/testing/fuzzing.py).

:meth:`EffectExecutor.execute` names each effect once and ends in ``assert_never``, so a new effect
reaches every target (mypy sees a missing branch, and a missing method is an abstract one). Each
target supplies the I/O: sockets and a store, or dicts and inboxes.
"""

from __future__ import annotations

import abc
from typing import assert_never

from server.core.events import (
    Bind,
    CheckBlocked,
    ClaimProfile,
    CloseConnection,
    CreateDay,
    CreateRoomRecord,
    DropRoom,
    Effect,
    ExpireRoom,
    FindDailyDeal,
    FindDeal,
    FinishDaily,
    KeepCommand,
    ListRooms,
    LoadDay,
    LoadRoom,
    LookupProfile,
    LookupToken,
    Note,
    PersistMove,
    PutDailyRow,
    RateRace,
    ReadBack,
    ReadBoard,
    ReadProfile,
    ReadRatings,
    ReadStanding,
    RegisterPlayer,
    ReloadLog,
    RenameProfile,
    Reply,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Wake,
    WakeDaily,
    WakeLeaderboards,
)


class EffectExecutor(abc.ABC):
    """Carries out the core's effects: :meth:`execute` dispatches, each method does one kind."""

    __slots__ = ()

    def execute(self, effect: Effect) -> None:
        # The most frequent effects first: this runs for every effect of every move.
        if isinstance(effect, Send):
            self.send_to_players(effect)
        elif isinstance(effect, Reply):
            self.reply_to_conn(effect)
        elif isinstance(effect, PersistMove):
            self.persist_move(effect)
        elif isinstance(effect, Wake):
            self.wake(effect)
        elif isinstance(effect, WakeLeaderboards):
            self.wake_leaderboards(effect)
        elif isinstance(effect, SaveRoom):
            self.save_room(effect)
        elif isinstance(effect, Note):
            self.note(effect)
        elif isinstance(effect, Bind):
            self.bind(effect)
        elif isinstance(effect, CloseConnection):
            self.close_connection(effect)
        elif isinstance(effect, SavePlayer):
            self.save_player(effect)
        elif isinstance(effect, RegisterPlayer):
            self.register_player(effect)
        elif isinstance(effect, CreateRoomRecord):
            self.create_room(effect)
        elif isinstance(effect, SetListed):
            self.set_listed(effect)
        elif isinstance(effect, ExpireRoom):
            self.expire_room(effect)
        elif isinstance(effect, ReloadLog):
            self.reload_log(effect)
        elif isinstance(effect, FindDeal):
            self.find_deal(effect)
        elif isinstance(effect, CheckBlocked):
            self.check_blocked(effect)
        elif isinstance(effect, LookupToken):
            self.lookup_token(effect)
        elif isinstance(effect, LoadRoom):
            self.load_room(effect)
        elif isinstance(effect, ListRooms):
            self.list_rooms(effect)
        elif isinstance(effect, DropRoom):
            self.drop_room(effect)
        elif isinstance(effect, ReadBack):
            self.read_back(effect)
        elif isinstance(effect, KeepCommand):
            self.keep_command(effect)
        elif isinstance(effect, PutDailyRow):
            self.put_daily_row(effect)
        elif isinstance(effect, ReadBoard):
            self.read_board(effect)
        elif isinstance(effect, WakeDaily):
            self.wake_daily(effect)
        elif isinstance(effect, FinishDaily):
            self.finish_daily(effect)
        elif isinstance(effect, LoadDay):
            self.load_day(effect)
        elif isinstance(effect, CreateDay):
            self.create_day(effect)
        elif isinstance(effect, FindDailyDeal):
            self.find_daily_deal(effect)
        elif isinstance(effect, ReadProfile):
            self.read_profile(effect)
        elif isinstance(effect, ReadStanding):
            self.read_standing(effect)
        elif isinstance(effect, LookupProfile):
            self.lookup_profile(effect)
        elif isinstance(effect, ClaimProfile):
            self.claim_profile(effect)
        elif isinstance(effect, RenameProfile):
            self.rename_profile(effect)
        elif isinstance(effect, RateRace):
            self.rate_race(effect)
        elif isinstance(effect, ReadRatings):
            self.read_ratings(effect)
        else:
            assert_never(effect)

    def execute_all(self, effects: list[Effect]) -> None:
        for effect in effects:
            self.execute(effect)

    # ------------------------------------------------------------------ connections and timers

    @abc.abstractmethod
    def send_to_players(self, effect: Send) -> None:
        """A message to every connection bound to each of the players."""

    @abc.abstractmethod
    def reply_to_conn(self, effect: Reply) -> None:
        """A message to one connection, dropped if it has ended."""

    @abc.abstractmethod
    def bind(self, effect: Bind) -> None:
        """The connection speaks for the player from now on (dropped if it has ended)."""

    @abc.abstractmethod
    def close_connection(self, effect: CloseConnection) -> None:
        """Unbind the connection at once, then close it; its end is a Disconnected event."""

    @abc.abstractmethod
    def wake(self, effect: Wake) -> None:
        """Hand the core Tick(code) at the time (replacing the room's earlier wake)."""

    @abc.abstractmethod
    def wake_leaderboards(self, effect: WakeLeaderboards) -> None: ...

    @abc.abstractmethod
    def drop_room(self, effect: DropRoom) -> None:
        """The core forgot the room: its wake and what the shell keeps of it go."""

    @abc.abstractmethod
    def note(self, effect: Note) -> None: ...

    # ------------------------------------------------------------------ the store and the workers

    @abc.abstractmethod
    def persist_move(self, effect: PersistMove) -> None: ...

    @abc.abstractmethod
    def reload_log(self, effect: ReloadLog) -> None: ...

    @abc.abstractmethod
    def save_room(self, effect: SaveRoom) -> None: ...

    @abc.abstractmethod
    def create_room(self, effect: CreateRoomRecord) -> None: ...

    @abc.abstractmethod
    def set_listed(self, effect: SetListed) -> None: ...

    @abc.abstractmethod
    def expire_room(self, effect: ExpireRoom) -> None: ...

    @abc.abstractmethod
    def register_player(self, effect: RegisterPlayer) -> None: ...

    @abc.abstractmethod
    def save_player(self, effect: SavePlayer) -> None: ...

    @abc.abstractmethod
    def lookup_token(self, effect: LookupToken) -> None: ...

    @abc.abstractmethod
    def load_room(self, effect: LoadRoom) -> None: ...

    @abc.abstractmethod
    def list_rooms(self, effect: ListRooms) -> None: ...

    @abc.abstractmethod
    def find_deal(self, effect: FindDeal) -> None: ...

    @abc.abstractmethod
    def check_blocked(self, effect: CheckBlocked) -> None: ...

    # ------------------------------------------------------------------ several nodes

    @abc.abstractmethod
    def read_back(self, effect: ReadBack) -> None: ...

    @abc.abstractmethod
    def keep_command(self, effect: KeepCommand) -> None: ...

    # ------------------------------------------------------------------ the daily deal (docs/daily.md)

    @abc.abstractmethod
    def wake_daily(self, effect: WakeDaily) -> None:
        """Hand the core DailyTick at the time (replacing the earlier one)."""

    @abc.abstractmethod
    def load_day(self, effect: LoadDay) -> None: ...

    @abc.abstractmethod
    def create_day(self, effect: CreateDay) -> None: ...

    @abc.abstractmethod
    def find_daily_deal(self, effect: FindDailyDeal) -> None: ...

    @abc.abstractmethod
    def put_daily_row(self, effect: PutDailyRow) -> None: ...

    @abc.abstractmethod
    def finish_daily(self, effect: FinishDaily) -> None: ...

    @abc.abstractmethod
    def read_board(self, effect: ReadBoard) -> None: ...

    @abc.abstractmethod
    def read_profile(self, effect: ReadProfile) -> None: ...

    @abc.abstractmethod
    def read_standing(self, effect: ReadStanding) -> None: ...

    # ------------------------------------------------------------------ profiles and ratings
    # (server/shell/profile_ops.py holds the store steps every target runs)

    @abc.abstractmethod
    def lookup_profile(self, effect: LookupProfile) -> None: ...

    @abc.abstractmethod
    def claim_profile(self, effect: ClaimProfile) -> None: ...

    @abc.abstractmethod
    def rename_profile(self, effect: RenameProfile) -> None: ...

    @abc.abstractmethod
    def rate_race(self, effect: RateRace) -> None: ...

    @abc.abstractmethod
    def read_ratings(self, effect: ReadRatings) -> None: ...
