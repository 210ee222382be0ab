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

import contextlib
import secrets
from collections import deque
from dataclasses import dataclass, field

import msgspec

from server.core.events import (
    Bind,
    BlockedChecked,
    CheckBlocked,
    ClientEvent,
    Connected,
    CreateRoomRecord,
    DealFound,
    Disconnected,
    DropRoom,
    Effect,
    Event,
    ExpireRoom,
    FindDeal,
    HelloEvent,
    LogReloaded,
    MovePersisted,
    MovePersistFailed,
    Note,
    PersistMove,
    PlayerRegistered,
    RegisterFailed,
    RegisterPlayer,
    ReloadLog,
    Reply,
    RoomCreated,
    RoomCreateFailed,
    SavePlayer,
    SaveRoom,
    Send,
    SetListed,
    Tick,
    Wake,
)
from server.core.records import (
    LogEntry,
    MemberRecord,
    PlayerRecord,
    RaceRecord,
    RacerInfo,
    RoomRecord,
    hash_token,
)
from shared import protocol as p
from shared.engine import BLOCKED, BLOCKED_BUDGET, PLAYING, RESIGN, UNDO, WON, Game, IllegalMove, View, view_hash
from shared.fairplay import commitment, new_salt, random_deal


@dataclass(frozen=True, slots=True)
class CoreConfig:
    countdown_ms: int = 3000
    grace_ms: int = 60_000  # a racer disconnected this long forfeits (resigned)
    member_grace_ms: int = 120_000  # a disconnected lobby member / spectator is removed after this
    lobby_idle_ms: int = 30 * 60_000  # a lobby (or finished room) nobody touches closes after this
    leaderboard_interval_ms: int = 100  # at most ~10 leaderboards per second per room
    boards_interval_ms: int = 250  # live spectator boards, when the room allows them
    # A spectator coming or going changes only the spectator count others see: that snapshot is
    # coalesced, at most one per room per interval (latest wins), so n joins do not cost n² entries.
    spectators_interval_ms: int = 100
    max_rooms: int = 1000
    room_ttl_s: float = 24 * 3600  # rooms, logs and results vanish from the store this long after use
    # States the blocked check may spend per move on the event loop (shared.engine.BLOCKED_BUDGET);
    # a position it cannot decide goes to the shell's worker process (CheckBlocked).
    blocked_budget: int | None = BLOCKED_BUDGET


class Entropy:
    """Where the core's randomness comes from (tests inject a seeded one). Cryptographic by default."""

    def room_code(self) -> str:
        return "".join(secrets.choice(p.ROOM_CODE_ALPHABET) for _ in range(p.ROOM_CODE_LENGTH))

    def deal(self) -> int:
        return random_deal()

    def salt(self) -> str:
        return new_salt()

    def player_id(self) -> str:
        return "p" + secrets.token_hex(8)

    def token(self) -> str:
        return secrets.token_urlsafe(24)  # 192 bits


# ---------------------------------------------------------------- in-memory state


@dataclass(slots=True)
class PlayerState:
    player_id: str
    name: str
    bot: bool
    token_hash: str
    room: str | None = None
    conns: set[int] = field(default_factory=set)
    created_ms: int = 0

    def record(self) -> PlayerRecord:
        return PlayerRecord(
            player_id=self.player_id, name=self.name, bot=self.bot, room=self.room, created_ms=self.created_ms
        )


@dataclass(slots=True)
class MemberState:
    player_id: str
    name: str
    bot: bool
    role: str
    ready: bool
    token_hash: str
    left_ms: int | None = None


@dataclass(slots=True)
class PendingMove:
    id: int | None  # None: a server-made entry (forfeit, leaving, kicked)
    move: str
    conn: int | None


@dataclass(slots=True)
class RacerState:
    info: RacerInfo
    game: Game
    times: list[int] = field(default_factory=list)  # accept time (ms from start) of each entry
    log_length: int = 0  # entries in the store's log (== len(game.entries) unless a stored entry was unreadable)
    ids: dict[int, int] = field(default_factory=dict)  # client move id -> seq it got
    pending_ids: set[int] = field(default_factory=set)
    queue: deque[PendingMove] = field(default_factory=deque)
    inflight: PendingMove | None = None
    candidate: Game | None = None  # after an in-flight undo/resign (a plain move is played on game once stored)
    inflight_t: int = 0
    reloading: bool = False
    uncertain: PendingMove | None = None  # its write failed mid-call: the reloaded log tells if it landed
    cards_ms: int = 0  # time of the entry that last changed the foundation count (SPEC section 7 ties)
    forfeit_at: int | None = None
    delayed: Game | None = None  # spectators' delayed board (rooms that allow live boards)
    delayed_n: int = 0
    blocked_asked: int | None = None  # entries of the position whose exact blocked check is in flight
    blocked_at: int | None = None  # entries of a position the exact check found blocked

    @property
    def busy(self) -> bool:
        return self.inflight is not None or bool(self.queue) or self.reloading


@dataclass(slots=True)
class RaceState:
    record: RaceRecord
    racers: dict[str, RacerState]
    lb_dirty: bool = True
    lb_last_ms: int = 0
    boards_dirty: bool = True
    boards_last_ms: int = 0
    ending: bool = False
    final_rows: list[p.LeaderboardRow] | None = None

    @property
    def total_entries(self) -> int:
        return sum(r.log_length for r in self.racers.values())


