"""Rooms to and from their store records (the record plus the move logs rebuild a room)."""

from __future__ import annotations

from server.core.base import CoreBase
from server.core.records import (
    LogEntry,
    MemberRecord,
    RaceRecord,
    RacerInfo,
    RoomRecord,
)
from server.core.state import (
    MemberState,
    RacerState,
    RaceState,
    RoomState,
)
from shared import protocol as p
from shared.engine import Game, IllegalMove


class RebuildMixin(CoreBase):
    def _record(self, room: RoomState) -> RoomRecord:
        return RoomRecord(
            code=room.code,
            options=room.options,
            host=room.host,
            phase=room.phase,
            version=room.version,
            race_number=room.race_number,
            members=[
                MemberRecord(
                    player_id=m.player_id,
                    name=m.name,
                    bot=m.bot,
                    role=m.role,
                    ready=m.ready,
                    token_hash=m.token_hash,
                    left_ms=m.left_ms,
                    node=m.node,
                    claim=m.claim,
                    muted=m.muted,
                    profile_id=m.profile_id,
                )
                for m in room.members.values()
            ],
            race=None if room.race is None else room.race.record,
            pending_deal=room.pending_deal,
            created_ms=room.created_ms,
            last_activity_ms=room.last_activity_ms,
            chat=list(room.chat),
            ghosts=list(room.ghosts),
        )

    def _room_from_record(
        self,
        record: RoomRecord,
        logs: dict[str, list[LogEntry]],
        now: int,
        seeds: dict[str, RacerState] | None = None,
    ) -> RoomState:
        """The room a record and its race's logs describe. ``seeds``: racers of this node's copy of
        the same race whose game already holds the start of their log; ``logs`` then holds only
        the entries past it for them (a read-back replays what is new, not the whole race)."""
        members = {
            m.player_id: MemberState(
                m.player_id,
                m.name,
                m.bot,
                m.role,
                m.ready,
                m.token_hash,
                # Loaded from the store: nobody is connected to this process yet. Several nodes:
                # presence is as stored (the node holding a member's connection keeps it there).
                m.left_ms if m.left_ms is not None or self.config.shared_rooms else now,
                m.node,
                m.claim,
                m.muted,
                m.profile_id,
            )
            for m in record.members
        }
        for pid in members:
            player = self.players.get(pid)
            if player is not None and player.conns and player.room == record.code:
                members[pid].left_ms = None
                members[pid].node = self.config.node_id
        room = RoomState(
            code=record.code,
            options=record.options,
            host=record.host,
            phase=record.phase,
            version=record.version,
            race_number=record.race_number,
            members=members,
            race=None,
            pending_deal=record.pending_deal,
            created_ms=record.created_ms,
            last_activity_ms=max(record.last_activity_ms, now) if record.members else record.last_activity_ms,
            chat=list(record.chat),
            ghosts=list(record.ghosts),
        )
        if record.race is not None:
            room.race = self._race_from_record(room, record.race, logs, now, seeds)
            if record.phase == p.RESULTS:
                room.race.final_rows = self._rows(room.race, final=True)
        return room

    def _race_from_record(
        self,
        room: RoomState,
        record: RaceRecord,
        logs: dict[str, list[LogEntry]],
        now: int,
        seeds: dict[str, RacerState] | None = None,
    ) -> RaceState:
        racers: dict[str, RacerState] = {}
        for info in record.racers:
            seed = None if seeds is None else seeds.get(info.player_id)
            racer = self._replay_racer(info, record, logs.get(info.player_id, []), seed)
            member = room.members.get(info.player_id)
            if member is not None and member.left_ms is not None and room.phase == p.RACING and not racer.game.over:
                racer.forfeit_at = max(now, member.left_ms) + self.config.grace_ms
            racers[info.player_id] = racer
        # Games over already were announced (or happened before this copy): never again.
        finished = {pid for pid, racer in racers.items() if racer.game.over}
        # Ghosts are a function of the race's clock: rebuilt where the race stands now (docs/ghosts.md).
        racing = room.phase == p.RACING and record.ended_at is None
        race_ms = min(now, record.ends_at or now) - record.starts_at if racing else None
        ghosts = self._ghost_states(record.ghosts, record.deal, race_ms)
        return RaceState(record=record, racers=racers, members=room.members, finished=finished, ghosts=ghosts)

    def _replay_racer(
        self, info: RacerInfo, record: RaceRecord, entries: list[LogEntry], seed: RacerState | None = None
    ) -> RacerState:
        """A racer rebuilt from its log: ``entries`` played on a new game, or, given a ``seed`` (the
        racer as this node's copy has it, its game the log's first ``seed.log_length`` entries), the
        entries past those played on the seed's game, which is taken over (the copy is dropped)."""
        if seed is None:
            game = Game(record.deal, undo=record.undo, blocked_budget=self.config.blocked_budget)
            racer = RacerState(info=info, game=game)
        else:
            game = seed.game
            racer = RacerState(
                info=info, game=game, times=seed.times, log_length=seed.log_length, ids=seed.ids, cards_ms=seed.cards_ms
            )
        for entry in entries:
            racer.log_length += 1
            before = game.foundation_cards
            try:
                # Live play checked blocked after each entry; a stored log holds nothing after a
                # blocked position (but while the check was pending), so checking once at the end
                # (as replay does, within the budget: settle_status) is the same.
                game.play(entry.move, check_blocked=False)
            except IllegalMove:
                continue  # an unreadable entry: skipped (never written by this server)
            racer.times.append(entry.t_ms)
            if game.foundation_cards != before:
                racer.cards_ms = entry.t_ms
            if entry.id is not None:
                racer.ids[entry.id] = racer.log_length
        if seed is None or entries or game.blocked_pending:
            game.settle_status()  # (a seed's game with nothing new is as live play left it: decided)
        return racer
