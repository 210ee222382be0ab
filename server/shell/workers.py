"""The worker-process jobs: winnable-deal searches and exact blocked checks, away from the event loop.

A search is dropped, or stopped after its current candidate, once the room no longer waits for
it: the core answers that (:meth:`ServerCore.awaits_search`), the rule it applies to the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time

from server.core.events import BlockedChecked, CheckBlocked, DealFound, FindDeal
from server.shell.config import log_event, now_ms
from server.shell.part import Part, ShellContext
from server.winnable import DealFinder


class Workers(Part):
    def __init__(self, ctx: ShellContext) -> None:
        super().__init__(ctx)
        self.deal_finder = DealFinder(ctx.config.winnable)  # its worker process starts with the first search
        self.jobs: set[asyncio.Task[None]] = set()

    def start_job(self, effect: FindDeal | CheckBlocked) -> None:
        job = asyncio.ensure_future(self._find_deal(effect) if isinstance(effect, FindDeal) else self._check(effect))
        self.jobs.add(job)  # cancelled at shutdown: a restarted server asks again
        job.add_done_callback(self.jobs.discard)

    def stop(self) -> None:
        for job in self.jobs:
            job.cancel()  # a room still dealing is stored so: a restarted server searches again
        self.deal_finder.shutdown()

    async def _find_deal(self, effect: FindDeal) -> None:
        """A winnable deal for a room, from the worker process; the event loop only waits for it
        (docs/solver.md, "The solver queue")."""
        outcome = await self.link.find_deal(
            effect, self.deal_finder, lambda: self.core.awaits_search(effect.code, effect.race, effect.search)
        )
        if outcome is None:
            return  # another node searched, and the room moved on (the answer would be stale)
        if outcome.busy:
            name, level = "deal_search_refused", logging.WARNING
        elif outcome.cancelled and outcome.candidates == 0:
            name, level = "deal_search_dropped", logging.INFO
        else:
            name = "deal_search_finished"
            level = logging.INFO if outcome.deal is not None or outcome.cancelled else logging.WARNING
        log_event(
            level,
            name,
            room=effect.code,
            race=effect.race,
            search=effect.search,
            found=outcome.deal is not None,
            seconds=round(outcome.seconds, 3),
            positions=outcome.positions,
            candidates=outcome.candidates,
            cancelled=outcome.cancelled,
            detail=outcome.detail,
        )
        self.dispatch(
            DealFound(effect.code, effect.race, effect.search, outcome.deal, now_ms(), outcome.detail, outcome.busy)
        )

    async def _check(self, effect: CheckBlocked) -> None:
        """The exact blocked check of a racer's position, in the worker process (it may take seconds)."""
        started = time.monotonic()
        checked = await self.deal_finder.check_blocked(effect.deal, effect.entries, effect.undo)
        log_event(
            logging.INFO if checked.blocked is not None else logging.WARNING,
            "blocked_check_finished",
            room=effect.code,
            player=effect.player_id,
            entries=effect.length,
            blocked=checked.blocked,
            seconds=round(time.monotonic() - started, 3),
            detail=checked.detail,
        )
        self.dispatch(
            BlockedChecked(effect.code, effect.race, effect.player_id, effect.length, checked.blocked, now_ms())
        )
