"""Overload that degrades: past ``busy_turn_moves`` moves in one turn of the event loop,
a plot-server process answers the turn's later moves ``busy`` with a retry hint at once, and
nothing else changes: every move is answered, a busy move resent later is played, no write fails
while Redis is healthy, and the stored logs replay to the boards the racers were acknowledged.
The same for one client that sends far ahead of its answers, past its queue's bound
(``--max-queued-moves``)."""

from __future__ import annotations

import asyncio
import re
import signal
from dataclasses import replace

import pytest
from redis_fixture import RedisServer, free_port
from support import (
    FAST,
    Client,
    eventually,
    fast_config,
    latest,
    log_lines,
    make_room,
    running_server,
    server_process,
    start_race,
    wait_healthy,
)

from server.core.records import decode_entry
from server.store.base import Store
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import replay

RETRY_MS = re.compile(r"retry_ms=(\d+)")
TURN_LIMIT = 8
BURST = 10  # moves a racer sends in one write: one turn of the server's loop takes each write whole


async def send_burst(client: Client, moves: list[p.Move]) -> None:
    """Several move frames in one write, so that they reach the server together (a client that
    sends ahead of its acknowledgements, or many clients at once, as the server sees them)."""
    ws = client.ws
    for move in moves:
        ws.protocol.send_binary(p.encode(move))
    ws.transport.write(b"".join(ws.protocol.data_to_send()))


async def answers(client: Client, ids: set[int]) -> dict[int, p.MoveOk | p.MoveRejected]:
    got: dict[int, p.MoveOk | p.MoveRejected] = {}
    while ids - got.keys():
        msg = await client.expect(p.MoveOk | p.MoveRejected, timeout=10.0)  # type: ignore[arg-type]
        assert msg.id in ids, msg
        assert msg.id not in got, f"{msg.id} answered twice"
        got[msg.id] = msg
    return got


async def test_a_flood_past_the_loop_limit_is_answered_busy_and_the_logs_replay_to_the_acknowledged_boards(
    redis_server: RedisServer, redis_url: str
) -> None:
    port = free_port()
    args = ["--port", str(port), "--redis", redis_url, "--countdown", "0.1", "--rate", "100000"]
    args += ["--busy-turn-moves", str(TURN_LIMIT), "--busy-turn-streak", "1", "--log-level", "warning"]
    with server_process(*args) as proc:
        await asyncio.to_thread(wait_healthy, proc, port)
        racers, code = await make_room(f"ws://127.0.0.1:{port}", ["Ann", "Bob", "Cy"])
        starts = await start_race(racers)
        # Only stock>waste, fewer than the stock holds: every move is legal in any order, so an
        # answer other than move_ok or busy is a fault.
        stock = min(s.view.stock for s in starts if s.view is not None)
        target = min(stock - 2, 6 * BURST)
        next_id = {c.pid: 1 for c in racers}
        accepted = {c.pid: 0 for c in racers}
        to_resend: dict[str, list[int]] = {c.pid: [] for c in racers}
        busy_answers = 0
        rounds = 0
        while any(accepted[c.pid] < target for c in racers):
            rounds += 1
            assert rounds < 50, f"no progress: {accepted}"
            # Two writes per racer, 20 ms apart: the first turn (30 moves, past the limit) makes
            # the streak, the next one back to back takes on 8 moves and refuses the rest.
            sent: dict[str, list[int]] = {c.pid: [] for c in racers}
            for half in range(2):
                if half:
                    await asyncio.sleep(0.02)
                writes = []
                for client in racers:
                    ids = to_resend[client.pid][:BURST]
                    del to_resend[client.pid][:BURST]
                    while len(ids) < BURST and accepted[client.pid] + len(sent[client.pid]) + len(ids) < target:
                        ids.append(next_id[client.pid])
                        next_id[client.pid] += 1
                    sent[client.pid] += ids
                    writes.append(send_burst(client, [p.Move(id=i, move="stock>waste") for i in ids]))
                await asyncio.gather(*writes)
            waits = []
            for client in racers:
                got = await answers(client, set(sent[client.pid]))
                for move_id, answer in sorted(got.items()):
                    if isinstance(answer, p.MoveOk):
                        accepted[client.pid] += 1
                        continue
                    assert answer.code == p.BUSY, answer
                    assert "taking on moves" in answer.reason, answer.reason  # the loop's limit, not the store's
                    hint = RETRY_MS.search(answer.reason)
                    assert hint is not None, answer.reason
                    waits.append(int(hint.group(1)))
                    to_resend[client.pid].append(move_id)  # the same id: it was never played
                    busy_answers += 1
            assert all(125 <= w <= 375 for w in waits), waits  # 250 ms, spread by half either way
            if waits:
                await asyncio.sleep(max(waits) / 1000)  # as the hint says
        assert busy_answers > 0
        for client in racers:
            await client.send(p.Move(id=next_id[client.pid], move="resign"))
        results = [await c.expect(p.Results, timeout=10.0) for c in racers]
        store = RedisStore(redis_url)
        try:
            for client in racers:
                entries = [decode_entry(e) for e in await store.load_moves(code, results[0].race, client.pid)]
                oks = [m for m in client.messages if isinstance(m, p.MoveOk)]
                assert len(entries) == len(oks) == target + 1  # every acknowledged move, once; the resign
                assert sorted(e.id or 0 for e in entries) == sorted(m.id for m in oks)
                game, _ = replay(results[0].deal, [e.move for e in entries])
                assert client.board.view == game.view()  # the board the acknowledgements built
                assert not client.diverged
        finally:
            await store.close()
        for client in racers:
            await client.close()
        proc.send_signal(signal.SIGINT)
        await asyncio.to_thread(proc.wait, 15)
        events = [line.get("event") for line in log_lines(proc)]
        assert "append_failed" not in events and "store_unavailable" not in events, events


