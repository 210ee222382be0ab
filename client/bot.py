"""A bot racer: it plays from its own View, as any racer sees it, never from the deal.

How it chooses and how fast it plays is its level (``client.bot_levels``: beginner to expert).
The greedy policy below is the medium level's, and the other levels' starting point. It is
greedy over the legal moves the View allows (``client.viewmodel.legal_moves``): a card home
when one can go, then dig the waste onto the tableau, then turn the stock; with the stock
empty, fill spaces from the waste or empty a pile; when nothing of that is left it resigns
rather than wander (the server marks it blocked first when the rules say so). Every step
makes progress (a card home, a shorter waste or stock, a non-empty pile fewer), so it never
loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from typing import TYPE_CHECKING

from client.connection import Connection, ConnectionFailed, TokenFile
from client.viewmodel import RaceModel, legal_moves
from client.words import describe_error
from shared.cards import rank
from shared.engine import PLAYING, RESIGN, View
from shared.protocol import LOBBY, RACING, RESULTS, Error, Join, MoveRejected, Ready, Results, Room, ServerMessage

if TYPE_CHECKING:
    from client.bot_levels import Level

log = logging.getLogger("plot.bot")

SOURCE_ORDER = {"reserve": 0, "t": 1, "waste": 2}


def _source_rank(move: str) -> int:
    src = move.split(">")[0]
    return SOURCE_ORDER.get(src, SOURCE_ORDER["t"])


def choose_move(view: View, rng: random.Random | None = None) -> str | None:
    """The bot's next entry for ``view`` (a move or ``resign``); None when the game is over.

    With ``rng``, equally preferred moves (two cards that could go home, two piles a card could
    go on) are taken in its order rather than the legal moves' order."""
    if view.status != PLAYING:
        return None
    moves = legal_moves(view)
    if rng is not None:
        rng.shuffle(moves)
    home = sorted((m for m in moves if ">f" in m), key=_source_rank)
    if home:
        return home[0]
    builds = [m for m in moves if m.startswith("waste>t") and view.tableau[int(m.split(">t")[1])]]
    if builds:
        return builds[0]
    if "stock>waste" in moves:
        return "stock>waste"
    fills = [m for m in moves if m.startswith("waste>t")]
    if fills:
        return fills[0]
    # A space helps only if the waste's top may fill it (and none is free already, or it would have).
    top_fits_space = bool(view.waste) and (not view.restricted or rank(view.waste[-1]) == view.base_rank)
    if top_fits_space and all(view.tableau):
        emptying = [m for m in moves if m.startswith("t") and len(view.tableau[int(m[1 : m.index(">")])]) == 1]
        if emptying:
            return emptying[0]
    return RESIGN


class Bot:
    """One bot: joins ``code`` as a racer (marked as a bot), readies up, races, readies again for a rematch.

    ``level`` (default medium) chooses its moves and pace; ``speed`` (moves per second) replaces
    the level's pace; ``seed`` makes its choices and pace repeatable (default: a random one).
    """

    def __init__(
        self,
        url: str,
        code: str,
        *,
        name: str = "bot",
        speed: float | None = None,
        level: Level | None = None,
        seed: int | None = None,
        token_file: TokenFile | None = None,
        races: int | None = None,
    ) -> None:
        from client.bot_levels import DEFAULT_LEVEL, Player, level_named

        self.url = url
        self.code = code
        self.name = name
        self.level = level or level_named(DEFAULT_LEVEL)
        self.seed = secrets.randbits(64) if seed is None else seed
        self.player = Player(self.level, self.seed, pace=speed)
        self.token_file = token_file
        self.races = races  # stop after this many races (None: until the room goes away)
        self.model = RaceModel()
        self.connection: Connection | None = None
        self._wake = asyncio.Event()
        self.moves_played = 0
        self.last_results: Results | None = None  # the latest race's results (kept after a rematch starts)

    def _on_message(self, msg: ServerMessage) -> None:
        self.model.apply(msg)
        if isinstance(msg, Results):
            self.last_results = msg
        self._wake.set()

    async def run(self) -> Results | None:
        """Race until the room is gone (or ``races`` are done); returns the last results seen."""
        connection = Connection(self.url, self.name, bot=True, token_file=self.token_file, room=self.code)
        connection.on_message = self._on_message
        self.connection = connection
        try:
            welcome = await connection.start()
            if welcome.room != self.code:
                reply = await connection.request(Join(code=self.code, role="racer"), Room)
                if isinstance(reply, Error):
                    raise ConnectionFailed(f"cannot join room {self.code}: {describe_error(reply)}")
            return await self._race_loop(connection)
        finally:
            await connection.close()

    async def _race_loop(self, connection: Connection) -> Results | None:
        finished = 0
        last_results: Results | None = None
        readied_for: int | None = None
        while True:
            self._wake.clear()
            model = self.model
            room = model.room
            if room is None and model.left_reason is not None:
                return last_results
            if model.results is not None and model.results is not last_results:
                last_results = model.results
                finished += 1
                if self.races is not None and finished >= self.races:
                    return last_results
            me = model.me
            if (
                room is not None
                and room.phase == LOBBY
                and me is not None
                and not me.ready
                and readied_for != room.race
            ):
                readied_for = room.race
                await connection.send(Ready(ready=True))
            if (
                room is not None
                and room.phase == RACING
                and model.view is not None
                and await self._turn(connection, model.view)
            ):
                continue
            if room is not None and room.phase == RESULTS and self.races is not None and finished >= self.races:
                return last_results
            await self._nap(1.0)

    async def _nap(self, seconds: float) -> None:
        """Wait for a server message, ``seconds`` at most. (Not ``asyncio.wait_for``: on Python
        3.11 a cancel arriving as the wait ends is lost there, and a cancelled bot raced on.)"""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _turn(self, connection: Connection, view: View) -> bool:
        """Choose and play one entry for ``view`` at the bot's pace (the thinking counts in it).
        False when there is nothing to play (the game is over)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        entry = await self.player.choose(view)
        if entry is None:
            return False
        wait = self.player.delay() - (loop.time() - started)
        if wait > 0:
            await asyncio.sleep(wait)
        if self.model.phase != RACING or self.model.view is not view:
            return True  # the race moved on while the bot thought (ended, or a fresh board): look again
        result = await connection.move(entry)
        if isinstance(result, MoveRejected):
            # The View said it was legal; the server knows better (the race ended, say). Look again.
            log.info("%s: %s rejected: %s", self.name, entry, result.reason)
            self._wake.clear()
            await self._nap(1.0)
            return True
        self.moves_played += 1
        return True
