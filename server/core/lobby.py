"""Lobby and membership: hello, resume, rooms, joining, leaving, kicks, disconnections."""

from __future__ import annotations

import msgspec

from server.core.base import CoreBase
from server.core.daily_rules import daily_room
from server.core.events import (
    Bind,
    ClientEvent,
    CloseConnection,
    CreateRoomRecord,
    Disconnected,
    DropRoom,
    ExpireRoom,
    HelloEvent,
    ListRooms,
    LookupToken,
    NodesGone,
    PlayerRegistered,
    RegisterPlayer,
    RoomCreated,
    RoomCreateFailed,
    SavePlayer,
    SaveRoom,
    SetListed,
    TokenLooked,
)
from server.core.records import (
    PlayerRecord,
    RoomRecord,
    hash_token,
)
from server.core.state import (
    MemberState,
    PlayerState,
    RoomState,
)
from shared import protocol as p
from shared.engine import RESIGN
from shared.names import NameInvalid, display_name, name_key

# The daily deal's client messages (server/core/daily.py): none needs a room.
DAILY_MESSAGES = (p.Daily, p.WatchDaily, p.GetBoard, p.GetPlayer, p.GetStanding)
DAILY_RUNNING = (p.COUNTDOWN, p.RACING)  # a daily attempt under way: leave is refused (daily.py)