async def test_one_big_turn_after_a_pause_refuses_nothing_a_standing_backlog_does() -> None:
    """The streak: a turn past busy_turn_moves refuses moves only when the turns before it, back to
    back, were past it too (a standing backlog), not after one burst (a pause, a collection)."""
    config = fast_config(busy_turn_moves=4, busy_turn_streak=2)
    async with running_server(config=config) as server:

        async def turn(moves: int) -> list[str | None]:
            causes = []
            for _ in range(moves):
                server.appends.load()  # counts the move in this turn
                causes.append(server.appends.busy())
            await asyncio.sleep(0)  # the turn ends: its closing callback runs
            await asyncio.sleep(0)
            return causes

        assert await turn(10) == [None] * 10  # one big turn: nothing refused
        assert await turn(10) == [None] * 10  # two in a row: still none
        assert await turn(6) == [None] * 4 + ["loop"] * 2  # the third: past 4, refused
        assert await turn(3) == [None] * 3  # a small turn ends the streak
        assert await turn(10) == [None] * 10
        await asyncio.sleep(0.1)  # idle for longer than TURN_GAP_S: the streak does not carry over
        assert await turn(10) == [None] * 10
        assert await turn(10) == [None] * 10
        assert await turn(5) == [None] * 4 + ["loop"]


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
async def test_a_client_pipelining_past_its_queue_bound_gets_busy_and_every_move_lands_once(
    redis_url: str, store_kind: str
) -> None:
    """One racer sends 60 moves in one write without waiting: the first 33 (the head and the 32
    the queue holds by default) are played in order; those that find the queue full are answered
    busy at once with the core's retry hint, never left unanswered; resent after it with the same
    ids, they are played; the store holds every acknowledged move once, replaying to the board."""
    store: Store = MemoryStore() if store_kind == "memory" else RedisStore(redis_url)
    try:
        async with running_server(store, fast_config()) as server:
            bound = server.config.core.max_queued_moves
            assert bound == 32
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            assert starts[0].view is not None
            sent = min(60, starts[0].view.stock)  # only stock>waste: legal in any order while the stock lasts
            assert sent > bound + 1
            await send_burst(ann, [p.Move(id=i, move="stock>waste") for i in range(1, sent + 1)])
            got = await answers(ann, set(range(1, sent + 1)))
            accepted = {i for i, m in got.items() if isinstance(m, p.MoveOk)}
            busy = {i: m for i, m in got.items() if isinstance(m, p.MoveRejected)}
            assert set(range(1, bound + 2)) <= accepted, "nothing queued before the bound was refused"
            assert busy, "the moves past the bound are refused"
            hints = set()
            for answer in busy.values():
                assert answer.code == p.BUSY and "queued behind the one being written" in answer.reason, answer
                hint = RETRY_MS.search(answer.reason)
                assert hint is not None, answer.reason
                hints.add(int(hint.group(1)))
            assert hints == {server.config.core.queue_retry_ms}
            await asyncio.sleep(max(hints) / 1000)  # as the hint says
            await send_burst(ann, [p.Move(id=i, move="stock>waste") for i in sorted(busy)])
            again = await answers(ann, set(busy))
            assert all(isinstance(m, p.MoveOk) and not m.duplicate for m in again.values()), again
            await ann.send(p.Move(id=sent + 1, move="resign"))
            await bob.send(p.Move(id=1, move="resign"))
            results = await ann.expect(p.Results, timeout=10.0)
            entries = [decode_entry(e) for e in await store.load_moves(code, results.race, ann.pid)]
            assert sorted(e.id or 0 for e in entries) == list(range(1, sent + 2)), "every move once, the resign"
            game, _ = replay(results.deal, [e.move for e in entries])
            assert ann.board.view == game.view() and not ann.diverged
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()


