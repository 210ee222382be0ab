"""The room writes' bookkeeping, pure: which store version a room's next save expects, and what
the shell does when a save's outcome is unknown, refused, stale or lost.

No I/O and no clock: :class:`RoomVersions` is told what the store answered and answers with a
decision (a typed value the room-write worker, server/shell/room_writes.py, carries out). Its
tests (tests/test_room_versions.py) walk it as a table of steps, the way h11 tests its state table.

One room's book:

- ``version``: the store version this node last wrote or read (None: unknown, the next save
  probes the store first).
- ``uncertain``: a save whose outcome is unknown (the store did not answer): the version it
  expected and its data, so that the probe can tell whether it landed.
- ``conflict``: one node, another writer changed the room: it is never overwritten again.
- ``epoch``: several nodes, the room's read-backs so far; a save made before the last one was made
  on a copy that the read-back replaced, and is dropped.
- ``uncommitted``: several nodes, room commands handled here that no landed save holds yet, by
  number; a read-back replays them on the store's copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from server.core.events import ClientEvent, Send
from server.core.records import RoomRecord

# ---------------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class SaveOp:
    """A room save waiting in the room's queue, made at ``epoch`` (the room's read-backs then)."""

    record: RoomRecord
    epoch: int
    commands: int = 0  # several nodes: the room commands (their numbers) up to here are in this save
    then: tuple[Send, ...] = ()  # sent once this save has landed (SaveRoom.then)

    def replacing(self, older: SaveOp) -> SaveOp:
        """This save in place of an older one of the same room that has not landed: it carries the
        older one's messages too, unless a read-back came between (the older was made on a copy
        the read-back replaced, and the read-back sent the stored room's own)."""
        if older.epoch != self.epoch or not older.then:
            return self
        return replace(self, then=older.then + self.then)


@dataclass(frozen=True, slots=True)
class ListOp:
    listed: bool


@dataclass(frozen=True, slots=True)
class ExpireOp:
    seconds: float | None


@dataclass(frozen=True, slots=True)
class ReadOp:
    """A read behind the room's pending writes: ``answer`` (an asyncio future) gets the stored
    (data, version) or None."""

    answer: Any


@dataclass(frozen=True, slots=True)
class RefreshOp:
    """Several nodes: read the room back from the store (RoomChanged); a read of race ``race``'s
    logs starts at ``lengths`` (the core's copy holds the entries before)."""

    race: int | None = None
    lengths: dict[str, int] = field(default_factory=dict)


RoomOp = SaveOp | ListOp | ExpireOp | ReadOp | RefreshOp

# ---------------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Write:
    """Compare-and-set on ``version``."""

    version: int


@dataclass(frozen=True, slots=True)
class Probe:
    """The version is unknown: load the stored room and hand it to :meth:`RoomVersions.probed`."""


@dataclass(frozen=True, slots=True)
class Drop:
    """Do not write: ``why`` is ``stale`` (made before a read-back) or ``conflict`` (another
    writer changed the room, one node)."""

    why: str


@dataclass(frozen=True, slots=True)
class Recreate:
    """The room vanished from the store while held here: create it afresh."""


@dataclass(frozen=True, slots=True)
class Lost:
    """Another writer's change stands (found at version ``found``; this node expected
    ``expected``). ``refresh``: several nodes, read the room back before anything else queued."""

    expected: int | None
    found: int
    refresh: bool


SaveStep = Write | Probe | Drop
ProbeStep = Write | Recreate | Lost
RefusedStep = Recreate | Lost


@dataclass(slots=True)
class RoomBook:
    version: int | None = None
    uncertain: tuple[int, bytes] | None = None
    conflict: bool = False
    epoch: int = 0
    refreshing: bool = False
    uncommitted: list[tuple[int, ClientEvent]] = field(default_factory=list)


