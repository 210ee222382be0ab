"""Helpers for the daily deal's tests: claimed players over the real protocol, an attempt played,
the JSON API read, and the check that nothing hidden reached a client before the reveal."""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import replace
from typing import Any

import msgspec
from support import FAST, Client, board, view_game
from web_helpers import http_get

from server.core.state import CoreConfig
from shared import protocol as p
from shared.engine import View

DAY_SECONDS = 60
DAILY_CORE: CoreConfig = replace(FAST, day_seconds=DAY_SECONDS, daily_time_limit_s=15, daily_poll_ms=200)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


async def claimed(server: object, name: str, secret: str | None = None, label: str = "") -> tuple[Client, str]:
    """A connected player holding the claimed ``name`` (claimed now, or bound by its secret)."""
    client = await Client.open(server, label or name)  # type: ignore[arg-type]
    if secret is not None:
        await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=name, identity=secret))
        client.welcome = await client.expect(p.Welcome)
        assert client.welcome.claimed
        return client, secret
    await client.hello(name)
    secret = new_secret()
    await client.send(p.Claim(name=name, identity=secret))
    await client.expect(p.Claimed)
    return client, secret


async def start_attempt(client: Client) -> tuple[p.DailyDay, p.RaceStart]:
    await client.send(p.Daily())
    day = await client.expect(p.DailyDay, timeout=90)
    start = await client.expect(p.RaceStart, timeout=30)
    assert start.view is not None and start.commitment == day.commitment
    return day, start


async def play_moves(client: Client, view: View, count: int, rng: random.Random, first_id: int = 1) -> tuple[View, int]:
    """Up to ``count`` legal moves (foundation moves first), each acknowledged."""
    move_id = first_id
    for _ in range(count):
        if view.status != "playing":
            break
        legal = [m for m in view_game(view).legal_moves() if m not in ("undo", "resign")]
        if not legal:
            break
        up = [m for m in legal if ">f" in m]
        move = rng.choice(up) if up else rng.choice(legal)
        await client.send(p.Move(id=move_id, move=move))
        reply = await client.expect(p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
        assert isinstance(reply, p.MoveOk), reply
        view = board(reply)
        move_id += 1
    return view, move_id


async def api(port: int, path: str) -> tuple[int, Any]:
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    status, _headers, body = await http_get(port, request)
    return status, json.loads(body)


HIDDEN_FIELDS = ("deal", "salt", "records")


def until_reveal(frames: list[bytes]) -> list[bytes]:
    """The frames before the first revealed (final) daily board."""
    for i, frame in enumerate(frames):
        msg = p.decode_server(frame)
        if isinstance(msg, p.DailyBoard) and msg.final:
            return frames[:i]
    return frames


def assert_nothing_hidden(label: str, frames: list[bytes], deal: int, *, own_board: bool) -> None:
    """Every frame: no results, no live boards, no deal, salt or records of the day, not even the
    deal's number anywhere, and a board only the racer's own (``own_board``)."""
    for frame in frames:
        msg = p.decode_server(frame)
        assert not isinstance(msg, p.Results | p.Boards), f"{label} got {p.message_type(msg)}"
        if isinstance(msg, p.DailyBoard):
            assert msg.deal is None and msg.salt is None and msg.records is None, msg
        if isinstance(msg, p.RaceStart) and not own_board:
            assert msg.view is None
        raw = msgspec.msgpack.decode(frame)
        assert deal not in _ints(raw), f"{label}: the day's deal number in a {p.message_type(msg)} frame"


def assert_api_hides(answer: Any) -> None:
    board = answer.get("board", {}) if isinstance(answer, dict) else {}
    for name in HIDDEN_FIELDS:
        assert board.get(name) is None, f"the API showed {name} before the reveal"


def _ints(value: object) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_ints(v) for v in value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*(_ints(v) for v in value)) if value else set()
    return set()
