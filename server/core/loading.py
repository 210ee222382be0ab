"""Rooms read from the store on demand (LoadRoom / RoomLoaded), and the error state: a room whose
handler failed is dropped from memory and rebuilt from the store, its racers resynchronised.

A room is loaded when a join names a code this process does not hold, when a resuming player's
room is not in memory, and after a failure. Joins and resumes that need it wait here (parked)
until the store answers. A closed room (stored with no members) is never loaded again, and a
loaded room counts toward ``CoreConfig.max_rooms`` like any other.
"""

from __future__ import annotations

import msgspec

from server.core.base import CoreBase
from server.core.events import (
    ClientEvent,
    DropRoom,
    Effect,
    KeepCommand,
    LoadRoom,
    ReadBack,
    ReloadLog,
    RoomChanged,
    RoomLoaded,
    RoomsListed,
    RoomStale,
    SaveRoom,
)
from server.core.records import LogEntry, PlayerRecord
from server.core.state import Loading, LogSnapshot, LogState, RacerState, RoomState, summary_from_record
from shared import protocol as p


class LoadingMixin(CoreBase):
    # ---------------------------------------------------------------- asking

    def _load(self, code: str, once: bool = True) -> Loading:
        loading = self._loading.get(code)
        if loading is None:
            loading = self._loading[code] = Loading()
            self._out.append(LoadRoom(code, once))
        return loading

    def _park_join(self, code: str, conn: int, msg: p.Join, now: int) -> None:
        self._load(code).joins.append((conn, msg))

    def _park_resume(self, code: str, conn: int, record: PlayerRecord, token: str, now: int) -> None:
        self._load(code).resumes.append((conn, record, token))

    def _loading_answer(self, code: str, player_id: str) -> None:
        """A racer's write was answered while its room is being reloaded: re-read its log after."""
        loading = self._loading.get(code)
        if loading is not None:
            loading.answered.add(player_id)

    def _rebuild_room(self, code: str, now: int, why: str, racers: dict[str, LogSnapshot | None] | None = None) -> None:
        """Drop a room from memory and load it again from the store (the error state). ``racers``:
        its racers' write-ahead state to carry over (taken before the failed event; by default the
        live one), so that queued moves and writes in flight are still answered."""
        room = self.rooms.pop(code, None)
        self._out.append(DropRoom(code))  # its timer goes; the rebuilt room schedules its own
        loading = self._load(code, once=False)
        loading.rebuild = why
        self._note("room_rebuild", room=code, why=why, level="warning")
        if room is None:
            return
        loading.members = list(room.members)
        if room.race is not None and room.phase == p.RACING:
            # Taken before the failed event where given, else as they are (untouched by it).
            loading.racers = {pid: racer.log_snapshot() for pid, racer in room.race.racers.items()}
            loading.racers.update(racers or {})

    # ---------------------------------------------------------------- the answer

    def _room_loaded(self, ev: RoomLoaded, seeds: dict[str, RacerState] | None = None) -> None:
        loading = self._loading.pop(ev.code, None) or Loading()
        code = ev.code
        if ev.failed:
            if loading.rebuild is not None:
                self._loading[code] = loading  # the shell retries with back-off until it answers
                self._out.append(LoadRoom(code, once=False))
                return
            self._answer_parked(loading, ev.now, p.STORE_UNAVAILABLE, "the store did not answer: try again")
            return
        record = ev.record
        if code in self.rooms:
            room: RoomState | None = self.rooms[code]
        elif record is None or record.closed or not record.members:
            room = None
            if loading.rebuild is not None:
                self._room_gone(code, loading, ev.now)
        elif loading.rebuild is None and len(self.rooms) + len(self._creating) >= self.config.max_rooms:
            self._answer_parked(loading, ev.now, p.SERVER_FULL, "the server holds as many rooms as it may: try later")
            return
        else:
            room = self._room_from_record(record, ev.logs, ev.now, seeds)
            room.version = max(room.version, loading.version_floor)
            room.shown = (room.phase, room.race_number)  # as stored: what its members are sent from here
            self.rooms[code] = room
            self._touched.add(code)
            self._note("room_loaded", room=code, phase=room.phase, race=room.race_number)
            if room.phase == p.DEALING:
                self._find_deal(room)  # the search of the process that stored it is gone: search again
            if loading.rebuild is not None:
                self._resync(room, loading, ev.now)
            if room.race is not None:
                # The replay decided blocked within the budget; what it left undecided is asked again.
                for racer in room.race.racers.values():
                    self._settle_blocked(room, racer, ev.now)
        for conn, record_, token in loading.resumes:
            if conn in self.conns and self.conns[conn] is None:
                self._resume(conn, record_, token, ev.now)
        for conn, msg in loading.joins:
            pid = self.conns.get(conn)
            player = self.players.get(pid) if pid is not None else None
            if player is not None:
                self._join(conn, player, msg, ev.now, loaded=True)
        if loading.dailies:
            self._daily_loaded(code, record, loading.dailies, ev.now)

    def _room_stale(self, ev: RoomStale) -> None:
        room = self.rooms.get(ev.code)
        if room is None:
            return
        race = room.race
        lengths: dict[str, int] = {}
        if race is not None:
            lengths = {
                pid: racer.log_length
                for pid, racer in race.racers.items()
                if racer.log_length and len(racer.game.entries) == len(racer.times) == racer.log_length
            }
        self._out.append(ReadBack(ev.code, None if race is None else race.record.number, lengths, ev.first))

    # Client messages that change no room's stored record.
    _NOT_ROOM_COMMANDS = (p.Move, p.Ping, p.ListRooms, p.CreateRoom)

    def _keep_command(self, event: ClientEvent, out: list[Effect]) -> None:
        """Several nodes: a room command is kept until a save of its room commits it (a join that
        waits for its room to load, until the save that follows the load): KeepCommand, first, so
        that the saves it goes with are made after it."""
        if isinstance(event.msg, self._NOT_ROOM_COMMANDS):
            return
        codes = {e.code for e in out if isinstance(e, SaveRoom)}
        if isinstance(event.msg, p.Join):
            codes.update(e.code for e in out if isinstance(e, LoadRoom))
        if codes:
            out.insert(0, KeepCommand(tuple(sorted(codes)), event))

    def _room_changed(self, ev: RoomChanged) -> None:
        """Several nodes: the store's room replaces this node's copy (another node changed it, or this
        node's save lost the compare-and-set), as a rebuild does: racers' write-ahead state carried
        over, every local member resynchronised. Then this node's room commands the store lacks
        (``ev.replay``) are handled again on the new copy, so a command that lost the race to
        another node's change is applied after it, not lost. A local player the room no longer
        lists after that (kicked, or removed, on another node) is told: kicked, reason ``removed``."""
        code = ev.code
        old = self.rooms.get(code)
        if old is None or code in self._loading:
            return  # not held here, or being loaded anyway (the load reads the store's latest)
        loading = Loading(
            rebuild="remote",
            members=list(old.members),
            version_floor=old.version + 1,
            shown=old.shown,
            lengths={} if old.race is None else {pid: racer.log_length for pid, racer in old.race.racers.items()},
        )
        if old.race is not None and old.phase == p.RACING:
            loading.racers = {pid: racer.log_snapshot() for pid, racer in old.race.racers.items()}
        del self.rooms[code]
        self._loading[code] = loading
        read = sum(len(entries) for entries in ev.logs.values())
        self._note("room_refreshed", room=code, version=old.version, replay=len(ev.replay), entries_read=read)
        logs, unread, seeds = self._known_logs(old, ev)
        self._room_loaded(RoomLoaded(code, ev.record, logs, ev.now), seeds)
        room = self.rooms.get(code)
        if room is None:
            return
        self._touched.add(code)
        self._chat_arrived(old, room)
        if room.race is not None and room.phase == p.RACING:
            for pid in unread:
                racer = room.race.racers.get(pid)
                if racer is not None and racer.state is LogState.IDLE:
                    self._reread(room, racer)  # the read missed entries this node knows: read it again
        local = [pid for pid in dict.fromkeys((*old.members, *room.members)) if pid in self.players]
        joining = {self.conns.get(e.conn) for e in ev.replay if isinstance(e.msg, p.Join)}
        for pid in local:  # this node's players follow the stored membership (a lost join, a lost leave)
            player = self.players[pid]
            if pid in room.members:
                player.room = code
                continue
            if player.room == code:
                player.room = None
            if pid in old.members and pid not in joining:  # removed by another node (its join is replayed)
                self._send((pid,), p.Kicked(room=code, reason="removed"))
                self._save_player(pid, None, player.name, player.bot, player.token_hash)
        stored = {m.player_id: m for m in ev.record.members} if ev.record is not None else {}
        here = [pid for pid in local if pid in room.members and self._connected(pid)]
        for pid in list(here):
            seat, before = stored.get(pid), old.members.get(pid)
            if seat is None or seat.left_ms is not None or seat.node in ("", self.config.node_id):
                continue
            if before is not None and seat.claim >= before.claim:  # (not in this copy: it resumed here since)
                # A newer resume on another node holds the seat: this node's connection yields.
                self._supersede(self.players[pid])
                room.members[pid].left_ms, room.members[pid].node = seat.left_ms, seat.node
                here.remove(pid)
        if any(
            pid not in stored or (stored[pid].left_ms, stored[pid].node) != (None, self.config.node_id) for pid in here
        ):
            for pid in here:  # connected here (a resume whose save lost): the room says so again
                member, before = room.members[pid], old.members.get(pid)
                member.left_ms, member.node = None, self.config.node_id
                member.claim = max(member.claim, 0 if before is None else before.claim)
            self._changed(room)
        self._replay_departures(room, old, ev.now)
        for replayed in ev.replay:
            self._client(msgspec.structs.replace(replayed, now=ev.now))
        for pid in local:
            self._forget_if_idle(pid)
        if self.rooms.get(code) is room:
            self._release_if_held_elsewhere(room)

    def _release_if_held_elsewhere(self, room: RoomState) -> None:
        """Several nodes: a room none of whose members is connected here, and some connected to
        another node (which holds it, so its timers run there), is dropped from memory: this node
        stops applying its moves and reading it back (docs/deployment.md, "Room affinity": a host
        that created its room here resumed on the room's node). Only once nothing of this node's
        is pending for it: a save, a racer's write, a deal search. A member who comes back here,
        or a join, loads it again."""
        node = self.config.node_id
        if not self.config.shared_rooms or room.needs_save or room.phase == p.DEALING or room.code in self._loading:
            return
        if any(self._connected(pid) for pid in room.members):
            return
        if not any(member.left_ms is None and member.node not in ("", node) for member in room.members.values()):
            return
        race = room.race
        if race is not None and any(r.state is not LogState.IDLE or r.queue for r in race.racers.values()):
            return
        del self.rooms[room.code]
        self._out.append(DropRoom(room.code))
        for pid in room.members:
            self._forget_if_idle(pid)
        self._note("room_released", room=room.code, version=room.version)

    def _replay_departures(self, room: RoomState, old: RoomState, now: int) -> None:
        """Members the store records as connected to this node that are not (their disconnect's save
        lost the compare-and-set, or was made on the old copy): only this node knows, so it marks
        them away again, from when the old copy says they went (the grace forfeit keeps its time)."""
        node = self.config.node_id
        if not node:
            return
        for pid, member in list(room.members.items()):
            if member.left_ms is not None or member.node != node or self._connected(pid):
                continue
            before = old.members.get(pid)
            since = before.left_ms if before is not None and before.left_ms is not None else now
            self._note("departure_replayed", room=room.code, player=pid, since=since)
            self._member_away(room, pid, since)

    def _known_logs(
        self, old: RoomState, ev: RoomChanged
    ) -> tuple[dict[str, list[LogEntry]], list[str], dict[str, RacerState]]:
        """What a read-back hands the rebuild: for each racer of this node's copy of the same race
        whose game lines up with its log (every stored entry readable), the copy's racer as a seed
        and the entries read past its length; for the others, their whole log as read.

        The shell reads a room's record and logs with awaits between, while this node goes on
        storing (and acknowledging) its own racers' moves and playing other nodes' ones: a log
        read before such an entry landed is older than what the node knows, and a racer rebuilt
        from it would lose acknowledged moves (its next move judged on an older position). Logs
        only grow, and every entry the node knows is stored, so the copy is never cut back: a
        seed keeps every entry it has. The shell reads only the entries past the copy's lengths
        when the read began (``ev.starts``): the copy holds those before.

        Returns the logs, the racers whose log must be read again (the read does not reach what
        this node knows and the copy cannot be seeded, or it read a tail the copy cannot
        complete), and the seeds."""
        logs = dict(ev.logs)
        unread: list[str] = []
        seeds: dict[str, RacerState] = {}
        race, record = old.race, ev.record
        same = (
            race is not None
            and record is not None
            and record.race is not None
            and record.race.number == race.record.number
        )
        racers = race.racers if same and race is not None else {}
        for pid, start in ev.starts.items():
            if start > 0 and pid not in racers:  # a tail without the entries before it: read it all again
                logs[pid] = []
                unread.append(pid)
        for pid, racer in racers.items():
            start, read = ev.starts.get(pid, 0), logs.get(pid, [])
            lined = len(racer.game.entries) == len(racer.times) == racer.log_length
            if not lined or racer.log_length < start:
                # Positions do not line up (an unreadable stored entry): rebuilt from what was read
                # (nothing, for a tail), and read again if that falls short of what the node knows.
                if start > 0:
                    logs[pid] = []
                    unread.append(pid)
                elif racer.log_length > len(read):
                    unread.append(pid)
                continue
            seeds[pid] = racer
            logs[pid] = read[racer.log_length - start :]
            if racer.log_length > start + len(read):
                self._note("refresh_behind", room=old.code, player=pid, read=start + len(read), known=racer.log_length)
        return logs, unread, seeds

    def _answer_parked(self, loading: Loading, now: int, code: str, why: str) -> None:
        for conn, record, token in loading.resumes:
            if conn in self.conns and self.conns[conn] is None:
                self._resume(conn, record, token, now, keep_room=True)
                self._error(conn, code, f"your room cannot be loaded now ({why})", "hello")
        for conn, _msg in loading.joins:
            if conn in self.conns:
                self._error(conn, code, why, "join")
        for conn, _daily in loading.dailies:
            if conn in self.conns:
                self._error(conn, code, why, "daily")

    def _room_gone(self, code: str, loading: Loading, now: int) -> None:
        """A dropped room the store no longer has: its members are told, and it is forgotten."""
        self._note("room_gone", room=code, level="warning")
        why = "your room is gone from the store (it expired or was deleted): this move was not played"
        for snapshot in loading.racers.values():
            if snapshot is None:
                continue
            head, queue = snapshot[1], snapshot[8]
            for pending in (*((head,) if head is not None else ()), *queue):
                # Every move gets one answer (docs/protocol.md): the head's write found no room.
                if pending.id is not None and pending.conn is not None and pending.conn in self.conns:
                    self._reply(pending.conn, p.MoveRejected(id=pending.id, code=p.NOT_IN_ROOM, reason=why))
        for pid in loading.members:
            player = self.players.get(pid)
            if player is None or player.room != code:
                continue
            player.room = None
            self._send((pid,), p.Kicked(room=code, reason="gone"))
            self._save_player(pid, None, player.name, player.bot, player.token_hash)
            self._forget_if_idle(pid)

    def _resync(self, room: RoomState, loading: Loading, now: int) -> None:
        """A room rebuilt after a failure: carry each racer's queue and write-ahead state over, then
        send every connected member a fresh snapshot (as a resuming client gets)."""
        race = room.race
        if race is not None and room.phase == p.RACING:
            for pid, snapshot in loading.racers.items():
                racer = race.racers.get(pid)
                if racer is None:
                    continue
                racer.restore_log(snapshot)
                if racer.state is LogState.WRITING and racer.log_length != racer.head_length:
                    racer.state = LogState.REREADING  # the log just read moved past it: it decides now
                if racer.state is LogState.WRITING and pid in loading.answered:
                    # Its write was answered while the room was away (that answer is lost): re-read.
                    racer.state = LogState.REREADING
                    self._out.append(ReloadLog(room.code, race.record.number, pid))
                elif racer.state in (LogState.REREADING, LogState.OUTAGE):
                    self._settle_head(room, racer, racer.head_length, now)  # the log was just read
        # A read-back after another node's change that left the phase and the race its members
        # were last shown as they were (a spectator came or went, a member's presence, a ready): a
        # member this copy had gets the new room only; its countdown, leaderboard and results are
        # the ones it has, and its board too unless its log moved. Its leaderboards and
        # spectators' boards go on with the ticks. Sent whole each time, a spectator joining on
        # one node sent every member on the others their board, leaderboard and delayed boards
        # again. "Shown", not this copy's phase: a change of this node's whose save lost (its
        # race start, its results) was never shown, and its members get the stored one here.
        same = loading.rebuild == "remote" and loading.shown == (room.phase, room.race_number)
        for pid in room.members:
            player = self.players.get(pid)
            if player is None:
                continue
            racer = race.racers.get(pid) if race is not None else None
            board_moved = racer is not None and racer.log_length != loading.lengths.get(pid)
            catch_up = not same or pid not in loading.members or (room.phase == p.RACING and board_moved)
            for conn in sorted(player.conns):
                self._reply(conn, self._room_message(room, pid))
                if catch_up:
                    self._snapshot(conn, room, pid, now)
        room.shown = (room.phase, room.race_number)
        if race is not None:
            for racer in race.racers.values():
                self._pump(room, racer, now)
            self._check_race_over(room, now)

    # ---------------------------------------------------------------- room list

    def _rooms_listed(self, ev: RoomsListed) -> None:
        if ev.conn not in self.conns:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: try again", "list_rooms")
            return
        rooms: list[p.RoomSummary] = []
        for code in ev.codes:
            room = self.rooms.get(code)
            if room is not None:
                summary = summary_from_record(self._record(room))
            else:
                record = ev.records.get(code)
                if record is None or record.closed:
                    continue
                summary = summary_from_record(record)
            if not summary.code or summary.racers + summary.spectators == 0:
                continue
            rooms.append(summary)
        self._reply(ev.conn, p.RoomList(rooms=rooms))
