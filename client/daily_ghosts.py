"""A past daily deal raced again (docs/ghosts.md, "A past daily deal"): once a day is over its
board reveals the deal and every attempt's record; its top attempts and your own race beside you
as ghosts, in a practice race on this machine (``plot practice --daily DAY``).

The board keeps each attempt's moves and its time, not the time of each move: a daily ghost's
entries are spread evenly over its own time (its average pace), not the engine's default pace.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from client.ghosts import GhostFile, GhostFileError
from client.state import state_dir
from shared import protocol as p

PAGES_MAX: Final = 20  # board pages read looking for your own attempt (100 rows each)
DAY_SECONDS: Final = 86_400


def day_number(text: str) -> int:
    """``N`` (a day number) or ``YYYY-MM-DD`` (a UTC date: the day of 24-hour days that starts then)."""
    if text.isdigit():
        return int(text)
    try:
        date = datetime.date.fromisoformat(text)
    except ValueError:
        raise GhostFileError(f"a day is a number or a date YYYY-MM-DD, not {text!r}") from None
    return (date - datetime.date(1970, 1, 1)).days


def saved_identity(url: str) -> str | None:
    """The secret of the name claimed on ``url`` (state_dir()/identities.json), if this client has one."""
    path = state_dir() / "identities.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = data.get(url) if isinstance(data, dict) else None
    secret = entry.get("secret") if isinstance(entry, dict) else None
    return secret if isinstance(secret, str) else None


def paced(row: p.DailyRow, moves: list[str]) -> tuple[int, ...] | None:
    """An attempt's entries spread evenly over its time (None: no time to spread them over)."""
    if not moves or row.elapsed_ms <= 0:
        return None
    return tuple(round((i + 1) * row.elapsed_ms / len(moves)) for i in range(len(moves)))


def ghost_of(row: p.DailyRow, deal: int, moves: list[str], label: str) -> GhostFile:
    return GhostFile(name=label[:24], deal=deal, moves=tuple(moves), times=paced(row, moves))


async def daily_ghosts(url: str, name: str, day: int, top: int = 3) -> tuple[int, tuple[GhostFile, ...]]:
    """The deal of a past ``day`` and its ghosts: its best ``top`` attempts and yours (by your
    claimed name, when this client holds its secret for ``url``, else by ``name``)."""
    try:
        return await _daily_ghosts(url, name, day, top)
    except (OSError, WebSocketException) as exc:
        raise GhostFileError(f"cannot read the daily board from {url}: {exc}") from None


async def _daily_ghosts(url: str, name: str, day: int, top: int) -> tuple[int, tuple[GhostFile, ...]]:
    identity = saved_identity(url)
    async with connect(url, compression=None) as ws:

        async def ask(message: p.ClientMessage) -> p.ServerMessage:
            await ws.send(p.encode(message))
            while True:
                frame = await ws.recv()
                if not isinstance(frame, bytes):
                    continue
                try:
                    answer = p.decode_server(frame)
                except (p.ProtocolError, msgspec.DecodeError):
                    continue
                if isinstance(answer, p.Error):
                    raise GhostFileError(f"the server refused: {answer.message} ({answer.code})")
                if not isinstance(answer, p.Pong | p.ChatSaid | p.ChatHistory | p.Room | p.RaceStart):
                    return answer

        welcome = await ask(p.Hello(v=p.PROTOCOL_VERSION, name=name, identity=identity))
        if not isinstance(welcome, p.Welcome):
            raise GhostFileError("the server did not welcome this client")
        me = welcome.name
        board = await ask(p.GetBoard(day=day))
        if not isinstance(board, p.DailyBoard):
            raise GhostFileError("the server did not answer with the day's board")
        if not board.final or board.deal is None or board.records is None:
            raise GhostFileError(f"day {day} is not over yet: its records are revealed once it ends")
        deal = board.deal
        ghosts: list[GhostFile] = []
        for row in board.rows[:top]:
            moves = board.records.get(row.name)
            if moves:
                label = "you" if row.name == me else row.name
                ghosts.append(ghost_of(row, deal, moves, f"{label} #{row.rank}"))
        if not any(row.name == me for row in board.rows[:top]):
            mine = await _own_attempt(ask, board, day, me)
            if mine is not None:
                row, moves = mine
                ghosts.append(ghost_of(row, deal, moves, f"you #{row.rank}"))
    if not ghosts:
        raise GhostFileError(f"day {day} has no attempt with a record to race")
    return deal, tuple(ghosts[: p.MAX_GHOSTS])


Ask = Callable[[p.ClientMessage], Awaitable[p.ServerMessage]]


async def _own_attempt(ask: Ask, board: p.DailyBoard, day: int, me: str) -> tuple[p.DailyRow, list[str]] | None:
    """Your row and record on the day's board: on the first page, else on the page your rank is
    on (``you``), else page by page."""
    page = board
    offsets = [board.you.rank - 1] if board.you is not None else list(range(100, 100 * PAGES_MAX, 100))
    for offset in [0, *offsets]:
        if offset:
            if offset >= board.total:
                break
            answer = await ask(p.GetBoard(day=day, offset=offset))
            if not isinstance(answer, p.DailyBoard):
                return None
            page = answer
        for row in page.rows:
            moves = (page.records or {}).get(row.name)
            if row.name == me and moves:
                return row, moves
    return None
