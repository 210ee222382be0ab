"""Fan-out: deliver one encoded frame to every connection of some players.

The core addresses players, not sockets, so this is the seam where several server processes
can later share rooms: a Redis pub/sub implementation would publish (players, frame) on the
room's channel and every process would deliver to the players connected to it. Today one
process serves everyone: :class:`LocalFanout`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable


class Fanout(abc.ABC):
    @abc.abstractmethod
    def publish(self, room: str | None, players: Iterable[str], frame: bytes, droppable: bool) -> None:
        """Deliver ``frame`` to every connection of ``players`` (``room`` names the channel)."""

    def reaches(self, players: Iterable[str]) -> bool:
        """Would a frame to ``players`` reach any connection? (False: the caller need not encode it.)"""
        return True


class LocalFanout(Fanout):
    """Every player is connected to this process (or not connected at all)."""

    def __init__(self, conns_of: Callable[[str], Iterable[int]], deliver: Callable[[list[int], bytes, bool], None]):
        self._conns_of = conns_of
        self._deliver = deliver

    def reaches(self, players: Iterable[str]) -> bool:
        # Several nodes: most frames of a shared room are addressed to members on other nodes too
        # (a room snapshot, a leaderboard), and some to none here at all.
        return any(self._conns_of(player) for player in players)

    def publish(self, room: str | None, players: Iterable[str], frame: bytes, droppable: bool) -> None:
        conns: list[int] = []
        for player in players:
            conns.extend(self._conns_of(player))
        if conns:
            self._deliver(conns, frame, droppable)
