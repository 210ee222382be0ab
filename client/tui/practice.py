"""A practice race: the real server in this process (memory store, loopback, a free port), bots, you."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from client.bot_levels import DEFAULT_LEVEL
from client.ghosts import GhostFile
from client.tui.play import solver_hint
from client.tui.race import GIVEN_PRACTICE_DEAL, HOST, RANDOM_PRACTICE_DEAL, RaceApp, RaceConfig
from client.widgets.room import verify_command
from shared.engine import Game, view_hash
from shared.fairplay import random_deal
from shared.protocol import RoomOptions


@contextlib.asynccontextmanager
async def embedded_server(countdown_ms: int = 3000, **server_options: Any) -> AsyncIterator[str]:
    """The race server on 127.0.0.1, a free port, the memory store; yields its ws:// address.

    ``server_options`` are ``ServerConfig`` fields (tests raise the rate limit for fast bots).
    """
    import logging

    from server.core import CoreConfig
    from server.shell import RaceServer, ServerConfig
    from server.store.memory import MemoryStore

    logging.getLogger("plot.server").setLevel(logging.WARNING)  # its log lines would paint over the board
    config = ServerConfig(host="127.0.0.1", port=0, core=CoreConfig(countdown_ms=countdown_ms), **server_options)
    server = RaceServer(MemoryStore(), config)
    await server.start()
    try:
        yield f"ws://127.0.0.1:{server.port}"
    finally:
        await server.stop("practice is over")


def practice_config(
    url: str,
    *,
    name: str,
    bots: int,
    deal: int,
    speed: float | None = None,
    levels: tuple[str, ...] = (DEFAULT_LEVEL,),
    deal_given: bool = False,
    ghosts: tuple[GhostFile, ...] = (),
) -> RaceConfig:
    """The race app's settings for practice; the hint replays your accepted moves on the deal."""
    config = RaceConfig(
        url=url,
        name=name,
        mode=HOST,
        options=RoomOptions(deal=deal, max_racers=max(min(bots + 1, 16), 2), private=True),
        profile=None,  # no token kept: each practice server is new
        bots=bots,
        bot_speed=speed,
        bot_levels=levels,
        auto_start=True,
        title="practice",
        next_deal=random_deal,
        deal_note=GIVEN_PRACTICE_DEAL if deal_given else RANDOM_PRACTICE_DEAL,
        reachable=False,
        ghosts=ghosts,
    )
    return config


def attach_hint(app: RaceApp) -> None:
    """Practice only: a hint from the solver, for the position the server shows you.

    The practice client chose the deal itself (``app.known_deal``, new at each rematch), and
    replays the moves the server accepted from it: the solver needs the stock, which a race
    never gives a client.
    """

    async def hint() -> str:
        model = app.model
        deal = app.known_deal
        if model.view is None or model.race is None or deal is None:
            return "no hint before the race starts"
        game = Game(deal, undo=model.race.undo)
        for entry in app.accepted_entries:
            game.play(entry)
        if view_hash(game.view()) != view_hash(model.view):
            return "no hint: this position could not be rebuilt here"
        try:
            move = await asyncio.to_thread(solver_hint, game)
        except Exception as exc:  # a solver fault must not end the race
            return f"no hint: the solver failed ({exc})"
        return f"hint: {move}" if move else "no hint from the solver here"

    app.config.hint = hint


async def run_practice(
    *,
    name: str,
    bots: int,
    deal: int | None,
    speed: float | None,
    levels: tuple[str, ...] = (DEFAULT_LEVEL,),
    ghosts: tuple[GhostFile, ...] = (),
) -> int:
    given = deal is not None
    deal = random_deal() if deal is None else deal
    async with embedded_server() as url:
        config = practice_config(
            url, name=name, bots=bots, deal=deal, speed=speed, levels=levels, deal_given=given, ghosts=ghosts
        )
        app = RaceApp(config)
        attach_hint(app)
        await app.run_async()
        await app.shutdown()
    model = app.model
    if model.saved_records:
        folder = next(iter(model.saved_records.values())).parent
        print(f"practice on deal {deal}: records saved in {folder}")
        mine = model.saved_records.get(model.player_id or "")
        if mine is not None and model.results is not None:
            print(f"replay yours: {verify_command(mine, model.results)}")
    return 0
