"""What the shell's parts tell other nodes, and hear from them: nothing, on one node.

:class:`Link` is the one-node case (every call does nothing or the plain thing); the several-node
glue (server/shell/several_nodes.py, built only with ``--multi-node``) overrides it. The parts
call it unconditionally, so none of them branches on how many nodes there are.
"""

from __future__ import annotations

from collections.abc import Callable

from server.core.events import FindDeal
from server.core.records import RoomRecord
from server.store.base import LogLength
from server.winnable import DealFinder, SearchOutcome


class Link:
    shared = False  # several nodes share the rooms
    node_id: str | None = None

    def attach(self, is_news: Callable[[str, int], bool]) -> None:
        """Several nodes: the room writes' rule for another node's version notice (is it news?)."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def subscribe(self, code: str) -> None:
        """Hear of other nodes' changes to the room from now on (before it is read)."""

    def appended_notice(self, race: int, player: str, start: int, entry: bytes) -> bytes:
        """What the store publishes with an appended entry."""
        return b""

    def version_notice(self, version: int) -> bytes:
        """What the store publishes with a room's new version."""
        return b""

    def noticed(self, count: int) -> None:
        """The store published this many notices of ours."""

    def counted_logs(self, record: RoomRecord) -> tuple[LogLength, ...]:
        """The logs a save of this record must find as long as it says (none on one node)."""
        return ()

    async def find_deal(self, effect: FindDeal, finder: DealFinder, wanted: Callable[[], bool]) -> SearchOutcome | None:
        """A winnable deal for the room (None: another node searched, and the room moved on)."""
        return await finder.find(effect.code, wanted)

    def pubsub_counts(self) -> tuple[int, int, int]:
        """Notices published, received, and gaps seen (for /metrics)."""
        return 0, 0, 0