@dataclass(slots=True)
class RoomState:
    code: str
    options: p.RoomOptions
    host: str
    phase: str
    version: int
    race_number: int
    members: dict[str, MemberState]
    race: RaceState | None
    pending_deal: int | None
    created_ms: int
    last_activity_ms: int
    wake_at: int | None = None
    needs_save: bool = False
    search: int = 0  # the deal search in flight (phase dealing), 0: none
    snapshot_dirty: bool = False  # members have not yet seen the latest spectator count
    snapshot_last_ms: int = 0  # when the last coalesced snapshot went out

    @property
    def leak_proof(self) -> bool:
        return self.options.spectator_boards == "after"

    @property
    def boards_delay_ms(self) -> int | None:
        delay = self.options.spectator_boards
        return None if isinstance(delay, str) else delay * 1000

    @property
    def chosen_deal(self) -> bool:
        if self.race is not None:
            return self.race.record.chosen_deal
        return self.pending_deal is not None

    def racer_ids(self) -> list[str]:
        return [m.player_id for m in self.members.values() if m.role == p.RACER]

    def spectator_ids(self) -> tuple[str, ...]:
        return tuple(m.player_id for m in self.members.values() if m.role == p.SPECTATOR)

    def member_ids(self) -> tuple[str, ...]:
        return tuple(self.members)


def _rules(options: p.RoomOptions) -> p.RoomRules:
    return p.RoomRules(
        max_racers=options.max_racers,
        undo=options.undo,
        spectator_boards=options.spectator_boards,
        private=options.private,
        time_limit=options.time_limit,
        bots_allowed=options.bots_allowed,
        winnable_only=options.winnable_only,
    )


def summary_from_record(record: RoomRecord) -> p.RoomSummary:
    """A room list line from a stored room (for rooms this process has not loaded)."""
    host = next((m.name for m in record.members if m.player_id == record.host), "?")
    chosen = record.race.chosen_deal if record.race is not None else record.pending_deal is not None
    return p.RoomSummary(
        code=record.code,
        host_name=host,
        phase=record.phase,
        racers=sum(1 for m in record.members if m.role == p.RACER),
        max_racers=record.options.max_racers,
        spectators=sum(1 for m in record.members if m.role == p.SPECTATOR),
        undo=record.options.undo,
        chosen_deal=chosen,
        leak_proof=record.options.spectator_boards == "after",
        bots_allowed=record.options.bots_allowed,
        time_limit=record.options.time_limit,
        winnable_only=record.options.winnable_only,
    )


