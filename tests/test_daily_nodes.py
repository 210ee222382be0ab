"""The daily deal on several nodes and across a restart (real servers, real Redis): one day record
whichever node writes it, an attempt resumed on another node, and after a restart of the only
node, with its clock honest (the attempt's start and end never move)."""

from __future__ import annotations

import random
from dataclasses import replace

from daily_support import DAILY_CORE, claimed, play_moves, start_attempt
from support import Client, board, eventually, fast_config, running_server

from server.shell import RaceServer
from server.store.redis import RedisStore
from shared import protocol as p

SHARED = replace(DAILY_CORE, shared_rooms=True)


async def test_two_nodes_serve_one_day_and_an_attempt_moves_between_them(redis_url: str) -> None:
    rng = random.Random(7)
    one = RaceServer(RedisStore(redis_url), fast_config(core=SHARED), store_name="redis")
    two = RaceServer(RedisStore(redis_url), fast_config(core=SHARED), store_name="redis")
    await one.start()
    await two.start()
    try:
        ann, secret = await claimed(one, "ann")
        day, start = await start_attempt(ann)
        bob, _ = await claimed(two, "bob")
        bob_day, _ = await start_attempt(bob)
        if bob_day.day == day.day:  # both nodes serve the day the first of them committed
            assert bob_day.commitment == day.commitment
        assert start.view is not None and ann.welcome is not None
        view, next_id = await play_moves(ann, start.view, 12, rng)
        token = ann.welcome.token
        await ann.close()
        # The same player on the other node: its attempt, its board, its clock.
        again = await Client.open(two, "ann@two")
        welcome = await again.hello("ann", token=token)
        assert welcome.resumed and welcome.room is not None
        snapshot = await again.expect(p.RaceStart)
        assert (snapshot.started_at, snapshot.ends_at) == (start.started_at, start.ends_at)
        assert snapshot.view == view and snapshot.seq == next_id - 1
        view, next_id = await play_moves(again, view, 5, rng, first_id=next_id)
        # Another connection of the same profile on the first node, asking for a new attempt,
        # gets none: the day's attempt of that profile is the one under way.
        other, _ = await claimed(one, "ann", secret=secret, label="ann-again")
        await other.send(p.Daily())
        refused = await other.expect(p.Error)
        assert refused.code in (p.WRONG_PHASE, p.DAILY_DONE)
        await again.send(p.Move(id=next_id, move="resign"))
        done = await again.expect(p.DailyBoard)
        mine = done.you or next(r for r in done.rows if r.name == "ann")
        assert mine.status == "resigned" and mine.moves == next_id

        async def refused_as_done() -> bool:  # once the first node has the stored end (pub/sub)
            await other.send(p.Daily())
            return (await other.expect(p.Error)).code == p.DAILY_DONE

        await eventually(refused_as_done, what="daily_done on the other node")
        for client in (again, bob, other):
            await client.close()
    finally:
        await one.stop()
        await two.stop()


async def test_a_restart_mid_attempt_loses_nothing_and_keeps_the_clock(redis_url: str) -> None:
    rng = random.Random(9)
    config = fast_config(core=DAILY_CORE)
    async with running_server(RedisStore(redis_url), config) as first:
        ann, _ = await claimed(first, "ann")
        day, start = await start_attempt(ann)
        assert start.view is not None and ann.welcome is not None
        view, next_id = await play_moves(ann, start.view, 10, rng)
        token = ann.welcome.token
        acked = [m for m in ann.messages if isinstance(m, p.MoveOk)]
    async with running_server(RedisStore(redis_url), config) as second:
        again = await Client.open(second, "ann-after")
        welcome = await again.hello("ann", token=token)
        assert welcome.resumed and welcome.room is not None
        snapshot = await again.expect(p.RaceStart)
        assert (snapshot.started_at, snapshot.ends_at) == (start.started_at, start.ends_at)
        assert snapshot.seq == len(acked) and snapshot.view == view
        # A resent move is not applied twice; the attempt goes on where it was.
        await again.send(p.Move(id=next_id - 1, move="stock>waste"))
        assert (await again.expect(p.MoveOk)).duplicate
        view, next_id = await play_moves(again, board(snapshot), 3, rng, first_id=next_id)
        await again.send(p.Move(id=next_id, move="resign"))
        final = await again.expect(p.DailyBoard)
        assert final.day == day.day
        mine = final.you or next(r for r in final.rows if r.name == "ann")
        assert mine.moves == next_id and mine.elapsed_ms >= acked[-1].t_ms
        await again.send(p.Daily())
        assert (await again.expect(p.Error)).code == p.DAILY_DONE
        await again.close()
