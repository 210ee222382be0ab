"""Timers: each room's next wake-up (a Tick) and the node's one leaderboard tick."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.core.events import Event, LeaderboardTick, Tick
from server.shell.config import now_ms


class Timers:
    """``wake(code, at_ms)`` replaces the room's timer; ``wake_leaderboards(at_ms)`` the node's."""

    def __init__(self, dispatch: Callable[[Event], None]) -> None:
        self.dispatch = dispatch
        self.rooms: dict[str, asyncio.TimerHandle] = {}
        self._leaderboards: asyncio.TimerHandle | None = None
        self.stopped = False

    def wake(self, code: str, at_ms: int | None) -> None:
        self.drop(code)
        if at_ms is None or self.stopped:
            return
        delay = max(0.0, (at_ms - now_ms()) / 1000)
        self.rooms[code] = asyncio.get_running_loop().call_later(delay, self._due, code)

    def drop(self, code: str) -> None:
        timer = self.rooms.pop(code, None)
        if timer is not None:
            timer.cancel()

    def _due(self, code: str) -> None:
        self.rooms.pop(code, None)
        self.dispatch(Tick(code, now_ms()))

    def wake_leaderboards(self, at_ms: int | None) -> None:
        """One timer for every room's leaderboard (docs/architecture.md, "Leaderboards")."""
        if self._leaderboards is not None:
            self._leaderboards.cancel()
            self._leaderboards = None
        if at_ms is None or self.stopped:
            return
        delay = max(0.0, (at_ms - now_ms()) / 1000)
        self._leaderboards = asyncio.get_running_loop().call_later(delay, self._leaderboards_due)

    def _leaderboards_due(self) -> None:
        self._leaderboards = None
        self.dispatch(LeaderboardTick(now_ms()))

    def stop(self) -> None:
        self.stopped = True
        for timer in self.rooms.values():
            timer.cancel()
        self.rooms.clear()
        if self._leaderboards is not None:
            self._leaderboards.cancel()
            self._leaderboards = None
