"""The store interface the room server talks to.

The store holds opaque bytes (the server encodes its records with msgspec), so the
schema lives with the server and the store only guarantees what a shared, multi-process
deployment needs: atomic compare-and-set on room documents and on move logs, lookups
by token, a listing of open rooms, and expiry. Every implementation must pass
``tests/test_store_contract.py``.

Keys (for the Redis implementation; docs/store.md lists each with type, writer, lifetime):
rooms by code, players by id, token hashes to player ids, one move log per
(room, race, player), the set of listed rooms; profiles by id, indexed by secret hash and by
name key, and the rating board (docs/players.md).
"""

from __future__ import annotations

import abc
import enum
import re
from collections.abc import Callable, Sequence

import msgspec

from server.store.daily import DailyStore

# A player record (and its token index) lives this long after its last put_player.
DEFAULT_PLAYER_TTL = 7 * 24 * 3600.0

# Room codes, player ids, token hashes: what the Redis key layout can embed unambiguously
# (no ':' separators, no '{}' hash-tag braces, no spaces or control characters). Lookups with
# any other text find nothing; writes with it raise ValueError (a server bug, not user input).
IDENTIFIER = re.compile(r"[A-Za-z0-9_.+/=-]{1,128}")


def is_identifier(text: object) -> bool:
    """True if ``text`` can name a room, player or token in every store."""
    return isinstance(text, str) and IDENTIFIER.fullmatch(text) is not None


def check_identifier(kind: str, text: object) -> str:
    """``text`` if it is an identifier, else ValueError naming what was wrong."""
    if not is_identifier(text):
        raise ValueError(f"bad {kind} {text!r}: expected 1-128 characters from A-Z a-z 0-9 _ . + / = -")
    assert isinstance(text, str)
    return text


class StoreUnavailable(Exception):
    """The store cannot be reached or did not answer.

    If the store stopped answering mid-call (a timeout, a dropped connection) a write may
    still have landed: after a failed ``append_move`` or ``save_room``, reload before retrying."""


class AppendResult(enum.Enum):
    """What an append did. Each outcome is its own value, so none can be taken for another
    (a missing room once read as a length conflict made the server retry for ever)."""

    APPENDED = "appended"
    # The log does not hold exactly the expected number of entries: reload it, then decide.
    LENGTH_MISMATCH = "length mismatch"
    # The room is not in the store, that race is not its open race, or the race is finished in
    # the store: retrying can never succeed, nothing was written.
    NO_SUCH_RACE = "no such race"


class RenameResult(enum.Enum):
    """What a rename did (Store.rename_profile)."""

    RENAMED = "renamed"
    NAME_TAKEN = "name taken"  # the new name key is another profile's (claimed or reserved): nothing written
    CONFLICT = "conflict"  # no such profile, or its version is not the expected one: reload, then decide


# Told of each call a store makes to its server (Redis): the store operation, how long it took
# in seconds, and whether it failed (StoreUnavailable). The node's metrics (server/metrics.py)
# set one; the in-memory store makes no calls to tell of.
StoreObserver = Callable[[str, float, bool], None]


class LogLength(msgspec.Struct, frozen=True):
    """A move log's length a room save expects (save_room's ``logs``)."""

    race: int
    player_id: str
    length: int


class AppendRequest(msgspec.Struct, frozen=True):  # a struct: one per move, cheap to build
    """One entry of a batch for :meth:`Store.append_moves`: a compare-and-set on one move log."""

    code: str
    race: int
    player_id: str
    expected_length: int
    entry: bytes
    # Several nodes: published on the room's channel by the store in the same step as the append,
    # and only if the entry lands (empty: nothing published; the in-memory store has no channels).
    notice: bytes = b""


