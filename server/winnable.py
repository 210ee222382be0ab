"""The server's CPU-bound work, in a worker process: winnable deals and exact blocked checks.

The room core asks for a deal (``FindDeal``); :class:`DealFinder` draws random deal numbers
(``shared.fairplay.random_deal``, a cryptographic source) and has the solver prove one winnable
within a budget of positions per candidate (``shared.solver.find_winnable_deal``). The search is
CPU-bound, so it runs in a worker process (a ``ProcessPoolExecutor``, made on first use and shut
down with the server): the event loop only awaits its future, and every other room keeps racing.

The same pool answers the blocked checks a live game's budgeted check left undecided
(``CheckBlocked``): :meth:`DealFinder.blocked` replays the racer's record there and runs the exact
check (:func:`exact_blocked`), which can take seconds on constructed positions.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shared.engine import BLOCKED, replay
from shared.fairplay import random_deal
from shared.solver import find_winnable_deal

T = TypeVar("T")

DEFAULT_BUDGET = 20_000  # positions per candidate: 98% of all deals are proved winnable within it, in < 1 s
DEFAULT_TRIES = 20  # candidates per search before giving up (about 2% of deals miss the budget: 20 misses never happen)
DEFAULT_WORKERS = 1


@dataclass(frozen=True, slots=True)
class WinnableConfig:
    """How the server searches deals for winnable_only rooms."""

    budget: int = DEFAULT_BUDGET
    tries: int = DEFAULT_TRIES
    workers: int = DEFAULT_WORKERS
    # Where candidate deal numbers come from: a module-level callable (it is pickled to the worker
    # process) or a list. The cryptographic ``random_deal`` in service; tests inject others.
    seed_source: Callable[[], int] | Sequence[int] = field(default=random_deal)

    def check(self) -> None:
        if self.budget < 1 or self.tries < 1 or self.workers < 1:
            raise ValueError("the winnable-deal budget, tries and workers must each be at least 1")


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """A proved-winnable deal (``deal``), or None with ``detail`` saying why there is none."""

    deal: int | None
    seconds: float
    positions: int = 0  # positions the winning solve expanded
    detail: str = ""


@contextlib.contextmanager
def _real_stderr() -> Iterator[None]:
    """multiprocessing hands its helper process sys.stderr's file descriptor. Where a Textual app
    runs the server in its own process (``plot practice``), sys.stderr is a capture whose fileno()
    is -1, and starting a process would fail: lend it the real stderr for that moment."""
    saved = sys.stderr
    try:
        valid = saved is not None and saved.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        valid = False
    if not valid and sys.__stderr__ is not None:
        sys.stderr = sys.__stderr__
    try:
        yield
    finally:
        sys.stderr = saved


def exact_blocked(deal: int, entries: Sequence[str], undo: bool) -> bool:
    """In the worker: is the position after these entries blocked? The exact check (no budget)."""
    _game, result = replay(deal, list(entries), undo=undo)
    return result.ok and result.status == BLOCKED


class DealFinder:
    """Runs deal searches and exact blocked checks in a process pool, created lazily (no process
    until a room needs one)."""

    def __init__(self, config: WinnableConfig | None = None) -> None:
        self.config = config or WinnableConfig()
        self.config.check()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self.searches = 0  # searches started (for logs and tests)
        self.blocked_checks = 0  # exact blocked checks asked

    @property
    def started(self) -> bool:
        """Is the worker pool up? (It starts with the first search.)"""
        return self._pool is not None

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a fresh interpreter, not a fork of a process that runs an event loop and threads.
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(max_workers=self.config.workers, mp_context=context)
        return self._pool

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | str:
        """``fn(*args, **kwargs)`` in the worker process: its result, or a string saying why there
        is none. Never raises (but CancelledError)."""
        if self._closed:
            return "the server is shutting down"
        try:
            with _real_stderr():  # the pool starts its helper and worker processes here, on demand
                pool = self._ensure_pool()
                future = pool.submit(fn, *args, **kwargs)
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            # A worker died (killed, out of memory): drop the pool; the next call starts a new one.
            broken, self._pool = self._pool, None
            if broken is not None:
                broken.shutdown(wait=False, cancel_futures=True)
            return "the solver's worker process died"
        except Exception as exc:  # shut down meanwhile, no process could start, a source that fails or won't pickle
            return f"the search failed: {exc}"

    async def find(self) -> SearchOutcome:
        """A deal the solver proved winnable, or why there is none. Never raises (but CancelledError)."""
        config = self.config
        started = time.monotonic()
        if self._closed:
            return SearchOutcome(None, 0.0, detail="the server is shutting down")
        self.searches += 1
        found = await self._run(find_winnable_deal, config.seed_source, tries=config.tries, max_positions=config.budget)
        if isinstance(found, str):
            return SearchOutcome(None, time.monotonic() - started, detail=found)
        seconds = time.monotonic() - started
        if found is None:
            return SearchOutcome(
                None, seconds, detail=f"{config.tries} random deals, none proved within {config.budget} positions"
            )
        deal, result = found
        return SearchOutcome(deal, seconds, positions=result.positions)

    async def blocked(self, deal: int, entries: Sequence[str], undo: bool) -> bool | None:
        """Is the position after ``entries`` of this game blocked (the exact check, in the worker)?
        None when the check could not run (the worker died, the server is stopping)."""
        self.blocked_checks += 1
        verdict = await self._run(exact_blocked, deal, tuple(entries), undo)
        return None if isinstance(verdict, str) else verdict

    def shutdown(self) -> None:
        """Cancel queued searches and stop the workers now (a running search is abandoned, not awaited)."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # Read before shutdown() forgets them: a search may run for seconds, and a clean stop
        # should not wait for it. (Python 3.14 has terminate_workers(); 3.11 has only this.)
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):
                if process.is_alive():
                    process.terminate()