async def test_the_client_s_moves_go_out_in_the_order_asked_even_when_one_is_answered_busy(
    own_redis_server: RedisServer,
) -> None:
    """The terminal client's connection (client/connection.py) sends one move at a time: Ann asks
    for a move while Redis is stopped (its write stalls), then a second (the server, its write out
    too long, would answer it busy, with a resend after a random wait), then a third once the
    first is acknowledged. Sent as asked, the third was played before the busy one came back;
    now each waits for the one before it, and the log holds them in the order asked."""
    from client.connection import Connection

    store = RedisStore(own_redis_server.url)
    config = fast_config(append_stall_ms=100, core=replace(FAST, busy_retry_ms=300))
    try:
        async with running_server(store, config) as server:
            (bob,), code = await make_room(server, ["Bob"])
            ann = Connection(f"ws://127.0.0.1:{server.port}", "Ann")
            await ann.start()
            assert isinstance(await ann.request(p.Join(code=code), p.Room), p.Room)
            await ann.send(p.Ready(ready=True))
            starting = asyncio.ensure_future(ann.wait_for(lambda m: isinstance(m, p.RaceStart), 15))
            await eventually(lambda: any(m.ready for m in latest(bob, p.Room).members if m.player_id != bob.pid))
            await bob.send(p.Start())
            start = await starting
            assert isinstance(start, p.RaceStart)
            redis_process = own_redis_server.process
            assert redis_process is not None
            redis_process.send_signal(signal.SIGSTOP)
            try:
                first = asyncio.ensure_future(ann.move("stock>waste"))
                await eventually(lambda: server.appends.busy() == "store", 5, what="the first write stalled")
                second = asyncio.ensure_future(ann.move("stock>waste"))
                # Time for a second move sent at once (the old client) to be answered busy; the
                # client now holds it back, so there is nothing of it to wait for.
                await asyncio.sleep(0.05)
            finally:
                redis_process.send_signal(signal.SIGCONT)
            answers = [await first]
            third = asyncio.ensure_future(ann.move("stock>waste"))
            answers += [await second, await third]
            oks = [a for a in answers if isinstance(a, p.MoveOk)]
            assert len(oks) == 3, answers
            ids = [a.id for a in oks]
            assert ids == sorted(ids) and [a.seq for a in oks] == [1, 2, 3], answers
            welcome = ann.welcome
            assert welcome is not None
            stored = [decode_entry(e).id for e in await store.load_moves(code, start.race, welcome.player_id)]
            assert stored == ids  # played in the order asked
            await ann.close()
            await bob.close()
    finally:
        await store.close()