class Store(DailyStore, abc.ABC):
    """Async storage for the race server. All methods may raise :class:`StoreUnavailable`. The
    daily deal's calls are declared in server/store/daily.py (``DailyStore``)."""

    observer: StoreObserver | None = None  # see StoreObserver

    @abc.abstractmethod
    async def ping(self) -> None:
        """Return if the store answers; raise StoreUnavailable otherwise."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # Players ---------------------------------------------------------------

    @abc.abstractmethod
    async def put_player(self, player_id: str, token_hash: str, data: bytes, ttl_s: float | None = None) -> None:
        """Create or overwrite a player and index it by the hash of its resume token. ``ttl_s``: its
        lifetime from now (None: the store's player lifetime, ``player_ttl``)."""

    @abc.abstractmethod
    async def get_player(self, player_id: str) -> bytes | None: ...

    @abc.abstractmethod
    async def player_by_token(self, token_hash: str) -> str | None:
        """The player id whose token hashes to ``token_hash``, or None."""

    # Profiles (docs/players.md): never expire ------------------------------
    # ``name_key`` is shared/names.py's name_key of the claimed name (any text: the store never
    # puts it in a key as it is); ``secret_hash`` the SHA-256 (hex) of the client's secret.

    @abc.abstractmethod
    async def create_profile(self, profile_id: str, secret_hash: str, name_key: str, data: bytes) -> bool:
        """In one atomic step: if no profile holds ``name_key`` (as its name or a reserved old one)
        and no profile has ``secret_hash``, store the profile at version 1 and index it by both.
        False (nothing written) if either is taken."""

    @abc.abstractmethod
    async def profile_by_secret(self, secret_hash: str) -> str | None:
        """The profile id bound to this secret hash, or None."""

    @abc.abstractmethod
    async def get_profile(self, profile_id: str) -> bytes | None: ...

    @abc.abstractmethod
    async def load_profile(self, profile_id: str) -> tuple[bytes, int] | None:
        """(data, version) of a profile, or None."""

    @abc.abstractmethod
    async def profile_by_name(self, name_key: str) -> str | None:
        """The profile holding this name key (its name, or an old name still reserved), or None."""

    @abc.abstractmethod
    async def put_profile(
        self, profile_id: str, data: bytes, *, expected_version: int | None = None, score: float | None = None
    ) -> int | None:
        """Replace an existing profile's data: the new version, or None (no such profile, or with
        ``expected_version`` given, the stored version is another: compare-and-set). ``score``: the
        profile's place on the rating board (the shown figure), set in the same step (None: left)."""

    @abc.abstractmethod
    async def rename_profile(
        self,
        profile_id: str,
        old_key: str,
        new_key: str,
        data: bytes,
        expected_version: int,
        reserve_s: float,
    ) -> RenameResult:
        """In one atomic step: if the profile is at ``expected_version`` and ``new_key`` is free or
        already this profile's (an old name of its own coming back), index the profile by
        ``new_key`` for good, keep ``old_key`` its own for ``reserve_s`` seconds more (then free),
        and store ``data`` (version + 1)."""

    @abc.abstractmethod
    async def rating_board(self, limit: int) -> list[tuple[str, float]]:
        """The ``limit`` profiles with the highest scores (put_profile's ``score``), (profile id,
        score), highest first (equal scores in the order the store keeps)."""

    # Rooms -----------------------------------------------------------------

    @abc.abstractmethod
    async def create_room(self, code: str, data: bytes, *, open_race: int | None = None, notice: bytes = b"") -> bool:
        """Store a new room at version 1; False if the code is taken.

        ``open_race``: the race whose move logs accept appends (None: no race is open).
        ``notice`` (several nodes: a room stored again after it vanished): published on the room's
        channel in the same step, and only if the room is created (as save_room's)."""

    @abc.abstractmethod
    async def load_room(self, code: str) -> tuple[bytes, int] | None:
        """(data, version) of a room, or None if there is no such room."""

    @abc.abstractmethod
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
        """Compare-and-set: replace the room if its version is ``expected_version`` and each of
        ``logs`` holds exactly its length (several nodes: the save that ends a race, whose results
        count those entries, is refused if another node stored more meanwhile).

        ``notice`` (several nodes): published on the room's channel in the same step as the save,
        and only if it lands (empty: nothing published; the in-memory store has no channels).

        ``open_race`` replaces the room's open race with the record (None: the race is over, or
        none has begun: appends to any log of the room answer NO_SUCH_RACE from now on).
        Returns the new version (expected + 1), or None if the version did not match
        (another process changed it) or the room does not exist."""

    @abc.abstractmethod
    async def delete_room(self, code: str) -> None:
        """Remove a room, its move logs and its listing."""

    @abc.abstractmethod
    async def set_listed(self, code: str, listed: bool) -> None:
        """Add the room to, or remove it from, the public room list."""

    @abc.abstractmethod
    async def listed_rooms(self) -> list[str]:
        """Codes of listed rooms (rooms that no longer exist are left out)."""

    @abc.abstractmethod
    async def expire_room(self, code: str, seconds: float | None) -> None:
        """Make the room, its logs and listing vanish after ``seconds``; None keeps it forever."""

    # Move logs -------------------------------------------------------------

    @abc.abstractmethod
    async def append_move(
        self, code: str, race: int, player_id: str, expected_length: int, entry: bytes
    ) -> AppendResult:
        """Atomically append ``entry`` to the (room, race, player) log if ``race`` is the room's
        open race and the log holds exactly ``expected_length`` entries: APPENDED. Otherwise
        nothing is written: LENGTH_MISMATCH (two connections of one player can never fork its
        log) or NO_SUCH_RACE. StoreUnavailable: the outcome is unknown, reload the log."""

    @abc.abstractmethod
    async def append_moves(self, batch: Sequence[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        """Each request as :meth:`append_move` would do it, in one round trip (group commit).

        One result per request, in order; each entry succeeds or fails on its own (a failed
        entry never fails another). A StoreUnavailable in the list: that entry's outcome is
        unknown. Requests for one log are applied in batch order. Invalid identifiers or types
        raise (ValueError, TypeError) before anything is written."""

    @abc.abstractmethod
    async def load_moves(self, code: str, race: int, player_id: str, start: int = 0) -> list[bytes]:
        """The (room, race, player) log from index ``start`` on (the whole log by default), oldest
        first (empty if none)."""

    async def load_logs(self, code: str, race: int, starts: Sequence[tuple[str, int]]) -> list[list[bytes]]:
        """Several logs of one race, each (player id, index) read from that index on, in order: what
        ``load_moves`` gives for each (stores that can, in one round trip)."""
        return [await self.load_moves(code, race, player_id, start) for player_id, start in starts]
