"""What docs/protocol.md promises about duplicates, a spectator's sync and an error's id, checked
on the wire: a real server on loopback, frames decoded with plain msgpack (no project code)."""

from __future__ import annotations

import asyncio

import msgpack
from support import Client, make_room, running_server, start_race

from shared import protocol as p


async def test_a_duplicate_carries_the_whole_board_its_check_and_the_first_time() -> None:
    async with running_server() as server:
        (ann, bob), _code = await make_room(server, ["Ann", "Bob"], deal=26)
        await start_race([ann, bob])
        await ann.send(p.Move(id=7, move="stock>waste"))
        first = await ann.expect(p.MoveOk)
        await asyncio.sleep(0.02)  # the resend comes later: its answer must keep the first time
        seen = len(ann.frames)
        await ann.send(p.Move(id=7, move="stock>waste"))
        again = await ann.expect(p.MoveOk)
        assert again.id == 7
        frames = [msgpack.unpackb(frame, raw=False) for frame in ann.frames[seen:]]
        frames = [frame for frame in frames if frame.get("type") == "move_ok"]
        dup = frames[0]
        assert dup["duplicate"] is True and dup["id"] == 7
        assert "view" in dup and "view_hash" not in dup and isinstance(dup["check"], int)
        assert dup["seq"] == first.seq == 1 and dup["t_ms"] == first.t_ms
        for client in (ann, bob):
            await client.close()


async def test_a_spectators_sync_is_answered_by_the_races_start_without_a_board() -> None:
    async with running_server() as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        sue = await Client.open(server, "Sue")
        await sue.hello("Sue")
        await sue.send(p.Join(code=code, role="spectator"))
        await sue.expect(p.Room)
        await start_race(racers)
        await sue.expect(p.RaceStart)
        await sue.send(p.Sync())
        answer = await sue.expect(p.RaceStart)
        assert answer.view is None and answer.view_hash is None and answer.check is None
        for client in (*racers, sue):
            await client.close()


async def test_every_error_frame_has_an_id_field() -> None:
    async with running_server() as server:
        client = await Client.open(server, "Ann")
        await client.hello("Ann")
        await client.send(p.Ready(ready=True))  # not in a room: an error that answers no move
        await client.expect(p.Error)
        (frame,) = [f for f in map(msgpack.unpackb, client.frames) if f.get("type") == "error"]
        assert frame["code"] == "not_in_room" and "id" in frame and frame["id"] is None
        await client.close()
