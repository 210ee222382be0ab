"""The daily deal's effects for the in-process targets (the test shell and the fuzzer's runner):
the same store I/O as the real shell (server/shell/daily_io.py), on a MemoryStore of their own,
run to completion at once (the memory store never awaits). The day's deal search is a
worker-process job: it is answered with a fixed winnable-by-assumption deal, as tests choose."""

from __future__ import annotations

import abc
from collections.abc import Coroutine
from typing import Any, TypeVar

from server.core.daily_events import (
    CreateDay,
    DailyDealFound,
    FindDailyDeal,
    FinishDaily,
    LoadDay,
    PutDailyRow,
    ReadBoard,
    ReadProfile,
    ReadStanding,
    WakeDaily,
)
from server.core.events import Event
from server.shell import daily_io
from server.shell.executor import EffectExecutor
from server.store.memory import MemoryStore

T = TypeVar("T")
DAILY_DEAL = 4242


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """A coroutine that never suspends (the memory store's calls), run to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("the in-process daily store suspended")


class InProcessDaily(EffectExecutor):
    """Mixed into the in-process targets: ``daily_store``, ``daily_wake``; the owner supplies
    :meth:`daily_answer` (an event back to the core) and :meth:`daily_now`."""

    daily_store: MemoryStore
    daily_wake: int | None = None
    daily_deal: int | None = DAILY_DEAL  # None: deal searches stay unanswered (a test answers them)

    @abc.abstractmethod
    def daily_answer(self, event: Event) -> None: ...

    @abc.abstractmethod
    def daily_now(self) -> int: ...

    def wake_daily(self, effect: WakeDaily) -> None:
        self.daily_wake = effect.at_ms

    def load_day(self, effect: LoadDay) -> None:
        self.daily_answer(run_now(daily_io.load_day(self.daily_store, effect.day, self.daily_now())))

    def create_day(self, effect: CreateDay) -> None:
        self.daily_answer(run_now(daily_io.create_day(self.daily_store, effect, self.daily_now())))

    def find_daily_deal(self, effect: FindDailyDeal) -> None:
        if self.daily_deal is not None:
            self.daily_answer(DailyDealFound(effect.day, self.daily_deal, self.daily_now()))

    def put_daily_row(self, effect: PutDailyRow) -> None:
        run_now(daily_io.put_row(self.daily_store, effect))

    def finish_daily(self, effect: FinishDaily) -> None:
        run_now(daily_io.finish(self.daily_store, effect))
        if effect.then is not None:
            self.read_board(effect.then)

    def read_board(self, effect: ReadBoard) -> None:
        self.daily_answer(run_now(daily_io.read_board(self.daily_store, effect, self.daily_now())))

    def read_profile(self, effect: ReadProfile) -> None:
        self.daily_answer(run_now(daily_io.read_profile(self.daily_store, effect, self.daily_now())))

    def read_standing(self, effect: ReadStanding) -> None:
        self.daily_answer(run_now(daily_io.read_standing(self.daily_store, effect, self.daily_now())))