class RoomVersions:
    """Every room's book (see the module docstring). ``shared``: several nodes share the rooms."""

    def __init__(self, shared: bool = False) -> None:
        self.shared = shared
        self.books: dict[str, RoomBook] = {}
        self.commands = 0  # room commands noted so far (several nodes)

    def book(self, code: str) -> RoomBook:
        book = self.books.get(code)
        if book is None:
            book = self.books[code] = RoomBook()
        return book

    def forget(self, code: str) -> None:
        self.books.pop(code, None)

    # ------------------------------------------------------------------ what the store holds

    def loaded(self, code: str, version: int | None) -> None:
        """A room read from the store to be held here (nothing of it was queued)."""
        book = self.book(code)
        book.version = version
        book.conflict = False

    def created(self, code: str) -> None:
        """This node stored the room afresh (a creation, or a recreation): version 1."""
        book = self.book(code)
        book.version = 1
        book.conflict = False

    # ------------------------------------------------------------------ saves

    def epoch(self, code: str) -> int:
        """The epoch a save queued now is made at."""
        book = self.books.get(code)
        return 0 if book is None else book.epoch

    def begin_save(self, code: str, epoch: int) -> SaveStep:
        book = self.book(code)
        if self.shared and epoch != book.epoch:
            return Drop("stale")
        if book.conflict:
            return Drop("conflict")
        if book.version is None:
            return Probe()
        return Write(book.version)

    def probed(self, code: str, stored: tuple[bytes, int] | None) -> ProbeStep:
        """The stored room, read because the version was unknown."""
        if stored is None:
            return Recreate()
        book = self.book(code)
        uncertain, book.uncertain = book.uncertain, None
        data, found = stored
        if uncertain is not None and (data == uncertain[1] or found == uncertain[0]):
            # Our last save landed after all, or it did not and no one else wrote.
            return Write(found)
        return self._lost(book, None if uncertain is None else uncertain[0], found)

    def save_unknown(self, code: str, version: int, data: bytes) -> None:
        """The store did not answer a save on ``version``: whether it landed is unknown."""
        book = self.book(code)
        book.version = None
        book.uncertain = (version, data)

    def save_landed(self, code: str, version: int, commands: int) -> None:
        """A save holding the room commands up to number ``commands`` landed as ``version``."""
        book = self.book(code)
        book.version = version
        if self.shared and book.uncommitted:
            book.uncommitted = [c for c in book.uncommitted if c[0] > commands]

    def refused(self, code: str, expected: int, stored: tuple[bytes, int] | None) -> RefusedStep:
        """The compare-and-set on ``expected`` was refused; ``stored``: the room as read after."""
        if stored is None:
            return Recreate()
        return self._lost(self.book(code), expected, stored[1])

    def recreate_refused(self, code: str) -> Lost:
        """A recreation found the room created by someone else meanwhile."""
        return self._lost(self.book(code), None, 1)

    def _lost(self, book: RoomBook, expected: int | None, found: int) -> Lost:
        book.version = None
        if not self.shared:
            book.conflict = True
        return Lost(expected, found, self.shared)

    # ------------------------------------------------------------------ read-backs (several nodes)

    def is_news(self, code: str, version: int) -> bool:
        """Another node announced ``version`` of a room held here: read it back? Version 1 of a room
        held here is news unless it is ours: another node stored it again after it vanished (a
        creation is not announced), counting from 1 again."""
        known = self.book(code).version
        return known is None or known < version or (version == 1 and known != 1)

    def want_refresh(self, code: str) -> bool:
        """A read-back is asked for: False if one is already waiting in the room's queue."""
        book = self.book(code)
        if book.refreshing:
            return False
        book.refreshing = True
        return True

    def refreshed(self, code: str, version: int | None) -> tuple[ClientEvent, ...]:
        """The room was read back (``version`` None: it is gone): saves made before are stale from
        now on. Returns the commands to handle again on the store's copy."""
        book = self.book(code)
        book.refreshing = False
        book.epoch += 1
        if version is not None:
            book.version = version
        book.uncertain = None
        book.conflict = False
        return tuple(event for _number, event in book.uncommitted)

    def note_command(self, codes: set[str], event: ClientEvent) -> None:
        """Several nodes: a room command changed these rooms; kept until a save commits it."""
        self.commands += 1
        for code in codes:
            self.book(code).uncommitted.append((self.commands, event))
