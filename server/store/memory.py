"""The embedded store: everything in one process's memory, no I/O.

``plot-server`` uses it when no Redis URL is given. Each method runs to completion without
awaiting, so under asyncio every call is atomic and the compare-and-set guarantees hold
trivially. Expiry follows the clock it is given (``time.monotonic`` by default): expired
rooms and players are dropped lazily, at the start of the next call, through a heap of
deadlines, so nothing runs in the background.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from server.store.base import (
    DEFAULT_PLAYER_TTL,
    AppendRequest,
    AppendResult,
    LogLength,
    Store,
    StoreUnavailable,
    check_identifier,
    is_identifier,
)
from server.store.memory_daily import MemoryDaily
from server.store.memory_profiles import MemoryProfiles

_ROOM = 0
_PLAYER = 1


@dataclass
class _Room:
    data: bytes
    version: int
    open_race: int | None = None  # the race whose logs accept appends
    deadline: float | None = None
    # (race, player id) -> entries, oldest first
    logs: dict[tuple[int, str], list[bytes]] = field(default_factory=dict)


@dataclass
class _Player:
    token_hash: str
    data: bytes
    deadline: float | None


def check_bytes(kind: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{kind} must be bytes, not {type(value).__name__}")
    return value


def check_count(kind: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{kind} must be an int, not {type(value).__name__}")
    return value


def check_log_lengths(logs: Sequence[LogLength]) -> None:
    """save_room's ``logs``: whole lengths, 0 or more."""
    for log in logs:
        if check_count("log length", log.length) < 0:
            raise ValueError(f"log length must be 0 or more, not {log.length}")


def check_open_race(value: object) -> int | None:
    return None if value is None else check_count("open race", value)


def check_request(request: object) -> AppendRequest:
    """The request, if every field is valid; ValueError/TypeError naming the first bad one."""
    if not isinstance(request, AppendRequest):
        raise TypeError(f"an append batch holds AppendRequest, not {type(request).__name__}")
    check_identifier("room code", request.code)
    check_count("race", request.race)
    check_identifier("player id", request.player_id)
    check_count("expected length", request.expected_length)
    check_bytes("move entry", request.entry)
    if not isinstance(request.notice, bytes):
        raise TypeError(f"notice must be bytes, not {type(request.notice).__name__}")
    return request


def check_seconds(seconds: object) -> float | None:
    if seconds is None:
        return None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not math.isfinite(seconds):
        raise ValueError(f"expiry must be a finite number of seconds or None, not {seconds!r}")
    return float(seconds)


