"""Bot levels: how well and how fast a bot plays, from beginner to expert.

Every level plays from the bot's own View, never the deal. The greedy levels use
:func:`client.bot.choose_move` (its order of preference among the legal moves). The search
levels choose by determinised search (``client.bot_search``) and fall back on the greedy move
where no sample found a win; their search runs in a worker process (:func:`search_pool`), so
the bot's event loop only awaits it. A beginner, an easy and a hard bot now and then *slip*:
turn the stock where the move chosen was something else, which buries the waste card it should
have played.

Each bot has a seed: it picks among equally good moves with it (and a search level's samples
come from it), and it sets the bot's own pace (the level's pace times a factor of 0.85-1.15,
each move's delay varying around that), so two bots of one level never play move for move
alike. Figures of each level: docs/bots.md (``bench/bot_levels.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Final

from client.bot import choose_move
from client.bot_search import SearchBudget, SearchMemory, search_move
from shared.engine import PLAYING, View

log = logging.getLogger("plot.bot")


@dataclass(frozen=True, slots=True)
class Level:
    """One bot level: its policy and its pace."""

    name: str
    pace: float  # moves per second, on average
    slip: float  # chance, at each move, of turning the stock instead of the move chosen
    search: SearchBudget | None  # determinised search (None: the greedy policy alone)
    summary: str  # what it does, in a few words (plot bot -h, docs/bots.md)


LEVELS: Final[tuple[Level, ...]] = (
    Level("beginner", 0.8, 0.55, None, "greedy, often turns the stock too soon"),
    Level("easy", 1.2, 0.25, None, "greedy, sometimes turns the stock too soon"),
    Level("medium", 1.5, 0.0, None, "greedy: home, then build from the waste, then turn"),
    Level(
        "hard",
        2.0,
        0.15,
        SearchBudget(samples=1, positions=500, seconds=0.5),
        "determinised search on one sample, now and then turning the stock too soon",
    ),
    Level(
        "expert",
        2.5,
        0.0,
        SearchBudget(samples=8, positions=3000, seconds=2.0, compare=3),
        "determinised search, comparing moves where samples disagree",
    ),
)
LEVEL_NAMES: Final[tuple[str, ...]] = tuple(level.name for level in LEVELS)
DEFAULT_LEVEL: Final = "medium"
# Moves in a row that neither send a card home nor turn the stock, after which a search level
# plays only such moves (its votes could otherwise carry a card back and forth for ever).
IDLE_LIMIT: Final = 60


def makes_progress(move: str) -> bool:
    """Does ``move`` always make progress (a card home, or a stock card turned)?"""
    return move == "stock>waste" or ">f" in move


def level_named(name: str) -> Level:
    """The level called ``name`` (KeyError for none)."""
    for level in LEVELS:
        if level.name == name:
            return level
    raise KeyError(name)


def parse_levels(text: str) -> tuple[Level, ...]:
    """``"hard"`` or a mix ``"easy,hard"`` (bots take them in turn); ValueError naming the choices."""
    names = [part.strip().lower() for part in text.split(",")]
    unknown = [name for name in names if name not in LEVEL_NAMES]
    if not names or unknown:
        bad = ", ".join(repr(n) for n in unknown) or repr(text)
        raise ValueError(f"no bot level {bad}: choose from {', '.join(LEVEL_NAMES)} (or a mix: easy,hard)")
    return tuple(level_named(name) for name in names)


def bot_name(base: str, level: Level) -> str:
    """A bot's racer name: its level beside its name, as the leaderboard shows it."""
    return f"{base} ({level.name})"


_POOL: ProcessPoolExecutor | None = None


def search_pool() -> ProcessPoolExecutor:
    """The worker processes searches run in (made at the first search, shared by this process's
    bots): never the event loop, so the connection, the board and an embedded server stay live.
    Two workers at most: practice runs several bots beside the player's own screen."""
    global _POOL
    if _POOL is None:
        workers = max(1, min(2, multiprocessing.cpu_count() - 1))
        # multiprocessing's resource tracker, started with the pool's first lock, hands the child
        # sys.stderr's descriptor: under a running Textual app that is a capture whose fileno() is
        # -1, and the start fails. The tracker starts here on the process's own stderr instead.
        real_stderr = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
        with contextlib.redirect_stderr(real_stderr):
            resource_tracker.ensure_running()
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    return _POOL


def shutdown_search_pool() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL = None


class Player:
    """One bot's choices and pace at its level, from its seed."""

    def __init__(self, level: Level, seed: int, *, pace: float | None = None) -> None:
        self.level = level
        self.rng = random.Random(seed)
        self.memory = SearchMemory(rng=random.Random(self.rng.getrandbits(64)))
        # The bot's own pace: the level's (or the one asked for) times its seeded factor.
        self.pace = (pace or level.pace) * self.rng.uniform(0.85, 1.15)
        self.idle = 0
        self._last: tuple[int, int] | None = None  # (stock, cards home) at the last choice

    def delay(self) -> float:
        """Seconds the next move takes, thinking included (0.6-1.4 times the mean)."""
        return self.rng.uniform(0.6, 1.4) / self.pace

    def greedy(self, view: View) -> str | None:
        """The greedy move, ties among equal moves broken by the bot's generator."""
        return choose_move(view, self.rng)

    def _slip(self, view: View, move: str | None) -> str | None:
        """Now and then (the level's ``slip``) the stock turned instead of ``move``."""
        if move is not None and move != "stock>waste" and view.stock and self.rng.random() < self.level.slip:
            return "stock>waste"
        return move

    def _count_idle(self, view: View) -> None:
        now = (view.stock, view.foundation_cards)
        self.idle = self.idle + 1 if now == self._last else 0
        self._last = now

    def choose_here(self, view: View) -> str | None:
        """The next entry, chosen on the calling thread (the bench's way; a bot uses :meth:`choose`)."""
        if view.status != PLAYING:
            return None
        self._count_idle(view)
        if self.level.search is None:
            return self._slip(view, self.greedy(view))
        move, self.memory = search_move(view, self.memory, self.level.search)
        return self._after_search(view, move)

    async def choose(self, view: View) -> str | None:
        """The next entry (a move or ``resign``); None when the game is over. A search level
        searches in :func:`search_pool`'s workers, never on this event loop."""
        if view.status != PLAYING:
            return None
        self._count_idle(view)
        if self.level.search is None:
            return self._slip(view, self.greedy(view))
        loop = asyncio.get_running_loop()
        try:
            move, self.memory = await loop.run_in_executor(
                search_pool(), search_move, view, self.memory, self.level.search
            )
        except (BrokenProcessPool, OSError, ValueError):
            # A worker died (killed, out of memory) or none could start: this move is greedy, the
            # next search gets a new pool.
            log.warning("the bots' search worker died: a greedy move instead")
            shutdown_search_pool()
            move = None
        return self._after_search(view, move)

    def _after_search(self, view: View, move: str | None) -> str | None:
        if move is None or (self.idle >= IDLE_LIMIT and not makes_progress(move)):
            move = self.greedy(view)
        return self._slip(view, move)
