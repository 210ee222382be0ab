"""The web port's connection slots: a cap in all, a cap per address, and idle ones evicted first.

A connection is *idle* from its accept until its request head is complete (it has cost the
server nothing yet and may never send anything); then it is *busy* until its answer is written.
When every slot is taken, a new connection evicts the oldest idle one (aborted at once): so a
flood of connections that never send a request cannot keep an honest request out, however many
addresses it comes from, while a request being answered is never cut for a newcomer. Only when
every slot is busy is a new connection refused. Addresses are counted as the game port counts
them (server/limits.py: an IPv4 address, an IPv6 /64); a trusted proxy's connection is admitted
uncounted and ``place``d under the client its PROXY header names once that is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal


class Slot:
    """One admitted connection. ``abort`` cuts it (called when it is evicted)."""

    __slots__ = ("abort", "address", "released")

    def __init__(self, address: str | None, abort: Callable[[], None]) -> None:
        self.address = address
        self.abort = abort
        self.released = False


Refusal = Literal["address", "full"]


class Slots:
    """``admit`` a new connection, mark it ``busy`` once its head is read, ``release`` it when it
    ends (releasing twice, or after an eviction, is harmless). 0 turns the per-address cap off."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self._open = 0
        self._by_address: dict[str, int] = {}
        self._idle: dict[Slot, None] = {}  # insertion order: the oldest idle connection first
        self.evicted = 0  # idle connections cut to make room, since the start

    def __len__(self) -> int:
        return self._open

    def admit(self, address: str | None, abort: Callable[[], None]) -> Slot | Refusal:
        """A slot, counted under ``address`` (None: not yet, see ``place``), or why not."""
        if address is not None and self._at_cap(address):
            return "address"
        if self._open >= self.total:
            if not self._idle:
                return "full"
            oldest = next(iter(self._idle))
            self.release(oldest)
            self.evicted += 1
            oldest.abort()
        slot = Slot(address, abort)
        self._open += 1
        if address is not None:
            self._by_address[address] = self._by_address.get(address, 0) + 1
        self._idle[slot] = None
        return slot

    def _at_cap(self, address: str) -> bool:
        return bool(self.per_address) and self._by_address.get(address, 0) >= self.per_address

    @staticmethod
    def counted(slot: Slot) -> bool:
        return slot.address is not None

    def place(self, slot: Slot, address: str) -> bool:
        """Count an uncounted slot under ``address``; False (nothing changed) if it is at its cap."""
        if self._at_cap(address):
            return False
        slot.address = address
        self._by_address[address] = self._by_address.get(address, 0) + 1
        return True

    def busy(self, slot: Slot) -> None:
        """Its request head is complete: it is answered, never evicted."""
        self._idle.pop(slot, None)

    def release(self, slot: Slot) -> None:
        if slot.released:
            return
        slot.released = True
        self._idle.pop(slot, None)
        self._open -= 1
        if slot.address is None:
            return
        left = self._by_address[slot.address] - 1
        if left:
            self._by_address[slot.address] = left
        else:
            del self._by_address[slot.address]
