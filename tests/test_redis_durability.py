"""Durability as shipped: Redis run with docker-compose.yml's own persistence settings (read from
that file: tests/redis_fixture.py, ``shipped_persistence``) and SIGKILLed mid-race, with moves in
flight, comes back from its append-only file holding every move any racer saw acknowledged. The
race then goes on. A real server, real WebSocket clients, a real redis-server."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from redis_fixture import RedisServer, shipped_persistence
from support import FAST, Client, board, eventually, fast_config, make_room, running_server, start_race, view_game

from server.core.records import decode_entry
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import UNDO, View

RACERS = ["Ann", "Bob", "Cy", "Di"]


def test_the_shipped_redis_fsyncs_every_write_before_it_answers() -> None:
    options = shipped_persistence()
    settings = dict(zip(options[::2], options[1::2], strict=True))
    assert settings["--appendonly"] == "yes" and settings["--appendfsync"] == "always"


async def race_until_stopped(racer: Client, view: View, acked: set[int], stop: asyncio.Event, seed: int) -> None:
    """Move, undo, move, ... (the game never ends) as fast as answered, until ``stop``; every
    acknowledged id into ``acked``. A move refused store_unavailable (Redis is down) waits for the
    board the server resends."""
    rng = random.Random(seed)
    move_id = 1
    resend: str | None = None
    undo_next = False  # after a move that can be undone (one from the stock or the reserve turns a card: not)
    while not stop.is_set():
        legal = [move for move in view_game(view).legal_moves() if move != UNDO]
        plain = [move for move in legal if not move.startswith(("stock>", "reserve>"))]
        move = resend or (UNDO if undo_next else rng.choice(plain or legal))
        await racer.send(p.Move(id=move_id, move=move))
        reply = await racer.expect(p.MoveOk | p.MoveRejected, timeout=30)  # type: ignore[arg-type]
        assert reply.id == move_id, reply
        if isinstance(reply, p.MoveRejected):
            # Stored or not, nobody knows yet: once the server sends the board again (the log as
            # Redis has it), the same move goes again with the same id (docs/protocol.md, 3.2).
            assert reply.code == p.STORE_UNAVAILABLE, reply
            view = board(await racer.expect(p.RaceStart, timeout=30))
            resend = move
            continue
        resend = None
        undo_next = move != UNDO and not move.startswith(("stock>", "reserve>"))
        acked.add(reply.id)
        view = board(reply)
        move_id += 1


async def test_a_redis_sigkill_mid_race_loses_no_acknowledged_move(shipped_redis_server: RedisServer) -> None:
    store = RedisStore(shipped_redis_server.url, socket_timeout=0.5, connect_timeout=0.5, retries=0)
    core = replace(FAST, store_outage_ms=2000, retry_first_ms=50, retry_max_ms=200)
    try:
        async with running_server(store, fast_config(core=core)) as server:
            racers, code = await make_room(server, RACERS)
            starts = await start_race(racers)
            acked: dict[str, set[int]] = {racer.pid: set() for racer in racers}
            stop = asyncio.Event()
            tasks = [
                asyncio.ensure_future(race_until_stopped(racer, board(start), acked[racer.pid], stop, seed))
                for seed, (racer, start) in enumerate(zip(racers, starts, strict=True))
            ]

            def racing(enough: int) -> bool:
                for task in tasks:
                    if task.done():
                        task.result()  # a racer that failed fails the test with its own error
                return all(len(ids) >= enough for ids in acked.values())

            await eventually(lambda: racing(20), timeout=30, what="moves acked")
            shipped_redis_server.kill()  # SIGKILL, moves in flight: no goodbye, no last flush
            before_kill = {pid: set(ids) for pid, ids in acked.items()}
            shipped_redis_server.start()  # the same folder: it loads its append-only file
            # The race goes on after the restart: every racer gets moves acknowledged again.
            await eventually(
                lambda: racing(0) and all(len(acked[pid]) > len(ids) for pid, ids in before_kill.items()),
                timeout=30,
                what="moves acknowledged after the restart",
            )
            stop.set()
            await asyncio.gather(*tasks)
            for racer in racers:
                entries = [decode_entry(entry) for entry in await store.load_moves(code, 1, racer.pid)]
                stored = [entry.id for entry in entries]
                assert acked[racer.pid] <= set(stored), sorted(acked[racer.pid] - set(stored))
                assert len(stored) == len(set(stored))  # nothing applied twice
                await racer.close()
    finally:
        await store.close()
