"""Several server nodes on one Redis (docs/scaling.md, "Several nodes"): racers, host and spectator
of one room spread over two nodes, each node a real server (in this process, or a real
``plot-server --multi-node`` process), one real Redis, real WebSocket clients."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio
from redis_fixture import RedisServer, free_port
from support import (
    FAST,
    TLS,
    Client,
    eventually,
    fast_config,
    health,
    latest,
    log_lines,
    metric,
    metrics,
    play,
    race_number,
    room_phase,
    server_process,
    wait_for_file,
    wait_healthy,
)
from winnable_sources import gated_random_deal

from server.core.records import LogEntry, decode_player, decode_room, encode_record, hash_token, open_race_of
from server.shell import RaceServer
from server.store.base import AppendRequest, AppendResult
from server.store.redis import RedisStore
from server.winnable import WinnableConfig
from shared import protocol as p

SHARED = replace(FAST, shared_rooms=True)


@asynccontextmanager
async def node(redis_url: str, **overrides: Any) -> AsyncIterator[RaceServer]:
    server = RaceServer(RedisStore(redis_url), fast_config(core=SHARED, **overrides), store_name="redis")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await server.store.close()


async def hello(address: RaceServer | str, name: str) -> Client:
    client = await Client.open(address, name)
    await client.hello(name)
    return client


def moves_of(client: Client, pid: str) -> int:
    """The moves ``pid`` has in the latest leaderboard ``client`` received (-1: none yet)."""
    for msg in reversed(client.messages):
        if isinstance(msg, p.Leaderboard):
            return next((row.moves for row in msg.racers if row.player_id == pid), -1)
    return -1


async def spread_room(a: RaceServer | str, b: RaceServer | str) -> tuple[list[Client], list[p.RaceStart]]:
    """Host and a racer on node A, a racer and a spectator on node B, through to the race's start:
    [host, ann, bob, eve] and the racers' race_start."""
    host, ann = await hello(a, "host"), await hello(a, "ann")
    bob, eve = await hello(b, "bob"), await hello(b, "eve")
    await host.send(p.CreateRoom(options=p.RoomOptions()))
    code = (await host.expect(p.Room)).code
    await ann.send(p.Join(code=code))
    await ann.expect(p.Room)
    await bob.send(p.Join(code=code))  # node B loads the room node A created
    await bob.expect(p.Room)
    await eve.send(p.Join(code=code, role=p.SPECTATOR))
    await eve.expect(p.Room)
    # The host on A sees bob (joined on B) and the spectator count.
    await eventually(lambda: bob.pid in {m.player_id for m in latest(host, p.Room).members}, what="bob on A")
    for racer in (ann, bob):
        await racer.send(p.Ready(ready=True))
    await eventually(
        lambda: all(m.ready for m in latest(host, p.Room).members if m.player_id != host.pid),
        what="both ready, seen on A",
    )
    await host.send(p.Start())
    starts = [await c.expect(p.RaceStart) for c in (host, ann, bob)]
    await eve.expect(p.RaceStart)
    assert len({s.race for s in starts}) == 1
    return [host, ann, bob, eve], starts


async def finish_race(clients: list[Client], moves: dict[str, int]) -> None:
    """Every racer resigns; every client gets the same results, with every racer's moves."""
    for racer in clients[:3]:
        await racer.send(p.Move(id=1000, move="resign"))
    results = [await c.expect(p.Results, timeout=10) for c in clients]
    assert all(r == results[0] for r in results), results
    assert {row.player_id: row.moves for row in results[0].racers} == {pid: n + 1 for pid, n in moves.items()}
    for client in clients:
        await room_phase(client, p.RESULTS)
        await client.close()


async def spread_race(a: RaceServer | str, b: RaceServer | str) -> None:
    """The room, the start, the moves and the results go across, and every client sees the same."""
    rng = random.Random(5)
    clients, starts = await spread_room(a, b)
    host, ann, bob, eve = clients
    views = [s.view for s in starts]
    assert views[1] is not None and views[2] is not None
    # Moves on both nodes; the spectator on B sees A's racer's progress, and A's host sees B's racer.
    await play(ann, views[1], 12, rng)
    await play(bob, views[2], 9, rng)
    ann_moves = latest(ann, p.MoveOk).seq
    bob_moves = latest(bob, p.MoveOk).seq
    await eventually(lambda: moves_of(eve, ann.pid) == ann_moves, what="ann's progress seen on node B")
    await eventually(lambda: moves_of(host, bob.pid) == bob_moves, what="bob's progress seen on node A")
    await finish_race(clients, {host.pid: 0, ann.pid: ann_moves, bob.pid: bob_moves})


async def test_a_race_spread_over_two_nodes(redis_url: str) -> None:
    async with node(redis_url) as a, node(redis_url) as b:
        await spread_race(a, b)


async def test_a_room_change_on_one_node_reaches_the_other_at_once(redis_url: str) -> None:
    async with node(redis_url) as a, node(redis_url) as b:
        host = await hello(a, "host")
        guest = await hello(b, "guest")
        await host.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await host.expect(p.Room)).code
        await guest.send(p.Join(code=code))
        await guest.expect(p.Room)
        await guest.send(p.Ready(ready=True))
        await eventually(lambda: any(m.ready for m in latest(host, p.Room).members), what="ready seen on A")
        await host.send(p.Leave())
        await eventually(lambda: latest(guest, p.Room).host == guest.pid, what="the host's leave seen on B")
        for client in (host, guest):
            await client.close()


async def test_two_plot_server_processes_share_a_race(own_redis_server: RedisServer) -> None:
    ports = free_port(), free_port()
    common = ("--redis", own_redis_server.url, "--multi-node", "--countdown", "0.1", "--rate", "1000")
    with (
        server_process("--port", str(ports[0]), *common) as first,
        server_process("--port", str(ports[1]), *common) as second,
    ):
        await asyncio.to_thread(wait_healthy, first, ports[0])
        await asyncio.to_thread(wait_healthy, second, ports[1])
        await spread_race(f"ws://127.0.0.1:{ports[0]}", f"ws://127.0.0.1:{ports[1]}")


