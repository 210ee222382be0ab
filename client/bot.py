"""A bot racer: it plays from its own View, as any racer sees it, never from the deal.

The strategy is greedy over the legal moves the View allows (``client.viewmodel.legal_moves``):
a card home when one can go, then dig the waste onto the tableau, then turn the stock; with
the stock empty, fill spaces from the waste or empty a pile; when nothing of that is left it
resigns rather than wander (the server marks it blocked first when the rules say so). Every
step makes progress (a card home, a shorter waste or stock, a non-empty pile fewer), so it
never loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from client.connection import Connection, ConnectionFailed, TokenFile
from client.viewmodel import RaceModel, legal_moves
from client.words import describe_error
from shared.cards import rank
from shared.engine import PLAYING, RESIGN, View
from shared.protocol import LOBBY, RACING, RESULTS, Error, Join, MoveRejected, Ready, Results, Room, ServerMessage

log = logging.getLogger("plot.bot")

SOURCE_ORDER = {"reserve": 0, "t": 1, "waste": 2}


def _source_rank(move: str) -> int:
    src = move.split(">")[0]
    return SOURCE_ORDER.get(src, SOURCE_ORDER["t"])


def choose_move(view: View) -> str | None:
    """The bot's next entry for ``view`` (a move or ``resign``); None when the game is over."""
    if view.status != PLAYING:
        return None
    moves = legal_moves(view)
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
    """One bot: joins ``code`` as a racer (marked as a bot), readies up, races, readies again for a rematch."""

    def __init__(
        self,
        url: str,
        code: str,
        *,
        name: str = "bot",
        speed: float = 2.0,
        token_file: TokenFile | None = None,
        races: int | None = None,
    ) -> None:
        self.url = url
        self.code = code
        self.name = name
        self.delay = 1.0 / speed if speed > 0 else 0.0
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
            if room is not None and room.phase == RACING and model.view is not None:
                entry = choose_move(model.view)
                if entry is not None:
                    await self._play(connection, entry)
                    continue
            if room is not None and room.phase == RESULTS and self.races is not None and finished >= self.races:
                return last_results
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)

    async def _play(self, connection: Connection, entry: str) -> None:
        if self.delay:
            await asyncio.sleep(self.delay * random.uniform(0.7, 1.3))
        if self.model.phase != RACING:
            return
        result = await connection.move(entry)
        if isinstance(result, MoveRejected):
            # The View said it was legal; the server knows better (the race ended, say). Look again.
            log.info("%s: %s rejected: %s", self.name, entry, result.reason)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)
            return
        self.moves_played += 1
