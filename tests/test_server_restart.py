"""With Redis, stopping (even killing) the server or restarting Redis mid-race loses nothing:
rooms and games come back from the store, racers resume with their tokens, and no move is
applied twice. Redis keeps an append-only file in a temporary folder (tests/redis_fixture.py)."""

from __future__ import annotations

import asyncio
import random
import signal
from typing import Any

from redis_fixture import RedisServer, free_port
from support import (
    Client,
    board,
    eventually,
    fast_config,
    make_room,
    play,
    running_server,
    server_process,
    start_race,
    view_game,
    wait_healthy,
)

from server.core.records import decode_entry
from server.core.state import LogState
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import replay


async def stored_moves(url: str, code: str, race: int, player_id: str) -> list[Any]:
    store = RedisStore(url)
    try:
        return [decode_entry(b) for b in await store.load_moves(code, race, player_id)]
    finally:
        await store.close()


async def test_server_killed_mid_race_comes_back_from_redis(persistent_redis_server: RedisServer) -> None:
    rng = random.Random(5)
    redis_url = persistent_redis_server.url
    port = free_port()
    args = ("--port", str(port), "--redis", redis_url, "--countdown", "0.1", "--rate", "1000")
    address = f"ws://127.0.0.1:{port}"
    with server_process(*args) as first:
        await asyncio.to_thread(wait_healthy, first, port)
        racers, code = await make_room(address, ["Ann", "Bob"])
        starts = await start_race(racers)
        progress = []
        for client, start in zip(racers, starts, strict=True):
            assert start.view is not None
            progress.append(await play(client, start.view, 8, rng))
        tokens = [c.welcome.token for c in racers if c.welcome]
        acked = {c.pid: [m for m in c.messages if isinstance(m, p.MoveOk)] for c in racers}
        first.send_signal(signal.SIGKILL)  # a crash: no goodbye, no flush
        await asyncio.to_thread(first.wait, 10)
    with server_process(*args) as second:
        await asyncio.to_thread(wait_healthy, second, port)
        back = []
        for client, token, (view, next_id) in zip(racers, tokens, progress, strict=True):
            again = await Client.open(address, client.label)
            welcome = await again.hello(client.label, token=token)
            assert welcome.resumed and welcome.player_id == client.pid and welcome.room == code
            snapshot = await again.expect(p.RaceStart)
            assert snapshot.seq == len(acked[client.pid]) and snapshot.view == view
            # Resending the last acknowledged id applies nothing.
            await again.send(p.Move(id=next_id - 1, move="stock>waste"))
            assert (await again.expect(p.MoveOk)).duplicate
            back.append((again, view, next_id))
        for again, view, next_id in back:
            view, next_id = await play(again, view, 4, rng, first_id=next_id)
            await again.send(p.Move(id=next_id, move="resign"))
        results = [await again.expect(p.Results) for again, _, _ in back]
        for again, _, _ in back:
            record = results[0].records[again.pid]
            entries = await stored_moves(redis_url, code, 1, again.pid)
            assert [e.move for e in entries] == record.moves
            ids = [e.id for e in entries if e.id is not None]
            assert len(ids) == len(set(ids)) == len(record.moves)
            game, outcome = replay(results[0].deal, record.moves)
            assert outcome.ok and game.status == "resigned"
            await again.close()
        second.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(second.wait, 10) == 0


async def test_redis_restart_mid_race(persistent_redis_server: RedisServer) -> None:
    rng = random.Random(9)
    store = RedisStore(persistent_redis_server.url, socket_timeout=0.5, connect_timeout=0.5, retries=1)
    async with running_server(store, fast_config()) as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        starts = await start_race(racers)
        ann, bob = racers
        assert starts[0].view is not None
        view, next_id = await play(ann, starts[0].view, 5, rng)
        persistent_redis_server.stop()
        move = next(m for m in view_game(view).legal_moves())
        await ann.send(p.Move(id=next_id, move=move))

        def state() -> LogState | None:
            log = server.core.racer_log(code, ann.pid)
            return None if log is None else log[0]

        await eventually(lambda: state() not in (LogState.IDLE, LogState.WRITING, None), what="the append failed")
        # Not stored, so neither acknowledged nor (yet) refused: the outcome is unknown until Redis answers.
        assert not [m for m in ann.messages if isinstance(m, p.MoveOk | p.MoveRejected) and m.id == next_id]
        persistent_redis_server.start()
        reply = await ann.expect(p.MoveOk | p.MoveRejected, timeout=10)  # type: ignore[arg-type]
        if isinstance(reply, p.MoveRejected):
            assert reply.code == p.STORE_UNAVAILABLE
            await ann.send(p.Move(id=next_id, move=move))  # retry, same id
            reply = await ann.expect(p.MoveOk)
        assert isinstance(reply, p.MoveOk) and reply.id == next_id
        view, next_id = await play(ann, board(reply), 3, rng, first_id=next_id + 1)
        # And a clean server restart on the same Redis, mid-race.
        token = ann.welcome.token if ann.welcome else ""
        bob_token = bob.welcome.token if bob.welcome else ""
    async with running_server(store, fast_config()) as server:
        # A fresh process lists the room from the store before anyone touched it.
        lister = await Client.open(server, "Lister")
        await lister.hello("Lister")
        await lister.send(p.ListRooms())
        listing = (await lister.expect(p.RoomList)).rooms
        assert [(r.code, r.phase, r.racers) for r in listing] == [(code, p.RACING, 2)]
        await lister.close()
        ann = await Client.open(server, "Ann")
        await ann.hello("Ann", token=token)
        snapshot = await ann.expect(p.RaceStart)
        assert snapshot.view == view
        bob = await Client.open(server, "Bob")
        await bob.hello("Bob", token=bob_token)
        await bob.expect(p.RaceStart)
        await ann.send(p.Move(id=next_id, move="resign"))
        await bob.send(p.Move(id=1, move="resign"))
        results = await ann.expect(p.Results)
        entries = await stored_moves(persistent_redis_server.url, code, 1, ann.pid)
        assert [e.move for e in entries] == results.records[ann.pid].moves
        assert len(entries) == snapshot.seq + 1
        await ann.close()
        await bob.close()
    await store.close()
