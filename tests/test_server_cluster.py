"""The server on a three-master Redis Cluster (tests/redis_cluster_fixture.py): the same race as on
one Redis, and a server killed mid-race whose racers resume on a fresh process, all through the
real ``plot-server --redis redis+cluster://...`` and real WebSocket clients; and bench/cluster_bench.py
runs (its figures are in docs/cluster.md, never asserted here)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import test_server_e2e as one_redis
import test_server_nodes as one_redis_nodes
from redis_cluster_fixture import LocalRedisCluster
from redis_fixture import free_port
from support import Client, eventually, latest, make_room, play, server_process, start_race, wait_healthy
from support import health as read_health

from server.core.records import decode_entry
from server.nodes import NodeLink
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import replay


def nodes_holding_keys(cluster: LocalRedisCluster) -> int:
    return sum(1 for node in cluster.nodes if node.command("DBSIZE"))


async def stored_moves(url: str, code: str, race: int, player_id: str) -> list[Any]:
    store = RedisStore(url)
    try:
        return [decode_entry(b) for b in await store.load_moves(code, race, player_id)]
    finally:
        await store.close()


async def test_whole_race_with_a_spectator_on_a_cluster(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    store = RedisStore(redis_cluster_url)  # test_server_e2e imported as a module: its test is not collected twice
    try:
        assert store.cluster
        await one_redis.test_whole_race_three_racers_and_a_spectator(store)
    finally:
        await store.close()
    # The room's keys share one slot; the players' and tokens' keys hash anywhere: the race used
    # several masters (all of seven-odd keys on one master has odds of about 1 in 2,000).
    assert nodes_holding_keys(redis_cluster) >= 2


async def test_server_killed_mid_race_resumes_from_the_cluster(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    rng = random.Random(11)
    port, listener = free_port(), free_port()
    args = ("--port", str(port), "--redis", redis_cluster_url, "--countdown", "0.1", "--rate", "1000")
    address = f"ws://127.0.0.1:{port}"
    with server_process(*args, "--metrics-port", str(listener)) as first:
        await asyncio.to_thread(wait_healthy, first, port)
        # The store is named on the metrics listener's /healthz (the game port's says only ok or not).
        _status, health = await asyncio.to_thread(read_health, listener)
        assert "redis+cluster://" in str(health), health
        racers, code = await make_room(address, ["Ann", "Bob"])
        starts = await start_race(racers)
        progress = []
        for client, start in zip(racers, starts, strict=True):
            assert start.view is not None
            progress.append(await play(client, start.view, 8, rng))
        tokens = [c.welcome.token for c in racers if c.welcome]
        acked = {c.pid: [m for m in c.messages if isinstance(m, p.MoveOk)] for c in racers}
        # Player records are written behind: wait for them before the crash, or a busy machine
        # kills the node with only the room's keys (one slot, one master) stored.
        await eventually(lambda: nodes_holding_keys(redis_cluster) >= 2, timeout=10.0, what="keys on two masters")
        first.send_signal(signal.SIGKILL)  # a crash: no goodbye, no flush
        await asyncio.to_thread(first.wait, 10)
    assert nodes_holding_keys(redis_cluster) >= 2
    with server_process(*args) as second:
        await asyncio.to_thread(wait_healthy, second, port)
        # A fresh process lists the room from the cluster (the listing's slot, then the room's).
        lister = await Client.open(address, "Lister")
        await lister.hello("Lister")
        await lister.send(p.ListRooms())
        listing = (await lister.expect(p.RoomList)).rooms
        assert [(r.code, r.phase, r.racers) for r in listing] == [(code, p.RACING, 2)]
        await lister.close()
        back = []
        for client, token, (view, next_id) in zip(racers, tokens, progress, strict=True):
            again = await Client.open(address, client.label)
            welcome = await again.hello(client.label, token=token)
            assert welcome.resumed and welcome.player_id == client.pid and welcome.room == code
            snapshot = await again.expect(p.RaceStart)
            assert snapshot.seq == len(acked[client.pid]) and snapshot.view == view
            await again.send(p.Move(id=next_id - 1, move="stock>waste"))  # resent: applies nothing
            assert (await again.expect(p.MoveOk)).duplicate
            back.append((again, view, next_id))
        for again, view, next_id in back:
            view, next_id = await play(again, view, 4, rng, first_id=next_id)
            await again.send(p.Move(id=next_id, move="resign"))
        results = [await again.expect(p.Results) for again, _, _ in back]
        assert results[0] == results[1]
        for again, _, _ in back:
            record = results[0].records[again.pid]
            entries = await stored_moves(redis_cluster_url, code, 1, again.pid)
            assert [e.move for e in entries] == record.moves
            ids = [e.id for e in entries if e.id is not None]
            assert len(ids) == len(set(ids)) == len(record.moves)
            game, outcome = replay(results[0].deal, record.moves)
            assert outcome.ok and game.status == "resigned"
            await again.close()
        second.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(second.wait, 10) == 0


# ---------------------------------------------------------------- several nodes on the cluster


def master_of_room(cluster: LocalRedisCluster, code: str) -> int:
    """The port of the master holding the room's keys and its channel (they share the hash tag)."""
    port = cluster.node_of(f"plot:events:{{{code}}}").port
    assert port is not None
    return port


