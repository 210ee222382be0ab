"""Profiles and ratings in the real shell: each effect's store steps (server/shell/profile_ops.py)
in a task of its own, its answer handed to the core.

The rating board is read once per second per node at most (``BOARD_TTL_S``): one read of the
whole board (``RATING_BOARD_MAX`` rows, a round trip per row) answers every ``get_ratings`` of
that second, whatever its limit, so a flood of board requests costs the store nothing more."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

import msgspec

from server.core.events import ClaimProfile, Event, LookupProfile, RateRace, RatingsRead, ReadRatings, RenameProfile
from server.shell import profile_ops as ops
from server.shell.config import log_event, now_ms
from server.shell.part import Part, ShellContext
from shared.identity import RATING_BOARD_MAX

BOARD_TTL_S = 1.0


class ProfileSteps(Part):
    def __init__(self, ctx: ShellContext) -> None:
        super().__init__(ctx)
        self._board: tuple[float, asyncio.Task[RatingsRead]] | None = None

    async def _answer(self, what: str, steps: Awaitable[Event]) -> None:
        event = await steps
        if getattr(event, "failed", False) or getattr(event, "outcome", "") == "failed":
            log_event(logging.WARNING, "store_unavailable", op=what)
        self.dispatch(event)

    def lookup(self, effect: LookupProfile) -> None:
        self.tasks.spawn(self._answer("lookup_profile", ops.lookup_profile(self.store, effect, now_ms)))

    def claim(self, effect: ClaimProfile) -> None:
        self.tasks.spawn(self._answer("claim_profile", ops.claim_profile(self.store, effect, now_ms)))

    def rename(self, effect: RenameProfile) -> None:
        self.tasks.spawn(self._answer("rename_profile", ops.rename_profile(self.store, effect, now_ms)))

    def rate(self, effect: RateRace) -> None:
        self.tasks.spawn(self._answer("rate_race", ops.rate_race_profiles(self.store, effect, now_ms)))

    def read(self, effect: ReadRatings) -> None:
        if effect.profile_id is not None or effect.name_key is not None:
            self.tasks.spawn(self._answer("read_ratings", ops.read_ratings(self.store, effect, now_ms)))
        else:
            self.tasks.spawn(self._answer("read_ratings", self._board_answer(effect)))

    async def _board_answer(self, effect: ReadRatings) -> RatingsRead:
        """The board from this second's one read (made now if there is none, or it failed)."""
        clock = time.monotonic()
        held = self._board
        if held is None or clock - held[0] > BOARD_TTL_S or (held[1].done() and held[1].result().failed):
            whole = ReadRatings(effect.conn, limit=RATING_BOARD_MAX)
            held = (clock, asyncio.ensure_future(ops.read_ratings(self.store, whole, now_ms)))
            self._board = held
        read = await asyncio.shield(held[1])
        rows = None if read.board is None else read.board[: effect.limit]
        return msgspec.structs.replace(read, conn=effect.conn, now=now_ms(), board=rows)
