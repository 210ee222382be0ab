"""The server on a Redis Cluster whose masters have replicas (tests/redis_cluster_fixture.py,
``replicated_cluster``): a failover of the room's master mid-race under two real ``plot-server``
nodes, coordinated and by a crash; what ``--redis-replicas-ack`` changes, shown on the store
itself (the window in which asynchronous replication loses an acknowledged append, and WAIT
closing it), on one Redis with a replica too; and ``plot-server --workers 2`` on a cluster URL.
The failover's timings are bench/failover_bench.py's to write (docs/cluster.md, "A master's
failure"), never asserted."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import random
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_scenarios import failover_race, is_master, until
from redis_cluster_fixture import LocalRedisCluster
from redis_fixture import RedisServer, ReplicaServer, free_port
from support import Client, eventually, health, latest, log_lines, play, server_process, wait_healthy

from server.store.base import AppendRequest, AppendResult, StoreUnavailable
from server.store.redis import RedisStore
from shared import protocol as p

RESIGN_ID = 1000  # test_server_nodes.finish_race resigns every racer with this id


async def test_a_coordinated_failover_mid_race_loses_no_acknowledged_move(
    replicated_cluster: LocalRedisCluster, replicated_cluster_url: str
) -> None:
    """CLUSTER FAILOVER to the replica of the room's master while two racers on two nodes play:
    the servers follow the new master (MOVED, the slot map read again, the room's channel
    subscribed there), every acknowledged move is in the log, the race finishes alike everywhere."""
    outcome = await failover_race(replicated_cluster, how="coordinated")
    for label, acked in outcome["acked"].items():
        assert outcome["logs"][label] == [*acked, RESIGN_ID], label  # every ack stored, once, in order
    assert "nodes_gone" not in outcome["warnings"], outcome["warnings"]


async def test_a_master_killed_mid_race_loses_no_acknowledged_move_with_replicas_ack(
    replicated_cluster: LocalRedisCluster, replicated_cluster_url: str
) -> None:
    """SIGKILL of the room's master mid-race, the servers on --redis-replicas-ack 1: its replica is
    promoted, the dead master comes back as its replica, the racers' moves wait (retried by the
    servers) and go on; no acknowledged move is lost, the race finishes alike everywhere."""
    outcome = await failover_race(replicated_cluster, how="kill", replicas_ack=1)
    for label, acked in outcome["acked"].items():
        assert outcome["logs"][label] == [*acked, RESIGN_ID], label
    # Neither node took the other for dead meanwhile (its liveness keys outlive one master).
    assert "nodes_gone" not in outcome["warnings"], outcome["warnings"]


# ---------------------------------------------------------------- the window, on the store itself


@contextlib.contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    """SIGSTOP: the process holds its connections but answers nothing (a replica fallen behind)."""
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


def offset(server: RedisServer) -> int:
    """The replication offset the server has reached (ROLE: a master's own, a replica's received)."""
    role = server.command("ROLE")
    assert isinstance(role, list)
    found = role[1] if role[0] == b"master" else role[4]
    assert isinstance(found, int)
    return found


def in_sync(master: RedisServer, replica: RedisServer) -> bool:
    return offset(replica) >= offset(master)


def request(code: str, length: int) -> AppendRequest:
    return AppendRequest(code, 1, "p1", length, b"entry %d" % length)


def player_on(cluster: LocalRedisCluster, store: RedisStore, master: RedisServer, tag: str) -> tuple[str, str]:
    """A player id and a token hash whose keys (the record, the token) both live on ``master``."""
    ids = (f"{tag}{n}" for n in range(10_000))
    player = next(i for i in ids if cluster.master_of(store.player_key(i)) is master)
    token = next(i for i in ids if cluster.master_of(store.token_key(i)) is master)
    return player, token


async def test_an_acknowledged_append_is_lost_in_a_failover_unless_replicas_confirm_it(
    replicated_cluster: LocalRedisCluster, replicated_cluster_url: str
) -> None:
    """The room's replica cut off (its replication link closed while it is stopped, SIGSTOP, so it
    cannot come back for the rest of the stream). Without replicas_ack the master acknowledges
    an append the replica never gets, and a failover to that replica loses it. With replicas_ack=1
    the same append is not acknowledged (StoreUnavailable: unconfirmed), nor is a read of the log
    (its fence is not confirmed either); room saves and reads likewise, and a player's token and
    record (put_player: the token a welcome would carry). Once the shard has a replica in sync
    again, reads and appends are confirmed again."""
    code = "WAITS"
    plain = RedisStore(replicated_cluster_url)
    confirming = RedisStore(replicated_cluster_url, replicas_ack=1, replicas_timeout=0.3)
    try:
        assert await plain.create_room(code, b"room", open_race=1)
        assert await confirming.append_moves([request(code, 0)]) == [AppendResult.APPENDED]
        master = replicated_cluster.master_of(plain.room_key(code))
        replica = replicated_cluster.replica_of(master)
        kept, kept_token = player_on(replicated_cluster, plain, master, "kept")
        lost, lost_token = player_on(replicated_cluster, plain, master, "lost")
        refused, refused_token = player_on(replicated_cluster, plain, master, "refused")
        await confirming.put_player(kept, kept_token, b"kept")  # confirmed: the replica holds it
        # WAIT 1 answered: the replica holds entry 0.
        with stopped(replica):
            master.command("CLIENT", "KILL", "TYPE", "replica")  # what it was sent so far, it gets
            assert await plain.append_moves([request(code, 1)]) == [AppendResult.APPENDED]  # acknowledged
            (unconfirmed,) = await confirming.append_moves([request(code, 2)])
            assert isinstance(unconfirmed, StoreUnavailable) and "0 of 1 replicas" in str(unconfirmed)
            with pytest.raises(StoreUnavailable, match="replicas confirmed"):
                await confirming.load_moves(code, 1, "p1")
            assert await plain.load_moves(code, 1, "p1") == [b"entry 0", b"entry 1", b"entry 2"]
            # Room records the same way: a save acknowledged (plain), one not (confirming), nor a read.
            assert await plain.save_room(code, b"room v2", 1, open_race=1) == 2
            with pytest.raises(StoreUnavailable, match="replicas confirmed room WAITS's write"):
                await confirming.save_room(code, b"room v3", 2, open_race=1)
            with pytest.raises(StoreUnavailable, match="replicas confirmed room WAITS's read"):
                await confirming.load_room(code)
            # A player's token: acknowledged (plain), or refused for want of a replica (confirming).
            await plain.put_player(lost, lost_token, b"lost")
            with pytest.raises(StoreUnavailable, match=f"replicas confirmed player {refused}'s token"):
                await confirming.put_player(refused, refused_token, b"refused")
            assert await plain.player_by_token(lost_token) == lost
            master.kill()  # the master dies with entries 1 and 2 its replica never received
        replica.command("CLUSTER", "FAILOVER", "TAKEOVER")
        await until(lambda: is_master(replica), 15, "the replica promoted")

        async def answers() -> bool:
            try:
                await plain.load_moves(code, 1, "p1")
            except StoreUnavailable:  # the dead master, until the client reads the slot map again
                return False
            return True

        await eventually(answers, 15, what="the new master answering")
        # Entry 1 and version 2 were acknowledged (plain) and are gone; entry 2 and version 3 never were.
        assert await plain.load_moves(code, 1, "p1") == [b"entry 0"]
        assert await plain.load_room(code) == (b"room", 1)
        # The acknowledged token is gone: its racer could not resume. The confirmed one is there.
        assert await plain.player_by_token(lost_token) is None and await plain.get_player(lost) is None
        assert await plain.player_by_token(kept_token) == kept and await plain.get_player(kept) == b"kept"

        async def refused_for_want_of_replicas() -> bool:  # once its slot map names the new master
            try:
                await confirming.load_moves(code, 1, "p1")
            except StoreUnavailable as error:
                return "replicas confirmed" in str(error)
            return False

        await eventually(refused_for_want_of_replicas, 15, what="a shard with no replica confirms nothing")
        await asyncio.to_thread(master.start)  # back as the new master's replica
        await asyncio.to_thread(replicated_cluster.wait_replicated)

        async def confirmed() -> bool:
            try:
                return await confirming.load_moves(code, 1, "p1") == [b"entry 0"]
            except StoreUnavailable:
                return False

        await eventually(confirmed, 15, what="entry 0 confirmed by the new replica")
        assert await confirming.append_moves([request(code, 1)]) == [AppendResult.APPENDED]
    finally:
        await plain.close()
        await confirming.close()


async def test_replicas_ack_on_one_redis_with_a_replica(own_redis_server: RedisServer) -> None:
    """The same on one Redis: WAIT after the batch on its connection (one round trip with it), a
    room save likewise, and a read confirmed by a fence write; no replica in sync: nothing
    confirmed."""
    code = "WAITR"
    store = RedisStore(own_redis_server.url, replicas_ack=1, replicas_timeout=0.3)
    try:
        with pytest.raises(StoreUnavailable, match="0 of 1 replicas confirmed room WAITR's write"):
            await store.create_room(code, b"room", open_race=1)  # created, but confirmed by no replica
        (alone,) = await store.append_moves([request(code, 0)])
        assert isinstance(alone, StoreUnavailable) and "0 of 1 replicas" in str(alone)  # no replica yet
        own_redis_server.command("CONFIG", "SET", "repl-diskless-sync-delay", "0")  # the sync at once, not in 5 s
        with ReplicaServer(own_redis_server) as replica:

            async def confirmed() -> bool:  # once the master counts the replica online
                try:
                    return await store.load_moves(code, 1, "p1") == [b"entry 0"]  # stored, now confirmed
                except StoreUnavailable:
                    return False

            await eventually(confirmed, 15, what="entry 0 confirmed by the replica")
            assert await store.append_moves([request(code, 1)]) == [AppendResult.APPENDED]
            with stopped(replica):
                (unconfirmed,) = await store.append_moves([request(code, 2)])
                assert isinstance(unconfirmed, StoreUnavailable)
                with pytest.raises(StoreUnavailable, match="replicas confirmed"):
                    await store.load_logs(code, 1, [("p1", 0)])
                with pytest.raises(StoreUnavailable, match="replicas confirmed room WAITR's write"):
                    await store.save_room(code, b"room v2", 1, open_race=1)
                # Every other write something depends on: a token, the listing, expiry, deletion.
                with pytest.raises(StoreUnavailable, match="replicas confirmed player p9's token"):
                    await store.put_player("p9", "t9", b"player")
                with pytest.raises(StoreUnavailable, match="replicas confirmed room WAITR's listing"):
                    await store.set_listed(code, True)
                with pytest.raises(StoreUnavailable, match="replicas confirmed room WAITR's expiry"):
                    await store.expire_room(code, 60)
                with pytest.raises(StoreUnavailable, match="replicas confirmed room GONE's deletion"):
                    await store.delete_room("GONE")
            await eventually(lambda: in_sync(own_redis_server, replica), 10, what="the replica caught up")
            assert await store.load_logs(code, 1, [("p1", 1)]) == [[b"entry 1", b"entry 2"]]
            assert await store.load_room(code) == (b"room v2", 2)  # it had landed; now it is confirmed
            await store.put_player("p9", "t9", b"player")  # confirmed now, as are the others
            await store.set_listed(code, True)
            await store.expire_room(code, None)
            assert await store.player_by_token("t9") == "p9" and await store.listed_rooms() == [code]
    finally:
        await store.close()


def test_replicas_ack_needs_redis_and_a_sane_number() -> None:
    for args, said in [
        (("--redis-replicas-ack", "1"), "--redis-replicas-ack needs --redis"),
        (("--redis-replicas-ack", "-1", "--redis", "redis://127.0.0.1:1/0"), "--redis-replicas-ack"),
        (("--redis-replicas-ack", "x", "--redis", "redis://127.0.0.1:1/0"), "--redis-replicas-ack"),
    ]:
        with server_process("--port", str(free_port()), *args) as proc:
            _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and said in err, (args, err)
    with pytest.raises(ValueError, match="replicas_ack"):
        RedisStore("redis://127.0.0.1:1/0", replicas_ack=-1)
    with pytest.raises(ValueError, match="replicas_timeout"):
        RedisStore("redis://127.0.0.1:1/0", replicas_ack=1, replicas_timeout=5.0)


# ---------------------------------------------------------------- --workers on a cluster URL


def connections_by_worker(port: int, seen: dict[int, int]) -> dict[int, int]:
    """One detailed /healthz on the shared metrics listener ``port`` (a new connection: the kernel
    picks the worker): its pid's open connections."""
    with contextlib.suppress(OSError, ValueError):
        status, body = health(port)
        if status == 200:
            seen[int(body["pid"])] = int(body["connections"])
    return seen