class LobbyMixin(CoreBase):
    def _client(self, ev: ClientEvent) -> None:
        if ev.conn not in self.conns:
            return
        msg = ev.msg
        kind = p.message_type(msg)
        if isinstance(msg, p.Ping):
            self._reply(ev.conn, p.Pong(t=msg.t, server_time=ev.now))
            return
        pid = self.conns[ev.conn]
        move_id = msg.id if isinstance(msg, p.Move) else None
        if pid is None:
            self._error(ev.conn, p.WRONG_PHASE, "say hello first", kind, move_id)
            return
        player = self.players[pid]
        if isinstance(msg, p.Hello):
            self._error(ev.conn, p.WRONG_PHASE, "you already said hello on this connection", kind)
        elif isinstance(msg, p.Move):
            self._move(ev.conn, player, msg, ev.now)
        elif isinstance(msg, p.CreateRoom):
            self._create_room(ev.conn, player, msg.options, ev.now)
        elif isinstance(msg, p.Join):
            self._join(ev.conn, player, msg, ev.now)
        elif isinstance(msg, p.ListRooms):
            # The listed rooms of every process are in the store: the shell reads them (ListRooms).
            self._out.append(ListRooms(ev.conn))
        elif isinstance(msg, DAILY_MESSAGES):
            self._daily_client(ev.conn, player, msg, ev.now)
        elif isinstance(msg, p.Claim):
            self._claim(ev.conn, player, msg, ev.now)
        elif isinstance(msg, p.Rename):
            self._rename(ev.conn, player, msg)
        elif isinstance(msg, p.GetRatings):
            self._get_ratings(ev.conn, msg)
        elif isinstance(msg, p.GetRating):
            self._get_rating(ev.conn, player, msg)
        else:
            room = self.rooms.get(player.room) if player.room is not None else None
            if room is None:
                if player.room is not None and player.room in self._loading:
                    why = f"room {player.room} is being reloaded from the store: try again"
                    self._error(ev.conn, p.STORE_UNAVAILABLE, why, kind)
                    return
                self._error(ev.conn, p.NOT_IN_ROOM, f"{kind} needs a room: create or join one first", kind)
                return
            room.last_activity_ms = ev.now
            self._touched.add(room.code)
            if isinstance(msg, p.Leave) and daily_room(room.code) is not None and room.phase in DAILY_RUNNING:
                self._daily_leave(ev.conn, room, player, ev.now)
            elif isinstance(msg, p.Leave):
                self._remove_member(room, pid, ev.now)
                self._reply(ev.conn, p.Left(room=room.code))
            elif isinstance(msg, p.Ready):
                self._ready(ev.conn, room, pid, msg.ready)
            elif isinstance(msg, p.Start):
                self._start(ev.conn, room, pid, ev.now)
            elif isinstance(msg, p.Kick):
                self._kick(ev.conn, room, pid, msg.player_id, ev.now)
            elif isinstance(msg, p.EndRace):
                self._end_request(ev.conn, room, pid, ev.now)
            elif isinstance(msg, p.Rematch):
                self._rematch(ev.conn, room, pid, msg.deal, ev.now, msg.ghosts)
            elif isinstance(msg, p.AddGhost):
                self._add_ghost(ev.conn, room, pid, msg)
            elif isinstance(msg, p.RemoveGhost):
                self._remove_ghost(ev.conn, room, pid, msg.player_id)
            elif isinstance(msg, p.Sync):
                self._sync(ev.conn, room, pid, ev.now)
            elif isinstance(msg, p.Chat):
                self._chat(ev.conn, room, player, msg.text, ev.now)
            elif isinstance(msg, p.Mute):
                self._mute(ev.conn, room, pid, msg.player_id, msg.muted)

    def _hello(self, ev: HelloEvent) -> None:
        conn, msg = ev.conn, ev.msg
        if conn not in self.conns:
            return
        if self.conns[conn] is not None:
            self._error(conn, p.WRONG_PHASE, "you already said hello on this connection", "hello")
            return
        if msg.v != p.PROTOCOL_VERSION:
            # Never a session a client cannot read (version 1 expects whole boards in move_ok):
            # the reason, then the connection is closed.
            why = f"this server speaks protocol version {p.PROTOCOL_VERSION}, the client {msg.v}: update the client"
            self._error(conn, p.UNSUPPORTED_VERSION, why, "hello")
            self._out.append(CloseConnection(conn, 1002, "unsupported protocol version"))
            return
        if msg.identity is not None:  # bound to a claimed name: ``name`` is the profile's (profiles.py)
            self._hello_identity(conn, msg)
            return
        try:
            name = display_name(msg.name)
        except NameInvalid as exc:
            self._error(conn, p.NAME_INVALID, str(exc), "hello")
            return
        if conn in self._hellos:
            self._error(conn, p.WRONG_PHASE, "your hello is being answered already", "hello")
            return
        if msg.token is None:
            token = self.entropy.token()
            record = PlayerRecord(player_id=self.entropy.player_id(), name=name, bot=msg.bot, created_ms=ev.now)
            # Kept briefly in the store until it joins a room: identity churn alone must not grow it.
            self._out.append(RegisterPlayer(conn, record, hash_token(token), token, self.config.new_player_ttl_s))
            return
        self._hellos[conn] = msg.token
        self._out.append(LookupToken(conn, hash_token(msg.token)))

    def _token_looked(self, ev: TokenLooked) -> None:
        token = self._hellos.pop(ev.conn, None)
        profile = self._hello_profiles.pop(ev.conn, None)
        if token is None or ev.conn not in self.conns or self.conns[ev.conn] is not None:
            return
        if ev.failed:
            self._error(ev.conn, p.STORE_UNAVAILABLE, "the store did not answer: say hello again", "hello")
            return
        if profile is not None and (ev.record is None or ev.record.profile_id != profile.profile_id):
            # A hello with an identity and a token of another (or no) player of it: a new player of the profile.
            self._register_bound(ev.conn, profile, False, ev.now)
            return
        if ev.record is None:
            self._error(ev.conn, p.BAD_TOKEN, "this resume token is unknown or expired: say hello without it", "hello")
            return
        record = ev.record
        known = self.players.get(record.player_id)
        renamed = profile is not None and record.name != profile.name
        if profile is not None and renamed and record.room is None and (known is None or known.room is None):
            # The profile was renamed since this seat was made (on another connection or node).
            record = msgspec.structs.replace(record, name=profile.name)
            if known is not None:
                known.name = profile.name
        code = known.room if known is not None else record.room
        if code is not None and code not in self.rooms:
            # Its room is not in this process's memory (a restart, another process): load it first.
            self._park_resume(code, ev.conn, record, token, ev.now)
            return
        self._resume(ev.conn, record, token, ev.now)

    def _registered(self, ev: PlayerRegistered) -> None:
        if ev.conn not in self.conns or self.conns[ev.conn] is not None:
            return
        rec = ev.record
        player = PlayerState(
            rec.player_id, rec.name, rec.bot, ev.token_hash, None, {ev.conn}, rec.created_ms, profile_id=rec.profile_id
        )
        self.players[rec.player_id] = player
        self.conns[ev.conn] = rec.player_id
        self._out.append(Bind(ev.conn, rec.player_id))
        welcome = p.Welcome(
            player_id=rec.player_id,
            token=ev.token,
            name=rec.name,
            server_time=ev.now,
            profile=rec.profile_id,
            claimed=rec.profile_id is not None,
        )
        self._reply(ev.conn, welcome)
        self._note("player_new", player=rec.player_id, bot=rec.bot)

    def _resume(self, conn: int, rec: PlayerRecord, token: str, now: int, keep_room: bool = False) -> None:
        """Bind the connection to the player. ``keep_room``: its room could not be loaded now (the
        store did not answer, the room limit): it stays a member, without the room for now."""
        player = self.players.get(rec.player_id)
        if player is None:
            player = PlayerState(
                rec.player_id,
                rec.name,
                rec.bot,
                hash_token(token),
                rec.room,
                set(),
                rec.created_ms,
                profile_id=rec.profile_id,
            )
            self.players[rec.player_id] = player
        self._supersede(player)
        player.conns.add(conn)
        self.conns[conn] = player.player_id
        self._out.append(Bind(conn, player.player_id))
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is not None and player.player_id not in room.members:
            room = None
        if room is None and player.room is not None and not keep_room:
            player.room = None
            self._out.append(SavePlayer(player.record(), player.token_hash))
        self._reply(
            conn,
            p.Welcome(
                player_id=player.player_id,
                token=token,
                name=player.name,
                server_time=now,
                resumed=True,
                room=None if room is None else room.code,
                profile=player.profile_id,
                claimed=player.profile_id is not None,
            ),
        )
        self._note("player_resumed", player=player.player_id, room=None if room is None else room.code)
        if room is not None:
            self._seat_back(conn, room, player, now)

    def _seat_back(self, conn: int, room: RoomState, player: PlayerState, now: int) -> None:
        """A member's connection back in its seat (a resume, or a join of the seat it holds): present
        here, on this node, its room and board sent to ``conn``."""
        member = room.members[player.player_id]
        was_away = member.left_ms is not None
        moved = member.node != self.config.node_id  # several nodes: it was connected to another
        member.left_ms = None
        member.node = self.config.node_id
        if moved or was_away:
            member.claim += 1  # the newest claim holds the seat (another node's older one yields)
        board_now = True
        racer = room.race.racers.get(player.player_id) if room.race is not None else None
        if room.race is not None and racer is not None:
            racer.forfeit_at = None
            room.race.lb_dirty = True
            if moved and self.config.shared_rooms and room.phase == p.RACING:
                # Its entries were written by another node: this copy may still lack the last ones
                # (on their way over pub/sub), so its board goes out once its log is re-read.
                board_now = not self._board_after_reread(room, racer, conn)
        if was_away and self._shown(room, member):
            self._changed(room)
        else:
            if was_away or moved:  # back (only its own snapshot shows it), or now on this node: saved
                self._spectators_changed(room, counted=False)
            self._reply(conn, self._room_message(room, player.player_id))
        self._snapshot(conn, room, player.player_id, now, board=board_now)
        self._chat_history(conn, room, player.player_id)

    def _supersede(self, player: PlayerState) -> None:
        """One connection per player: the newer resume wins. Each older connection is told why
        (``superseded``), closed (4001) and forgotten here, so its later frames and its
        disconnection change nothing. Its unanswered moves stay queued and are answered to it
        (the shell drops those): the newer connection resends its own."""
        for old in sorted(player.conns):
            why = "another window or device resumed your seat: this connection is closed (it acts for you no more)"
            self._error(old, p.SUPERSEDED, why, "hello")
            self._out.append(CloseConnection(old, p.CLOSE_SUPERSEDED, "superseded by a newer connection"))
            self.conns.pop(old, None)
            self._forget_conn(old)
            self._note("connection_superseded", player=player.player_id, conn=old)
        player.conns.clear()

    def _create_room(self, conn: int, player: PlayerState, options: p.RoomOptions, now: int) -> None:
        if player.room is not None:
            self._error(conn, p.WRONG_PHASE, f"you are in room {player.room}: leave it first", "create_room")
            return
        if conn in self._creating:
            self._error(conn, p.WRONG_PHASE, "a room is being created for you already", "create_room")
            return
        if options.winnable_only and options.deal is not None:
            why = (
                "field 'options.deal' of create_room: a winnable_only room deals random deals the solver "
                "proves winnable, never a chosen one (leave out deal or winnable_only)"
            )
            self._error(conn, p.BAD_FIELD, why, "create_room")
            return
        if len(self.rooms) + len(self._creating) >= self.config.max_rooms:
            self._error(conn, p.SERVER_FULL, "the server has as many rooms as it may: try again later", "create_room")
            return
        self._creating[conn] = 0
        self._out.append(CreateRoomRecord(conn, self._new_room_record(player, options, now)))

    def _new_room_record(self, player: PlayerState, options: p.RoomOptions, now: int) -> RoomRecord:
        code = self.entropy.room_code()
        while code in self.rooms:
            code = self.entropy.room_code()
        member = player.racer_record(self.config.node_id, ready=False)
        return RoomRecord(
            code=code,
            options=options,
            host=player.player_id,
            phase=p.LOBBY,
            version=1,
            race_number=1,
            members=[member],
            race=None,
            pending_deal=options.deal,
            created_ms=now,
            last_activity_ms=now,
        )

    def _room_created(self, ev: RoomCreated) -> None:
        if daily_room(ev.record.code) is not None:
            self._daily_created(ev)
            return
        self._creating.pop(ev.conn, None)
        code = ev.record.code
        pid = self.conns.get(ev.conn)
        player = self.players.get(pid) if pid is not None else None
        if player is None or player.room is not None or code in self.rooms:
            # The creator went away meanwhile: let the stored room vanish.
            self._expire(code, 1.0)
            return
        room = self._room_from_record(ev.record, {}, ev.now)
        for member in room.members.values():
            member.left_ms = None
        self.rooms[code] = room
        player.room = code
        self._out.append(SavePlayer(player.record(), player.token_hash))
        if not room.options.private:
            self._out.append(SetListed(code, True))
        self._expire(code, self.config.room_ttl_s)
        self._note("room_created", room=code, host=player.player_id, chosen_deal=room.chosen_deal)
        self._changed(room)

    def _room_create_failed(self, ev: RoomCreateFailed) -> None:
        if daily_room(ev.record.code) is not None:
            self._daily_create_failed(ev)
            return
        attempts = self._creating.get(ev.conn)
        pid = self.conns.get(ev.conn)
        if attempts is None or pid is None:
            self._creating.pop(ev.conn, None)
            return
        if ev.taken and attempts < 8:
            self._creating[ev.conn] = attempts + 1
            player = self.players[pid]
            self._out.append(CreateRoomRecord(ev.conn, self._new_room_record(player, ev.record.options, ev.now)))
            return
        self._creating.pop(ev.conn, None)
        self._error(ev.conn, p.STORE_UNAVAILABLE, "the room could not be stored: try again", "create_room")

    def _join(self, conn: int, player: PlayerState, msg: p.Join, now: int, loaded: bool = False) -> None:
        """``loaded``: the store was asked already (a room not in memory now does not exist)."""
        code = p.normalize_room_code(msg.code)
        room = self.rooms.get(code)
        pid = player.player_id
        if player.room is not None and player.room != code:
            self._error(conn, p.WRONG_PHASE, f"you are in room {player.room}: leave it first", "join")
            return
        if room is None:
            if loaded or not p.is_room_code(code):
                self._error(conn, p.UNKNOWN_ROOM, f"there is no room {msg.code!r}", "join")
            else:
                self._park_join(code, conn, msg, now)  # perhaps in the store: another process's, or before a restart
            return
        member = room.members.get(pid)
        if member is not None and member.role == msg.role:
            # Its own seat (a resume that found no room in the player's record: the record is
            # written behind and another node may read it first): back in it, present on this node.
            if player.room is None:
                player.room = code
                self._out.append(SavePlayer(player.record(), player.token_hash))
            self._seat_back(conn, room, player, now)
            return
        taken = self._name_taken(room, player) if msg.role == p.RACER else None
        if taken is not None:
            self._error(conn, p.NAME_TAKEN, taken, "join")
            return
        if msg.role == p.RACER:
            if room.phase not in (p.LOBBY, p.RESULTS):
                soon = room.phase in (p.DEALING, p.COUNTDOWN)
                why = "the race is about to start" if soon else "the race is under way"
                self._error(conn, p.WRONG_PHASE, f"{why}: join as a spectator", "join")
                return
            if player.bot and not room.options.bots_allowed:
                self._error(conn, p.BOTS_NOT_ALLOWED, "this room does not let bots race", "join")
                return
            if len(room.racer_ids()) >= room.options.max_racers:
                self._error(conn, p.ROOM_FULL, f"room {code} has all {room.options.max_racers} racers", "join")
                return
        elif member is not None and room.race is not None and pid in room.race.racers and room.phase == p.COUNTDOWN:
            self._error(conn, p.WRONG_PHASE, "you are racing in the race about to start", "join")
            return
        elif member is not None and room.phase == p.RACING and room.race is not None and pid in room.race.racers:
            self._error(conn, p.WRONG_PHASE, "you are racing: a racer cannot watch as a spectator", "join")
            return
        room.last_activity_ms = now
        if member is None:
            room.members[pid] = MemberState(
                pid,
                player.name,
                player.bot,
                msg.role,
                False,
                player.token_hash,
                node=self.config.node_id,
                profile_id=player.profile_id,
            )
            player.room = code
            self._out.append(SavePlayer(player.record(), player.token_hash))
            self._note("room_joined", room=code, player=pid, role=msg.role)
        else:
            member.role = msg.role
            member.ready = False
            if room.phase == p.DEALING and not room.racer_ids():
                self._cancel_search(room)
        if member is None and msg.role == p.SPECTATOR:
            # A new spectator: its own snapshot now, the count to the others with the next tick.
            self._spectators_changed(room, counted=True)
            self._send((pid,), self._room_message(room, pid))
        else:
            self._changed(room)
        self._snapshot(conn, room, pid, now)
        self._chat_history(conn, room, pid)

    def _name_taken(self, room: RoomState, player: PlayerState) -> str | None:
        """Why ``player`` may not race in ``room`` under its name, or None: another member that
        everyone's snapshot lists (a racer, the host) shows the same name or one that looks it
        (shared/names.py, name_key). Spectators are listed only to themselves: theirs may repeat."""
        key = name_key(player.name)
        for other in room.members.values():
            if other.player_id != player.player_id and self._shown(room, other) and name_key(other.name) == key:
                if other.name == player.name:
                    return f"someone in room {room.code} is already called {player.name!r}: choose another name"
                return (
                    f"someone in room {room.code} is called {other.name!r}, which looks like {player.name!r}: "
                    "choose another name"
                )
        return None

    def _remove_member(self, room: RoomState, pid: str, now: int) -> None:
        member = room.members.pop(pid, None)
        if member is None:
            return
        was_shown = self._shown(room, member)
        self._save_player(pid, None, member.name, member.bot, member.token_hash)
        self._forget_if_idle(pid)
        self._note("room_left", room=room.code, player=pid)
        race = room.race
        if race is not None and pid in race.racers:
            if room.phase == p.COUNTDOWN:
                del race.racers[pid]
                race.record.racers = [r for r in race.record.racers if r.player_id != pid]
                if not race.racers:
                    self._cancel_countdown(room)
            elif room.phase == p.RACING:
                self._system_entry(room, race.racers[pid], RESIGN, now)
        if room.phase == p.DEALING and not room.racer_ids():
            self._cancel_search(room)
        if room.host == pid:
            self._pass_host(room)
        if not room.members:
            self._close_room(room, reason=None)
            return
        if was_shown:
            self._changed(room)
        else:
            self._spectators_changed(room, counted=True)

    def _pass_host(self, room: RoomState) -> None:
        members = list(room.members.values())
        # A racer before a spectator: a connected racer, any racer, a connected member, anyone.
        racers = [m for m in members if m.role == p.RACER]
        order = (
            [m for m in racers if self._present(m, m.player_id)]
            + racers
            + [m for m in members if self._present(m, m.player_id)]
            + members
        )
        if order:
            room.host = order[0].player_id
            self._note("host_passed", room=room.code, host=room.host)

    def _close_room(self, room: RoomState, reason: str | None) -> None:
        if room.race is not None:
            # Every move gets one answer (docs/protocol.md): those not decided yet never will be.
            why = "the room closed before this move was decided: it counts for nothing"
            for racer in room.race.racers.values():
                for pending in (*((racer.head,) if racer.head is not None else ()), *racer.queue):
                    self._reject(racer, pending, p.NOT_IN_ROOM, why)
        for pid, member in list(room.members.items()):
            self._save_player(pid, None, member.name, member.bot, member.token_hash)
            if reason is not None:
                self._send((pid,), p.Kicked(room=room.code, reason=reason))
        gone = list(room.members)
        room.members.clear()
        # Stored closed (no members), so that joining its code later never brings it back to life.
        room.version += 1
        self._out.append(SaveRoom(room.code, msgspec.structs.replace(self._record(room), closed=True)))
        self._out.append(SetListed(room.code, False))
        self._out.append(ExpireRoom(room.code, self.config.room_ttl_s))
        self._out.append(DropRoom(room.code))
        del self.rooms[room.code]
        for pid in gone:
            self._forget_if_idle(pid)
        self._note("room_closed", room=room.code, reason=reason or "empty")

    def _ready(self, conn: int, room: RoomState, pid: str, ready: bool) -> None:
        if room.phase != p.LOBBY:
            self._error(conn, p.WRONG_PHASE, f"ready is for the lobby; the room is in {room.phase}", "ready")
            return
        member = room.members[pid]
        if member.role != p.RACER:
            self._error(conn, p.WRONG_PHASE, "only racers get ready", "ready")
            return
        if member.ready != ready:
            member.ready = ready
            self._changed(room)

    def _kick(self, conn: int, room: RoomState, pid: str, target: str, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may kick", "kick")
            return
        if target == pid:
            why = "field 'player_id' of kick: you cannot kick yourself (leave instead)"
            self._error(conn, p.BAD_FIELD, why, "kick")
            return
        if target not in room.members:
            self._error(conn, p.UNKNOWN_PLAYER, f"{target!r} is not in room {room.code}", "kick")
            return
        self._send((target,), p.Kicked(room=room.code, reason="host"))
        self._remove_member(room, target, now)

    def _disconnected(self, ev: Disconnected) -> None:
        pid = self.conns.pop(ev.conn, None)
        self._forget_conn(ev.conn)
        if pid is None:
            return
        player = self.players.get(pid)
        if player is None:
            return
        player.conns.discard(ev.conn)
        if player.conns:
            return
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is None or pid not in room.members:
            self._forget_if_idle(pid)
            return
        self._member_away(room, pid, ev.now)

    def _nodes_gone(self, ev: NodesGone) -> None:
        """Several nodes: these nodes stopped renewing their liveness (killed, cut off): the members
        connected to them are away from now on, as if their connections had closed."""
        for room in list(self.rooms.values()):
            for pid, member in list(room.members.items()):
                if member.left_ms is None and member.node in ev.nodes and not self._connected(pid):
                    self._note("member_node_gone", room=room.code, player=pid, node=member.node, level="warning")
                    self._touched.add(room.code)
                    self._member_away(room, pid, ev.now)

    def _member_away(self, room: RoomState, pid: str, now: int) -> None:
        room.members[pid].left_ms = now
        race = room.race
        if race is not None and pid in race.racers and room.phase in (p.COUNTDOWN, p.RACING):
            racer = race.racers[pid]
            if not racer.game.over and daily_room(room.code) is None:  # an attempt's clock just runs on
                racer.forfeit_at = now + self.config.grace_ms
            race.lb_dirty = True
        if self._shown(room, room.members[pid]):
            self._changed(room)
        else:
            self._spectators_changed(room, counted=False)  # nobody else sees a spectator's connection
