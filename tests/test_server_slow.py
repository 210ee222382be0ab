"""A stalled reader never slows anyone else: its progress frames are dropped, and once it has been
over its buffer limit for too long the server cuts it, while the racers' moves keep being
acknowledged the whole time (the fan-out never waits for a socket)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

from support import FAST, Client, eventually, fast_config, make_room, room_members, running_server, start_race, url
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from shared import protocol as p
from shared.engine import Game


def undoable_pair() -> tuple[int, str]:
    """A deal and a tableau move that can be played and undone forever (endless legal traffic)."""
    for deal in range(1, 500):
        game = Game(deal)
        for move in game.legal_moves():
            if move.startswith("t") and ">t" in move:
                trial = game.copy()
                trial.play(move)
                trial.play("undo")
                return deal, move
    raise AssertionError("no deal with a tableau move in the first 500")


async def test_a_stalled_reader_does_not_slow_the_others() -> None:
    deal, move = undoable_pair()
    core = replace(FAST, leaderboard_interval_ms=20, boards_interval_ms=20)
    config = fast_config(
        core=core,
        write_soft_limit=4096,
        write_hard_limit=512 * 1024,
        slow_grace_s=0.5,
        socket_sndbuf=4096,
        rate_per_s=100_000,
        burst=100_000,
    )
    async with running_server(config=config) as server:
        racers, code = await make_room(server, ["Ann", "Bob"], deal=deal, spectator_boards=0)
        # The stalled spectator: a tiny kernel receive buffer, and a client that stops reading.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        slow = await connect(url(server), sock=sock, max_queue=1, compression=None)
        await slow.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Slow")))
        await slow.send(p.encode(p.Join(code=code, role="spectator")))
        while not isinstance(p.decode_server(await slow.recv(decode=False)), p.Room):
            pass
        # From here on, nobody reads `slow`.
        await start_race(racers)
        acks = [0, 0]

        async def race(index: int, client: Client) -> None:
            move_id = 0
            while server.stats.slow_disconnects == 0 and move_id < 20_000:
                move_id += 1
                await client.send(p.Move(id=move_id, move=move if move_id % 2 else "undo"))
                ok = await client.expect(p.MoveOk)
                assert ok.id == move_id
                acks[index] += 1

        await asyncio.wait_for(asyncio.gather(*(race(i, c) for i, c in enumerate(racers))), 30)
        # The racers were acknowledged all along, while the spectator was stalled ...
        assert min(acks) > 20
        # ... its progress frames were dropped, then it was cut as too slow.
        assert server.stats.dropped_frames > 0
        assert server.stats.slow_disconnects == 1
        # The racers are still connected and still get fresh leaderboards.
        for client in racers:
            assert client.closed_code is None
        await racers[0].send(p.Move(id=10**6, move="stock>waste"))
        version = (await racers[0].expect(p.MoveOk)).seq
        while True:
            board = await racers[1].expect(p.Leaderboard)
            if board.version >= version:
                break
        # A cut spectator's seat goes at once (a spectator has no token to resume); the racers stay.
        await eventually(lambda: len(room_members(server, code)) == 2, what="the cut spectator leaves")
        assert all(member.role == "racer" for member in room_members(server, code))
        try:
            while True:
                await asyncio.wait_for(slow.recv(), 5)
        except ConnectionClosed:
            pass
        for client in racers:
            await client.close()
