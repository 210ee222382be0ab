"""The room core's configuration, randomness and in-memory state (plain data, no behaviour beyond queries)."""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass, field

from server.core.records import (
    PlayerRecord,
    RaceRecord,
    RacerInfo,
    RoomRecord,
)
from shared import protocol as p
from shared.engine import BLOCKED_BUDGET, Game
from shared.fairplay import new_salt, random_deal


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


def rules_of(options: p.RoomOptions) -> p.RoomRules:
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
