"""The server's CPU-bound work, in worker processes: winnable deals and exact blocked checks.

The room core asks for a deal (``FindDeal``); :class:`DealFinder` draws random deal numbers
(``shared.fairplay.random_deal``, a cryptographic source) and has the solver prove one winnable
within a budget of positions per candidate (``shared.solver.find_winnable_deal``). The search is
CPU-bound, so it runs in a worker process (a ``ProcessPoolExecutor``, made on first use and shut
down with the server): the event loop only awaits its future, and every other room keeps racing.

Searches wait in a bounded queue, one per room (docs/solver.md, "The solver queue"): a newer
search of a room replaces its waiting one, a search whose room stopped waiting (the host ended
it, everyone left) is dropped before it runs and stops after its current candidate if it is
running, and a start that finds the queue full is refused at once (``busy``) rather than queued
behind thousands of others.

The blocked checks a live game's budgeted check left undecided (``CheckBlocked``) have their own
pool, so they never wait behind a deal search: :meth:`DealFinder.blocked` replays the racer's
record there and runs the exact check (:func:`exact_blocked`), which can take seconds on
constructed positions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import sys
import time
from collections import OrderedDict
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
# Searches waiting for a worker (one per room). A typical search takes 10-30 ms, so 32 waiting
# rooms wait about a second; a full queue means the worker cannot keep up, and a clear "busy"
# now beats a start that hangs for minutes.
DEFAULT_QUEUE = 32
DEFAULT_BLOCKED_WORKERS = 1
# Blocked checks waiting or running. A racer has at most one in flight, so only a server with
# more racers than this stuck on undecided positions at the same moment reaches it.
DEFAULT_BLOCKED_QUEUE = 256


@dataclass(frozen=True, slots=True)
class WinnableConfig:
    """How the server searches deals for winnable_only rooms, and runs the exact blocked checks."""

    budget: int = DEFAULT_BUDGET
    tries: int = DEFAULT_TRIES
    workers: int = DEFAULT_WORKERS
    # Where candidate deal numbers come from: a module-level callable (it is pickled to the worker
    # process) or a list. The cryptographic ``random_deal`` in service; tests inject others.
    seed_source: Callable[[], int] | Sequence[int] = field(default=random_deal)
    queue: int = DEFAULT_QUEUE  # deal searches waiting for a worker, at most one per room
    blocked_workers: int = DEFAULT_BLOCKED_WORKERS  # worker processes for the exact blocked checks
    blocked_queue: int = DEFAULT_BLOCKED_QUEUE  # blocked checks waiting or running

    def check(self) -> None:
        if min(self.budget, self.tries, self.workers, self.queue, self.blocked_workers, self.blocked_queue) < 1:
            raise ValueError(
                "the winnable-deal budget, tries, workers and queue, and the blocked-check workers and "
                "queue, must each be at least 1"
            )


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """A proved-winnable deal (``deal``), or None with ``detail`` saying why there is none."""

    deal: int | None
    seconds: float
    positions: int = 0  # positions the winning solve expanded
    detail: str = ""
    candidates: int = 0  # candidate deals the worker tried (0: the search never ran)
    busy: bool = False  # refused at once: the queue was full
    cancelled: bool = False  # dropped or stopped early: its room no longer waits for it


@dataclass(frozen=True, slots=True)
class BlockedOutcome:
    """The exact check's verdict, or None with ``detail`` saying why there is none."""

    blocked: bool | None
    detail: str = ""


@dataclass(eq=False, slots=True)
class _SearchRequest:
    key: str  # the room's code: one waiting search per key
    wanted: Callable[[], bool]  # does its room still wait for it? (read before each candidate)
    answer: asyncio.Future[SearchOutcome]


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


def _always() -> bool:
    return True