async def test_two_plot_server_nodes_share_a_race_on_the_cluster(redis_cluster_url: str) -> None:
    """Two real ``plot-server --multi-node`` processes on the three-master cluster: the race spread
    over both (the spectator on B sees A's racers' progress), identical results everywhere."""
    ports = free_port(), free_port()
    common = ("--redis", redis_cluster_url, "--multi-node", "--countdown", "0.1", "--rate", "1000")
    with (
        server_process("--port", str(ports[0]), *common) as first,
        server_process("--port", str(ports[1]), *common) as second,
    ):
        await asyncio.to_thread(wait_healthy, first, ports[0])
        await asyncio.to_thread(wait_healthy, second, ports[1])
        await one_redis_nodes.spread_race(f"ws://127.0.0.1:{ports[0]}", f"ws://127.0.0.1:{ports[1]}")


async def test_rooms_on_different_masters_cross_between_nodes(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """Rooms whose codes hash to different masters: each node hears each room through its own
    master's connection (SSUBSCRIBE), and a change on node B reaches node A in every room."""
    async with one_redis_nodes.node(redis_cluster_url) as a, one_redis_nodes.node(redis_cluster_url) as b:
        assert a.nodes is not None and b.nodes is not None
        rooms: dict[str, tuple[Client, Client]] = {}
        while len({master_of_room(redis_cluster, code) for code in rooms}) < 2:
            assert len(rooms) < 12, "twelve random room codes all on one master"
            host, guest = await one_redis_nodes.hello(a, "host"), await one_redis_nodes.hello(b, "guest")
            await host.send(p.CreateRoom(options=p.RoomOptions()))
            code = (await host.expect(p.Room)).code
            await guest.send(p.Join(code=code))
            await guest.expect(p.Room)
            rooms[code] = (host, guest)
        for _host, guest in rooms.values():
            await guest.send(p.Ready(ready=True))

        def ready_seen(host: Client) -> bool:
            return any(m.ready for m in latest(host, p.Room).members)

        for code, (host, _guest) in rooms.items():
            await eventually(partial(ready_seen, host), what=f"ready in {code}")
        for link in (a.nodes, b.nodes):
            heard = {int(name.rsplit(":", 1)[1]): codes for name, codes in link.shards().items() if codes}
            assert len(heard) >= 2
            assert all(master_of_room(redis_cluster, code) == port for port, codes in heard.items() for code in codes)
        # Heard through pub/sub (B's versions on A's connections), not from a read-back after a gap.
        assert a.nodes.received >= len(rooms) and a.nodes.missed == 0
        # The liveness keys work on the cluster too: B is alive, a node never seen is not.
        assert await a.nodes.gone({b.nodes.node_id, "nobody"}) == {"nobody"}
        for host, guest in rooms.values():
            await host.close()
            await guest.close()


async def test_a_masters_pubsub_connections_killed_mid_race(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """CLIENT KILL TYPE pubsub on the master holding the room's channel, mid-race: both nodes'
    connections to that master drop, each node reads the room back, and everyone converges."""

    def kill(code: str) -> object:
        return redis_cluster.node_of(f"plot:events:{{{code}}}").command("CLIENT", "KILL", "TYPE", "pubsub")

    await one_redis_nodes.dropped_subscriptions_race(redis_cluster_url, kill)


async def test_a_room_s_slot_moved_to_another_master_is_heard_there(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """A resharding moves the room's slot (and keys) to another master: Redis unsubscribes the
    nodes' SSUBSCRIBE there, each node subscribes the room on its new master and reads it back,
    and changes on one node go on reaching the other. The slot is moved back afterwards."""
    async with one_redis_nodes.node(redis_cluster_url) as a, one_redis_nodes.node(redis_cluster_url) as b:
        assert a.nodes is not None and b.nodes is not None
        host, guest = await one_redis_nodes.hello(a, "host"), await one_redis_nodes.hello(b, "guest")
        await host.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await host.expect(p.Room)).code
        await guest.send(p.Join(code=code))
        await guest.expect(p.Room)
        channel = f"plot:events:{{{code}}}"
        source = redis_cluster.node_of(channel)
        target = next(node for node in redis_cluster.nodes if node is not source)
        try:
            redis_cluster.move_slot(channel, target)
            wanted = f"127.0.0.1:{target.port}"

            def moved(link: NodeLink) -> bool:
                return code in link.shards().get(wanted, set())

            for link in (a.nodes, b.nodes):
                await eventually(partial(moved, link), what="the room heard on its new master")
            received = a.nodes.received
            await guest.send(p.Ready(ready=True))
            await eventually(lambda: any(m.ready for m in latest(host, p.Room).members), what="ready seen on A")
            await guest.send(p.Leave())
            await eventually(lambda: len(latest(host, p.Room).members) == 1, what="the leave seen on A")
            assert a.nodes.received > received  # B's changes heard through the new master's subscription
        finally:
            redis_cluster.move_slot(channel, source)
        await host.close()
        await guest.close()


async def test_a_subscription_sent_on_a_stale_slot_map_moves_to_the_room_s_master(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """A room subscribed while the node's slot map is stale (the slot moved and no command told
    the client yet): the old master answers SSUBSCRIBE with MOVED; the node reads the map again,
    subscribes the room on its master and reads it back once that is confirmed."""
    store = RedisStore(redis_cluster_url, namespace="plot")
    missed: list[str] = []
    link = NodeLink(store, lambda _batch: None, missed.extend, subscribe_timeout_s=0.5)
    code = "STALE"
    channel = store.events_channel(code)
    source = redis_cluster.node_of(channel)
    target = next(node for node in redis_cluster.nodes if node is not source)
    try:
        await link.start()  # reads the slot map: the channel's slot on ``source``
        redis_cluster.move_slot(channel, target)
        await link.subscribe(code)  # SSUBSCRIBE to ``source``: MOVED
        wanted = f"127.0.0.1:{target.port}"
        await eventually(lambda: code in link.shards().get(wanted, set()), what="the room on its master")
        await eventually(lambda: code in missed, what="the room read back once heard")
    finally:
        await link.close()
        await store.close()
        redis_cluster.move_slot(channel, source)


def test_the_cluster_bench_compares_one_redis_with_the_cluster(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    bench = Path(__file__).resolve().parent.parent / "bench" / "cluster_bench.py"
    command = [sys.executable, str(bench), "--runs", "1", "--rooms", "2", "--racers", "4", "--moves", "2"]
    done = subprocess.run([*command, "--batch", "8", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    medians = json.loads(out.read_text())["medians"]
    assert set(medians) == {"one redis", "cluster (3 masters)"}
    for figures in medians.values():
        assert figures["appends_per_s"] > 0 and figures["redis_cpu_us_per_append"] > 0
    assert "Redis CPU" in done.stdout


def test_the_cluster_load_bench_drives_a_real_server_on_each_store(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    bench = Path(__file__).resolve().parent.parent / "bench" / "cluster_load.py"
    command = [sys.executable, str(bench), "--racers", "8", "--duration", "1", "--warmup", "0.5", "--runs", "1"]
    done = subprocess.run([*command, "--json", str(out)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"one redis", "cluster (3 masters)"}
    for (figures,) in runs.values():
        assert figures["accepted_moves"] > 0 and figures["errors"] == 0
        assert figures["ack_latency_ms"]["count"] == figures["accepted_moves"]
