"""Helpers of the daily views' tests (the client's daily commands, the daily pages): a server with
short days, claimed players over the real protocol, their identities where the client keeps them,
and attempts played by plain WebSocket clients."""

from __future__ import annotations

import asyncio
import base64
import secrets
from dataclasses import replace
from typing import Any

from support import FAST, Client, board, fast_config

from client.bot import choose_move
from client.identities import Identity, remember, server_key
from server.shell import RaceServer, ServerConfig
from shared import protocol as p


def daily_config(day_seconds: int = 3600, time_limit_s: int = 1800, **overrides: Any) -> ServerConfig:
    """A test server whose days last ``day_seconds`` (the day record is made before the day starts)."""
    core = replace(FAST, daily=True, day_seconds=day_seconds, daily_time_limit_s=time_limit_s)
    return fast_config(core=core, **overrides)


def new_secret() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


async def claim(server: RaceServer, name: str) -> dict[str, str]:
    """``name`` claimed on ``server`` over the protocol: {"secret", "profile_id", "name"}."""
    client = await Client.open(server, name)
    try:
        await client.hello(name)
        secret = new_secret()
        await client.send(p.Claim(name=name, identity=secret))
        claimed = await client.expect(p.Claimed)
    finally:
        await client.close()
    return {"secret": secret, "profile_id": claimed.profile_id, "name": claimed.name}


def keep_identities(server_url: str, identity: dict[str, str]) -> None:
    """Where ``plot claim`` keeps it (client/identities.py: the state directory's identities.json)."""
    remember(Identity(server_key(server_url), identity["secret"], identity["profile_id"], identity["name"]))


async def bound(server: RaceServer, identity: dict[str, str]) -> Client:
    """A plain client said hello with the identity (bound to its profile)."""
    client = await Client.open(server, identity["name"])
    await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=identity["name"], identity=identity["secret"]))
    client.welcome = await client.expect(p.Welcome)
    assert client.welcome.profile == identity["profile_id"]
    return client


async def play_attempt(
    server: RaceServer, identity: dict[str, str], moves: int, *, resign: bool = True, pace_s: float = 0.0
) -> Client:
    """Today's ranked attempt of ``identity``: the bot's first ``moves`` moves (``pace_s`` apart:
    the screenshots' human-looking pace), then resigned (or left running). Returns the client
    (still connected)."""
    client = await bound(server, identity)
    await client.send(p.Daily())
    start = await client.expect(p.RaceStart, timeout=60)
    view = board(start)
    for move_id in range(1, moves + 1):
        move = choose_move(view)
        if move is None or move == "resign":
            break
        await client.send(p.Move(id=move_id, move=move))
        view = board(await client.expect(p.MoveOk))
        if pace_s:
            await asyncio.sleep(pace_s)
    if resign:
        await client.send(p.Move(id=moves + 1, move="resign"))
        await client.expect(p.DailyBoard)  # the attempt's row went to the day's board
    return client