class _Pool:
    """A process pool made on first use (spawn context), dropped when a worker dies."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.executor: ProcessPoolExecutor | None = None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | str:
        """``fn(*args, **kwargs)`` in a worker process: its result, or a string saying why there is none.
        Never raises (but CancelledError)."""
        try:
            with _real_stderr():  # the pool starts its helper and worker processes here, on demand
                if self.executor is None:
                    # spawn: a fresh interpreter, not a fork of a process that runs an event loop and threads.
                    context = multiprocessing.get_context("spawn")
                    self.executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=context)
                future = self.executor.submit(fn, *args, **kwargs)
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            # A worker died (killed, out of memory): drop the pool; the next call starts a new one.
            broken, self.executor = self.executor, None
            if broken is not None:
                broken.shutdown(wait=False, cancel_futures=True)
            return "the solver's worker process died"
        except Exception as exc:  # shut down meanwhile, no process could start, a source that fails or won't pickle
            return f"the search failed: {exc}"

    def shutdown(self) -> None:
        """Cancel queued calls and stop the workers now (a running call is abandoned, not awaited)."""
        pool, self.executor = self.executor, None
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


class DealFinder:
    """Deal searches and exact blocked checks, each in its own process pool, created lazily (no
    process until a room needs one).

    Searches go through a bounded queue served by ``workers`` dispatchers, one candidate deal
    per call to the worker, so a search whose room stopped waiting ends after its current
    candidate. Blocked checks go straight to their own pool, bounded by ``blocked_queue``."""

    def __init__(self, config: WinnableConfig | None = None) -> None:
        self.config = config or WinnableConfig()
        self.config.check()
        self._search_pool = _Pool(self.config.workers)
        self._blocked_pool = _Pool(self.config.blocked_workers)
        self._closed = False
        self._waiting: OrderedDict[str, _SearchRequest] = OrderedDict()  # oldest first
        self._running: list[_SearchRequest] = []
        self._dispatchers: list[asyncio.Task[None]] = []
        self._wakeup: asyncio.Event | None = None
        self._anonymous = itertools.count(1)
        self._blocked_in_flight = 0
        self.searches = 0  # searches asked for (for logs and tests)
        self.searches_run = 0  # ... that reached the worker
        self.searches_dropped = 0  # ... dropped or stopped early: replaced, or their room stopped waiting
        self.searches_refused = 0  # ... refused at once: the queue was full
        self.blocked_checks = 0  # exact blocked checks run
        self.blocked_refused = 0  # ... refused: too many in flight

    @property
    def started(self) -> bool:
        """Is a worker pool up? (Each starts with its first call.)"""
        return self._search_pool.executor is not None or self._blocked_pool.executor is not None

    def queued(self) -> list[str]:
        """The keys (room codes) of the searches waiting for a worker, oldest first."""
        return list(self._waiting)

    def running(self) -> list[str]:
        """The keys of the searches a worker is running now."""
        return [request.key for request in self._running]

    # ---------------------------------------------------------------- deal searches

    async def find(self, key: str | None = None, wanted: Callable[[], bool] = _always) -> SearchOutcome:
        """A deal the solver proved winnable, or why there is none. Never raises (but CancelledError).

        ``key`` names the room: a newer search with the same key replaces a waiting one (which is
        answered ``cancelled``). ``wanted`` tells whether the room still waits for this search;
        it is read before each candidate, and a search no longer wanted is dropped or stopped."""
        if self._closed:
            return SearchOutcome(None, 0.0, detail="the server is shutting down")
        self.searches += 1
        key = key if key is not None else f"#{next(self._anonymous)}"
        replaced = self._waiting.pop(key, None)
        if replaced is not None:
            self._drop(replaced, "a newer search of the same room replaced it")
        self._drop_unwanted()  # at most ``queue`` calls: cheap, and the queue shows only live searches
        if len(self._waiting) >= self.config.queue:
            self.searches_refused += 1
            return SearchOutcome(
                None,
                0.0,
                detail=f"{len(self._waiting)} rooms are already waiting for a deal search, the server's limit",
                busy=True,
            )
        request = _SearchRequest(key, wanted, asyncio.get_running_loop().create_future())
        self._waiting[key] = request
        self._start_dispatchers()
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            return await request.answer
        finally:
            if self._waiting.get(key) is request:
                del self._waiting[key]  # cancelled while waiting (the server is stopping)

    def _drop(self, request: _SearchRequest, why: str) -> None:
        self.searches_dropped += 1
        if not request.answer.done():
            request.answer.set_result(SearchOutcome(None, 0.0, detail=why, cancelled=True))

    def _drop_unwanted(self) -> None:
        for key, request in list(self._waiting.items()):
            if not request.wanted():
                del self._waiting[key]
                self._drop(request, "its room stopped waiting for it")

    def _start_dispatchers(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        self._dispatchers = [task for task in self._dispatchers if not task.done()]
        while len(self._dispatchers) < self.config.workers:
            self._dispatchers.append(asyncio.ensure_future(self._dispatch()))

    async def _dispatch(self) -> None:
        """One worker's turn-taker: the oldest waiting search that is still wanted, then the next."""
        assert self._wakeup is not None
        while not self._closed:
            if not self._waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            _key, request = self._waiting.popitem(last=False)
            if request.answer.done():
                continue
            try:
                if not request.wanted():
                    self._drop(request, "its room stopped waiting for it")
                    continue
                self._running.append(request)
                self.searches_run += 1
                try:
                    outcome = await self._search(request)
                finally:
                    self._running.remove(request)
            except Exception as exc:  # a bug here must not leave this and every later search unanswered
                outcome = SearchOutcome(None, 0.0, detail=f"the search failed: {exc!r}")
            if outcome.cancelled:
                self.searches_dropped += 1
            if not request.answer.done():
                request.answer.set_result(outcome)

    async def _search(self, request: _SearchRequest) -> SearchOutcome:
        """One candidate deal per call to the worker, until one is proved winnable, the tries run
        out, or the room stops waiting."""
        config = self.config
        source = config.seed_source
        started = time.monotonic()
        tried = 0
        for attempt in range(config.tries):
            if attempt > 0 and (request.answer.done() or not request.wanted()):
                return SearchOutcome(
                    None, time.monotonic() - started, detail="its room stopped waiting for it",
                    candidates=tried, cancelled=True,
                )  # fmt: skip
            if callable(source):
                candidates: Callable[[], int] | Sequence[int] = source
            elif attempt < len(source):
                candidates = (source[attempt],)
            else:
                break  # a list of candidates ran out
            found = await self._search_pool.run(find_winnable_deal, candidates, tries=1, max_positions=config.budget)
            tried += 1
            if isinstance(found, str):
                return SearchOutcome(None, time.monotonic() - started, detail=found, candidates=tried)
            if found is not None:
                deal, result = found
                return SearchOutcome(deal, time.monotonic() - started, positions=result.positions, candidates=tried)
        return SearchOutcome(
            None, time.monotonic() - started,
            detail=f"{tried} random deals, none proved within {config.budget} positions", candidates=tried,
        )  # fmt: skip

    # ---------------------------------------------------------------- blocked checks

    async def check_blocked(self, deal: int, entries: Sequence[str], undo: bool) -> BlockedOutcome:
        """Is the position after ``entries`` of this game blocked (the exact check, in the blocked
        checks' own worker)? None, with the reason, when the check could not run (too many in
        flight, the worker died, the server is stopping)."""
        if self._closed:
            return BlockedOutcome(None, "the server is shutting down")
        if self._blocked_in_flight >= self.config.blocked_queue:
            self.blocked_refused += 1
            return BlockedOutcome(None, f"{self._blocked_in_flight} blocked checks in flight, the server's limit")
        self.blocked_checks += 1
        self._blocked_in_flight += 1
        try:
            verdict = await self._blocked_pool.run(exact_blocked, deal, tuple(entries), undo)
        finally:
            self._blocked_in_flight -= 1
        return BlockedOutcome(None, verdict) if isinstance(verdict, str) else BlockedOutcome(verdict)

    async def blocked(self, deal: int, entries: Sequence[str], undo: bool) -> bool | None:
        """:meth:`check_blocked`'s verdict alone."""
        return (await self.check_blocked(deal, entries, undo)).blocked

    def shutdown(self) -> None:
        """Answer waiting searches, stop the dispatchers, and stop the workers now (a running
        search or check is abandoned, not awaited)."""
        self._closed = True
        for request in [*self._waiting.values(), *self._running]:
            if not request.answer.done():
                request.answer.set_result(SearchOutcome(None, 0.0, detail="the server is shutting down"))
        self._waiting.clear()
        for task in self._dispatchers:
            task.cancel()
        self._dispatchers.clear()
        self._search_pool.shutdown()
        self._blocked_pool.shutdown()
