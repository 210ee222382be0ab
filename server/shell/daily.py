"""The daily deal's part of the shell (docs/daily.md): its timer, the day's deal search in the
worker pool, and the store calls of server/shell/daily_io.py, each answered to the core.

A final result is retried until the store takes it (``daily_finish`` is idempotent); a live row
is written behind and dropped when the store does not answer (the next one replaces it).
"""

from __future__ import annotations

import asyncio
import logging

from server.core.daily_events import (
    CreateDay,
    DailyDealFound,
    DailyTick,
    FindDailyDeal,
    FinishDaily,
    LoadDay,
    PutDailyRow,
    ReadBoard,
    ReadProfile,
    ReadStanding,
    WakeDaily,
)
from server.shell import daily_io
from server.shell.config import log_event, now_ms
from server.shell.part import Part, ShellContext
from server.shell.workers import Workers

FINISH_RETRY_S = (0.05, 0.2, 1.0, 2.0)  # then every 2 s until the store answers


class DailyPart(Part):
    def __init__(self, ctx: ShellContext, workers: Workers) -> None:
        super().__init__(ctx)
        self.workers = workers
        self._timer: asyncio.TimerHandle | None = None
        self.stopped = False

    def start(self) -> None:
        """The day clock's first tick: today's record, loaded or prepared."""
        self.dispatch(DailyTick(now_ms()))

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def wake(self, effect: WakeDaily) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if effect.at_ms is None or self.stopped:
            return
        delay = max(0.0, (effect.at_ms - now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self.stopped:
            self.dispatch(DailyTick(now_ms()))

    def load_day(self, effect: LoadDay) -> None:
        self.tasks.spawn(self._answer_load(effect))

    async def _answer_load(self, effect: LoadDay) -> None:
        self.dispatch(await daily_io.load_day(self.store, effect.day, now_ms()))

    def create_day(self, effect: CreateDay) -> None:
        self.tasks.spawn(self._answer_create(effect))

    async def _answer_create(self, effect: CreateDay) -> None:
        self.dispatch(await daily_io.create_day(self.store, effect, now_ms()))

    def find_daily_deal(self, effect: FindDailyDeal) -> None:
        self.tasks.spawn(self._find(effect))

    async def _find(self, effect: FindDailyDeal) -> None:
        """The day's deal, proved winnable by the solver in the worker process (never the loop)."""
        outcome = await self.workers.deal_finder.find(f"day-{effect.day}")
        log_event(
            logging.INFO if outcome.deal is not None else logging.WARNING,
            "daily_deal_search_finished",
            day=effect.day,
            found=outcome.deal is not None,
            seconds=round(outcome.seconds, 3),
            candidates=outcome.candidates,
            detail=outcome.detail,
        )
        self.dispatch(DailyDealFound(effect.day, outcome.deal, now_ms(), outcome.detail))

    def put_row(self, effect: PutDailyRow) -> None:
        self.tasks.spawn(self._put(effect))

    async def _put(self, effect: PutDailyRow) -> None:
        await daily_io.put_row(self.store, effect)

    def finish(self, effect: FinishDaily) -> None:
        self.tasks.spawn(self._finish(effect))

    async def _finish(self, effect: FinishDaily) -> None:
        attempt = 0
        while not await daily_io.finish(self.store, effect):
            if self.stopped and attempt >= len(FINISH_RETRY_S):
                log_event(logging.ERROR, "daily_finish_lost", day=effect.day, profile=effect.profile_id)
                return
            await asyncio.sleep(FINISH_RETRY_S[min(attempt, len(FINISH_RETRY_S) - 1)])
            attempt += 1
        if effect.then is not None:
            await self._answer_board(effect.then)

    def read_board(self, effect: ReadBoard) -> None:
        self.tasks.spawn(self._answer_board(effect))

    async def _answer_board(self, effect: ReadBoard) -> None:
        self.dispatch(await daily_io.read_board(self.store, effect, now_ms()))

    def read_profile(self, effect: ReadProfile) -> None:
        self.tasks.spawn(self._answer_profile(effect))

    async def _answer_profile(self, effect: ReadProfile) -> None:
        self.dispatch(await daily_io.read_profile(self.store, effect, now_ms()))

    def read_standing(self, effect: ReadStanding) -> None:
        self.tasks.spawn(self._answer_standing(effect))

    async def _answer_standing(self, effect: ReadStanding) -> None:
        self.dispatch(await daily_io.read_standing(self.store, effect, now_ms()))