class MemoryStore(MemoryDaily, MemoryProfiles, Store):
    """In-process store. ``clock`` must be monotonic; ``player_ttl`` None keeps players forever."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        player_ttl: float | None = DEFAULT_PLAYER_TTL,
    ) -> None:
        MemoryDaily.__init__(self)
        self._clock = clock or time.monotonic
        self._player_ttl = check_seconds(player_ttl)
        self._rooms: dict[str, _Room] = {}
        self._listed: dict[str, None] = {}  # an insertion-ordered set: oldest listing first
        self._players: dict[str, _Player] = {}
        self._tokens: dict[str, str] = {}
        # (deadline, kind, key); stale entries (the deadline changed since) are skipped.
        self._deadlines: list[tuple[float, int, str]] = []
        self._closed = False
        self._profiles_init()

    # Housekeeping ------------------------------------------------------------

    def _begin(self) -> float:
        """Refuse calls after close, drop whatever has expired, and return the time now."""
        if self._closed:
            raise StoreUnavailable("the in-memory store is closed")
        now = self._clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, kind, key = heapq.heappop(self._deadlines)
            if kind == _ROOM:
                room = self._rooms.get(key)
                if room is not None and room.deadline == deadline:
                    self._drop_room(key)
            else:
                player = self._players.get(key)
                if player is not None and player.deadline == deadline:
                    self._drop_player(key)
        return now

    def _drop_room(self, code: str) -> None:
        self._rooms.pop(code, None)
        self._listed.pop(code, None)

    def _drop_player(self, player_id: str) -> None:
        player = self._players.pop(player_id, None)
        if player is not None and self._tokens.get(player.token_hash) == player_id:
            del self._tokens[player.token_hash]

    async def ping(self) -> None:
        self._begin()

    async def close(self) -> None:
        self._closed = True

    # Players -----------------------------------------------------------------

    async def put_player(self, player_id: str, token_hash: str, data: bytes, ttl_s: float | None = None) -> None:
        check_identifier("player id", player_id)
        check_identifier("token hash", token_hash)
        check_bytes("player data", data)
        now = self._begin()
        old = self._players.get(player_id)
        if old is not None and old.token_hash != token_hash and self._tokens.get(old.token_hash) == player_id:
            del self._tokens[old.token_hash]  # a new token replaces the old one
        ttl = self._player_ttl if ttl_s is None else check_seconds(ttl_s)
        deadline = None if ttl is None else now + ttl
        self._players[player_id] = _Player(token_hash, data, deadline)
        self._tokens[token_hash] = player_id
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, _PLAYER, player_id))

    async def get_player(self, player_id: str) -> bytes | None:
        self._begin()
        player = self._players.get(player_id) if is_identifier(player_id) else None
        return None if player is None else player.data

    async def player_by_token(self, token_hash: str) -> str | None:
        self._begin()
        return self._tokens.get(token_hash) if is_identifier(token_hash) else None

    # Rooms -------------------------------------------------------------------

    async def create_room(self, code: str, data: bytes, *, open_race: int | None = None, notice: bytes = b"") -> bool:
        check_identifier("room code", code)
        check_bytes("room data", data)
        check_bytes("room notice", notice)  # checked as Redis's is; one process has no one to tell
        check_open_race(open_race)
        self._begin()
        if code in self._rooms:
            return False
        self._rooms[code] = _Room(data, 1, open_race)
        self._listed.pop(code, None)  # a new room starts unlisted
        return True

    async def load_room(self, code: str) -> tuple[bytes, int] | None:
        self._begin()
        room = self._rooms.get(code) if is_identifier(code) else None
        return None if room is None else (room.data, room.version)

    async def save_room(
        self,
        code: str,
        data: bytes,
        expected_version: int,
        *,
        open_race: int | None = None,
        notice: bytes = b"",
        logs: Sequence[LogLength] = (),
    ) -> int | None:
        check_bytes("room data", data)
        check_count("expected version", expected_version)
        check_bytes("room notice", notice)  # checked as Redis's is; one process has no one to tell
        check_open_race(open_race)
        check_log_lengths(logs)
        self._begin()
        room = self._rooms.get(code) if is_identifier(code) else None
        if room is None or room.version != expected_version:
            return None
        if any(len(room.logs.get((log.race, log.player_id), ())) != log.length for log in logs):
            return None
        room.data = data  # the deadline, if any, stays: saving does not extend a room's life
        room.open_race = open_race
        room.version += 1
        return room.version

    async def delete_room(self, code: str) -> None:
        self._begin()
        if is_identifier(code):
            self._drop_room(code)

    async def set_listed(self, code: str, listed: bool) -> None:
        check_identifier("room code", code)
        self._begin()
        if listed:
            self._listed.setdefault(code, None)
        else:
            self._listed.pop(code, None)

    async def listed_rooms(self) -> list[str]:
        self._begin()
        return [code for code in self._listed if code in self._rooms]

    async def expire_room(self, code: str, seconds: float | None) -> None:
        ttl = check_seconds(seconds)
        now = self._begin()
        room = self._rooms.get(code) if is_identifier(code) else None
        if room is None:
            return
        if ttl is None:
            room.deadline = None
        elif ttl <= 0:
            self._drop_room(code)
        else:
            room.deadline = now + ttl
            heapq.heappush(self._deadlines, (room.deadline, _ROOM, code))

    # Move logs ---------------------------------------------------------------

    async def append_move(
        self, code: str, race: int, player_id: str, expected_length: int, entry: bytes
    ) -> AppendResult:
        request = check_request(AppendRequest(code, race, player_id, expected_length, entry))
        self._begin()
        return self._append(request)

    async def append_moves(self, batch: Sequence[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        requests = [check_request(request) for request in batch]
        self._begin()
        return [self._append(request) for request in requests]

    def _append(self, request: AppendRequest) -> AppendResult:
        room = self._rooms.get(request.code)
        if room is None or room.open_race != request.race:
            return AppendResult.NO_SUCH_RACE  # no log outlives its room, or its race
        key = (request.race, request.player_id)
        log = room.logs.get(key)
        if (0 if log is None else len(log)) != request.expected_length:
            return AppendResult.LENGTH_MISMATCH
        if log is None:
            room.logs[key] = [request.entry]
        else:
            log.append(request.entry)
        return AppendResult.APPENDED

    async def load_moves(self, code: str, race: int, player_id: str, start: int = 0) -> list[bytes]:
        check_count("race", race)
        if check_count("start", start) < 0:
            raise ValueError(f"start must be 0 or more, not {start}")
        self._begin()
        room = self._rooms.get(code) if is_identifier(code) else None
        if room is None:
            return []
        return list(room.logs.get((race, player_id), ()))[start:]
