"""Profiles and ratings in the real shell: each effect's store steps (server/shell/profile_ops.py)
in a task of its own, its answer handed to the core."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from server.core.events import ClaimProfile, Event, LookupProfile, RateRace, ReadRatings, RenameProfile
from server.shell import profile_ops as ops
from server.shell.config import log_event, now_ms
from server.shell.part import Part


class ProfileSteps(Part):
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
        self.tasks.spawn(self._answer("read_ratings", ops.read_ratings(self.store, effect, now_ms)))