def test_multi_node_needs_one_redis_and_says_so() -> None:
    cases = [
        (("--multi-node",), {}, "--multi-node needs --redis URL"),
        ((), {"PLOT_MULTI_NODE": "1"}, "--multi-node needs --redis URL"),
        ((), {"PLOT_MULTI_NODE": "maybe", "REDIS_URL": "redis://127.0.0.1:1/0"}, "PLOT_MULTI_NODE='maybe'"),
    ]
    for args, env, said in cases:
        with server_process("--port", str(free_port()), *args, env=env) as proc:
            _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 2, (args, env, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], err


async def dropped_subscriptions_race(redis_url: str, kill_pubsub: Callable[[str], object]) -> None:
    """``kill_pubsub(code)`` cuts the nodes' subscriptions of the room mid-race (what they publish
    meanwhile is lost); each node reads the room back, and everyone converges."""
    rng = random.Random(8)
    async with node(redis_url) as a, node(redis_url) as b:
        clients, starts = await spread_room(a, b)
        host, ann, bob, eve = clients
        assert a.nodes is not None and b.nodes is not None
        views = [s.view for s in starts]
        assert views[1] is not None and views[2] is not None
        view_ann, next_id = await play(ann, views[1], 3, rng)
        killed = kill_pubsub(latest(host, p.Room).code)
        assert isinstance(killed, int) and killed >= 2
        await play(ann, view_ann, 6, rng, first_id=next_id)  # published while B is not listening
        await play(bob, views[2], 4, rng)
        sam = await hello(a, "sam")  # a room change during the gap too: a second spectator, on A
        await sam.send(p.Join(code=latest(host, p.Room).code, role=p.SPECTATOR))
        await sam.expect(p.Room)
        await eventually(lambda: a.nodes is not None and a.nodes.missed >= 1, what="node A saw its gap")
        await eventually(lambda: b.nodes is not None and b.nodes.missed >= 1, what="node B saw its gap")
        ann_moves, bob_moves = latest(ann, p.MoveOk).seq, latest(bob, p.MoveOk).seq
        await eventually(lambda: moves_of(eve, ann.pid) == ann_moves, what="ann's moves on B")
        await eventually(lambda: moves_of(host, bob.pid) == bob_moves, what="bob's moves on A")
        await eventually(lambda: latest(eve, p.Room).spectators == 2, what="the second spectator counted on B")
        await finish_race([host, ann, bob, eve, sam], {host.pid: 0, ann.pid: ann_moves, bob.pid: bob_moves})


async def test_dropped_subscriptions_catch_up_mid_race(own_redis_server: RedisServer) -> None:
    """CLIENT KILL TYPE pubsub mid-race: both nodes' subscriptions drop; they catch up."""
    await dropped_subscriptions_race(
        own_redis_server.url, lambda _code: own_redis_server.command("CLIENT", "KILL", "TYPE", "pubsub")
    )


async def test_a_node_killed_mid_race_its_racers_go_on_elsewhere(own_redis_server: RedisServer) -> None:
    """kill -9 of node A mid-race: ann (on A) resumes on node B with her token and finds every
    acknowledged move; the host (on A) never comes back: node B sees A's liveness lapse, and the
    host forfeits after the grace period on B's timer; the race finishes."""
    rng = random.Random(3)
    ports = free_port(), free_port()
    common = ("--redis", own_redis_server.url, "--multi-node", "--countdown", "0.1", "--rate", "1000", "--grace", "1")
    with (
        server_process("--port", str(ports[0]), *common) as first,
        server_process("--port", str(ports[1]), *common) as second,
    ):
        await asyncio.to_thread(wait_healthy, first, ports[0])
        await asyncio.to_thread(wait_healthy, second, ports[1])
        node_b = f"ws://127.0.0.1:{ports[1]}"
        clients, starts = await spread_room(f"ws://127.0.0.1:{ports[0]}", node_b)
        host, ann, bob, eve = clients
        assert starts[1].view is not None and starts[2].view is not None
        await play(ann, starts[1].view, 10, rng)
        acked = latest(ann, p.MoveOk)
        await play(bob, starts[2].view, 5, rng)
        first.kill()  # SIGKILL: no shutdown message, no flush, no disconnect saved
        assert ann.welcome is not None
        again = await Client.open(node_b, "ann again")
        welcome = await again.hello("ann", token=ann.welcome.token)
        assert welcome.resumed and welcome.player_id == ann.pid
        board = await again.expect(p.RaceStart)
        assert (board.seq, board.check, board.view) == (acked.seq, acked.check, acked.view)  # no acknowledged move lost
        assert board.view is not None
        await play(again, board.view, 4, rng, first_id=500)
        ann_moves = latest(again, p.MoveOk).seq
        bob_moves = latest(bob, p.MoveOk).seq
        for racer in (again, bob):
            await racer.send(p.Move(id=1000, move="resign"))
        # The host, left on the dead node, forfeits on node B (liveness lapse, then the grace).
        results = [await c.expect(p.Results, timeout=15) for c in (again, bob, eve)]
        assert all(r == results[0] for r in results)
        rows = {row.player_id: row for row in results[0].racers}
        assert rows[host.pid].status == "resigned" and not rows[host.pid].connected
        assert (rows[ann.pid].moves, rows[bob.pid].moves) == (ann_moves + 1, bob_moves + 1)
        for client in (again, bob, eve, host, ann):
            await client.close()