async def test_workers_on_a_cluster_url_take_connections_and_a_dead_one_s_racers_resume(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """plot-server --workers 2 --redis redis+cluster://...: both workers hold racers of one room
    (their /healthz connection counts), one is killed (SIGKILL): the supervisor restarts it, its
    racers reconnect on the port with their tokens, find every acknowledged move, and the race
    finishes with the same results for everyone."""
    rng = random.Random(21)
    port, listener = free_port(), free_port()
    args = ("--port", str(port), "--redis", redis_cluster_url, "--workers", "2", "--countdown", "0.1")
    with server_process(*args, "--rate", "1000", "--metrics-port", str(listener), "--probe-rate", "0") as supervisor:
        await asyncio.to_thread(wait_healthy, supervisor, port)
        address = f"ws://127.0.0.1:{port}"
        seen: dict[int, int] = {}
        await eventually(
            lambda: asyncio.to_thread(lambda: len(connections_by_worker(listener, seen)) >= 2),
            15,
            what="both workers answer on the port",
        )
        pids = set(seen)
        host = await Client.open(address, "host")
        await host.hello("host")
        await host.send(p.CreateRoom(options=p.RoomOptions()))
        code = (await host.expect(p.Room)).code
        racers = [host]
        # Racers join until both workers hold some (the kernel spreads new connections at random).
        while True:
            seen.clear()

            def counted(opened: int = len(racers)) -> bool:
                return sum(connections_by_worker(listener, seen).values()) == opened and len(seen) == 2

            await eventually(lambda: asyncio.to_thread(counted), 10, what="each worker's connections counted")
            if all(count > 0 for count in seen.values()):
                break
            assert len(racers) < 7, f"seven connections all on one worker: {seen}"
            racer = await Client.open(address, f"r{len(racers)}")
            await racer.hello(racer.label)
            await racer.send(p.Join(code=code))
            await racer.expect(p.Room)
            await racer.send(p.Ready(ready=True))
            racers.append(racer)
        await eventually(
            lambda: all(m.ready for m in latest(host, p.Room).members if m.player_id != host.pid),
            10,
            what="everyone ready, seen by the host",
        )
        await host.send(p.Start())
        views = {}
        for racer in racers:
            start = await racer.expect(p.RaceStart, timeout=10)
            assert start.view is not None
            views[racer.pid], _next = await play(racer, start.view, 3, rng)
        victim = min(seen)
        os.kill(victim, signal.SIGKILL)

        def cut_off() -> list[Client]:
            return [r for r in racers if r.closed_code is not None]

        await eventually(lambda: len(cut_off()) == seen[victim], 10, what="the dead worker's racers cut off")
        cut = cut_off()
        kept = [r for r in racers if r.closed_code is None]
        assert cut and kept  # the other worker's racers stay connected
        back = []
        for racer in cut:
            assert racer.welcome is not None
            acked = latest(racer, p.MoveOk)
            again = await Client.open(address, racer.label)
            welcome = await again.hello(racer.label, token=racer.welcome.token)
            assert welcome.resumed and welcome.player_id == racer.pid and welcome.room == code
            board = await again.expect(p.RaceStart, timeout=10)
            assert (board.seq, board.view) == (acked.seq, acked.view)  # every acknowledged move there
            assert board.view is not None
            await play(again, board.view, 2, rng, first_id=100)
            back.append(again)
        everyone = kept + back
        moves = {r.pid: latest(r, p.MoveOk).seq + 1 for r in everyone}  # with the resign
        for racer in everyone:
            await racer.send(p.Move(id=RESIGN_ID, move="resign"))
        results = [await racer.expect(p.Results, timeout=15) for racer in everyone]
        assert all(r == results[0] for r in results)
        assert {row.player_id: row.moves for row in results[0].racers} == moves
        fresh: dict[int, int] = {}
        await eventually(
            lambda: asyncio.to_thread(lambda: bool(set(connections_by_worker(listener, fresh)) - pids)),
            20,
            what="the dead worker restarted",
        )
        for racer in everyone:
            await racer.close()
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(supervisor.wait, 30) == 0
        events = [line.get("event") for line in log_lines(supervisor)]
        assert "worker_died" in events and events.count("worker_started") == 3


async def test_the_failover_bench_times_wait_against_no_wait(replicated_cluster_url: str) -> None:
    """bench/failover_bench.py's cost half (its failover half is failover_race, run above)."""
    bench = Path(__file__).resolve().parent.parent / "bench"
    if str(bench) not in sys.path:  # a bench script runs with its own folder on sys.path (machine_info)
        sys.path.append(str(bench))
    spec = importlib.util.spec_from_file_location("bench_failover", bench / "failover_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cost = await module.wait_cost(replicated_cluster_url, 3)
    assert set(cost) == {"0", "1"}
    assert all(figures["batches"] == 3 and figures["batch_ms_p50"] > 0 for figures in cost.values())


async def test_a_node_stays_alive_when_one_master_loses_its_liveness_keys(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """On a cluster a node's liveness is kept under keys spread over every master: a master that
    comes back from a failover without its keys (they lapsed while the node could not renew them
    there) does not make the node look dead to the others; losing all of them does."""
    store = RedisStore(redis_cluster_url)
    try:
        await store.mark_alive("alive", 5000)
        keys = store.node_keys("alive")
        assert len({redis_cluster.node_of(key).port for key in keys}) == 3  # on every master
        lost = redis_cluster.node_of(keys[0])
        for key in keys:
            if redis_cluster.node_of(key) is lost:
                lost.command("DEL", key)
        assert await store.nodes_alive(["alive", "never seen"]) == {"alive"}
        for key in keys:
            redis_cluster.node_of(key).command("DEL", key)
        assert await store.nodes_alive(["alive"]) == set()
    finally:
        await store.close()


async def test_a_dead_master_fails_no_command_on_the_healthy_masters(
    replicated_cluster: LocalRedisCluster, replicated_cluster_url: str
) -> None:
    """A master killed and not yet replaced: every command to it fails, and redis-py's cluster
    client then closed its connections to every master (its way of re-reading the slot map),
    failing what was in flight on the healthy ones, and re-read the command table on the map's
    first master, often the dead one, failing again. During a failover that failed appends in
    rooms on healthy masters, and the liveness keys' renewals: a node's heartbeats publish to
    every master every half second, so its renewals failed for the whole failover, the keys
    lapsed and the other nodes took a live node for dead (the flaky failover race). Now, until
    the replica is promoted, beside a publish and an append to the dead master each round:
    appends and reads in a room on a healthy master succeed, every renewal lands on the healthy
    masters, and the liveness read answers "alive" while a master is unknown. The dead master
    is the one holding slot 0, the first of the map and so redis-py's default node, and the
    watcher's first command comes after the kill, with the dead master first of its seeds:
    redis-py read the command table there only, and every command of a client first used
    during a failover failed until the promotion."""
    ttl_ms = 3000
    store = RedisStore(replicated_cluster_url)
    dead = replicated_cluster.master_of_slot(0)
    others = replicated_cluster.seeds_url.split("://", 1)[1].split(",")
    seeds = [f"127.0.0.1:{dead.port}", *(seed for seed in others if seed != f"127.0.0.1:{dead.port}")]
    watcher = RedisStore("redis+cluster://" + ",".join(seeds))  # its first seed is the master killed
    node = next(
        name
        for name in (f"racing{n}" for n in range(100))
        if any(replicated_cluster.master_of(key) is dead for key in store.node_keys(name))
    )
    keys = store.node_keys(node)
    holders = {key: replicated_cluster.master_of(key) for key in keys}
    replica = replicated_cluster.replica_of(dead)
    healthy = [key for key in keys if holders[key] is not dead]
    assert healthy and len(healthy) < len(keys)
    rooms = [f"RM{n:03d}" for n in range(200)]
    doomed = next(code for code in rooms if replicated_cluster.master_of(store.room_key(code)) is dead)
    living = next(code for code in rooms if replicated_cluster.master_of(store.room_key(code)) is not dead)
    try:
        for code in (doomed, living):
            assert await store.create_room(code, b"room", open_race=1)
        await store.mark_alive(node, ttl_ms)
        channel = store.beat_channel(node, f"127.0.0.1:{dead.port}")
        assert channel is not None
        dead.kill()
        rounds = 0
        while not is_master(replica) or rounds < 12:
            published, doomed_append, renewed, alive, living_append, living_log = await asyncio.gather(
                store.publish([(channel, b"beat")]),
                store.append_moves([request(doomed, 1000 + rounds)]),
                store.mark_alive(node, ttl_ms),
                watcher.nodes_alive([node]),
                store.append_moves([request(living, rounds)]),
                watcher.load_moves(living, 1, "p1"),
                return_exceptions=True,
            )
            assert isinstance(published, StoreUnavailable) or published is None
            assert isinstance(doomed_append, StoreUnavailable | list)
            assert living_append == [AppendResult.APPENDED], f"round {rounds}: {living_append!r}"
            assert isinstance(living_log, list) and len(living_log) in (rounds, rounds + 1), living_log
            assert renewed is None, f"renewal {rounds} failed: {renewed!r}"
            assert alive == {node}, f"liveness read {rounds}: {alive!r}"
            for key in healthy:  # each renewal landed on the healthy masters: nearly a whole ttl left
                left = holders[key].command("PTTL", key)
                assert isinstance(left, int) and left > ttl_ms - 1500, (key, left)
            rounds += 1
            await asyncio.sleep(0.1)
    finally:
        await store.close()
        await watcher.close()
        await until(lambda: is_master(replica), 30, "the replica promoted")
        await asyncio.to_thread(dead.start)  # back as the new master's replica
        await asyncio.to_thread(replicated_cluster.wait_replicated)
