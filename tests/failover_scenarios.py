"""A race on two real ``plot-server --multi-node`` nodes on a Redis Cluster with replicas
(tests/redis_cluster_fixture.py, ``replicas=1``), through a failover of the master holding the
room: a coordinated one (``CLUSTER FAILOVER`` sent to its replica) or a crash (the master killed
with SIGKILL; its replica promoted, then the dead master restarted, so it rejoins as the new
master's replica). The racers keep playing throughout; every acknowledgement is timed.

Plain Python (no pytest): tests/test_server_cluster_failover.py asserts on what ``failover_race``
returns, and bench/failover_bench.py runs it several times for docs/cluster.md's figures ("A master's failure").
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from redis_cluster_fixture import ClusterNodeServer, LocalRedisCluster
from redis_fixture import RedisServerError, free_port
from support import Client, board, latest, log_lines, server_process, view_game, wait_healthy
from test_server_nodes import moves_of, spread_room

from server.core.records import decode_entry
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import View

RESIGN_ID = 1000


@dataclass
class Racer:
    """A racer playing random legal moves, one at a time, until stopped: each acknowledged move's
    id and when it was sent and acknowledged. A move answered ``busy`` is sent again after a
    moment; one answered ``store_unavailable`` is sent again (same id) once the server resends
    the board, as docs/protocol.md asks."""

    client: Client
    view: View
    rng: random.Random
    pace_s: float = 0.05
    acked: list[tuple[int, float, float]] = field(default_factory=list)  # (id, sent, acknowledged)
    rejected: list[str] = field(default_factory=list)  # the codes of the rejections met on the way
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def choose(self) -> str | None:
        if self.view.status != "playing":
            return None
        legal = view_game(self.view).legal_moves()
        up = [m for m in legal if ">f" in m]
        return self.rng.choice(up or legal) if legal else None

    async def run(self, first_id: int = 1) -> None:
        move_id = first_id
        while not self.stop.is_set() and move_id < 900:
            move = self.choose()
            if move is None:
                return
            sent = time.monotonic()
            await self.client.send(p.Move(id=move_id, move=move))
            while True:
                kind: Any = p.MoveOk | p.MoveRejected | p.RaceStart
                reply = await self.client.expect(kind, timeout=30)
                if isinstance(reply, p.RaceStart):
                    continue  # a board resent: the move answered store_unavailable goes again below
                if isinstance(reply, p.MoveOk) and reply.id == move_id:
                    self.acked.append((move_id, sent, time.monotonic()))
                    self.view = board(reply)
                    break
                assert isinstance(reply, p.MoveRejected) and reply.id == move_id, reply
                self.rejected.append(reply.code)
                if reply.code == p.STORE_UNAVAILABLE:
                    resent = await self.client.expect(p.RaceStart, timeout=30)
                    assert resent.view is not None
                    self.view = resent.view
                elif reply.code != p.BUSY:
                    raise AssertionError(f"{self.client.label}: {reply}")
                await asyncio.sleep(0.05)
                await self.client.send(p.Move(id=move_id, move=move))
            move_id += 1
            await asyncio.sleep(max(0.0, self.pace_s - (time.monotonic() - sent)))

    def acks_after(self, moment: float) -> int:
        return sum(1 for _id, _sent, acked in self.acked if acked > moment)

    def longest_wait_across(self, moment: float) -> float:
        """The longest a racer waited for an acknowledgement around ``moment``: from the last ack
        before it (or the move's sending) to the first after it, seconds."""
        before = [acked for _id, _sent, acked in self.acked if acked <= moment]
        after = [acked for _id, _sent, acked in self.acked if acked > moment]
        if not after:
            return float("inf")
        return min(after) - (max(before) if before else moment)


async def until(check: Any, timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``check`` (a plain predicate, run in a thread: it may talk to Redis) until it holds."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {timeout} s: {what}")
        await asyncio.sleep(interval)


def is_master(node: ClusterNodeServer) -> bool:
    try:
        return node.running and node.role == b"master"
    except (RedisServerError, OSError):
        return False


def shard_subscribers(node: ClusterNodeServer, channel: str) -> int:
    """How many connections to ``node`` have SSUBSCRIBEd ``channel``."""
    try:
        found = node.command("PUBSUB", "SHARDNUMSUB", channel)
    except (RedisServerError, OSError):
        return 0
    return found[1] if isinstance(found, list) and isinstance(found[1], int) else 0


async def stored_ids(url: str, code: str, race: int, player_id: str) -> list[int | None]:
    store = RedisStore(url)
    try:
        return [decode_entry(entry).id for entry in await store.load_moves(code, race, player_id)]
    finally:
        await store.close()


async def finish(clients: list[Client]) -> list[p.Results]:
    """Every racer resigns (``RESIGN_ID``); each client's results, in the clients' order."""
    for racer in clients[:3]:
        await racer.send(p.Move(id=RESIGN_ID, move="resign"))
    results = [await client.expect(p.Results, timeout=10) for client in clients]
    for client in clients:
        await client.close()
    return results


def differences(results: list[p.Results], labels: list[str]) -> dict[str, dict[str, str]]:
    """The fields of results that are not the same for every client: field -> client -> value."""
    differ: dict[str, dict[str, str]] = {}
    for name in p.Results.__struct_fields__:
        values = [getattr(result, name) for result in results]
        if any(value != values[0] for value in values):
            differ[name] = {label: repr(value)[:400] for label, value in zip(labels, values, strict=True)}
    return differ


async def failover_race(
    cluster: LocalRedisCluster, *, how: str, replicas_ack: int = 0, moves_after: int = 5, pace_s: float = 0.05
) -> dict[str, Any]:
    """A race spread over two nodes (host and ann on A, bob and the spectator eve on B); ann and bob
    play on while the room's master fails over (``how``: ``coordinated`` or ``kill``), until each
    has ``moves_after`` more moves acknowledged; then everyone resigns. Checks as it goes that the
    nodes hear the room on its new master and that everyone gets the same results; returns what
    the caller checks and times: each racer's acknowledged ids and the ids its log holds after, the
    promotion's time and each racer's longest wait for an ack across the failover."""
    url = cluster.url
    ports = free_port(), free_port()
    common = ["--redis", url, "--multi-node", "--countdown", "0.1", "--rate", "1000", "--log-level", "warning"]
    if replicas_ack:
        common += ["--redis-replicas-ack", str(replicas_ack)]
    with (
        server_process("--port", str(ports[0]), *common) as first,
        server_process("--port", str(ports[1]), *common) as second,
    ):
        await asyncio.to_thread(wait_healthy, first, ports[0])
        await asyncio.to_thread(wait_healthy, second, ports[1])
        clients, starts = await spread_room(f"ws://127.0.0.1:{ports[0]}", f"ws://127.0.0.1:{ports[1]}")
        host, ann, bob, eve = clients
        code, race = latest(host, p.Room).code, starts[1].race
        channel = f"plot:events:{{{code}}}"
        master = cluster.master_of(channel)
        replica = cluster.replica_of(master)
        rng = random.Random(17)
        racers = []
        for client, start in ((ann, starts[1]), (bob, starts[2])):
            assert start.view is not None
            racers.append(Racer(client, start.view, random.Random(rng.random()), pace_s))
        tasks = [asyncio.ensure_future(racer.run()) for racer in racers]
        try:
            await until(lambda: all(len(r.acked) >= 3 for r in racers), 15, "three moves each before the failover")
            began = time.monotonic()
            if how == "coordinated":
                replica.command("CLUSTER", "FAILOVER")
            elif how == "kill":
                master.kill()  # SIGKILL: no goodbye, whatever the replica had not received is gone
            else:
                raise ValueError(f"how: coordinated or kill, not {how!r}")
            await until(lambda: is_master(replica), 30, "the replica promoted")
            promoted = time.monotonic()
            if how == "kill":  # back as the new master's replica (its nodes.conf), synced from it
                await asyncio.to_thread(master.start)
            await until(
                lambda: all(r.acks_after(promoted) >= moves_after for r in racers),
                45,
                "moves acknowledged after the failover",
            )
            for racer in racers:
                racer.stop.set()
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # Both nodes hear the room on its new master (sharded pub/sub follows the slot), and a
        # move made on one node reaches the other's clients through it.
        await until(lambda: shard_subscribers(replica, channel) >= 2, 15, "both nodes subscribed on the new master")
        ann_moves, bob_moves = latest(ann, p.MoveOk).seq, latest(bob, p.MoveOk).seq
        await until(lambda: moves_of(eve, ann.pid) == ann_moves, 15, "ann's moves (node A) seen on node B")
        await until(lambda: moves_of(host, bob.pid) == bob_moves, 15, "bob's moves (node B) seen on node A")
        results = await finish(clients)
        for proc in (first, second):
            proc.terminate()
        warnings: dict[str, int] = {}
        for proc in (first, second):
            await asyncio.to_thread(proc.wait, 15)
            for line in log_lines(proc):
                if line.get("level") in ("warning", "error"):
                    warnings[str(line.get("event"))] = warnings.get(str(line.get("event")), 0) + 1
        differ = differences(results, [c.label for c in clients])
        assert not differ, f"the clients' results differ: {differ}; the nodes' warnings: {warnings}"
        moves = {host.pid: 1, ann.pid: ann_moves + 1, bob.pid: bob_moves + 1}  # with the resigns
        assert {row.player_id: row.moves for row in results[0].racers} == moves
        if how == "kill":
            await asyncio.to_thread(cluster.wait_replicated)
        logs = {r.client.label: await stored_ids(cluster.url, code, race, r.client.pid) for r in racers}
        return {
            "promoted_s": promoted - began,
            "longest_wait_s": {r.client.label: r.longest_wait_across(began) for r in racers},
            "acked": {r.client.label: [move_id for move_id, _sent, _acked in r.acked] for r in racers},
            "logs": logs,
            "rejected": {r.client.label: r.rejected for r in racers},
            "warnings": warnings,  # the two nodes' warning and error log events, counted
            "ack_ms": {
                r.client.label: [(acked - sent) * 1000 for _id, sent, acked in r.acked if acked < began] for r in racers
            },
        }
