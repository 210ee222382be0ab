"""Protocol version 2 end to end with a plain ``msgpack`` client (no msgspec, no shared.protocol on
the wire): small move acknowledgements applied as changes, the check value computed from
docs/protocol.md alone, a divergence answered by ``sync``, and a version-1 client refused."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgpack
from support import Client, fast_config, running_server, url, view_game
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from shared import protocol as p
from shared.engine import View

# ---------------------------------------------------------------- docs/protocol.md, by hand

PILES = ["stock", "waste", "reserve", *(f"f{i}" for i in range(8)), *(f"t{i}" for i in range(12))]
MASK = 0xFFFFFFFF


def fmix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK
    return x ^ (x >> 16)


def term(pile: str, pos: int, value: int) -> int:
    return fmix32((PILES.index(pile) << 16) | (pos << 8) | value)


def check_value(board: dict[str, Any]) -> int:
    total = term("stock", 0, board["stock"]) + term("reserve", 0, board["reserve_count"])
    top = board["reserve_top"]
    total += term("reserve", 1, 255 if top is None else top)
    for pos, card in enumerate(board["waste"]):
        total += term("waste", pos, card)
    for i, pile in enumerate(board["foundations"]):
        total += sum(term(f"f{i}", pos, card) for pos, card in enumerate(pile))
    for i, pile in enumerate(board["tableau"]):
        total += sum(term(f"t{i}", pos, card) for pos, card in enumerate(pile))
    return total & MASK


def apply_ack(board: dict[str, Any], ack: dict[str, Any]) -> dict[str, Any]:
    """The board after a move_ok: its whole ``view``, or the changes on ``board``."""
    if "view" in ack:
        return dict(ack["view"])
    new = {**board, "foundations": list(board["foundations"]), "tableau": list(board["tableau"])}
    for name, keep, cards in ack.get("changes", []):
        if name == "waste":
            new["waste"] = new["waste"][:keep] + cards
        elif name[0] == "f":
            new["foundations"][int(name[1:])] = new["foundations"][int(name[1:])][:keep] + cards
        else:
            new["tableau"][int(name[1:])] = new["tableau"][int(name[1:])][:keep] + cards
    if "stock" in ack:
        new["stock"] = ack["stock"]
    if "reserve" in ack:
        new["reserve_count"], new["reserve_top"] = ack["reserve"]
    if "status" in ack:
        new["status"] = ack["status"]
    return new


def legal(board: dict[str, Any]) -> list[str]:
    """Legal moves, from the engine (choosing moves is not what this test is about)."""
    return view_game(View(**board)).legal_moves()


# ---------------------------------------------------------------- a plain client


class Plain:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []
        self.sizes: list[int] = []
        self.last_accepted = ""  # the text of the last move answered move_ok

    async def send(self, **message: Any) -> None:
        await self.ws.send(msgpack.packb(message))

    async def expect(self, *kinds: str) -> dict[str, Any]:
        while True:
            frame = await asyncio.wait_for(self.ws.recv(), 5)
            assert isinstance(frame, bytes)
            message = msgpack.unpackb(frame)
            assert isinstance(message, dict) and "type" in message
            self.received.append(message)
            if message["type"] == "move_ok":
                self.sizes.append(len(frame))
            if message["type"] in kinds:
                return message


@asynccontextmanager
async def racing_plain(name: str = "Plain") -> AsyncIterator[tuple[Plain, dict[str, Any]]]:
    async with running_server() as server, connect(url(server), compression=None) as ws:
        plain = Plain(ws)
        await plain.send(type="hello", v=2, name=name)
        assert (await plain.expect("welcome"))["v"] == 2
        await plain.send(type="create_room", options={"max_racers": 2, "private": True, "deal": 4242})
        await plain.expect("room")
        await plain.send(type="start")
        yield plain, await plain.expect("race_start")


async def play_moves(
    plain: Plain, board: dict[str, Any], seq: int, count: int, rng: random.Random, first_id: int
) -> tuple[dict[str, Any], int, int]:
    """Play ``count`` moves (foundation moves first, some undos), applying each move_ok's changes
    and checking the check value; returns the board, its seq and the next move id."""
    move_id = first_id
    for _ in range(count):
        moves = legal(board)
        up = [m for m in moves if ">f" in m]
        move = "undo" if rng.random() < 0.15 and seq else rng.choice(up or moves)
        await plain.send(type="move", id=move_id, move=move)
        ack = await plain.expect("move_ok", "move_rejected")
        if ack["type"] == "move_rejected":
            assert move == "undo", ack  # an undo after a stock turn or a reserve move is refused
        else:
            assert ack["id"] == move_id and ack["seq"] == seq + 1 and "view" not in ack
            board, seq = apply_ack(board, ack), ack["seq"]
            plain.last_accepted = move
            assert check_value(board) == ack["check"], f"board diverged after {move}"
        move_id += 1
    return board, seq, move_id


async def test_a_plain_msgpack_client_applies_small_acknowledgements() -> None:
    async with racing_plain() as (plain, start):
        board, seq = dict(start["view"]), start["seq"]
        assert check_value(board) == start["check"]
        board, seq, next_id = await play_moves(plain, board, seq, 40, random.Random(3), 1)
        assert seq >= 30
        acks = [m for m in plain.received if m["type"] == "move_ok"]
        # Only what changed: never a whole board, never the SHA-256, and the keys the docs name.
        allowed = {"type", "id", "seq", "t_ms", "check", "changes", "stock", "reserve", "status"}
        assert all(set(ack) <= allowed for ack in acks)
        assert all(len(ack.get("changes", [])) <= 2 for ack in acks)
        assert len(plain.sizes) == len(acks) and max(plain.sizes) < 100, "a move_ok is small whatever the board"
        # The whole board, asked for: the same as the one kept from the changes.
        await plain.send(type="sync")
        snapshot = await plain.expect("race_start")
        assert snapshot["seq"] == seq and snapshot["view"] == board and snapshot["check"] == check_value(board)
        # A duplicate (the same id and move again) is answered with the whole board.
        await plain.send(type="move", id=next_id - 1, move=plain.last_accepted)
        dup = await plain.expect("move_ok")
        assert dup["duplicate"] and dup["view"] == board and dup["check"] == check_value(board)


async def test_a_divergent_board_is_resynchronised() -> None:
    async with racing_plain() as (plain, start):
        board, seq = dict(start["view"]), start["seq"]
        board, seq, next_id = await play_moves(plain, board, seq, 5, random.Random(5), 1)
        # The client's board goes wrong (a lost frame, a bug): a tableau card it does not have.
        wrong = {**board, "tableau": [[*board["tableau"][0], 7], *board["tableau"][1:]]}
        await plain.send(type="move", id=next_id, move="stock>waste")
        ack = await plain.expect("move_ok")
        diverged = apply_ack(wrong, ack)
        assert check_value(diverged) != ack["check"], "the check value shows the divergence"
        await plain.send(type="sync")
        snapshot = await plain.expect("race_start")
        fixed = dict(snapshot["view"])
        assert snapshot["seq"] == ack["seq"] and check_value(fixed) == ack["check"] == snapshot["check"]
        assert fixed == apply_ack(board, ack)
        # And the changes go on from the snapshot.
        await play_moves(plain, fixed, snapshot["seq"], 5, random.Random(6), next_id + 1)


async def test_sync_outside_a_race_is_wrong_phase() -> None:
    async with running_server() as server, connect(url(server), compression=None) as ws:
        plain = Plain(ws)
        await plain.send(type="hello", v=2, name="Early")
        await plain.expect("welcome")
        await plain.send(type="sync")
        err = await plain.expect("error")
        assert err["code"] == p.NOT_IN_ROOM and err["ref"] == "sync"
        await plain.send(type="create_room")
        await plain.expect("room")
        await plain.send(type="sync")
        err = await plain.expect("error")
        assert err["code"] == p.WRONG_PHASE and err["ref"] == "sync"


async def test_a_version_1_client_is_refused_and_closed() -> None:
    async with running_server() as server, connect(url(server), compression=None) as ws:
        await ws.send(msgpack.packb({"type": "hello", "v": 1, "name": "Old"}))
        err = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 5))
        assert err["type"] == "error" and err["code"] == "unsupported_version" and err["ref"] == "hello"
        assert "2" in err["message"] and "1" in err["message"]
        try:
            extra = await asyncio.wait_for(ws.recv(), 5)
        except ConnectionClosed:
            extra = None
        assert extra is None, "nothing after the refusal"
        assert ws.close_code == 1002


async def test_the_plot_client_resyncs_a_divergent_board() -> None:
    """client/connection.py keeps the board from the changes; a wrong board is caught by the check
    value and answered with the whole board (sync), then play goes on."""
    from client.connection import Connection

    async with running_server(config=fast_config()) as server:
        conn = Connection(url(server), "Plot")
        await conn.start()
        host = await Client.open(server, "Host")
        await host.hello("Host")
        await host.send(p.CreateRoom(options=p.RoomOptions(max_racers=2, deal=4242)))
        code = (await host.expect(p.Room)).code
        await conn.send(p.Join(code=code))
        await conn.send(p.Ready())
        started: Callable[[p.ServerMessage], bool] = lambda m: isinstance(m, p.RaceStart)  # noqa: E731
        waiting: Awaitable[p.ServerMessage] = conn.wait_for(started, 5)
        await until_ready(host)
        await host.send(p.Start())
        await waiting
        first = await conn.move("stock>waste")
        assert isinstance(first, p.MoveOk) and first.view is not None and conn.resyncs == 0
        assert conn.board.view is not None
        conn.board.view.tableau[0].append(7)  # the divergence
        second = await conn.move("stock>waste")
        assert isinstance(second, p.MoveOk) and second.view is None  # the changes do not fit
        await conn.wait_for(started, 5)
        assert conn.resyncs == 1 and conn.board.seq == second.seq
        third = await conn.move("stock>waste")
        assert isinstance(third, p.MoveOk) and third.view is not None and third.view.stock == 75
        await conn.close()
        await host.close()


async def until_ready(host: Client) -> None:
    while True:
        room = await host.expect(p.Room)
        if all(m.ready or m.player_id == host.pid for m in room.members) and len(room.members) == 2:
            return
