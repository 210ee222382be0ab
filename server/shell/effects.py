"""The real shell's side of the one effect dispatch (executor.py): each effect to the part that
carries it out."""

from __future__ import annotations

from dataclasses import dataclass

from server.core import events as ev
from server.shell.appends import AppendPipeline
from server.shell.config import NOTE_LEVELS, Tasks, log_event
from server.shell.daily import DailyPart
from server.shell.delivery import Delivery
from server.shell.executor import EffectExecutor
from server.shell.players import PlayerWrites
from server.shell.profiles import ProfileSteps
from server.shell.reads import Reads
from server.shell.room_writes import RoomWrites
from server.shell.timers import Timers
from server.shell.workers import Workers


@dataclass(slots=True)
class ShellEffects(EffectExecutor):
    """The real shell's side of the one dispatch: each effect to the part that carries it out."""

    delivery: Delivery
    appends: AppendPipeline
    timers: Timers
    writes: RoomWrites
    reads: Reads
    players: PlayerWrites
    workers: Workers
    tasks: Tasks
    daily: DailyPart
    profiles: ProfileSteps

    def send_to_players(self, effect: ev.Send) -> None:
        self.delivery.to_players(effect.players, effect.message, effect.droppable)

    def reply_to_conn(self, effect: ev.Reply) -> None:
        if effect.frame is not None:
            self.delivery.frame_to_conn(effect.conn, effect.message, effect.frame)
        else:
            self.delivery.to_conn(effect.conn, effect.message)

    def bind(self, effect: ev.Bind) -> None:
        self.delivery.bind(effect.conn, effect.player_id)

    def close_connection(self, effect: ev.CloseConnection) -> None:
        self.delivery.close(effect.conn, effect.code, effect.reason)

    def wake(self, effect: ev.Wake) -> None:
        self.timers.wake(effect.code, effect.at_ms)

    def wake_leaderboards(self, effect: ev.WakeLeaderboards) -> None:
        self.timers.wake_leaderboards(effect.at_ms)

    def drop_room(self, effect: ev.DropRoom) -> None:
        self.timers.drop(effect.code)
        self.writes.dropped(effect.code)

    def note(self, effect: ev.Note) -> None:
        log_event(NOTE_LEVELS[effect.level], effect.event, **effect.fields)

    def persist_move(self, effect: ev.PersistMove) -> None:
        self.appends.enqueue(effect)

    def reload_log(self, effect: ev.ReloadLog) -> None:
        self.tasks.spawn(self.reads.reload(effect))

    def save_room(self, effect: ev.SaveRoom) -> None:
        self.writes.save(effect)

    def create_room(self, effect: ev.CreateRoomRecord) -> None:
        self.tasks.spawn(self.writes.create(effect))

    def set_listed(self, effect: ev.SetListed) -> None:
        self.writes.set_listed(effect.code, effect.listed)

    def expire_room(self, effect: ev.ExpireRoom) -> None:
        self.writes.expire(effect.code, effect.seconds)

    def register_player(self, effect: ev.RegisterPlayer) -> None:
        self.tasks.spawn(self.players.register(effect))

    def save_player(self, effect: ev.SavePlayer) -> None:
        self.players.save(effect)

    def lookup_token(self, effect: ev.LookupToken) -> None:
        self.tasks.spawn(self.reads.lookup_token(effect))

    def load_room(self, effect: ev.LoadRoom) -> None:
        self.tasks.spawn(self.reads.load_room(effect))

    def list_rooms(self, effect: ev.ListRooms) -> None:
        self.tasks.spawn(self.reads.list_rooms(effect))

    def find_deal(self, effect: ev.FindDeal) -> None:
        self.workers.start_job(effect)

    def check_blocked(self, effect: ev.CheckBlocked) -> None:
        self.workers.start_job(effect)  # its own worker: never behind a deal search

    def read_back(self, effect: ev.ReadBack) -> None:
        self.writes.read_back(effect)

    def keep_command(self, effect: ev.KeepCommand) -> None:
        self.writes.versions.note_command(set(effect.codes), effect.event)

    # The daily deal (docs/daily.md): the daily part carries each out.

    def wake_daily(self, effect: ev.WakeDaily) -> None:
        self.daily.wake(effect)

    def load_day(self, effect: ev.LoadDay) -> None:
        self.daily.load_day(effect)

    def create_day(self, effect: ev.CreateDay) -> None:
        self.daily.create_day(effect)

    def find_daily_deal(self, effect: ev.FindDailyDeal) -> None:
        self.daily.find_daily_deal(effect)

    def put_daily_row(self, effect: ev.PutDailyRow) -> None:
        self.daily.put_row(effect)

    def finish_daily(self, effect: ev.FinishDaily) -> None:
        self.daily.finish(effect)

    def read_board(self, effect: ev.ReadBoard) -> None:
        self.daily.read_board(effect)

    def read_profile(self, effect: ev.ReadProfile) -> None:
        self.daily.read_profile(effect)

    def read_standing(self, effect: ev.ReadStanding) -> None:
        self.daily.read_standing(effect)

    def lookup_profile(self, effect: ev.LookupProfile) -> None:
        self.profiles.lookup(effect)

    def claim_profile(self, effect: ev.ClaimProfile) -> None:
        self.profiles.claim(effect)

    def rename_profile(self, effect: ev.RenameProfile) -> None:
        self.profiles.rename(effect)

    def rate_race(self, effect: ev.RateRace) -> None:
        self.profiles.rate(effect)

    def read_ratings(self, effect: ev.ReadRatings) -> None:
        self.profiles.read(effect)