class ServerCore:
    """Every room and player this process serves. ``handle(event) -> effects``."""

    def __init__(self, config: CoreConfig | None = None, entropy: Entropy | None = None) -> None:
        self.config = config or CoreConfig()
        self.entropy = entropy or Entropy()
        self.conns: dict[int, str | None] = {}  # connection -> player id (None before welcome)
        self.players: dict[str, PlayerState] = {}
        self.rooms: dict[str, RoomState] = {}
        self._creating: dict[int, int] = {}  # connection -> create attempts (room codes taken)
        self._searches = 0  # deal searches asked for so far (each FindDeal gets the next number)
        self._out: list[Effect] = []
        self._touched: set[str] = set()

    # ================================================================ entry points

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

    def player_of(self, conn: int) -> str | None:
        return self.conns.get(conn)

    def room_of(self, conn: int) -> str | None:
        pid = self.conns.get(conn)
        return None if pid is None else self.players[pid].room

    def record_of(self, code: str) -> RoomRecord | None:
        room = self.rooms.get(code)
        return None if room is None else self._record(room)

    # ================================================================ plumbing

    def _finish(self) -> list[Effect]:
        for code in sorted(self._touched):
            room = self.rooms.get(code)
            if room is None:
                continue
            if room.needs_save:
                room.needs_save = False
                self._out.append(SaveRoom(code, self._record(room)))
            wake = self._next_wake(room)
            if wake != room.wake_at:
                room.wake_at = wake
                self._out.append(Wake(code, wake))
        out, self._out = self._out, []
        return out

    def _note(self, event: str, **fields: object) -> None:
        self._out.append(Note(event, fields))

    def _reply(self, conn: int, message: p.ServerMessage) -> None:
        self._out.append(Reply(conn, message))

    def _send(self, players: tuple[str, ...], message: p.ServerMessage, droppable: bool = False) -> None:
        if players:
            self._out.append(Send(players, message, droppable))

    def _error(self, conn: int, code: str, message: str, ref: str | None) -> None:
        self._reply(conn, p.Error(code=code, message=message, ref=ref))

    def _changed(self, room: RoomState) -> None:
        """The room's racers/host/phase changed: new version, tell everyone in it now, save it."""
        room.version += 1
        room.needs_save = True
        self._touched.add(room.code)
        room.snapshot_dirty = False  # this snapshot carries the latest count too
        self._send_room(room, droppable=False)

    def _spectators_changed(self, room: RoomState, counted: bool) -> None:
        """Only spectators changed (one came, went, or its connection did): new version, save it.
        ``counted``: the count changed, so the others get it with the next coalesced snapshot
        (``_tick``); otherwise nothing they see changed (their snapshot never lists spectators)."""
        room.version += 1
        room.needs_save = True
        self._touched.add(room.code)
        if counted:
            room.snapshot_dirty = True

    def _shown(self, room: RoomState, member: MemberState) -> bool:
        """Does everyone's snapshot list this member? Racers and the host; a spectator only in its own."""
        return member.role == p.RACER or member.player_id == room.host

    def _save_player(self, player_id: str, room: str | None, name: str, bot: bool, token_hash: str) -> None:
        player = self.players.get(player_id)
        if player is not None:
            player.room = room
            self._out.append(SavePlayer(player.record(), player.token_hash))
        else:
            record = PlayerRecord(player_id=player_id, name=name, bot=bot, room=room)
            self._out.append(SavePlayer(record, token_hash))

    def _connected(self, player_id: str) -> bool:
        player = self.players.get(player_id)
        return player is not None and bool(player.conns)

    # ================================================================ messages

    def _client(self, ev: ClientEvent) -> None:
        if ev.conn not in self.conns:
            return
        msg = ev.msg
        kind = p.message_type(msg)
        if isinstance(msg, p.Ping):
            self._reply(ev.conn, p.Pong(t=msg.t, server_time=ev.now))
            return
        pid = self.conns[ev.conn]
        if pid is None:
            self._error(ev.conn, p.WRONG_PHASE, "say hello first", kind)
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
            # The shell answers list_rooms from the store (rooms of every process); nothing to do here.
            pass
        else:
            room = self.rooms.get(player.room) if player.room is not None else None
            if room is None:
                self._error(ev.conn, p.NOT_IN_ROOM, f"{kind} needs a room: create or join one first", kind)
                return
            room.last_activity_ms = ev.now
            self._touched.add(room.code)
            if isinstance(msg, p.Leave):
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
                self._rematch(ev.conn, room, pid, msg.deal, ev.now)

    # ---------------------------------------------------------------- hello

    def _hello(self, ev: HelloEvent) -> None:
        conn, msg = ev.conn, ev.msg
        if conn not in self.conns:
            return
        if self.conns[conn] is not None:
            self._error(conn, p.WRONG_PHASE, "you already said hello on this connection", "hello")
            return
        if msg.v != p.PROTOCOL_VERSION:
            self._error(
                conn,
                p.VERSION_MISMATCH,
                f"this server speaks protocol version {p.PROTOCOL_VERSION}, the client {msg.v}: update the client",
                "hello",
            )
            return
        reason = p.check_name(msg.name)
        if reason is not None:
            self._error(conn, p.NAME_INVALID, reason, "hello")
            return
        if ev.token_unknown or (msg.token is not None and ev.resume is None):
            self._error(conn, p.BAD_TOKEN, "this resume token is unknown or expired: say hello without it", "hello")
            return
        if ev.resume is None:
            token = self.entropy.token()
            record = PlayerRecord(player_id=self.entropy.player_id(), name=msg.name, bot=msg.bot, created_ms=ev.now)
            self._out.append(RegisterPlayer(conn, record, hash_token(token), token))
            return
        assert msg.token is not None
        self._resume(conn, ev.resume, msg.token, ev.now)

    def _registered(self, ev: PlayerRegistered) -> None:
        if ev.conn not in self.conns or self.conns[ev.conn] is not None:
            return
        rec = ev.record
        player = PlayerState(rec.player_id, rec.name, rec.bot, ev.token_hash, None, {ev.conn}, rec.created_ms)
        self.players[rec.player_id] = player
        self.conns[ev.conn] = rec.player_id
        self._out.append(Bind(ev.conn, rec.player_id))
        self._reply(ev.conn, p.Welcome(player_id=rec.player_id, token=ev.token, name=rec.name, server_time=ev.now))
        self._note("player_new", player=rec.player_id, bot=rec.bot)

    def _resume(self, conn: int, rec: PlayerRecord, token: str, now: int) -> None:
        player = self.players.get(rec.player_id)
        if player is None:
            player = PlayerState(rec.player_id, rec.name, rec.bot, hash_token(token), rec.room, set(), rec.created_ms)
            self.players[rec.player_id] = player
        player.conns.add(conn)
        self.conns[conn] = player.player_id
        self._out.append(Bind(conn, player.player_id))
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is not None and player.player_id not in room.members:
            room = None
        if room is None and player.room is not None:
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
            ),
        )
        self._note("player_resumed", player=player.player_id, room=None if room is None else room.code)
        if room is None:
            return
        member = room.members[player.player_id]
        was_away = member.left_ms is not None
        member.left_ms = None
        if room.race is not None and player.player_id in room.race.racers:
            room.race.racers[player.player_id].forfeit_at = None
            room.race.lb_dirty = True
        if was_away and self._shown(room, member):
            self._changed(room)
        else:
            if was_away:
                self._spectators_changed(room, counted=False)  # back: only its own snapshot shows it
            self._reply(conn, self._room_message(room, player.player_id))
        self._snapshot(conn, room, player.player_id, now)

    def _snapshot(self, conn: int, room: RoomState, player_id: str, now: int) -> None:
        """What a client needs besides the room to catch up: countdown, own board, leaderboard, results."""
        race = room.race
        if race is None:
            return
        rec = race.record
        if room.phase == p.COUNTDOWN:
            self._reply(conn, p.Countdown(race=rec.number, starts_at=rec.starts_at, server_time=now))
        elif room.phase == p.RACING:
            racer = race.racers.get(player_id)
            self._reply(conn, self._race_start(room, racer, now))
            self._reply(conn, self._leaderboard(race, final=False))
            if racer is None and room.boards_delay_ms is not None:
                boards = self._boards_message(room, now, advance=False)
                if boards is not None:
                    self._reply(conn, boards)
        elif room.phase == p.RESULTS:
            self._reply(conn, self._results(room))

    # ---------------------------------------------------------------- rooms

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
        member = MemberRecord(
            player_id=player.player_id,
            name=player.name,
            bot=player.bot,
            role=p.RACER,
            ready=False,
            token_hash=player.token_hash,
        )
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
        self._creating.pop(ev.conn, None)
        code = ev.record.code
        pid = self.conns.get(ev.conn)
        player = self.players.get(pid) if pid is not None else None
        if player is None or player.room is not None or code in self.rooms:
            # The creator went away meanwhile: let the stored room vanish.
            self._out.append(ExpireRoom(code, 1.0))
            return
        room = self._room_from_record(ev.record, {}, ev.now)
        for member in room.members.values():
            member.left_ms = None
        self.rooms[code] = room
        player.room = code
        self._out.append(SavePlayer(player.record(), player.token_hash))
        if not room.options.private:
            self._out.append(SetListed(code, True))
        self._out.append(ExpireRoom(code, self.config.room_ttl_s))
        self._note("room_created", room=code, host=player.player_id, chosen_deal=room.chosen_deal)
        self._changed(room)

    def _room_create_failed(self, ev: RoomCreateFailed) -> None:
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

    def _join(self, conn: int, player: PlayerState, msg: p.Join, now: int) -> None:
        code = p.normalize_room_code(msg.code)
        room = self.rooms.get(code)
        if room is None:
            self._error(conn, p.UNKNOWN_ROOM, f"there is no room {msg.code!r}", "join")
            return
        pid = player.player_id
        if player.room is not None and player.room != code:
            self._error(conn, p.WRONG_PHASE, f"you are in room {player.room}: leave it first", "join")
            return
        member = room.members.get(pid)
        if member is not None and member.role == msg.role:
            self._reply(conn, self._room_message(room, pid))
            self._snapshot(conn, room, pid, now)
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
            room.members[pid] = MemberState(pid, player.name, player.bot, msg.role, False, player.token_hash)
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

    def _remove_member(self, room: RoomState, pid: str, now: int) -> None:
        member = room.members.pop(pid, None)
        if member is None:
            return
        was_shown = self._shown(room, member)
        self._save_player(pid, None, member.name, member.bot, member.token_hash)
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
        order = (
            [m for m in members if m.role == p.RACER and self._connected(m.player_id)]
            + [m for m in members if self._connected(m.player_id)]
            + members
        )
        if order:
            room.host = order[0].player_id
            self._note("host_passed", room=room.code, host=room.host)

    def _close_room(self, room: RoomState, reason: str | None) -> None:
        for pid, member in list(room.members.items()):
            self._save_player(pid, None, member.name, member.bot, member.token_hash)
            if reason is not None:
                self._send((pid,), p.Kicked(room=room.code, reason=reason))
        room.members.clear()
        # Stored as closed too: a stored record still listing members would bring the room back,
        # with them in it, the next time anyone joins it by code (the shell loads it lazily).
        room.version += 1
        self._out.append(SaveRoom(room.code, self._record(room)))
        self._out.append(SetListed(room.code, False))
        self._out.append(ExpireRoom(room.code, self.config.room_ttl_s))
        self._out.append(DropRoom(room.code))
        del self.rooms[room.code]
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

    def _rematch(self, conn: int, room: RoomState, pid: str, deal: int | None, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may call a rematch", "rematch")
            return
        if room.phase != p.RESULTS:
            self._error(conn, p.WRONG_PHASE, "a rematch follows a finished race", "rematch")
            return
        if deal is not None and room.options.winnable_only:
            why = "field 'deal' of rematch: this room deals only deals the solver proves winnable, never a chosen one"
            self._error(conn, p.BAD_FIELD, why, "rematch")
            return
        room.phase = p.LOBBY
        room.race = None
        room.race_number += 1
        room.pending_deal = deal
        for member in room.members.values():
            member.ready = False
        self._out.append(ExpireRoom(room.code, self.config.room_ttl_s))
        self._changed(room)

    # ---------------------------------------------------------------- race

    def _start(self, conn: int, room: RoomState, pid: str, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may start the race", "start")
            return
        if room.phase == p.DEALING:
            self._error(conn, p.WRONG_PHASE, "already starting: the server is finding a winnable deal", "start")
            return
        if room.phase != p.LOBBY:
            self._error(conn, p.WRONG_PHASE, f"start is for the lobby; the room is in {room.phase}", "start")
            return
        racers = [room.members[r] for r in room.racer_ids()]
        if not racers:
            self._error(conn, p.NOT_READY, "there is no racer in the room", "start")
            return
        waiting = [m.name for m in racers if not m.ready and m.player_id != pid]
        if waiting:
            self._error(conn, p.NOT_READY, "not ready yet: " + ", ".join(waiting), "start")
            return
        if room.options.winnable_only and room.pending_deal is None:
            # The deal comes from a solver search that the shell runs away from the event loop:
            # the countdown starts when it is found (DealFound). The racers are fixed meanwhile.
            room.phase = p.DEALING
            self._find_deal(room)
            self._note("deal_search", room=room.code, race=room.race_number, search=room.search, racers=len(racers))
            self._changed(room)
            return
        chosen = room.pending_deal is not None
        deal = room.pending_deal if room.pending_deal is not None else self.entropy.deal()
        self._countdown(room, deal, chosen, now)

    def _find_deal(self, room: RoomState) -> None:
        self._searches += 1
        room.search = self._searches
        self._out.append(FindDeal(room.code, room.race_number, room.search))

    def _cancel_search(self, room: RoomState) -> None:
        """Back to the lobby from dealing (the host ended it, or no racer is left); a late answer is ignored."""
        self._note("deal_search_cancelled", room=room.code, race=room.race_number, search=room.search)
        room.search = 0
        room.phase = p.LOBBY

    def _deal_found(self, ev: DealFound) -> None:
        room = self.rooms.get(ev.code)
        if room is None or room.phase != p.DEALING or room.search != ev.search or room.race_number != ev.race:
            self._note("deal_search_stale", room=ev.code, race=ev.race, search=ev.search)
            return
        self._touched.add(room.code)
        room.search = 0
        room.last_activity_ms = ev.now
        if ev.deal is None or not room.racer_ids():
            room.phase = p.LOBBY
            self._note("deal_search_failed", room=room.code, race=ev.race, detail=ev.detail)
            self._changed(room)
            if ev.deal is None and ev.busy:
                why = f"the server is busy finding deals for other rooms ({ev.detail}): the room is back in "
                why += "the lobby; the host may start again in a moment"
                self._send(room.member_ids(), p.Error(code=p.SERVER_BUSY, message=why, ref="start"))
            elif ev.deal is None:
                # Never a deal that was not proved winnable: the room promised that. Readiness is kept,
                # so the host can simply start again.
                why = "no deal was proved winnable within the server's budget"
                why += f" ({ev.detail})" if ev.detail else ""
                why += ": the room is back in the lobby; the host may start again"
                self._send(room.member_ids(), p.Error(code=p.NO_WINNABLE_DEAL, message=why, ref="start"))
            return
        self._note("deal_search_done", room=room.code, race=ev.race, search=ev.search)
        self._countdown(room, ev.deal, False, ev.now)

    def _countdown(self, room: RoomState, deal: int, chosen: bool, now: int) -> None:
        """Fix the race (deal, salt, commitment, racers) and start its countdown."""
        racers = [room.members[r] for r in room.racer_ids()]
        salt = self.entropy.salt()
        starts_at = now + self.config.countdown_ms
        limit = room.options.time_limit
        record = RaceRecord(
            number=room.race_number,
            deal=deal,
            salt=salt,
            commitment=commitment(deal, salt),
            chosen_deal=chosen,
            undo=room.options.undo,
            starts_at=starts_at,
            ends_at=None if limit is None else starts_at + limit * 1000,
            racers=[RacerInfo(player_id=m.player_id, name=m.name, bot=m.bot, token_hash=m.token_hash) for m in racers],
        )
        room.race = self._race_from_record(room, record, {}, now)
        room.phase = p.COUNTDOWN
        self._out.append(ExpireRoom(room.code, self.config.room_ttl_s))
        self._note("race_countdown", room=room.code, race=record.number, racers=len(racers), chosen_deal=chosen)
        self._changed(room)
        self._send(room.member_ids(), p.Countdown(race=record.number, starts_at=starts_at, server_time=now))

    def _cancel_countdown(self, room: RoomState) -> None:
        room.phase = p.LOBBY
        room.race = None
        self._note("race_cancelled", room=room.code, race=room.race_number)

    def _begin(self, room: RoomState, now: int) -> None:
        race = room.race
        assert race is not None
        room.phase = p.RACING
        race.lb_dirty = True
        for racer in race.racers.values():
            member = room.members.get(racer.info.player_id)
            if member is not None and member.left_ms is not None and racer.forfeit_at is None:
                racer.forfeit_at = now + self.config.grace_ms
        self._note("race_start", room=room.code, race=race.record.number, commitment=race.record.commitment)
        self._changed(room)
        for pid in room.members:
            self._send((pid,), self._race_start(room, race.racers.get(pid), now))

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
        )

    def _end_request(self, conn: int, room: RoomState, pid: str, now: int) -> None:
        if room.host != pid:
            self._error(conn, p.NOT_HOST, "only the host may end the race", "end_race")
            return
        if room.phase == p.COUNTDOWN:
            self._cancel_countdown(room)
            self._changed(room)
        elif room.phase == p.DEALING:
            self._cancel_search(room)
            self._changed(room)
        elif room.phase == p.RACING:
            self._end_race(room, now, "host")
        else:
            self._error(conn, p.WRONG_PHASE, f"there is no race to end; the room is in {room.phase}", "end_race")

    def _end_race(self, room: RoomState, now: int, why: str) -> None:
        race = room.race
        assert race is not None
        if not race.ending:
            race.ending = True
            self._note("race_ending", room=room.code, race=race.record.number, why=why)
            for racer in race.racers.values():
                while racer.queue:
                    pending = racer.queue.popleft()
                    self._reject(racer, pending, p.WRONG_PHASE, "the race is over")
        if any(r.inflight is not None or r.reloading for r in race.racers.values()):
            return  # finished when the writes in flight land: the results must match the logs
        self._finalize(room, now)

    def _finalize(self, room: RoomState, now: int) -> None:
        race = room.race
        assert race is not None
        race.record.ended_at = now
        race.final_rows = self._rows(race, final=True)
        room.phase = p.RESULTS
        room.last_activity_ms = now
        for member in room.members.values():
            member.ready = False
        self._out.append(ExpireRoom(room.code, self.config.room_ttl_s))
        self._note(
            "race_results",
            room=room.code,
            race=race.record.number,
            ranking=[row.player_id for row in race.final_rows],
        )
        self._changed(room)
        self._send(room.member_ids(), self._results(room))

    def _results(self, room: RoomState) -> p.Results:
        race = room.race
        assert race is not None
        rec = race.record
        rows = race.final_rows if race.final_rows is not None else self._rows(race, final=True)
        records = {
            pid: p.GameRecord(deal=rec.deal, moves=list(r.game.entries), undo=rec.undo)
            for pid, r in race.racers.items()
        }
        return p.Results(
            race=rec.number,
            ranking=[row.player_id for row in rows],
            racers=rows,
            deal=rec.deal,
            salt=rec.salt,
            commitment=rec.commitment,
            chosen_deal=rec.chosen_deal,
            records=records,
        )

    def _check_race_over(self, room: RoomState, now: int) -> None:
        race = room.race
        if room.phase != p.RACING or race is None:
            return
        if race.ending:
            self._end_race(room, now, "time")
        elif all(r.game.over and not r.busy for r in race.racers.values()):
            self._end_race(room, now, "all_done")

    # ---------------------------------------------------------------- moves

    def _move(self, conn: int, player: PlayerState, msg: p.Move, now: int) -> None:
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is None:
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.NOT_IN_ROOM, reason="you are not in a room"))
            return
        race = room.race
        if room.phase != p.RACING or race is None or race.ending:
            over = room.phase == p.RESULTS or (race is not None and race.ending)
            why = "the race is over" if over else "the race has not started"
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.WRONG_PHASE, reason=why))
            return
        racer = race.racers.get(player.player_id)
        if racer is None:
            self._reply(conn, p.MoveRejected(id=msg.id, code=p.WRONG_PHASE, reason="you are not racing in this race"))
            return
        room.last_activity_ms = now
        seq = racer.ids.get(msg.id)
        if seq is not None:
            # A retry (lost ack, reconnect): never applied twice; answer with the current board.
            view = racer.game.view()
            ok = p.MoveOk(
                id=msg.id,
                seq=racer.log_length,
                t_ms=racer.times[seq - 1] if 0 < seq <= len(racer.times) else 0,
                view=view,
                view_hash=view_hash(view),
                duplicate=True,
            )
            self._reply(conn, ok)
            return
        if msg.id in racer.pending_ids:
            return  # the same move is already on its way to the store; its ack will come
        racer.pending_ids.add(msg.id)
        racer.queue.append(PendingMove(msg.id, msg.move, conn))
        self._pump(room, racer, now)

    def _system_entry(self, room: RoomState, racer: RacerState, move: str, now: int) -> None:
        if racer.game.over or room.race is None or room.race.ending:
            return
        if any(q.id is None and q.move == move for q in racer.queue) or (
            racer.inflight is not None and racer.inflight.id is None
        ):
            return
        racer.queue.append(PendingMove(None, move, None))
        self._pump(room, racer, now)

    def _pump(self, room: RoomState, racer: RacerState, now: int) -> None:
        """Start the next queued move's write, if none is in flight."""
        race = room.race
        assert race is not None
        while racer.inflight is None and not racer.reloading and racer.queue:
            pending = racer.queue.popleft()
            candidate: Game | None = None
            if pending.move in (UNDO, RESIGN):
                candidate = racer.game.copy()  # rare entries: checked by playing them on a copy
                try:
                    candidate.play(pending.move)
                except IllegalMove as exc:
                    self._reject(racer, pending, p.ILLEGAL_MOVE, exc.reason)
                    continue
            else:
                # A plain move: checked without copying the game (the engine's own check, as play
                # makes it); played on the racer's game when the store holds it. Nothing changes
                # that game's position while its one write is in flight.
                reason = racer.game.reason_illegal(pending.move)
                if reason is not None:
                    self._reject(racer, pending, p.ILLEGAL_MOVE, reason)
                    continue
            t_ms = max(0, now - race.record.starts_at)
            if racer.times:
                t_ms = max(t_ms, racer.times[-1])  # times never go backwards in a log
            racer.inflight = pending
            racer.candidate = candidate
            racer.inflight_t = t_ms
            entry = LogEntry(move=pending.move, t_ms=t_ms, id=pending.id)
            self._out.append(PersistMove(room.code, race.record.number, racer.info.player_id, racer.log_length, entry))

    def _reject(self, racer: RacerState, pending: PendingMove, code: str, reason: str) -> None:
        if pending.id is not None:
            racer.pending_ids.discard(pending.id)
            if pending.conn is not None:
                self._reply(pending.conn, p.MoveRejected(id=pending.id, code=code, reason=reason))

    def _racer_for(self, code: str, race_no: int, pid: str) -> tuple[RoomState, RacerState] | None:
        room = self.rooms.get(code)
        if room is None or room.race is None or room.race.record.number != race_no:
            return None
        racer = room.race.racers.get(pid)
        return None if racer is None else (room, racer)

    def _move_persisted(self, ev: MovePersisted) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, racer = found
        race = room.race
        assert race is not None
        pending = racer.inflight
        if pending is None or ev.length != racer.log_length + 1:
            self._note("persist_mismatch", room=ev.code, player=ev.player_id, length=ev.length)
            return
        self._touched.add(room.code)
        before = racer.game.foundation_cards
        game = racer.candidate
        if game is None:
            game = racer.game
            try:
                game.play(pending.move)
            except IllegalMove:
                # Cannot happen (checked against this very position): were it to, the log holds an
                # entry this game refuses, so rebuild the racer from the log as after a failed write.
                self._note("persist_unplayable", room=ev.code, player=ev.player_id, length=ev.length)
                racer.inflight = None
                racer.reloading = True
                racer.uncertain = pending
                self._out.append(ReloadLog(room.code, ev.race, ev.player_id))
                return
        racer.game = game
        racer.times.append(racer.inflight_t)
        racer.log_length += 1
        if game.foundation_cards != before:
            racer.cards_ms = racer.inflight_t
        racer.inflight = None
        racer.candidate = None
        if pending.id is not None:
            racer.pending_ids.discard(pending.id)
            racer.ids[pending.id] = racer.log_length
            view = game.view()
            ok = p.MoveOk(
                id=pending.id, seq=racer.log_length, t_ms=racer.inflight_t, view=view, view_hash=view_hash(view)
            )
            self._send((racer.info.player_id,), ok)
        race.lb_dirty = True
        race.boards_dirty = True
        if game.over:
            self._note("racer_done", room=room.code, player=racer.info.player_id, status=game.status)
        self._settle_blocked(room, racer, ev.now)
        self._pump(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _move_persist_failed(self, ev: MovePersistFailed) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, racer = found
        pending = racer.inflight
        if pending is None:
            return
        self._touched.add(room.code)
        racer.inflight = None
        racer.candidate = None
        racer.reloading = True
        if ev.reason == "conflict":
            # Someone else appended to this log (another process, a stale view): reload it, then
            # retry this move against the real position (its id may turn out to be applied already).
            racer.queue.appendleft(pending)
        else:
            # The store stopped answering mid-write: the entry may or may not have landed. Only the
            # reloaded log can tell, so neither acknowledge nor reject before that.
            racer.uncertain = pending
        self._out.append(ReloadLog(room.code, ev.race, ev.player_id))

    def _log_reloaded(self, ev: LogReloaded) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            return
        room, old = found
        race = room.race
        assert race is not None
        self._touched.add(room.code)
        racer = self._replay_racer(old.info, race.record, ev.entries)
        racer.queue = old.queue
        racer.forfeit_at = old.forfeit_at
        racer.delayed, racer.delayed_n = old.delayed, min(old.delayed_n, len(racer.times))
        racer.blocked_asked, racer.blocked_at = old.blocked_asked, old.blocked_at
        race.racers[ev.player_id] = racer
        uncertain = old.uncertain
        if uncertain is not None:
            landed = (
                uncertain.id in racer.ids
                if uncertain.id is not None
                else racer.log_length > old.log_length and racer.game.entries[-1:] == [uncertain.move]
            )
            if landed:
                if uncertain.id is not None:
                    view = racer.game.view()
                    ok = p.MoveOk(
                        id=uncertain.id,
                        seq=racer.log_length,
                        t_ms=racer.times[-1] if racer.times else 0,
                        view=view,
                        view_hash=view_hash(view),
                    )
                    self._send((ev.player_id,), ok)
            elif uncertain.id is None:
                racer.queue.appendleft(uncertain)  # a forfeit or leave: try again
            else:
                self._reject(racer, uncertain, p.STORE_UNAVAILABLE, "the store did not answer: the move was not played")
        # Queued moves whose id the reloaded log already holds were applied: acknowledge them.
        for pending in list(racer.queue):
            if pending.id is not None and pending.id in racer.ids:
                racer.queue.remove(pending)
                view = racer.game.view()
                seq = racer.ids[pending.id]
                ok = p.MoveOk(
                    id=pending.id,
                    seq=racer.log_length,
                    t_ms=racer.times[seq - 1] if 0 < seq <= len(racer.times) else 0,
                    view=view,
                    view_hash=view_hash(view),
                    duplicate=True,
                )
                self._send((ev.player_id,), ok)
            elif pending.id is not None:
                racer.pending_ids.add(pending.id)
        race.lb_dirty = True
        race.boards_dirty = True
        if race.ending and room.phase == p.RACING:
            while racer.queue:
                self._reject(racer, racer.queue.popleft(), p.WRONG_PHASE, "the race is over")
        self._settle_blocked(room, racer, ev.now)
        self._pump(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    # ---------------------------------------------------------------- blocked, beyond the budget

    def _settle_blocked(self, room: RoomState, racer: RacerState, now: int) -> None:
        """The budgeted check after a move (or a replay) left the racer's position undecided:
        end the game if an exact answer already covers it, else ask the shell (one check per
        racer in flight; the answer's handler asks again for a newer position)."""
        race = room.race
        game = racer.game
        if race is None or not game.blocked_pending or racer.inflight is not None or racer.reloading:
            return  # a move in flight: settled when it lands, on the position it makes
        entries = game.entries
        known = racer.blocked_at
        if known is not None and known <= len(entries) and UNDO not in entries[known:]:
            # Exact, though asked about an earlier position: from a blocked position with the stock
            # empty every move (undo aside) keeps it blocked, since no sequence of moves from there
            # puts a card on a foundation, so every position reached by moves alone is blocked too.
            game.resolve_blocked(True)
            self._racer_blocked(room, racer, now)
            return
        if racer.blocked_asked is not None:
            return
        racer.blocked_asked = len(entries)
        rec = race.record
        self._out.append(
            CheckBlocked(room.code, rec.number, racer.info.player_id, len(entries), rec.deal, tuple(entries), rec.undo)
        )
        self._note("blocked_check", room=room.code, player=racer.info.player_id, entries=len(entries))

    def _blocked_checked(self, ev: BlockedChecked) -> None:
        found = self._racer_for(ev.code, ev.race, ev.player_id)
        if found is None:
            self._note("blocked_check_stale", room=ev.code, race=ev.race, player=ev.player_id)
            return
        room, racer = found
        self._touched.add(room.code)
        if racer.blocked_asked == ev.length:
            racer.blocked_asked = None
        game = racer.game
        self._note("blocked_checked", room=room.code, player=ev.player_id, entries=ev.length, blocked=ev.blocked)
        if ev.blocked is None:
            return  # the check failed: the racer's next move asks again (no retry loop on a dying worker)
        if ev.blocked:
            # Keep the newest: wherever an older one applies (no undo since), so does it.
            if racer.blocked_at is None or ev.length > racer.blocked_at:
                racer.blocked_at = ev.length
        elif ev.length == len(game.entries) and game.blocked_pending:
            game.resolve_blocked(False)  # this very position: not blocked, play on
        self._settle_blocked(room, racer, ev.now)
        self._check_race_over(room, ev.now)

    def _racer_blocked(self, room: RoomState, racer: RacerState, now: int) -> None:
        """The exact check ended a racer's game: as a blocked move would have (leaderboard, race end)."""
        race = room.race
        assert race is not None
        pid = racer.info.player_id
        self._touched.add(room.code)
        race.lb_dirty = True
        race.boards_dirty = True
        self._note("racer_done", room=room.code, player=pid, status=racer.game.status)
        if room.phase == p.RESULTS:
            race.final_rows = self._rows(race, final=True)  # a room rebuilt after the race: its final status
        elif room.phase == p.RACING:
            self._send((pid,), self._race_start(room, racer, now))  # the racer's board, now blocked

    # ---------------------------------------------------------------- leaderboard, boards

    def _rows(self, race: RaceState, final: bool) -> list[p.LeaderboardRow]:
        keyed: list[tuple[tuple[int, int, int, int], p.LeaderboardRow]] = []
        for seat, (pid, racer) in enumerate(race.racers.items()):
            game = racer.game
            status = game.status
            if final and status == PLAYING:
                status = p.STOPPED
            elapsed = racer.times[-1] if racer.times else 0
            cards = game.foundation_cards
            # SPEC section 7: winners by the time of their winning move; then by cards, most first,
            # ties by the time the count was last reached. Seat order settles exact ties.
            key = (0, elapsed, 0, seat) if game.status == WON else (1, -cards, racer.cards_ms, seat)
            row = p.LeaderboardRow(
                player_id=pid,
                name=racer.info.name,
                bot=racer.info.bot,
                cards=cards,
                moves=racer.log_length,
                status=status,
                elapsed_ms=elapsed,
                rank=0,
                connected=self._connected(pid),
            )
            keyed.append((key, row))
        keyed.sort(key=lambda kr: kr[0])
        rows = [row for _, row in keyed]
        for i, row in enumerate(rows):
            row.rank = i + 1
        return rows

    def _leaderboard(self, race: RaceState, final: bool) -> p.Leaderboard:
        return p.Leaderboard(race=race.record.number, version=race.total_entries, racers=self._rows(race, final))

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
        if advance and not changed:
            return None
        boards: dict[str, View] = {}
        for pid, racer in race.racers.items():
            assert racer.delayed is not None
            boards[pid] = racer.delayed.view()
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
        if not times and not first:
            return None
        at = race.record.starts_at + delay + (min(times) if times else 0)
        return max(at, race.boards_last_ms + self.config.boards_interval_ms)

    # ---------------------------------------------------------------- time

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

    # ---------------------------------------------------------------- connections

    def _disconnected(self, ev: Disconnected) -> None:
        pid = self.conns.pop(ev.conn, None)
        self._creating.pop(ev.conn, None)
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
            del self.players[pid]
            return
        room.members[pid].left_ms = ev.now
        race = room.race
        if race is not None and pid in race.racers and room.phase in (p.COUNTDOWN, p.RACING):
            racer = race.racers[pid]
            if not racer.game.over:
                racer.forfeit_at = ev.now + self.config.grace_ms
            race.lb_dirty = True
        if self._shown(room, room.members[pid]):
            self._changed(room)
        else:
            self._spectators_changed(room, counted=False)  # nobody else sees a spectator's connection

    # ================================================================ records

    def _member(self, m: MemberState) -> p.Member:
        return p.Member(
            player_id=m.player_id,
            name=m.name,
            role=m.role,
            ready=m.ready,
            bot=m.bot,
            connected=self._connected(m.player_id),
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
            rules=_rules(room.options),
            chosen_deal=room.chosen_deal,
            leak_proof=room.leak_proof,
            members=shown,
            starts_at=race.record.starts_at if timed and race is not None else None,
            ends_at=race.record.ends_at if timed and race is not None else None,
            spectators=sum(1 for m in room.members.values() if m.role == p.SPECTATOR),
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
                )
                for m in room.members.values()
            ],
            race=None if room.race is None else room.race.record,
            pending_deal=room.pending_deal,
            created_ms=room.created_ms,
            last_activity_ms=room.last_activity_ms,
        )

    def _room_from_record(self, record: RoomRecord, logs: dict[str, list[LogEntry]], now: int) -> RoomState:
        members = {
            m.player_id: MemberState(
                m.player_id,
                m.name,
                m.bot,
                m.role,
                m.ready,
                m.token_hash,
                # Loaded from the store: nobody is connected to this process yet.
                m.left_ms if m.left_ms is not None else now,
            )
            for m in record.members
        }
        for pid in members:
            player = self.players.get(pid)
            if player is not None and player.conns and player.room == record.code:
                members[pid].left_ms = None
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
        )
        if record.race is not None:
            room.race = self._race_from_record(room, record.race, logs, now)
            if record.phase == p.RESULTS:
                room.race.final_rows = self._rows(room.race, final=True)
        return room

    def _race_from_record(
        self, room: RoomState, record: RaceRecord, logs: dict[str, list[LogEntry]], now: int
    ) -> RaceState:
        racers: dict[str, RacerState] = {}
        for info in record.racers:
            racer = self._replay_racer(info, record, logs.get(info.player_id, []))
            member = room.members.get(info.player_id)
            if member is not None and member.left_ms is not None and room.phase == p.RACING and not racer.game.over:
                racer.forfeit_at = max(now, member.left_ms) + self.config.grace_ms
            racers[info.player_id] = racer
        return RaceState(record=record, racers=racers, lb_last_ms=0)

    def _replay_racer(self, info: RacerInfo, record: RaceRecord, entries: list[LogEntry]) -> RacerState:
        game = Game(record.deal, undo=record.undo, blocked_budget=self.config.blocked_budget)
        racer = RacerState(info=info, game=game)
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
        game.settle_status()
        return racer