async def test_a_disconnect_whose_save_loses_is_replayed_on_the_stored_room(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """ann (on node A) leaves mid-race just as another writer commits the room: A's save of her
    departure loses the compare-and-set. A reads the room back and marks her away again on the
    stored copy: both nodes show her away, and she forfeits after the grace period."""
    caplog.set_level(logging.INFO, logger="plot.server")
    rng = random.Random(11)
    async with node(redis_url) as a, node(redis_url) as b:
        clients, starts = await spread_room(a, b)
        host, ann, bob, eve = clients
        assert starts[1].view is not None
        await play(ann, starts[1].view, 3, rng)
        ann_moves = latest(ann, p.MoveOk).seq
        code = latest(host, p.Room).code
        other = RedisStore(redis_url)  # another node committing the room at that moment (no publish)
        try:
            loaded = await other.load_room(code)
            assert loaded is not None
            record = decode_room(loaded[0])
            assert await other.save_room(code, loaded[0], loaded[1], open_race=open_race_of(record)) == loaded[1] + 1
        finally:
            await other.close()
        await ann.close()

        def away_everywhere() -> bool:
            rows = [latest(c, p.Leaderboard).racers for c in (host, eve)]
            return all(not next(r for r in board if r.player_id == ann.pid).connected for board in rows)

        await eventually(away_everywhere, what="ann away on node A (host) and node B (eve)")
        lost = [r for r in caplog.records if r.getMessage() == "room_save_lost"]
        assert lost, "the departure's save did not lose the compare-and-set"
        assert any(r.getMessage() == "departure_replayed" for r in caplog.records)
        assert isinstance(b.store, RedisStore)

        async def stored_away() -> bool:
            stored = await b.store.load_room(code)
            return stored is not None and any(
                m.player_id == ann.pid and m.left_ms is not None for m in decode_room(stored[0]).members
            )

        await eventually(stored_away, what="ann away in the stored record")

        def forfeited(client: Client) -> bool:
            rows = latest(client, p.Leaderboard).racers
            return next(r for r in rows if r.player_id == ann.pid).status == "resigned"

        await eventually(lambda: forfeited(host) and forfeited(eve), timeout=10, what="ann forfeit on both")
        for racer in (host, bob):
            await racer.send(p.Move(id=1000, move="resign"))
        results = [await c.expect(p.Results, timeout=10) for c in (host, bob, eve)]
        assert all(r == results[0] for r in results)
        row = next(r for r in results[0].racers if r.player_id == ann.pid)
        assert row.status == "resigned" and not row.connected and row.moves == ann_moves + 1
        for client in (host, bob, eve):
            await client.close()


async def test_one_node_searches_a_winnable_deal_and_another_takes_over_when_it_stops(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A winnable-only room held by two nodes: the host's node A takes the deal lease and searches
    (held at its gate); node B, whose search would find a deal at once, waits. A stops: its lease
    lapses, B takes it over, finds the deal and the race starts for B's racer."""
    caplog.set_level(logging.INFO, logger="plot.server")
    gate_a, gate_b = tmp_path / "gate_a", tmp_path / "gate_b"
    gate_b.write_text("open")  # only the lease keeps B from finding a deal at once

    def searching(gate: Path) -> dict[str, Any]:
        source = functools.partial(gated_random_deal, str(gate))
        return {"winnable": WinnableConfig(seed_source=source), "deal_lease_s": 1.0}

    a_node = node(redis_url, **searching(gate_a))
    a = await a_node.__aenter__()
    a_running = True
    try:
        async with node(redis_url, **searching(gate_b)) as b:
            host, bob = await hello(a, "host"), await hello(b, "bob")
            await host.send(p.CreateRoom(options=p.RoomOptions(winnable_only=True)))
            code = (await host.expect(p.Room)).code
            await bob.send(p.Join(code=code))
            await bob.expect(p.Room)
            await bob.send(p.Ready(ready=True))
            await eventually(lambda: any(m.ready for m in latest(host, p.Room).members), what="bob ready on A")
            await host.send(p.Start())
            await room_phase(bob, p.DEALING)
            await wait_for_file(Path(str(gate_a) + ".pid"))  # A searches, held at its gate
            await eventually(
                lambda: any(r.getMessage() == "deal_search_waiting" for r in caplog.records), what="B waits"
            )
            assert b.deal_finder.searches == 0 and not Path(str(gate_b) + ".pid").exists()
            assert a.nodes is not None and isinstance(a.store, RedisStore)
            raw = redis.asyncio.from_url(redis_url)
            try:
                holder = await raw.get(a.store.deal_lease_key(code, race_number(a, code)))
            finally:
                await raw.aclose()
            assert holder == a.nodes.node_id.encode()
            a_running = False
            await a_node.__aexit__(None, None, None)  # A stops: its search ends, its lease is not renewed
            start = await bob.expect(p.RaceStart, timeout=20)
            assert start.view is not None
            assert b.deal_finder.searches >= 1 and Path(str(gate_b) + ".pid").exists()
            assert any(r.getMessage() == "deal_search_taken_over" for r in caplog.records)
            for client in (host, bob):
                await client.close()
    finally:
        if a_running:
            await a_node.__aexit__(None, None, None)


@pytest.mark.parametrize("readback", ["incremental", "full"])
async def test_a_read_back_mid_race_reads_only_the_entries_the_node_lacks(
    redis_url: str, readback: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Spectators coming and going on node B mid-race: node A reads the room back each time. It
    reads only the log entries its copy lacks (none: it played every move already), where the
    full read-back reads every entry of the race; the racers play on, and the results agree."""
    caplog.set_level(logging.INFO, logger="plot.server")
    rng = random.Random(8)
    async with node(redis_url, readback=readback) as a, node(redis_url, readback=readback) as b:
        clients, starts = await spread_room(a, b)
        host, ann, bob, eve = clients
        assert starts[1].view is not None and starts[2].view is not None
        ann_view, ann_next = await play(ann, starts[1].view, 12, rng)
        await play(bob, starts[2].view, 9, rng)
        known = latest(ann, p.MoveOk).seq + latest(bob, p.MoveOk).seq
        await eventually(lambda: moves_of(host, bob.pid) == latest(bob, p.MoveOk).seq, what="bob's moves on A")
        code = latest(host, p.Room).code
        caplog.clear()
        sam = await hello(b, "sam")
        await sam.send(p.Join(code=code, role=p.SPECTATOR))
        await sam.expect(p.Room)
        await eventually(lambda: latest(host, p.Room).spectators == 2, what="sam counted on A")

        def read_back() -> list[int]:
            return [
                getattr(r, "fields", {})["entries_read"]
                for r in caplog.records
                if r.getMessage() == "room_refreshed" and getattr(r, "fields", {}).get("room") == code
            ]

        await eventually(lambda: bool(read_back()), what="A read the room back")
        assert read_back()[0] == (0 if readback == "incremental" else known)
        # The racers go on from their acknowledged boards on both nodes.
        await play(ann, ann_view, 6, rng, first_id=ann_next)
        ann_moves, bob_moves = latest(ann, p.MoveOk).seq, latest(bob, p.MoveOk).seq
        await eventually(lambda: moves_of(eve, ann.pid) == ann_moves, what="ann's later moves on B")
        await finish_race([host, ann, bob, eve, sam], {host.pid: 0, ann.pid: ann_moves, bob.pid: bob_moves})


async def test_a_resume_on_another_node_supersedes_the_older_connection(redis_url: str) -> None:
    async with node(redis_url) as a, node(redis_url) as b:
        host, ann = await hello(a, "host"), await hello(a, "ann")
        await host.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await host.expect(p.Room)).code
        await ann.send(p.Join(code=code))
        await ann.expect(p.Room)
        assert ann.welcome is not None
        assert isinstance(a.store, RedisStore)

        async def joined() -> bool:  # room records are written behind: the join is stored a moment later
            loaded = await a.store.load_room(code)
            return loaded is not None and ann.pid in {m.player_id for m in decode_room(loaded[0]).members}

        await eventually(joined, what="ann's join stored")
        again = await Client.open(b, "ann on B")
        welcome = await again.hello("ann", token=ann.welcome.token)
        assert welcome.resumed and welcome.room == code
        error = await ann.expect(p.Error)
        assert error.code == p.SUPERSEDED
        assert await ann.closed() == p.CLOSE_SUPERSEDED
        await again.send(p.Ready(ready=True))  # the newer connection acts for ann; A's host sees it
        await eventually(
            lambda: any(m.player_id == ann.pid and m.ready and m.connected for m in latest(host, p.Room).members),
            what="ann ready and connected, seen on A",
        )
        for client in (host, again):
            await client.close()


async def test_a_join_of_its_own_seat_on_another_node_takes_the_seat_back(redis_url: str) -> None:
    """The host creates its room on A and reconnects to B (the room's node) before A's write of its
    player record names the room: B's welcome has no room, and the client joins its room again.
    That join of its own seat is a resume: the host is present on B (A's members see it connected,
    its ready counts), not left away on A until its grace ran out."""
    async with node(redis_url) as a, node(redis_url) as b:
        first, ann = await hello(a, "host"), await hello(a, "ann")
        assert first.welcome is not None
        await first.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await first.expect(p.Room)).code
        await ann.send(p.Join(code=code))
        await ann.expect(p.Room)
        assert isinstance(a.store, RedisStore)
        store = a.store

        async def named() -> bool:
            data = await store.get_player(first.pid)
            return data is not None and decode_player(data).room == code

        await eventually(named, what="the host's record names its room")
        await first.close()
        await eventually(
            lambda: any(m.player_id == first.pid and not m.connected for m in latest(ann, p.Room).members),
            what="the host shown away",
        )
        # As if A's write of the record had not landed yet: the record names no room.
        record = decode_player(cast(bytes, await store.get_player(first.pid)))
        record.room = None
        await store.put_player(first.pid, hash_token(first.welcome.token), encode_record(record))
        host = await Client.open(b, "host on B")
        welcome = await host.hello("host", token=first.welcome.token)
        assert welcome.resumed and welcome.room is None
        await host.send(p.Join(code=code))
        assert (await host.expect(p.Room)).code == code
        await host.send(p.Ready(ready=True))
        await eventually(
            lambda: any(m.player_id == host.pid and m.connected and m.ready for m in latest(ann, p.Room).members),
            what="the host connected and ready, seen on A",
        )
        assert not any(isinstance(m, p.Error) for m in host.messages), host.messages

        async def renamed() -> bool:
            data = await store.get_player(first.pid)
            return data is not None and decode_player(data).room == code

        await eventually(renamed, what="the host's record names its room again")
        await ann.send(p.Ready(ready=True))
        await eventually(lambda: all(m.ready for m in latest(host, p.Room).members), what="both ready")
        await host.send(p.Start())
        for client in (host, ann):
            assert (await client.expect(p.RaceStart)).view is not None
        for client in (host, ann):
            await client.close()


async def test_a_node_whose_last_member_of_a_room_leaves_releases_it_once_that_is_stored(redis_url: str) -> None:
    """Ann races on node A, Bob on node B (no room affinity here). Ann's connection drops: once A
    has stored her away, A holds no member of the room and B does, so A drops the room at once
    (before, it kept applying the race's moves until some later change was read back). Ann
    resumes on B and plays on; A never loads the room again."""
    async with node(redis_url) as a, node(redis_url) as b:
        ann, bob = await hello(a, "ann"), await hello(b, "bob")
        await ann.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await ann.expect(p.Room)).code
        await bob.send(p.Join(code=code))
        await bob.expect(p.Room)
        for client in (ann, bob):
            await client.send(p.Ready(ready=True))
        await eventually(lambda: sum(m.ready for m in latest(ann, p.Room).members) == 2, what="both ready on A")
        await ann.send(p.Start())
        starts = [await c.expect(p.RaceStart) for c in (ann, bob)]
        assert starts[0].view is not None and starts[1].view is not None
        rng = random.Random(4)
        await play(ann, starts[0].view, 3, rng)
        acked = latest(ann, p.MoveOk)
        assert a.core.has_room(code) and ann.welcome is not None
        await ann.close()
        await eventually(lambda: not a.core.has_room(code), 10, what="node A released the room")
        await eventually(
            lambda: any(m.player_id == ann.pid and not m.connected for m in latest(bob, p.Room).members),
            what="ann away, seen on B",
        )
        again = await Client.open(b, "ann on B")
        welcome = await again.hello("ann", token=ann.welcome.token)
        assert welcome.resumed and welcome.room == code
        board = await again.expect(p.RaceStart)
        assert (board.seq, board.view) == (acked.seq, acked.view) and board.view is not None
        await play(again, board.view, 2, rng, first_id=100)
        await play(bob, starts[1].view, 2, rng)
        assert not a.core.has_room(code)
        for client in (again, bob):
            await client.close()


def two_workers(redis_url: str, port: int, listener: int) -> tuple[str, ...]:
    """The arguments of ``plot-server --workers 2`` on these ports, with no deal-search probes."""
    return (
        *("--port", str(port), "--redis", redis_url, "--workers", "2"),
        *("--metrics-port", str(listener), "--probe-rate", "0"),
    )


async def workers_answering(
    supervisor: subprocess.Popen[str], port: int, listener: int, scheme: str = "http"
) -> set[int]:
    """Once ``plot-server --workers 2`` is up: the pids of both workers, each seen answering the
    detailed /healthz on the shared metrics listener (a new connection each time: the kernel
    spreads them, as on the game port)."""
    await asyncio.to_thread(wait_healthy, supervisor, port, scheme)
    pids: set[int] = set()

    def both_answer() -> bool:
        pids.add(int(health(listener)[1]["pid"]))
        return len(pids) >= 2

    await eventually(lambda: asyncio.to_thread(both_answer), 15, what="both workers answer on the port")
    return pids


async def test_workers_share_one_port_and_a_dead_one_is_restarted(own_redis_server: RedisServer) -> None:
    """plot-server --workers 2: both workers answer on the one port, a race runs across them, and a
    worker killed with SIGKILL is restarted by the supervisor (logged); SIGTERM stops them all."""
    port, listener = free_port(), free_port()
    args = two_workers(own_redis_server.url, port, listener)
    with server_process(*args, "--countdown", "0.1", "--rate", "1000") as supervisor:
        pids = await workers_answering(supervisor, port, listener)
        address = f"ws://127.0.0.1:{port}"
        await spread_race(address, address)  # clients land on either worker
        # /metrics on the shared metrics listener: whichever worker takes the scrape answers for
        # both, each series labelled with its worker, so every scrape sums to the same counts.
        scrapes = [await asyncio.to_thread(metrics, listener) for _ in range(6)]
        for samples in scrapes:
            assert metric(samples, "plot_worker_up", worker="0") == metric(samples, "plot_worker_up", worker="1") == 1
            assert {dict(labels).get("worker") for _name, labels in samples} == {"0", "1"}
        accepted = {
            sum(v for (name, _), v in samples.items() if name == "plot_moves_accepted_total") for samples in scrapes
        }
        assert len(accepted) == 1 and accepted.pop() >= 21, accepted  # ann's 12 moves and bob's 9, at least
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        fresh: set[int] = set()

        def restarted() -> bool:
            with contextlib.suppress(OSError, ValueError):
                fresh.add(int(health(listener)[1]["pid"]))
            return len(fresh - pids) >= 1 and len(fresh - {victim}) >= 2

        await eventually(lambda: asyncio.to_thread(restarted), 20, what="the dead worker restarted")

        async def both_scraped() -> bool:  # the new worker serves its metrics where the dead one did
            samples = await asyncio.to_thread(metrics, listener)
            return metric(samples, "plot_worker_up", worker="0") + metric(samples, "plot_worker_up", worker="1") == 2

        await eventually(both_scraped, 10, what="both workers in a scrape after the restart")
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(supervisor.wait, 30) == 0
        events = [line.get("event") for line in log_lines(supervisor)]
        assert "worker_died" in events and events.count("worker_started") == 3 and "workers_stopped" in events


async def test_sighup_replaces_the_workers_one_at_a_time_and_their_racers_resume(
    own_redis_server: RedisServer,
) -> None:
    """A deploy on one host: SIGHUP to the supervisor starts a new worker beside each old one in
    turn and stops the old one once the new one listens. Every client of an old worker is told
    (shutdown) and closed; the racers reconnect with their tokens, find every acknowledged move,
    and play on; the port never stops answering; both workers are new; SIGTERM still stops all."""
    rng = random.Random(11)
    port, listener = free_port(), free_port()
    args = two_workers(own_redis_server.url, port, listener)
    with server_process(*args, "--countdown", "0.1", "--rate", "1000") as supervisor:
        old = await workers_answering(supervisor, port, listener)
        address = f"ws://127.0.0.1:{port}"
        clients, starts = await spread_room(address, address)
        _host, ann, bob, _eve = clients
        assert starts[1].view is not None and starts[2].view is not None
        await play(ann, starts[1].view, 6, rng)
        await play(bob, starts[2].view, 4, rng)
        acked = {ann.pid: latest(ann, p.MoveOk), bob.pid: latest(bob, p.MoveOk)}
        supervisor.send_signal(signal.SIGHUP)
        answered: set[int] = set()

        def probe() -> None:
            with contextlib.suppress(OSError, ValueError):
                answered.add(int(health(listener)[1]["pid"]))

        for client in clients:  # each old worker stops in turn: every connection is told and closed
            assert await client.closed(60) == 1001, client.label
            assert any(isinstance(m, p.Shutdown) for m in client.messages), client.label
            await asyncio.to_thread(probe)  # the port answers meanwhile

        def new_workers() -> bool:  # the clients may all have sat on the first worker replaced
            seen: set[int] = set()
            for _ in range(8):
                with contextlib.suppress(OSError, ValueError):
                    seen.add(int(health(listener)[1]["pid"]))
            return len(seen) >= 2 and not seen & old

        await eventually(lambda: asyncio.to_thread(new_workers), 20, what="two new workers, no old one")
        assert answered, "the port answered while the workers were replaced"
        for racer in (ann, bob):
            assert racer.welcome is not None
            again = await Client.open(address, f"{racer.label} again")
            welcome = await again.hello(racer.label, token=racer.welcome.token)
            assert welcome.resumed and welcome.room is not None
            board = await again.expect(p.RaceStart)
            before = acked[racer.pid]
            assert (board.seq, board.check, board.view) == (before.seq, before.check, before.view)
            assert board.view is not None
            await play(again, board.view, 3, rng, first_id=500)
            assert latest(again, p.MoveOk).seq == before.seq + 3
            await again.close()
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(supervisor.wait, 30) == 0
        events = [line.get("event") for line in log_lines(supervisor)]
        assert events.count("worker_replaced") == 2 and "workers_reloaded" in events, events
        assert "worker_died" not in events and "worker_reload_failed" not in events


def lines_until(proc: subprocess.Popen[str], event: str) -> list[dict[str, Any]]:
    """The process's JSON log lines read from its stderr as they come, up to the first ``event``
    (blocking: call it in a thread); ``log_lines`` reads the rest once it has exited."""
    assert proc.stderr is not None
    lines: list[dict[str, Any]] = []
    for text in proc.stderr:
        if text.strip().startswith("{"):
            lines.append(json.loads(text))
            if lines[-1].get("event") == event:
                return lines
    raise AssertionError(f"the process's log ended before {event}: {lines[-5:]}")


async def test_a_reload_whose_new_worker_cannot_start_keeps_the_old_workers(
    own_redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGHUP after the deploy broke the settings (the TLS certificate the workers were started
    with is gone): the first new worker exits at its start (code 2), the reload stops there and
    the old workers go on serving; nothing is replaced."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes((TLS / "localhost.pem").read_bytes())
    key.write_bytes((TLS / "localhost.key").read_bytes())
    port, listener = free_port(), free_port()
    args = two_workers(own_redis_server.url, port, listener)
    with server_process(*args, "--tls-cert", str(cert), "--tls-key", str(key)) as supervisor:
        old = await workers_answering(supervisor, port, listener, "https")
        cert.unlink()
        supervisor.send_signal(signal.SIGHUP)

        early = await asyncio.wait_for(asyncio.to_thread(lines_until, supervisor, "workers_reloaded"), 30)
        seen: set[int] = set()
        for _ in range(10):  # the old workers keep answering, and only they do
            with contextlib.suppress(OSError, ValueError):
                assert (await asyncio.to_thread(health, port, "https"))[0] == 200  # the game port answers
                seen.add(int((await asyncio.to_thread(health, listener))[1]["pid"]))
        assert seen == old, (seen, old)
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(supervisor.wait, 30) == 0
        lines = early + log_lines(supervisor)
        [failed] = [line for line in lines if line.get("event") == "worker_reload_failed"]
        assert failed["worker"] == 0 and "code 2" in failed["why"], failed
        events = [line.get("event") for line in lines]
        assert "worker_replaced" not in events and "worker_died" not in events, events


async def test_workers_whose_supervisor_is_killed_stop_and_free_the_port(own_redis_server: RedisServer) -> None:
    """SIGKILL to the supervisor (it cannot pass it on): its workers see it gone and stop as on
    SIGTERM, within a second, instead of holding the shared port, restarted by no one."""
    port, listener = free_port(), free_port()
    args = two_workers(own_redis_server.url, port, listener)
    with server_process(*args) as supervisor:
        workers = await workers_answering(supervisor, port, listener)
        supervisor.kill()

        def gone(pid: int) -> bool:  # exited (a zombie not yet reaped by whoever adopted it counts)
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except FileNotFoundError:
                return True
            return "\nState:\tZ" in status

        def port_free() -> bool:
            try:
                health(port)
            except OSError:
                return True
            return False

        await eventually(lambda: all(gone(pid) for pid in workers), 15, what="both workers stopped")
        assert await asyncio.to_thread(port_free)


def test_workers_need_redis_and_a_port() -> None:
    for args, said in [
        (("--workers", "2"), "more than one worker needs --redis"),
        (("--workers", "2", "--redis", "redis://127.0.0.1:1/0", "--port", "0"), "give --port"),
        (("--workers", "0"), "--workers"),
    ]:
        with server_process(*args) as proc:
            _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and said in err, (args, err)


async def test_a_node_hears_the_other_nodes_messages_in_order_and_in_batches(redis_url: str) -> None:
    """The subscription is read raw and in batches: messages published together reach the node in
    fewer calls than messages, all of them, in order; the node's own messages are never handed over."""
    from server.nodes import Appended, NodeLink, RoomVersion

    store = RedisStore(redis_url)
    batches: list[list[tuple[str, RoomVersion | Appended]]] = []
    link = NodeLink(store, batches.append, lambda codes: None, read_every_s=0.05)
    other = NodeLink(store, lambda batch: None, lambda codes: None, node_id="other")
    await link.start()
    try:
        await link.subscribe("ABCDE")
        await other.publish([("ABCDE", other.room_version(v)) for v in range(1, 51)])  # one pipeline
        await link.publish([("ABCDE", link.room_version(99))])  # its own
        await other.publish([("ABCDE", other.room_version(100))])

        def heard() -> list[int]:
            return [m.version for batch in batches for _, m in batch if isinstance(m, RoomVersion)]

        await eventually(lambda: heard()[-1:] == [100], what="every message heard")
        assert heard() == [*range(1, 51), 100]  # in order, none lost, its own left out
        assert len(batches) < 20, [len(batch) for batch in batches]  # many to a wake-up
        assert all(code == "ABCDE" for batch in batches for code, _ in batch)
    finally:
        await link.close()
        await store.close()


async def settled(a: RaceServer, b: RaceServer, code: str, phase: str) -> bool:
    """The stored room is in ``phase`` and both nodes hold its latest version, with no room write or
    read-back of theirs pending: nothing more is on its way to the members."""
    assert isinstance(a.store, RedisStore)
    stored = await a.store.load_room(code)
    return (
        stored is not None
        and decode_room(stored[0]).phase == phase
        and all(n.known_version(code) == stored[1] and not n.writes_pending(code) for n in (a, b))
    )


async def duel(a: RaceServer, b: RaceServer) -> tuple[str, list[Client]]:
    """A room with a racer and a spectator on each node (ann hosts on A, bob on B), through to the
    race's start: its code and [ann, bob, sam (spectator on A), eve (spectator on B)]."""
    ann, sam = await hello(a, "ann"), await hello(a, "sam")
    bob, eve = await hello(b, "bob"), await hello(b, "eve")
    await ann.send(p.CreateRoom(options=p.RoomOptions()))
    code = (await ann.expect(p.Room)).code
    await bob.send(p.Join(code=code))
    for client in (bob, sam, eve):
        if client is not bob:
            await client.send(p.Join(code=code, role=p.SPECTATOR))
        await client.expect(p.Room)
    await bob.send(p.Ready(ready=True))
    await eventually(lambda: any(m.ready for m in latest(ann, p.Room).members if m.player_id == bob.pid), what="ready")
    await ann.send(p.Start())
    clients = [ann, bob, sam, eve]
    for client in clients:
        await client.expect(p.RaceStart)
    return code, clients


async def test_both_nodes_end_a_race_at_once_and_every_member_gets_one_and_the_same_results(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The racer on each node resigns at the same moment: each node sees the race over when the
    other's entry reaches it, and both end it; one save wins the compare-and-set. Every member, on
    either node, gets exactly one results message, the same everywhere: a node sends results only
    once its save has landed, and the node whose save lost sends the stored ones it reads back
    (docs/scaling.md, "Room changes"). Several rooms at once, so that some end on both nodes."""
    caplog.set_level(logging.INFO, logger="plot.server")
    async with node(redis_url) as a, node(redis_url) as b:
        rooms = [await duel(a, b) for _ in range(6)]
        caplog.clear()
        await asyncio.gather(*(c.send(p.Move(id=1, move="resign")) for _code, clients in rooms for c in clients[:2]))
        for _code, clients in rooms:
            for client in clients:
                await client.expect(p.Results, timeout=10)
        for code, clients in rooms:
            await eventually(functools.partial(settled, a, b, code, p.RESULTS), what=f"room {code} settled")
            for client in clients:  # a pong after every frame the node had for the client
                await client.send(p.Ping(t=7))
                await client.expect(p.Pong)
            frames = [[f for f in c.frames if isinstance(p.decode_server(f), p.Results)] for c in clients]
            assert all(len(got) == 1 for got in frames), (code, [len(got) for got in frames])
            assert all(got == frames[0] for got in frames), code
            for client in clients:
                await client.close()
        lost = sum(r.getMessage() == "room_save_lost" for r in caplog.records)
        logging.getLogger(__name__).info("results_race rooms=%d saves_lost=%d", len(rooms), lost)


async def test_a_room_stored_again_after_it_vanished_is_announced_to_the_other_node(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The room vanishes from the store under two nodes holding it (deleted, or expired); the next
    change on node A stores it afresh at version 1, and the creation's own script announces it:
    node B, which knew a higher version, reads it back and shows the change."""
    caplog.set_level(logging.INFO, logger="plot.server")
    async with node(redis_url) as a, node(redis_url) as b:
        host, guest = await hello(a, "host"), await hello(b, "guest")
        await host.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await host.expect(p.Room)).code
        await guest.send(p.Join(code=code))
        await guest.expect(p.Room)
        await eventually(lambda: guest.pid in {m.player_id for m in latest(host, p.Room).members}, what="on A")
        assert isinstance(a.store, RedisStore)
        await a.store.delete_room(code)
        await host.send(p.Kick(player_id=guest.pid))  # node A's change: the room is stored again
        kicked = await guest.expect(p.Kicked)
        assert kicked.reason == "removed"
        assert any(r.getMessage() == "room_recreated" for r in caplog.records)
        stored = await a.store.load_room(code)
        assert stored is not None and stored[1] == 1
        assert [m.player_id for m in decode_room(stored[0]).members] == [host.pid]
        for client in (host, guest):
            await client.close()


async def test_a_race_ended_before_another_node_s_entry_arrived_counts_it_in_the_results(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Bob's node has stored his resign (acknowledged), but node A has not heard it yet (here: it is
    never published) when the host on A ends the race. A's save of the race's end names the log
    lengths its results count; Bob's log is longer, so the save is refused: A reads the room back,
    logs and all, ends the race again (the host's command replayed), and every member, on either
    node, gets the same results, Bob's resign counted."""
    caplog.set_level(logging.INFO, logger="plot.server")
    async with node(redis_url) as a, node(redis_url) as b:
        clients, starts = await spread_room(a, b)
        host, bob = clients[0], clients[2]
        code = latest(host, p.Room).code
        assert isinstance(a.store, RedisStore)
        race = starts[0].race
        await eventually(functools.partial(settled, a, b, code, p.RACING), what="the race's start settled")
        entry = encode_record(LogEntry(move="resign", t_ms=500, id=77))
        stored = await a.store.append_moves([AppendRequest(code, race, bob.pid, 0, entry)])  # no notice
        assert stored == [AppendResult.APPENDED]
        caplog.clear()
        await host.send(p.EndRace())
        results = [await c.expect(p.Results, timeout=10) for c in clients]
        assert all(r == results[0] for r in results), results
        row = next(r for r in results[0].racers if r.player_id == bob.pid)
        assert row.moves == 1 and row.status == "resigned"
        assert any(r.getMessage() == "room_save_lost" for r in caplog.records)
        for client in clients:
            await client.send(p.Ping(t=1))
            await client.expect(p.Pong)
            assert sum(isinstance(m, p.Results) for m in client.messages) == 1, client.label
            await client.close()


async def test_results_reach_each_connection_once_whatever_the_read_backs_after_them(redis_url: str) -> None:
    """After the race, every change another node makes is read back, and the read-back sends each
    local member a fresh snapshot, in the results phase the results: a spectator joining on A
    sent B's members (bob, eve) the same results again (seen once as eve's two results in the
    two-node end-of-race test). A connection gets a race's results once; a resumed one (a new
    connection) gets them again, as it should."""
    async with node(redis_url) as a, node(redis_url) as b:
        clients, _starts = await spread_room(a, b)
        host, ann, bob, eve = clients
        for racer in (host, ann, bob):
            await racer.send(p.Move(id=1000, move="resign"))
        for client in clients:
            await client.expect(p.Results, timeout=10)
            await room_phase(client, p.RESULTS)

        async def counted_on_b(spectators: int) -> None:
            await eventually(lambda: latest(eve, p.Room).spectators == spectators, what=f"{spectators} seen on B")

        for n, name in enumerate(("zed", "yan")):  # two changes on A, each read back on B
            watcher = await hello(a, name)
            await watcher.send(p.Join(code=latest(host, p.Room).code, role=p.SPECTATOR))
            await watcher.expect(p.Results)  # its own snapshot, in the results phase
            await counted_on_b(2 + n)
        for client in clients:
            await client.send(p.Ping(t=1))
            await client.expect(p.Pong)
            assert sum(isinstance(m, p.Results) for m in client.messages) == 1, client.label
        assert bob.welcome is not None
        again = await Client.open(b, "bob again")
        await again.hello("bob", token=bob.welcome.token)
        assert (await again.expect(p.Results)).commitment == latest(eve, p.Results).commitment
        for client in (*clients, again):
            await client.close()


async def test_a_spectator_joining_on_one_node_sends_the_other_node_s_racers_no_board(redis_url: str) -> None:
    """Mid-race, a spectator joins on node A: node B reads the room back (its spectator count) and
    sends its members the new room only, not their board, the leaderboard or a race_start again."""
    async with node(redis_url) as a, node(redis_url) as b:
        clients, starts = await spread_room(a, b)
        host, _ann, bob, _eve = clients
        assert starts[2].view is not None
        await play(bob, starts[2].view, 3, random.Random(2))
        boards_before = sum(isinstance(m, p.RaceStart) for m in bob.messages)

        async def counted_on_b(spectators: int) -> None:
            await eventually(lambda: latest(bob, p.Room).spectators == spectators, what=f"{spectators} seen on B")

        for count, name in ((2, "zed"), (3, "yan")):
            watcher = await hello(a, name)
            await watcher.send(p.Join(code=latest(host, p.Room).code, role=p.SPECTATOR))
            await watcher.expect(p.RaceStart)  # its own snapshot
            await counted_on_b(count)
        await bob.send(p.Ping(t=1))
        await bob.expect(p.Pong)
        assert sum(isinstance(m, p.RaceStart) for m in bob.messages) == boards_before == 1
        for client in clients:
            await client.close()


async def test_a_node_left_with_no_member_of_a_room_releases_it(redis_url: str) -> None:
    """docs/deployment.md, "Room affinity": a host creates its room on node A, then resumes on node B
    (the room's node behind the balancer). Once A reads the room back and sees no member of it
    connected here and the host connected to B, A drops it: it stops hearing the room, applying
    its moves and reading it back. A member joining on A loads it again."""
    async with node(redis_url) as a, node(redis_url) as b:
        first = await hello(a, "host")
        assert first.welcome is not None
        await first.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await first.expect(p.Room)).code
        await first.close()
        host: Client | None = None
        for _ in range(20):  # A writes the host's record behind: B may read it before it names the room
            host = await Client.open(b, "host")
            welcome = await host.hello("host", token=first.welcome.token)
            if welcome.room == code:
                break
            await host.close()
            await asyncio.sleep(0.05)
        assert host is not None and host.welcome is not None and host.welcome.room == code
        await eventually(lambda: not a.core.has_room(code), 10, what="node A released the room")
        await eventually(lambda: a.nodes is not None and not a.nodes.subscribed(code), 5, what="A unsubscribed")
        assert a.nodes is not None
        heard = a.nodes.received
        ann = await hello(b, "ann")
        await ann.send(p.Join(code=code))
        await ann.expect(p.Room)
        for client in (host, ann):
            await client.send(p.Ready(ready=True))
        await eventually(lambda: all(m.ready for m in latest(host, p.Room).members), what="both ready")
        await host.send(p.Start())
        starts = [await c.expect(p.RaceStart) for c in (host, ann)]
        rng = random.Random(7)
        for client, start in zip((host, ann), starts, strict=True):
            assert start.view is not None
            await play(client, start.view, 3, rng)
        assert not a.core.has_room(code) and a.nodes.received == heard  # nothing of the race reached A
        # A spectator on A: A loads the room again (and keeps it while she is connected there).
        eve = await hello(a, "eve")
        await eve.send(p.Join(code=code, role=p.SPECTATOR))
        assert (await eve.expect(p.Room)).code == code and a.core.has_room(code)
        for client in (host, ann, eve):
            await client.close()
