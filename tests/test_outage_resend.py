"""A move rejected ``store_unavailable`` during a store outage may be sent again with the same id
(docs/protocol.md, section 5): every such resend gets one answer, during the outage and after it.
A real server, real WebSocket clients, a real Redis stopped and started again."""

from __future__ import annotations

import random
from dataclasses import replace

from redis_fixture import RedisServer
from support import FAST, Client, board, fast_config, make_room, play, running_server, start_race, view_game

from server.core.records import decode_entry
from server.shell import RaceServer
from server.store.redis import RedisStore
from shared import protocol as p

# A short outage deadline, so that the test sees the rejection within a second or two.
OUTAGE = replace(FAST, store_outage_ms=1000, retry_first_ms=50, retry_max_ms=200)


def outage_store(redis: RedisServer) -> RedisStore:
    """A store that gives up on a stopped Redis within a second, without retrying."""
    return RedisStore(redis.url, socket_timeout=0.5, connect_timeout=0.5, retries=0)


async def rejected_mid_race(
    server: RaceServer, redis: RedisServer, moves: int, rng: random.Random
) -> tuple[list[Client], str, int, str]:
    """Ann and Bob race; Ann plays ``moves`` moves, then Redis stops and her next move is rejected
    ``store_unavailable``. Returns the clients, the room code, that move's id and the move."""
    (ann, bob), code = await make_room(server, ["Ann", "Bob"])
    starts = await start_race([ann, bob])
    assert starts[0].view is not None
    view, next_id = await play(ann, starts[0].view, moves, rng)
    move = view_game(view).legal_moves()[0]
    redis.stop()
    await ann.send(p.Move(id=next_id, move=move))
    rejected = await ann.expect(p.MoveRejected, timeout=15)
    assert rejected.id == next_id and rejected.code == p.STORE_UNAVAILABLE
    return [ann, bob], code, next_id, move


async def test_a_move_resent_during_and_after_an_outage_is_answered_each_time(
    persistent_redis_server: RedisServer,
) -> None:
    rng = random.Random(5)
    store = outage_store(persistent_redis_server)
    try:
        async with running_server(store, fast_config(core=OUTAGE)) as server:
            (ann, bob), code, next_id, move = await rejected_mid_race(server, persistent_redis_server, 3, rng)
            # Resent at once, the store still away: answered at once, store_unavailable again.
            await ann.send(p.Move(id=next_id, move=move))
            again = await ann.expect(p.MoveRejected, timeout=5)
            assert again.id == next_id and again.code == p.STORE_UNAVAILABLE
            persistent_redis_server.start()
            await ann.expect(p.RaceStart, timeout=15)  # the board as the log has it: the outage is over
            # Resent after the recovery: stored and acknowledged once.
            await ann.send(p.Move(id=next_id, move=move))
            ok = await ann.expect(p.MoveOk, timeout=5)
            assert ok.id == next_id
            stored = [decode_entry(entry) for entry in await store.load_moves(code, 1, ann.pid)]
            assert [entry.id for entry in stored].count(next_id) == 1 and ok.seq == len(stored)
            await play(ann, board(ok), 2, rng, first_id=next_id + 1)
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()


async def test_a_move_resent_only_after_the_outage_is_acknowledged(persistent_redis_server: RedisServer) -> None:
    rng = random.Random(6)
    store = outage_store(persistent_redis_server)
    try:
        async with running_server(store, fast_config(core=OUTAGE)) as server:
            (ann, bob), code, next_id, move = await rejected_mid_race(server, persistent_redis_server, 2, rng)
            persistent_redis_server.start()
            resync = await ann.expect(p.RaceStart, timeout=15)
            assert resync.seq == len(await store.load_moves(code, 1, ann.pid))
            await ann.send(p.Move(id=next_id, move=move))
            reply = await ann.expect(p.MoveOk | p.MoveRejected, timeout=5)  # type: ignore[arg-type]
            assert isinstance(reply, p.MoveOk) and reply.id == next_id
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()
