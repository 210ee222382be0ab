"""The plumbing every part of the room core shares: its state, the effects it emits, room versions."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Literal

from server.core.daily_state import DailyState
from server.core.events import (
    ClientEvent,
    Effect,
    ExpireRoom,
    Note,
    Reply,
    RoomCreated,
    RoomCreateFailed,
    SavePlayer,
    SaveRoom,
    Send,
    Wake,
    WakeLeaderboards,
)
from server.core.records import (
    GhostRecord,
    LogEntry,
    PlayerRecord,
    ProfileRecord,
    RaceRecord,
    RacerInfo,
    RoomRecord,
)
from server.core.state import (
    CoreConfig,
    Entropy,
    GhostState,
    LeaderboardFeed,
    Loading,
    LogSnapshot,
    MemberState,
    PendingMove,
    PlayerState,
    RacerState,
    RaceState,
    RoomState,
)
from shared import protocol as p
from shared.engine import View


class CoreBase:
    """State and output shared by the core's parts (each part is a mixin on this)."""

    def __init__(self, config: CoreConfig | None = None, entropy: Entropy | None = None) -> None:
        self.config = config or CoreConfig()
        self.entropy = entropy or Entropy()
        self.conns: dict[int, str | None] = {}  # connection -> player id (None before welcome)
        self.players: dict[str, PlayerState] = {}
        self.rooms: dict[str, RoomState] = {}
        self._creating: dict[int, int] = {}  # connection -> create attempts (room codes taken)
        self._searches = 0  # deal searches asked for so far (each FindDeal gets the next number)
        self._hellos: dict[int, str] = {}  # connection -> the resume token being looked up
        # Profiles (profiles.py): hellos whose identity is being looked up; the profile a hello's
        # token lookup must match; connections whose claim or rename is under way (-> player id);
        # rated races being applied (room code, race).
        self._identity_hellos: dict[int, p.Hello] = {}
        self._hello_profiles: dict[int, ProfileRecord] = {}
        self._profile_ops: dict[int, str] = {}
        self._rating: set[tuple[str, int]] = set()
        self._loading: dict[str, Loading] = {}  # room code -> what waits for the room to be loaded
        self._out: list[Effect] = []
        self._touched: set[str] = set()
        self._now = 0  # the time of the event being handled
        # The node's shared leaderboard tick (deadlines.py): each racing room's next leaderboard
        # due, the earliest the shell was told (None: no timer), and when this event is the shared
        # tick (its timer spent), its time and the rooms that ticked in it.
        self._leaderboards: dict[str, int] = {}
        self._leaderboard_wake: int | None = None
        self._shared_tick_at: int | None = None
        self._ticked: set[str] = set()
        self.daily = DailyState()  # the daily deal's (server/core/daily.py)

    def _finish(self) -> list[Effect]:
        leaderboards = self._leaderboard_wake
        for code in sorted(self._touched):
            due = self._schedule_leaderboard(code, self._now)
            if due is not None and (leaderboards is None or due < leaderboards):
                leaderboards = due
            room = self.rooms.get(code)
            if room is None:
                continue
            if room.needs_save:
                room.needs_save = False
                then, room.after_save = tuple(room.after_save), []
                self._out.append(SaveRoom(code, self._record(room), then))
            wake = self._next_wake(room)
            if wake != room.wake_at:
                room.wake_at = wake
                self._out.append(Wake(code, wake))
        if self._shared_tick_at is not None:  # the shared tick: the next is the earliest left
            for code in self._ticked:
                self._schedule_leaderboard(code, self._shared_tick_at, ticked=True)
            self._ticked = set()
            self._shared_tick_at = None
            leaderboards = min(self._leaderboards.values(), default=None)
        if leaderboards != self._leaderboard_wake:
            self._leaderboard_wake = leaderboards
            self._out.append(WakeLeaderboards(leaderboards))
        out, self._out = self._out, []
        return out

    def _note(self, event: str, level: Literal["info", "warning", "error"] = "info", **fields: object) -> None:
        self._out.append(Note(event, fields, level))

    def _reply(self, conn: int, message: p.ServerMessage) -> None:
        self._out.append(Reply(conn, message))

    def awaits_search(self, code: str, race: int, search: int) -> bool:
        """Does the room still wait for this deal search? An answer to any other is stale."""
        room = self.rooms.get(code)
        return room is not None and room.phase == p.DEALING and room.search == search and room.race_number == race

    def _expire(self, code: str, seconds: float) -> None:
        """The stored room's lifetime from now: none while the room is live here (lobby, dealing,
        countdown, race), so that it never vanishes from the store mid-race; ``seconds`` once it
        shows results, or is not held here."""
        room = self.rooms.get(code)
        live = room is not None and room.phase != p.RESULTS
        self._out.append(ExpireRoom(code, None if live else seconds))

    def _send(self, players: tuple[str, ...], message: p.ServerMessage, droppable: bool = False) -> None:
        if players:
            self._out.append(Send(players, message, droppable))

    def _forget_conn(self, conn: int) -> None:
        """What the core kept for a connection's requests under way (it ended, or was superseded)."""
        self._creating.pop(conn, None)
        self._hellos.pop(conn, None)
        self._identity_hellos.pop(conn, None)
        self._hello_profiles.pop(conn, None)
        self._profile_ops.pop(conn, None)

    def _error(self, conn: int, code: str, message: str, ref: str | None, move_id: int | None = None) -> None:
        """An error reply; ``move_id``: the client's id when it answers a move."""
        self._reply(conn, p.Error(code=code, message=message, ref=ref, id=move_id))

    def _forget_if_idle(self, player_id: str) -> None:
        """A player with no connection and no room in this process is not kept in memory (its
        record is in the store: a resume brings it back)."""
        player = self.players.get(player_id)
        if player is None or player.conns:
            return
        room = self.rooms.get(player.room) if player.room is not None else None
        if room is None or player_id not in room.members:
            del self.players[player_id]

    def _changed(self, room: RoomState) -> None:
        """The room's racers/host/phase changed: new version, tell everyone in it, save it. On one
        node they are told now; on several (``shared_rooms``) once the save has landed, since a
        save that loses the compare-and-set to another node's is rolled back (the room is read
        back, the change replayed on it): told now, members saw the change, then not, then again."""
        room.version += 1
        room.needs_save = True
        self._touched.add(room.code)
        room.snapshot_dirty = False  # this snapshot carries the latest count too
        if not self.config.shared_rooms:
            self._send_room(room, droppable=False)
            return
        mark = len(self._out)
        self._send_room(room, droppable=False)
        fresh = [effect for effect in self._out[mark:] if isinstance(effect, Send)]
        del self._out[mark:]
        # One snapshot per save, the latest, where the first stood (before what followed it).
        first = next((i for i, send in enumerate(room.after_save) if isinstance(send.message, p.Room)), None)
        if first is None:
            room.after_save.extend(fresh)
        else:
            kept = [send for send in room.after_save if not isinstance(send.message, p.Room)]
            room.after_save = kept[:first] + fresh + kept[first:]

    def _announce(self, room: RoomState, players: tuple[str, ...], message: p.ServerMessage) -> None:
        """A message that comes with a room change (a countdown, a race's start): on several
        nodes it waits for the change's save, as the room's snapshot does (``_changed``)."""
        if not players:
            return
        if self.config.shared_rooms:
            room.after_save.append(Send(players, message))
        else:
            self._send(players, message)

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

    def _present(self, member: MemberState | None, player_id: str) -> bool:
        """Is this member connected? On one node: to this node. Several nodes: to any node, as the
        room records it (the node holding the connection keeps ``left_ms`` up to date)."""
        if self.config.shared_rooms:
            return member is not None and member.left_ms is None
        return self._connected(player_id)

    def _connected(self, player_id: str) -> bool:
        player = self.players.get(player_id)
        return player is not None and bool(player.conns)

    # ---- the parts' methods that other parts call (ServerCore mixes them all in)

    if TYPE_CHECKING:

        @abstractmethod  # daily.py
        def _daily_client(self, conn: int, player: PlayerState, msg: p.ClientMessage, now: int) -> None: ...

        @abstractmethod  # daily.py
        def _daily_created(self, ev: RoomCreated) -> None: ...

        @abstractmethod  # daily.py
        def _daily_create_failed(self, ev: RoomCreateFailed) -> None: ...

        @abstractmethod  # daily.py
        def _daily_finalized(self, room: RoomState) -> None: ...

        @abstractmethod  # daily.py
        def _daily_leave(self, conn: int, room: RoomState, player: PlayerState, now: int) -> None: ...

        @abstractmethod  # daily.py
        def _daily_loaded(
            self, code: str, record: RoomRecord | None, dailies: list[tuple[int, p.Daily]], now: int
        ) -> None: ...

        @abstractmethod  # daily.py
        def _daily_progress(self, room: RoomState) -> None: ...

        @abstractmethod  # daily.py
        def _end_message(self, room: RoomState) -> p.ServerMessage: ...

        @abstractmethod  # loading.py
        def _load(self, code: str, once: bool = True) -> Loading: ...

        @abstractmethod  # lobby.py
        def _seat_back(self, conn: int, room: RoomState, player: PlayerState, now: int) -> None: ...

        @abstractmethod  # race.py
        def _set_phase(self, room: RoomState, phase: str) -> None: ...
        @abstractmethod  # profiles.py
        def _hello_identity(self, conn: int, msg: p.Hello) -> None: ...

        @abstractmethod  # profiles.py
        def _register_bound(self, conn: int, profile: ProfileRecord, bot: bool, now: int) -> None: ...

        @abstractmethod  # profiles.py
        def _claim(self, conn: int, player: PlayerState, msg: p.Claim, now: int) -> None: ...

        @abstractmethod  # profiles.py
        def _rename(self, conn: int, player: PlayerState, msg: p.Rename) -> None: ...

        @abstractmethod  # profiles.py
        def _get_ratings(self, conn: int, msg: p.GetRatings) -> None: ...

        @abstractmethod  # profiles.py
        def _get_rating(self, conn: int, player: PlayerState, msg: p.GetRating) -> None: ...

        @abstractmethod  # profiles.py
        def _rate_when_stored(self, room: RoomState, phase: str, race_number: int) -> None: ...

        @abstractmethod  # profiles.py
        def _ratings_arrived(self, old: RoomState, room: RoomState) -> None: ...

        @abstractmethod  # chat.py
        def _announce_finishes(
            self, room: RoomState, race: RaceState, rows: list[p.LeaderboardRow] | None, final: bool = False
        ) -> None: ...

        @abstractmethod  # chat.py
        def _chat(self, conn: int, room: RoomState, player: PlayerState, text: str, now: int) -> None: ...

        @abstractmethod  # chat.py
        def _chat_arrived(self, old: RoomState, room: RoomState) -> None: ...

        @abstractmethod  # chat.py
        def _chat_history(self, conn: int, room: RoomState, player_id: str) -> None: ...

        @abstractmethod  # chat.py
        def _mute(self, conn: int, room: RoomState, pid: str, target: str, muted: bool) -> None: ...

        @abstractmethod  # deadlines.py
        def _next_wake(self, room: RoomState) -> int | None: ...

        @abstractmethod  # deadlines.py
        def _schedule_leaderboard(self, code: str, now: int, ticked: bool = False) -> int | None: ...

        @abstractmethod  # deadlines.py
        def _slot(self, at: int) -> int: ...

        @abstractmethod  # loading.py
        def _loading_answer(self, code: str, player_id: str) -> None: ...

        @abstractmethod  # loading.py
        def _park_join(self, code: str, conn: int, msg: p.Join, now: int) -> None: ...

        @abstractmethod  # loading.py
        def _park_resume(self, code: str, conn: int, record: PlayerRecord, token: str, now: int) -> None: ...

        @abstractmethod  # loading.py
        def _rebuild_room(
            self, code: str, now: int, why: str, racers: dict[str, LogSnapshot | None] | None = None
        ) -> None: ...

        @abstractmethod  # lobby.py
        def _client(self, ev: ClientEvent) -> None: ...

        @abstractmethod  # lobby.py
        def _supersede(self, player: PlayerState) -> None: ...

        @abstractmethod  # lobby.py
        def _member_away(self, room: RoomState, pid: str, now: int) -> None: ...

        @abstractmethod  # lobby.py
        def _close_room(self, room: RoomState, reason: str | None) -> None: ...

        @abstractmethod  # lobby.py
        def _join(self, conn: int, player: PlayerState, msg: p.Join, now: int, loaded: bool = False) -> None: ...

        @abstractmethod  # lobby.py
        def _remove_member(self, room: RoomState, pid: str, now: int) -> None: ...

        @abstractmethod  # lobby.py
        def _resume(self, conn: int, rec: PlayerRecord, token: str, now: int, keep_room: bool = False) -> None: ...

        @abstractmethod  # race.py
        def _begin(self, room: RoomState, now: int) -> None: ...

        @abstractmethod  # race.py
        def _cancel_countdown(self, room: RoomState) -> None: ...

        @abstractmethod  # race.py
        def _cancel_search(self, room: RoomState) -> None: ...

        @abstractmethod  # race.py
        def _check_race_over(self, room: RoomState, now: int) -> None: ...

        @abstractmethod  # race.py
        def _end_race(self, room: RoomState, now: int, why: str) -> None: ...

        @abstractmethod  # race.py
        def _end_request(self, conn: int, room: RoomState, pid: str, now: int) -> None: ...

        @abstractmethod  # race.py
        def _find_deal(self, room: RoomState) -> None: ...

        @abstractmethod  # race.py
        def _rematch(
            self, conn: int, room: RoomState, pid: str, deal: int | None, now: int, ghosts: bool = False
        ) -> None: ...

        @abstractmethod  # ghosts.py
        def _add_ghost(self, conn: int, room: RoomState, pid: str, msg: p.AddGhost) -> None: ...

        @abstractmethod
        def _remove_ghost(self, conn: int, room: RoomState, pid: str, target: str) -> None: ...

        @abstractmethod
        def _ghosts_of_race(self, race: RaceState) -> list[GhostRecord]: ...

        @abstractmethod
        def _ghost_entries(self, room: RoomState) -> list[p.GhostEntry]: ...

        @abstractmethod
        def _ghost_states(
            self, record_ghosts: list[GhostRecord], deal: int, race_ms: int | None
        ) -> dict[str, GhostState]: ...

        @abstractmethod
        def _advance_ghosts(self, room: RoomState, now: int) -> None: ...

        @abstractmethod
        def _next_ghost_entry(self, race: RaceState) -> int | None: ...

        @abstractmethod
        def _ghost_rows(self, race: RaceState, live: list[tuple[int, int, int, int]]) -> list[p.LeaderboardRow]: ...

        @abstractmethod
        def _ghost_results(self, race: RaceState, live: list[tuple[int, int, int, int]]) -> list[p.LeaderboardRow]: ...

        @abstractmethod
        def _ghost_boards(self, race: RaceState, as_of: int, advance: bool) -> tuple[bool, dict[str, View]]: ...

        @abstractmethod
        def _ghost_reveals(self, race: RaceState) -> tuple[list[int], bool]: ...

        @abstractmethod
        def _ranked(self, race: RaceState, final: bool) -> list[tuple[tuple[int, int, int, int], p.LeaderboardRow]]: ...

        @abstractmethod  # race.py
        def _start(self, conn: int, room: RoomState, pid: str, now: int) -> None: ...

        @abstractmethod  # ranking.py
        def _leaderboard(self, race: RaceState, final: bool) -> p.Leaderboard: ...

        @abstractmethod  # ranking.py
        def _leaderboard_update(
            self, race: RaceState, feed: LeaderboardFeed, rows: list[p.LeaderboardRow], now: int
        ) -> p.Leaderboard | None: ...

        @abstractmethod  # ranking.py
        def _results(self, room: RoomState) -> p.Results: ...

        @abstractmethod  # ranking.py
        def _rows(self, race: RaceState, final: bool) -> list[p.LeaderboardRow]: ...

        @abstractmethod  # rebuild.py
        def _race_from_record(
            self,
            room: RoomState,
            record: RaceRecord,
            logs: dict[str, list[LogEntry]],
            now: int,
            seeds: dict[str, RacerState] | None = None,
        ) -> RaceState: ...

        @abstractmethod  # rebuild.py
        def _record(self, room: RoomState) -> RoomRecord: ...

        @abstractmethod  # rebuild.py
        def _replay_racer(
            self, info: RacerInfo, record: RaceRecord, entries: list[LogEntry], seed: RacerState | None = None
        ) -> RacerState: ...

        @abstractmethod  # rebuild.py
        def _room_from_record(
            self,
            record: RoomRecord,
            logs: dict[str, list[LogEntry]],
            now: int,
            seeds: dict[str, RacerState] | None = None,
        ) -> RoomState: ...

        @abstractmethod  # views.py
        def _boards_message(self, room: RoomState, now: int, advance: bool) -> p.Boards | None: ...

        @abstractmethod  # views.py
        def _next_reveal(self, room: RoomState) -> int | None: ...

        @abstractmethod  # views.py
        def _race_start(self, room: RoomState, racer: RacerState | None, now: int) -> p.RaceStart: ...

        @abstractmethod  # views.py
        def _room_message(self, room: RoomState, recipient: str) -> p.Room: ...

        @abstractmethod  # views.py
        def _send_room(self, room: RoomState, droppable: bool) -> None: ...

        @abstractmethod  # views.py
        def _snapshot(self, conn: int, room: RoomState, player_id: str, now: int, board: bool = True) -> None: ...

        @abstractmethod  # views.py
        def _sync(self, conn: int, room: RoomState, player_id: str, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _board_after_reread(self, room: RoomState, racer: RacerState, conn: int) -> bool: ...

        @abstractmethod  # wal.py
        def _carry_over(self, old: RacerState, racer: RacerState) -> None: ...

        @abstractmethod  # wal.py
        def _clear_head(self, racer: RacerState) -> None: ...

        @abstractmethod  # wal.py
        def _move(self, conn: int, player: PlayerState, msg: p.Move, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _pump(self, room: RoomState, racer: RacerState, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _racer_due(self, room: RoomState, racer: RacerState, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _reject(self, racer: RacerState, pending: PendingMove, code: str, reason: str) -> None: ...

        @abstractmethod  # wal.py
        def _reread(self, room: RoomState, racer: RacerState) -> None: ...

        @abstractmethod  # wal.py
        def _settle_blocked(self, room: RoomState, racer: RacerState, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _settle_head(self, room: RoomState, racer: RacerState, length_before: int, now: int) -> None: ...

        @abstractmethod  # wal.py
        def _system_entry(self, room: RoomState, racer: RacerState, move: str, now: int) -> None: ...
