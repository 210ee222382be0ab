"""The Redis store: shared by every server process, durable with Redis persistence; runs on one
Redis (``redis://``, ``rediss://``, ``unix://``) or on a Redis Cluster (``redis+cluster://host:port``,
``rediss+cluster://``: any node of the cluster, or several separated by commas; the client finds
the others).

Talks to Redis through ``redis.asyncio`` (hiredis parses replies when installed). Every write
that needs atomicity is one Lua script (registered with ``register_script``, so one EVALSHA round
trip): the move-log append is a compare-and-set on the list length, the room save a
compare-and-set on a version. Every script touches the keys of one hash slot only, so the same
scripts run on a cluster; docs/store.md lists every key and script and what the cluster changes.

Keys (``ns`` is the namespace, ``{code}`` a Redis Cluster hash tag, so one room's keys share a slot):

- ``ns:room:{code}``            hash  data, version
- ``ns:logs:{code}``            set   the room's move-log keys (so delete/expiry need no SCAN)
- ``ns:log:{code}:race:player`` list  move entries, oldest first
- ``ns:rooms:listed``           zset  listed room codes, scored by listing time (one slot of its own)
- ``ns:player:id``              hash  data, token (the token hash): the record of which token is current
- ``ns:token:hash``             string player id (a token is valid only while the player's ``token`` is it)
- profiles, their indexes and the rating board: server/store/redis_profiles.py (hash tag ``{profiles}``)
- ``ns:fence:{code}``           string a throwaway write in the room's slot (``replicas_ack``: a read confirmed
                                       on the replicas, docs/store.md "Replicas")
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import PRIMARY
from redis.commands.core import AsyncScript

from server.store.base import (
    DEFAULT_PLAYER_TTL,
    AppendRequest,
    AppendResult,
    LogLength,
    Store,
    StoreUnavailable,
    check_identifier,
    is_identifier,
)
from server.store.memory import (
    check_bytes,
    check_count,
    check_log_lengths,
    check_open_race,
    check_request,
    check_seconds,
)
from server.store.redis_daily import RedisDaily
from server.store.redis_profiles import RedisProfiles
from server.store.urls import shown_url

# One append, as a Lua function: (room, log, log index keys; expected length, entry, race, and
# optionally a channel and a notice). 1 appended (and the notice published on the channel, if
# given: several nodes hear of the entry from the step that stored it, never of one that did not
# land); 0 the log does not hold exactly `expected` entries; -1 no such room, or `race` is not its
# open race (the room's `race` field: absent when no race is open). A new log joins the room's
# index and inherits the room's remaining time to live, so expiry covers it too.
APPEND_FUNCTION = """
local function append(room, log, index, expected, entry, race, channel, notice)
  if redis.call('HGET', room, 'race') ~= race then return -1 end
  local length = redis.call('LLEN', log)
  if length ~= tonumber(expected) then return 0 end
  redis.call('RPUSH', log, entry)
  if notice and notice ~= '' then redis.call('PUBLISH', channel, notice) end
  if length == 0 then
    redis.call('SADD', index, log)
    local ttl = redis.call('PTTL', room)
    if ttl > 0 then
      redis.call('PEXPIRE', log, ttl)
      redis.call('PEXPIRE', index, ttl)
    end
  end
  return 1
end
"""

# KEYS: room, log, log index. ARGV: expected length, entry, race[, channel, notice]. ``append``'s answer.
APPEND_MOVE = (
    APPEND_FUNCTION + "return append(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n"
)

# A batch of appends in one call (one Redis, not a cluster: the keys span many slots). KEYS: room,
# log, log index of each entry in turn; ARGV: expected length, entry, race, channel, notice of each
# (an empty notice: nothing published). One answer per entry, in order, each its own
# compare-and-set: ``append``'s, or the error text of an entry that failed inside Redis (pcall: it
# fails only its own entry; the others still run).
APPEND_MOVES = (
    APPEND_FUNCTION
    + """
local results = {}
for n = 0, #KEYS / 3 - 1 do
  local k, a = n * 3, n * 5
  local ok, result = pcall(append, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3],
    ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
  if ok then
    results[#results + 1] = result
  else
    results[#results + 1] = tostring(type(result) == 'table' and result.err or result)
  end
end
return results
"""
)

# KEYS: room, log index. ARGV: code, data, open race ('' for none)[, channel, notice]. 1 created;
# 0 the code is taken. Leftover logs of an earlier room with this code (there should be none) are
# cleared. The notice (several nodes: a room stored again after it vanished, version 1) is
# published in the same step, only if the room is created, as SAVE_ROOM's. The listing lives in
# another slot: create_room unlists the code in a second call.
CREATE_ROOM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for _, key in ipairs(redis.call('SMEMBERS', KEYS[2])) do redis.call('DEL', key) end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'version', 1)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'race', ARGV[3]) end
if ARGV[5] and ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return 1
"""

# KEYS: room[, move logs]. ARGV: expected version, data, open race ('' for none)[, channel,
# notice[, each log's expected length]]. The new version, or 0 on a mismatch (of the version or a
# log's length) or a missing room. HSET keeps the key's time to live: saving does not extend an
# expiring room. The notice (several nodes: the new version) is published on the channel in the
# same step, and only if the save lands: no committed change goes unannounced because a separate
# publish failed, and none is announced that did not land. The logs (several nodes: the save that
# ends a race) share the room's hash tag, so its slot.
SAVE_ROOM = """
local version = redis.call('HGET', KEYS[1], 'version')
if not version or tonumber(version) ~= tonumber(ARGV[1]) then return 0 end
for i = 2, #KEYS do
  if redis.call('LLEN', KEYS[i]) ~= tonumber(ARGV[i + 4]) then return 0 end
end
local new = tonumber(version) + 1
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'version', new)
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'race') else redis.call('HSET', KEYS[1], 'race', ARGV[3]) end
if ARGV[5] and ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return new
"""

# KEYS: room, log index. The log keys in the index share the room's hash tag, so its slot.
# delete_room unlists the code afterwards (another slot); a listing left behind is pruned by
# listed_rooms.
DELETE_ROOM = """
for _, key in ipairs(redis.call('SMEMBERS', KEYS[2])) do redis.call('DEL', key) end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

# KEYS: room, log index. ARGV: milliseconds, or -1 to keep forever. 0 if there is no such room.
EXPIRE_ROOM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ms = tonumber(ARGV[1])
local keys = redis.call('SMEMBERS', KEYS[2])
table.insert(keys, KEYS[1])
table.insert(keys, KEYS[2])
for _, key in ipairs(keys) do
  if ms < 0 then redis.call('PERSIST', key) else redis.call('PEXPIRE', key, ms) end
end
return 1
"""

# KEYS: listed set. ARGV: code, score, code, score... of listings whose room the caller found gone.
# Each is unlisted only if its score is still the one seen: a room created again since then and
# listed anew has a new score and stays (the rooms live in other slots, so this cannot check them).
PRUNE_LISTED = """
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return 1
"""

# KEYS: player. ARGV: token hash, data, ttl ms (<= 0: forever). The old token hash, or false.
# The player's `token` field is what makes a token current; the token keys live in other slots.
PUT_PLAYER = """
local old = redis.call('HGET', KEYS[1], 'token')
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'token', ARGV[1])
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
return old
"""

# KEYS: an old token (or a lease). ARGV: player id (or the lease's holder). Deletes it if it still
# names that player (holder).
RETIRE_TOKEN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS: a lease. ARGV: the holder (a node's id), time to live in ms. 1: the holder has the lease
# for ARGV[2] ms more (it was free, or already the holder's); 0: another holder has it.
TAKE_LEASE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# Error replies meaning the client's slot map may name the wrong master (a failover, a resharding,
# a restarted master not yet demoted): the map is read again.
SLOT_MAP_STALE = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
)

# A node's liveness keys on a cluster (RedisStore.node_keys): with 16 hash tags, all on one master
# of three has odds of about 1 in 14 million.
LIVENESS_KEYS = 16

# How long WAIT waits for the replicas (RedisStore's replicas_timeout), at most half the socket timeout.
DEFAULT_REPLICAS_TIMEOUT = 0.5

# How long a fence key (``RedisStore._confirmed_reads``) outlives its write: it only has to be written.
FENCE_TTL_MS = 60_000


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


def split_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL (``redis+cluster://[user:password@]host:port[,host:port...][/0]``) as the
    plain URL of its first node (what redis-py's ``from_url`` reads) and the other nodes named,
    as (host, port) seeds. Naming several lets a client starting while one of them is down find
    the cluster from another (only the first start needs one: afterwards the client knows every
    node from the slot map). A node without a port is on 6379. ValueError if one is not host:port."""
    scheme, rest = url.split("://", 1)
    split_at = min((rest.find(mark) for mark in "/?#" if mark in rest), default=len(rest))
    netloc, tail = rest[:split_at], rest[split_at:]
    credentials, _, hosts = netloc.rpartition("@")
    prefix = f"{CLUSTER_SCHEMES[scheme]}://{credentials + '@' if credentials else ''}"
    seeds: list[tuple[str, int]] = []
    for hostport in hosts.split(","):
        parts = urlsplit(f"redis://{hostport}")
        if not parts.hostname or parts.netloc != hostport:
            raise ValueError(f"no host in {hostport!r}" if hostport else "no host")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"the port in {hostport!r} is not an integer from 0 to 65535") from None
        seeds.append((parts.hostname, 6379 if port is None else port))
    return prefix + hosts.split(",")[0] + tail, seeds[1:]


def as_bytes(value: bytes | str) -> bytes:
    """Replies are bytes (the client does not decode responses); this narrows the client's wider types."""
    return value if isinstance(value, bytes) else value.encode()


def milliseconds(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def pack_command(parts: Sequence[bytes]) -> bytes:
    """One command in Redis's wire format (RESP): an array of bulk strings."""
    chunks = [b"*%d\r\n" % len(parts)]
    for part in parts:
        chunks += (b"$%d\r\n" % len(part), part, b"\r\n")
    return b"".join(chunks)


def command_part(part: object) -> bytes:
    """One argument of a command as Redis gets it: bytes as they are, anything else as its text."""
    return part if isinstance(part, bytes) else str(part).encode()


def race_argument(open_race: int | None) -> str:
    """The open race as the scripts compare it: decimal text, '' for none."""
    return "" if check_open_race(open_race) is None else str(open_race)


APPEND_RESULTS = {1: AppendResult.APPENDED, 0: AppendResult.LENGTH_MISMATCH, -1: AppendResult.NO_SUCH_RACE}


class IsolatingCluster(RedisCluster):
    """redis-py's cluster client, except that one master's failure does not fail the others.

    On a command or pipeline that fails (a dropped connection, CLUSTERDOWN, repeated MOVED)
    redis-py calls ``aclose()``, which disconnects every connection to every master at once,
    commands in flight on healthy masters included, to make itself read the slot map again.
    During one master's failover (~2.5 s) the nodes' heartbeats, appends and re-reads to it
    fail every few tens of milliseconds, so the other masters' writes kept failing with them:
    measured, 180 of 1,330 appends to rooms on healthy masters failed in the 4 s after a
    master was killed. Here those calls only ask for the slot map to be read again before the
    next command; that re-read keeps the live masters' connections (it lets commands in
    flight finish and reconnects lazily) and drops the dead master's. ``shut()`` closes for
    real."""

    _commands_known = False  # the command table (COMMAND) read: it does not change with the map

    async def aclose(self) -> None:
        self._initialize = True

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> IsolatingCluster:
        """The first time as redis-py does; afterwards only the slot map is read again. redis-py
        re-reads the command table too, on the first master of the new map, which during a
        failover is often the dead one (the map names it until its replica is promoted): the
        re-read failed, and redis-py then closed every connection to every master."""
        if not self._commands_known:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if not self._commands_known:
                    await self.nodes_manager.initialize(
                        additional_startup_nodes_info=additional_startup_nodes_info,
                        last_failed_node_name=last_failed_node_name,
                    )
                    await self._read_command_table()
                    self._commands_known = True
                    self._initialize = False
            return self
        if self._initialize:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._initialize:
                    await self.nodes_manager.initialize(
                        additional_startup_nodes_info=additional_startup_nodes_info,
                        last_failed_node_name=last_failed_node_name,
                    )
                    self._initialize = False
        return self

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """As redis-py's, once the client knows the cluster: redis-py picks a command's route
        before it reads the slot map, and with no map yet it takes a keyed command for a keyless
        one and sends it to a random master (the owner answers, another one redirects it). During
        a failover that master may be the dead one, three times running: a client's first read,
        if it raced its first initialisation, failed (seen once in CI, about 1 run in 30)."""
        if not self._commands_known:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    async def _read_command_table(self) -> None:
        """COMMAND from the first master that answers: redis-py asks only the map's default
        node, which a client first used during a failover finds dead (the map names it until its
        replica is promoted), and every command of that client failed until then."""
        masters = self.nodes_manager.get_nodes_by_server_type(PRIMARY)
        default = self.nodes_manager.default_node
        ordered = [default, *(node for node in masters if node is not default)] if default else masters
        failure: BaseException | None = None
        for node in ordered:
            try:
                await self.commands_parser.initialize(node)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as error:
                failure = error
                continue
            self.nodes_manager.default_node = node  # a live one, for keyless commands too
            return
        raise failure if failure is not None else redis.exceptions.ConnectionError("no cluster master known")

    async def shut(self) -> None:
        await super().aclose()


class RedisStore(RedisDaily, RedisProfiles, Store):
    """A store on one Redis (or Valkey) server, or on a Redis Cluster (a ``redis+cluster://`` URL).
    Connects lazily; ``await ping()`` to check it answers.

    ``retries`` re-sends a command after a dropped connection (for example the first call after
    Redis restarted); the Lua compare-and-sets make a re-sent write harmless."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "plot",
        player_ttl: float | None = DEFAULT_PLAYER_TTL,
        socket_timeout: float = 2.0,
        connect_timeout: float = 2.0,
        retries: int = 2,
        max_connections: int = 64,
        replicas_ack: int = 0,
        replicas_timeout: float | None = None,
        **redis_options: Any,
    ) -> None:
        self.namespace = check_identifier("namespace", namespace)
        if isinstance(replicas_ack, bool) or not isinstance(replicas_ack, int) or replicas_ack < 0:
            raise ValueError(f"replicas_ack must be a whole number, 0 or more, not {replicas_ack!r}")
        if replicas_timeout is None:  # well inside the socket's timeout, which would cut the WAIT
            replicas_timeout = min(DEFAULT_REPLICAS_TIMEOUT, socket_timeout / 2)
        if replicas_ack and not 0 < replicas_timeout < socket_timeout:
            raise ValueError(
                f"replicas_timeout must be above 0 and below the socket timeout ({socket_timeout} s), "
                f"not {replicas_timeout!r}"
            )
        # WAIT replicas_ack after each append batch (and after a log's read), on its connection:
        # nothing is acknowledged (or shown) before that many replicas hold it (docs/store.md, "Replicas").
        self.replicas_ack = replicas_ack
        self._wait_ms = milliseconds(replicas_timeout)
        self._map_refresh: asyncio.Task[None] | None = None
        self._liveness_nodes: dict[str, ClusterNode] = {}  # master address -> mark_alive's own connection
        player_seconds = check_seconds(player_ttl)
        self._player_ttl_ms = -1 if player_seconds is None else milliseconds(player_seconds)
        self._where = shown_url(url)
        retry = Retry(
            ExponentialBackoff(cap=0.5, base=0.05), retries, supported_errors=(redis.exceptions.ConnectionError,)
        )
        self.cluster = is_cluster_url(url)
        self._redis: aioredis.Redis | RedisCluster
        if self.cluster:
            scheme = url.split("://", 1)[0]
            # The cluster client keeps a pool per node and finds the nodes from the seeds (CLUSTER
            # SLOTS from the first that answers); it follows MOVED/ASK redirections and re-reads
            # the map after a failover.
            try:
                first, seeds = split_cluster_url(url)
                self._redis = IsolatingCluster.from_url(
                    first,
                    startup_nodes=[ClusterNode(host, port) for host, port in seeds] or None,
                    max_connections=max_connections,
                    socket_timeout=socket_timeout,
                    socket_connect_timeout=connect_timeout,
                    retry=retry,
                    **redis_options,
                )
            except (ValueError, redis.exceptions.RedisClusterException) as error:
                raise ValueError(
                    f"bad Redis Cluster URL {self._where}: expected {scheme}://[user:password@]host:port"
                    f"[,host:port...] naming any nodes of the cluster, database 0 ({error})"
                ) from None
        else:
            # A blocking pool: past max_connections, a command waits (up to socket_timeout) for a free
            # connection. redis-py's default pool fails it at once ("Too many connections"), which under
            # load turned into StoreUnavailable for most moves (bench/run_load.py paced, 1,000 racers).
            pool = aioredis.BlockingConnectionPool.from_url(
                url,
                max_connections=max_connections,
                timeout=socket_timeout,
                socket_timeout=socket_timeout,
                socket_connect_timeout=connect_timeout,
                retry=retry,
                **redis_options,
            )
            self._redis = aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes both
        self._permits = asyncio.Semaphore(max_connections) if self.cluster else None
        self._permit_timeout = socket_timeout
        self._closed = False
        # On a cluster the notice goes out with SPUBLISH (sharded pub/sub): the channel shares the
        # room's hash tag, so the script's slot, and only the room's master carries it.
        self._append_move_text = APPEND_MOVE.replace("'PUBLISH'", "'SPUBLISH'") if self.cluster else APPEND_MOVE
        self._append_move = self._redis.register_script(self._append_move_text)
        self._append_moves = self._redis.register_script(APPEND_MOVES)
        self._create_room = self._redis.register_script(
            CREATE_ROOM.replace("'PUBLISH'", "'SPUBLISH'") if self.cluster else CREATE_ROOM
        )
        self._save_room = self._redis.register_script(
            SAVE_ROOM.replace("'PUBLISH'", "'SPUBLISH'") if self.cluster else SAVE_ROOM
        )
        self._delete_room = self._redis.register_script(DELETE_ROOM)
        self._expire_room = self._redis.register_script(EXPIRE_ROOM)
        self._prune_listed = self._redis.register_script(PRUNE_LISTED)
        self._put_player = self._redis.register_script(PUT_PLAYER)
        self._retire_token = self._redis.register_script(RETIRE_TOKEN)
        self._take_lease = self._redis.register_script(TAKE_LEASE)
        self._profiles_init()
        self._listed_key = f"{namespace}:rooms:listed"
        self._register_daily()

    # Keys --------------------------------------------------------------------

    def room_key(self, code: str) -> str:
        return f"{self.namespace}:room:{{{code}}}"

    def log_index_key(self, code: str) -> str:
        return f"{self.namespace}:logs:{{{code}}}"

    def log_key(self, code: str, race: int, player_id: str) -> str:
        return f"{self.namespace}:log:{{{code}}}:{race}:{player_id}"

    def player_key(self, player_id: str) -> str:
        return f"{self.namespace}:player:{player_id}"

    def token_key(self, token_hash: str) -> str:
        return f"{self.namespace}:token:{token_hash}"

    def fence_key(self, code: str) -> str:
        return f"{self.namespace}:fence:{{{code}}}"

    def events_channel(self, code: str) -> str:
        """A room's pub/sub channel (several nodes: docs/scaling.md, "Several nodes")."""
        return f"{self.namespace}:events:{{{code}}}"

    # Pub/sub (several nodes) -------------------------------------------------

    def subscriber(self, shard: str) -> aioredis.client.PubSub:
        """A pub/sub connection of its own to ``shard``: the one Redis (``""``), or the cluster's
        master of that name (``host:port``, as ``shard_of`` gives). redis-py never re-makes it
        behind the caller's back (no retries): a dropped connection raises, so the node knows
        the messages of that shard's rooms may have been lost. Close it with ``close_subscriber``."""
        connection_class: type[AbstractConnection]
        if isinstance(self._redis, RedisCluster):
            node = self._redis.get_node(node_name=shard)
            if node is None:
                raise StoreUnavailable(f"the Redis Cluster at {self._where} has no node {shard} any more")
            connection_class, kwargs = node.connection_class, dict(node.connection_kwargs)
        else:
            pool = self._redis.connection_pool
            connection_class, kwargs = pool.connection_class, dict(pool.connection_kwargs)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        own = aioredis.ConnectionPool(connection_class=connection_class, max_connections=1, **kwargs)
        return aioredis.Redis.from_pool(own).pubsub()

    @staticmethod
    async def close_subscriber(pubsub: aioredis.client.PubSub) -> None:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await pubsub.connection_pool.disconnect()

    async def load_slot_map(self, *, refresh: bool = False) -> None:
        """On a cluster, read the slot map (``refresh``: again, after a failover or a slot moved);
        nothing on one Redis."""
        if isinstance(self._redis, RedisCluster):
            async with self._talking("slot_map"):
                if refresh:
                    await self._redis.nodes_manager.initialize()
                else:
                    await self._redis.initialize()

    def shard_of(self, channel: str) -> str | None:
        """Which connection hears ``channel``: ``""`` on one Redis; on a cluster the name of the
        master holding its slot in the client's slot map (SSUBSCRIBE goes there), None while the
        map is unread or the slot uncovered."""
        if not isinstance(self._redis, RedisCluster):
            return ""
        try:
            node = self._redis.get_node_from_key(channel)
        except (redis.exceptions.RedisClusterException, redis.exceptions.RedisError):
            return None
        return None if node is None else str(node.name)

    def beat_channel(self, node: str, shard: str) -> str | None:
        """A channel for ``node``'s heartbeats through ``shard``: on a cluster one whose hash tag
        lands on that master (a heartbeat per master, so a drop of any one subscription shows),
        None if no tag tried does (the master holds no slots)."""
        if not isinstance(self._redis, RedisCluster):
            return f"{self.namespace}:process:{node}"
        for attempt in range(4096):
            channel = f"{self.namespace}:process:{{{node}.{attempt}}}"
            if self.shard_of(channel) == shard:
                return channel
        return None

    def node_key(self, node: str) -> str:
        return f"{self.namespace}:node:{node}"

    def node_keys(self, node: str) -> list[str]:
        """A node's liveness keys: on one Redis its one key; on a cluster ``LIVENESS_KEYS`` keys,
        each with a hash tag of its own, so spread over the masters. A master that fails over
        may come back without the keys it held (they lapse while the node cannot reach it to
        renew them: the failover takes about as long as their time to live); the node's keys on
        the other masters keep it alive."""
        if not self.cluster:
            return [self.node_key(node)]
        return [f"{self.namespace}:node:{{{node}.{k}}}" for k in range(LIVENESS_KEYS)]

    async def mark_alive(self, node: str, ttl_ms: int) -> None:
        """This node is alive for ``ttl_ms`` more (its liveness keys; renewed by its heartbeat;
        on a cluster one pipeline per master, side by side, on the liveness connections).
        StoreUnavailable if none was renewed."""
        keys = self.node_keys(node)
        async with self._talking("mark_alive"):
            if not isinstance(self._redis, RedisCluster):
                await self._redis.set(keys[0], b"1", px=ttl_ms)
                return
            # A master that hangs must not hold the next renewal of the others past the keys' life.
            outcomes = await self._on_each_master(
                keys, lambda key: ["SET", key, b"1", "PX", ttl_ms], timeout_s=min(1.0, ttl_ms / 3000)
            )
            if not any(isinstance(replies, list) for replies in outcomes.values()):
                failed = next(iter(outcomes.values()), None)
                raise StoreUnavailable(f"the Redis Cluster at {self._where} renewed no liveness key: {failed!r}")

    async def nodes_alive(self, nodes: Sequence[str]) -> set[str]:
        """Which of these nodes renewed a liveness key in time (one round trip; on a cluster one
        per master, side by side: a node is alive while any of its keys is). On a cluster a node
        none of whose keys was found counts as alive too unless every master answered: during a
        failover the keys of the master being replaced are unknown, not gone."""
        if not nodes:
            return set()
        keyed = [(node, key) for node in nodes for key in self.node_keys(node)]
        async with self._talking("nodes_alive"):
            if not isinstance(self._redis, RedisCluster):
                async with self._redis.pipeline(transaction=False) as pipe:
                    for _node, key in keyed:
                        pipe.exists(key)
                    found = await pipe.execute()
                return {node for (node, _key), exists in zip(keyed, found, strict=True) if exists}
            outcomes = await self._on_each_master(
                [key for _node, key in keyed], lambda key: ["EXISTS", key], timeout_s=1.0
            )
            found_keys: set[str] = set()
            for master_keys, replies in outcomes.items():
                if isinstance(replies, list):
                    found_keys.update(key for key, exists in zip(master_keys, replies, strict=True) if exists == 1)
            if not found_keys and all(isinstance(replies, BaseException) for replies in outcomes.values()):
                raise StoreUnavailable(f"the Redis Cluster at {self._where} answered no liveness read")
            unanswered = any(not isinstance(replies, list) for replies in outcomes.values())
            return {node for node, key in keyed if key in found_keys or unanswered}

    async def _on_each_master(
        self, keys: Sequence[str], command: Callable[[str], list[Any]], *, timeout_s: float
    ) -> dict[tuple[str, ...], list[object] | BaseException]:
        """One command per key, one pipeline per master holding some of them, side by side, on
        the liveness connections: {the keys of one master: their replies, or why that master
        failed}. A reply that is an error (MOVED after a failover, CLUSTERDOWN) fails its master,
        and so does a pipeline taking longer than ``timeout_s``.

        Why connections of their own: the cluster client closes every connection it has, to every
        master, when a command or pipeline to one master fails (redis-py re-reads the slot map
        that way). During a master's failover the heartbeats' publishes to it fail every half
        second, and renewals on the healthy masters, sharing those connections, failed with
        them: for as long as the failover took, longer than the keys live under a busy CPU,
        and the other nodes took this one for dead. These connections are touched by nothing
        else, so only the failed master's renewals fail."""
        assert isinstance(self._redis, RedisCluster)
        if not self._redis.get_nodes():  # never read the slot map yet; afterwards the cached map serves
            await self._redis.initialize()
        by_master: dict[str, tuple[ClusterNode, list[str]]] = {}
        for key in keys:
            master = self._redis.get_node_from_key(key)
            if master is not None:
                by_master.setdefault(master.name, (master, []))[1].append(key)

        async def on_master(master: ClusterNode, master_keys: list[str]) -> list[object]:
            connection = self._liveness_node(master)
            stack = [PipelineCommand(position, *command(key)) for position, key in enumerate(master_keys)]
            try:
                await asyncio.wait_for(connection.execute_pipeline(stack), timeout_s)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError, TimeoutError):
                self._refresh_slot_map()
                raise
            replies = [entry.result for entry in stack]
            for reply in replies:
                if isinstance(reply, BaseException):
                    self._refresh_slot_map()
                    raise reply
            return replies

        results = await asyncio.gather(
            *(on_master(master, master_keys) for master, master_keys in by_master.values()), return_exceptions=True
        )
        return {
            tuple(master_keys): result
            for (_master, master_keys), result in zip(by_master.values(), results, strict=True)
        }

    def _liveness_node(self, master: ClusterNode) -> ClusterNode:
        """This store's own connection to a master for the liveness keys (``_on_each_master``: why),
        made with the cluster client's settings for that master; one per master address."""
        node = self._liveness_nodes.get(master.name)
        if node is None:
            settings = {k: v for k, v in master.connection_kwargs.items() if k not in ("host", "port")}
            node = ClusterNode(
                master.host, master.port, max_connections=2, connection_class=master.connection_class, **settings
            )
            self._liveness_nodes[master.name] = node
        return node

    def deal_lease_key(self, code: str, race: int) -> str:
        """Which node searches the winnable deal of a room's race (several nodes: one at a time)."""
        return f"{self.namespace}:lease:{{{code}}}:deal:{race}"

    async def take_lease(self, key: str, holder: str, ttl_ms: int) -> bool:
        """Take (or renew) a lease for ``ttl_ms``: True when ``holder`` has it, False when another does."""
        async with self._talking("take_lease"):
            return bool(await self._take_lease(keys=[key], args=[holder, ttl_ms]))

    async def drop_lease(self, key: str, holder: str) -> None:
        """Give a lease up, if ``holder`` still has it."""
        async with self._talking("drop_lease"):
            await self._retire_token(keys=[key], args=[holder])

    async def publish(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """PUBLISH each (channel, payload), in order, in one round trip; on a cluster SPUBLISH
        (sharded pub/sub: each message goes to the master holding its channel's slot, one
        pipeline per master)."""
        if not messages:
            return
        command = "SPUBLISH" if self.cluster else "PUBLISH"
        async with self._talking("publish"), self._redis.pipeline(transaction=False) as pipe:
            for channel, payload in messages:
                pipe.execute_command(command, channel, payload)
            await pipe.execute()

    # Errors ------------------------------------------------------------------

    @asynccontextmanager
    async def _talking(self, operation: str) -> AsyncIterator[None]:
        """One call to Redis (a round trip, a pipeline, or the few steps of one operation): every
        way Redis can fail us becomes StoreUnavailable, with a message saying where and what. The
        observer (the node's metrics) is told how long it took and whether it failed."""
        observer = self.observer
        started = time.perf_counter() if observer is not None else 0.0
        failed = True
        try:
            if self._closed:
                raise StoreUnavailable(f"the Redis store for {self._where} is closed ({operation})")
            async with self._cluster_permit(operation):
                try:
                    yield
                    failed = False
                except redis.exceptions.TimeoutError as error:
                    raise StoreUnavailable(
                        f"Redis at {self._where} did not answer in time ({operation}): {error}"
                    ) from error
                except redis.exceptions.ConnectionError as error:
                    raise StoreUnavailable(f"cannot reach Redis at {self._where} ({operation}): {error}") from error
                except redis.exceptions.RedisError as error:
                    raise StoreUnavailable(f"Redis at {self._where} refused {operation}: {error}") from error
                except redis.exceptions.RedisClusterException as error:  # no node reachable, a slot not covered...
                    raise StoreUnavailable(f"the Redis Cluster at {self._where} failed {operation}: {error}") from error
                except (OSError, TimeoutError) as error:
                    raise StoreUnavailable(f"cannot reach Redis at {self._where} ({operation}): {error!r}") from error
                except AttributeError as error:
                    if not self.cluster:
                        raise
                    # redis-py 8.1's cluster client can close a connection under a concurrent command
                    # while it re-reads the slot map after a node failed ("'NoneType' object has no
                    # attribute 'writelines'"): the command's outcome is unknown, as after a drop.
                    raise StoreUnavailable(
                        f"the Redis Cluster at {self._where} dropped {operation}: {error}"
                    ) from error
        finally:
            if observer is not None:
                observer(operation, time.perf_counter() - started, failed)

    @asynccontextmanager
    async def _cluster_permit(self, operation: str) -> AsyncIterator[None]:
        """On a cluster, one of max_connections permits per store operation. The cluster client's
        per-node pools fail at once when full (MaxConnectionsError), where the one-Redis store's
        blocking pool waits; an operation uses at most one connection per node at a time, so
        bounding the operations bounds every node's pool, and a full store waits as on one Redis."""
        if self._permits is None:
            yield
            return
        try:
            async with asyncio.timeout(self._permit_timeout):
                await self._permits.acquire()
        except TimeoutError:
            raise StoreUnavailable(
                f"no free connection to the Redis Cluster at {self._where} "
                f"within {self._permit_timeout} s ({operation})"
            ) from None
        try:
            yield
        finally:
            self._permits.release()

    async def ping(self) -> None:
        async with self._talking("ping"):
            await self._redis.ping()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._map_refresh is not None:
                self._map_refresh.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._map_refresh
            await asyncio.gather(*(node.disconnect() for node in self._liveness_nodes.values()))
            if isinstance(self._redis, IsolatingCluster):
                await self._redis.shut()
            else:
                await self._redis.aclose()

    # Players -----------------------------------------------------------------

    async def put_player(self, player_id: str, token_hash: str, data: bytes, ttl_s: float | None = None) -> None:
        """Three single-slot steps, each safe to stop after: the new token's key, then the player's
        record naming it current, then the old token's key deleted (player_by_token ignores a
        token the record does not name, so a step left undone never revives an old token)."""
        check_identifier("player id", player_id)
        check_identifier("token hash", token_hash)
        check_bytes("player data", data)
        ttl_ms = self._player_ttl_ms if ttl_s is None else milliseconds(check_seconds(ttl_s) or 0.0)
        async with self._talking("put_player"):
            token_key = self.token_key(token_hash)
            set_token: list[Any] = ["SET", token_key, player_id, *(("PX", ttl_ms) if ttl_ms > 0 else ())]
            keys = [self.player_key(player_id)]
            args: list[bytes | str | int] = [token_hash, data, ttl_ms]
            if self.replicas_ack:
                # A token is told to its client only once replicas hold it and the record naming it
                # (each step's WAIT on its own master's connection): it survives a failover.
                await self._with_wait(token_key, [set_token], f"player {player_id}'s token")
                old = await self._confirmed_script(self._put_player, keys, args, f"player {player_id}'s write")
            else:
                await self._redis.execute_command(*set_token)
                old = await self._put_player(keys=keys, args=args)
            # The old token's key is tidied without WAIT: lost, it stays harmless (the record no
            # longer names it, so player_by_token refuses it).
            if isinstance(old, bytes) and old != token_hash.encode():
                await self._retire_token(keys=[self.token_key(old.decode())], args=[player_id])

    async def get_player(self, player_id: str) -> bytes | None:
        if not is_identifier(player_id):
            return None
        async with self._talking("get_player"):
            data = await self._redis.hget(self.player_key(player_id), "data")
        return None if data is None else as_bytes(data)

    async def player_by_token(self, token_hash: str) -> str | None:
        if not is_identifier(token_hash):
            return None
        async with self._talking("player_by_token"):
            found = await self._redis.get(self.token_key(token_hash))
            if found is None:
                return None
            player_id = as_bytes(found).decode()
            current = await self._redis.hget(self.player_key(player_id), "token")
        return player_id if current is not None and as_bytes(current) == token_hash.encode() else None

    # Rooms -------------------------------------------------------------------

    async def create_room(self, code: str, data: bytes, *, open_race: int | None = None, notice: bytes = b"") -> bool:
        check_identifier("room code", code)
        check_bytes("room data", data)
        check_bytes("room notice", notice)
        race = race_argument(open_race)
        keys = [self.room_key(code), self.log_index_key(code)]
        args: list[bytes | str] = [code, data, race]
        if notice:  # published by the creation's own script, only if it creates the room
            args += [self.events_channel(code), notice]
        async with self._talking("create_room"):
            if self.replicas_ack:
                created = await self._confirmed_script(self._create_room, keys, args, f"room {code}'s write")
            else:
                created = await self._create_room(keys=keys, args=args)
            if created == 1:  # a new room starts unlisted, even if an earlier one of this code was listed
                await self._redis.zrem(self._listed_key, code)
        return bool(created == 1)

    async def load_room(self, code: str) -> tuple[bytes, int] | None:
        if not is_identifier(code):
            return None
        async with self._talking("load_room"):
            if self.replicas_ack:
                (found,) = await self._confirmed_reads(code, [["HMGET", self.room_key(code), "data", "version"]])
                data, version = cast(list[bytes | str | None], found)
            else:
                data, version = await self._redis.hmget(self.room_key(code), ["data", "version"])
        if data is None or version is None:
            return None
        return as_bytes(data), int(version)

    async def save_room(
        self,
        code: str,
        data: bytes,
        expected_version: int,
        *,
        open_race: int | None = None,
        notice: bytes = b"",
        logs: Sequence[LogLength] = (),
    ) -> int | None:
        check_bytes("room data", data)
        check_count("expected version", expected_version)
        check_bytes("room notice", notice)
        race = race_argument(open_race)
        check_log_lengths(logs)
        if not is_identifier(code) or not all(is_identifier(log.player_id) for log in logs):
            return None
        keys = [self.room_key(code), *(self.log_key(code, log.race, log.player_id) for log in logs)]
        args: list[bytes | int | str] = [expected_version, data, race]
        if notice or logs:  # the notice is published by the save's own script, only if it lands
            args += [self.events_channel(code), notice, *(log.length for log in logs)]
        async with self._talking("save_room"):
            if self.replicas_ack:
                version = await self._confirmed_script(self._save_room, keys, args, f"room {code}'s write")
            else:
                version = await self._save_room(keys=keys, args=args)
        return int(cast(int, version)) or None

    async def delete_room(self, code: str) -> None:
        if not is_identifier(code):
            return
        keys = [self.room_key(code), self.log_index_key(code)]
        async with self._talking("delete_room"):
            if self.replicas_ack:
                await self._confirmed_script(self._delete_room, keys, [], f"room {code}'s deletion")
                await self._with_wait(self._listed_key, [["ZREM", self._listed_key, code]], f"room {code}'s listing")
            else:
                await self._delete_room(keys=keys)
                await self._redis.zrem(self._listed_key, code)

    async def set_listed(self, code: str, listed: bool) -> None:
        check_identifier("room code", code)
        key = self._listed_key
        change: list[Any] = ["ZADD", key, "NX", repr(time.time()), code] if listed else ["ZREM", key, code]
        async with self._talking("set_listed"):
            if self.replicas_ack:
                await self._with_wait(key, [change], f"room {code}'s listing")
            else:
                await self._redis.execute_command(*change)

    async def listed_rooms(self) -> list[str]:
        async with self._talking("listed_rooms"):
            members = cast(
                list[tuple[bytes, float]], await self._redis.zrange(self._listed_key, 0, -1, withscores=True)
            )
            listed = [(as_bytes(member).decode(), float(score)) for member, score in members]
            if not listed:
                return []
            # On a cluster the pipeline is split per node: one round trip to each node holding a room.
            async with self._redis.pipeline(transaction=False) as pipe:
                for code, _score in listed:
                    pipe.exists(self.room_key(code))
                exists = await pipe.execute()
            gone = [(code, score) for (code, score), found in zip(listed, exists, strict=True) if not found]
            if gone:  # rooms that expired or vanished: tidy the listing
                await self._prune_listed(
                    keys=[self._listed_key], args=[part for code, score in gone for part in (code, repr(score))]
                )
        return [code for (code, _score), found in zip(listed, exists, strict=True) if found]

    async def expire_room(self, code: str, seconds: float | None) -> None:
        ttl = check_seconds(seconds)
        if not is_identifier(code):
            return
        if ttl is not None and ttl <= 0:
            await self.delete_room(code)
            return
        keys, args = [self.room_key(code), self.log_index_key(code)], [-1 if ttl is None else milliseconds(ttl)]
        async with self._talking("expire_room"):
            if self.replicas_ack:
                await self._confirmed_script(self._expire_room, keys, args, f"room {code}'s expiry")
            else:
                await self._expire_room(keys=keys, args=args)

    # Move logs ---------------------------------------------------------------

    def _append_keys_and_args(self, request: AppendRequest) -> tuple[list[str], list[bytes | int | str]]:
        code, race, player_id = request.code, request.race, request.player_id
        keys = [self.room_key(code), self.log_key(code, race, player_id), self.log_index_key(code)]
        args: list[bytes | int | str] = [request.expected_length, request.entry, str(race)]
        if request.notice:  # published with the append, in the same script, only if it lands
            args += [self.events_channel(code), request.notice]
        return keys, args

    async def append_move(
        self, code: str, race: int, player_id: str, expected_length: int, entry: bytes
    ) -> AppendResult:
        request = check_request(AppendRequest(code, race, player_id, expected_length, entry))
        if self.replicas_ack:  # the batch's path: WAIT on the append's own connection
            (result,) = await self.append_moves([request])
            if isinstance(result, StoreUnavailable):
                raise result
            return result
        keys, args = self._append_keys_and_args(request)
        async with self._talking("append_move"):
            appended = await self._append_move(keys=keys, args=args)
        return self._append_result(appended)

    async def append_moves(self, batch: Sequence[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        """On one Redis: one APPEND_MOVES call for the whole batch (one EVALSHA, one round trip, one
        reply; a second only after Redis lost its script cache, when nothing ran). On a cluster, one
        pipeline of APPEND_MOVE calls per master, in parallel: a master down fails only the
        entries of its rooms (the cluster client's own pipeline fails the whole batch)."""
        requests = [check_request(request) for request in batch]
        if not requests:
            return []
        if not self.cluster:
            return await self._append_script(requests)
        results: list[AppendResult | StoreUnavailable | None] = [None] * len(requests)
        try:
            groups = await self._groups_by_node(requests)
        except StoreUnavailable as error:
            return [error] * len(requests)
        parts = await asyncio.gather(
            *(self._append_group([requests[i] for i in indexes], node) for node, indexes in groups.items())
        )
        for indexes, part in zip(groups.values(), parts, strict=True):
            for index, result in zip(indexes, part, strict=True):
                results[index] = result
        return [result if result is not None else StoreUnavailable("append_moves: no answer") for result in results]

    async def _append_script(self, requests: list[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        """The batch as one APPEND_MOVES call, packed here: redis-py's per-argument encoding and its
        per-command pipeline work were most of a move's cost in the server (docs/benchmarks.md, "The
        move path at saturation"). All StoreUnavailable if the round trip failed (then no one can tell
        which entries landed); otherwise each entry's own result."""
        keys: list[bytes] = []
        args: list[bytes] = []
        for request in requests:
            code, race = request.code, request.race
            keys += (
                self.room_key(code).encode(),
                self.log_key(code, race, request.player_id).encode(),
                self.log_index_key(code).encode(),
            )
            channel = self.events_channel(code).encode() if request.notice else b""
            args += (b"%d" % request.expected_length, request.entry, b"%d" % race, channel, request.notice)
        packed = pack_command([b"EVALSHA", self._append_moves.sha.encode(), b"%d" % len(keys), *keys, *args])
        count = 1
        if self.replicas_ack:  # on the same connection: WAIT counts the writes of its own connection
            packed += self._wait_command()
            count = 2
        try:
            async with self._talking("append_moves"):
                replies = await self._round_trip(packed, count)
                if isinstance(replies[0], redis.exceptions.NoScriptError):  # Redis restarted, or SCRIPT FLUSH
                    await self._redis.script_load(APPEND_MOVES)  # nothing ran (a WAIT after it waited for nothing)
                    replies = await self._round_trip(packed, count)
                for answer in replies:
                    if isinstance(answer, redis.exceptions.ResponseError):
                        raise answer
        except StoreUnavailable as error:
            return [error] * len(requests)
        reply = replies[0]
        if not isinstance(reply, list) or len(reply) != len(requests):
            odd = StoreUnavailable(f"Redis at {self._where} answered append_moves with {reply!r:.200}")
            return [odd] * len(requests)
        results: list[object] = list(reply)
        if self.replicas_ack:
            results = self._confirmed(results, replies[1])
        outcomes: list[AppendResult | StoreUnavailable] = []
        for answer in results:
            if isinstance(answer, StoreUnavailable):
                outcomes.append(answer)
                continue
            try:
                outcomes.append(self._append_result(answer))
            except StoreUnavailable as error:
                outcomes.append(error)
        return outcomes

    def _wait_command(self) -> bytes:
        return pack_command([b"WAIT", b"%d" % self.replicas_ack, b"%d" % self._wait_ms])

    def _confirmed(self, replies: list[object], waited: object) -> list[object]:
        """The append replies of one connection, given its WAIT's answer: an entry stored but not
        confirmed by ``replicas_ack`` replicas becomes StoreUnavailable (outcome uncertain: the core
        re-reads the log, and that read is confirmed on the replicas too, ``_fenced``)."""
        if isinstance(waited, int) and waited >= self.replicas_ack:
            return replies
        unconfirmed = StoreUnavailable(
            f"Redis at {self._where} stored append_moves, but {waited!r} of {self.replicas_ack} replicas "
            f"confirmed it within {self._wait_ms} ms"
        )
        return [unconfirmed if reply == 1 else reply for reply in replies]

    async def _round_trip(self, packed: bytes, count: int = 1) -> list[object]:
        """Packed commands on one pooled connection, and their ``count`` replies (an error reply in
        its place, as an exception). redis-py's retry policy: a dropped connection is re-sent once
        it reconnects, all of it on the new connection; the compare-and-sets make that harmless."""
        assert isinstance(self._redis, aioredis.Redis)  # one Redis: the cluster client has a pool per node
        pool = self._redis.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]

        async def send() -> list[object]:
            await connection.send_packed_command(packed)
            replies: list[object] = []
            for _ in range(count):
                try:
                    replies.append(await connection.read_response())
                except redis.exceptions.ResponseError as error:  # an error reply: the next ones still follow
                    replies.append(error)
            return replies

        async def dropped(_error: Exception) -> None:
            await connection.disconnect()

        try:
            replies: list[object] = await connection.retry.call_with_retry(send, dropped)
        finally:
            await pool.release(connection)
        return replies

    async def _node_pipeline(self, node: ClusterNode, commands: Sequence[Sequence[Any]]) -> list[object]:
        """The commands on one connection to one cluster master, in order: each reply, or the error
        it got as an exception. No redirection followed and nothing re-sent (the node's pool does
        not retry): a WAIT must count the writes of its own connection, on the master it asks. A
        dropped connection (raised) or a MOVED, ASK, CLUSTERDOWN or TRYAGAIN (answered) reads
        the slot map again in the background: a failover."""
        stack = [PipelineCommand(position, *args) for position, args in enumerate(commands)]
        try:
            await node.execute_pipeline(stack)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            self._refresh_slot_map()
            raise
        replies = [command.result for command in stack]
        for reply in replies:
            if isinstance(reply, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
                self._refresh_slot_map()
                raise reply
            if isinstance(reply, SLOT_MAP_STALE):
                self._refresh_slot_map()
        return replies

    def _refresh_slot_map(self) -> None:
        """Read the cluster's slot map again in the background, once at a time."""
        if self._map_refresh is not None and not self._map_refresh.done():
            return

        async def refresh() -> None:
            if isinstance(self._redis, RedisCluster) and not self._closed:
                with contextlib.suppress(Exception):  # the next failure asks again
                    await self._redis.nodes_manager.initialize()

        self._map_refresh = asyncio.ensure_future(refresh())

    async def _groups_by_node(self, requests: list[AppendRequest]) -> dict[ClusterNode | None, list[int]]:
        """The indexes of the requests, by the master holding their room (one group on one Redis).
        A stale slot map only misgroups: the cluster pipeline still follows MOVED."""
        if not isinstance(self._redis, RedisCluster):
            return {None: list(range(len(requests)))}
        async with self._talking("append_moves"):
            await self._redis.initialize()  # the slot map (a no-op once read)
            groups: dict[ClusterNode | None, list[int]] = {}
            for index, request in enumerate(requests):
                node = self._redis.get_node_from_key(self.room_key(request.code))
                groups.setdefault(node, []).append(index)
        return groups

    async def _append_group(
        self, requests: list[AppendRequest], node: ClusterNode | None
    ) -> list[AppendResult | StoreUnavailable]:
        results: list[AppendResult | StoreUnavailable | None] = [None] * len(requests)
        todo = list(range(len(requests)))
        for attempt in range(2):
            replies = await self._append_pipeline([requests[i] for i in todo], node)
            again: list[int] = []
            for index, reply in zip(todo, replies, strict=True):
                if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 0:
                    again.append(index)  # refused before it ran: nothing was written, safe to re-send
                elif isinstance(reply, StoreUnavailable):
                    results[index] = reply
                elif isinstance(reply, Exception):
                    results[index] = StoreUnavailable(f"Redis at {self._where} refused append_moves: {reply}")
                else:
                    try:
                        results[index] = self._append_result(reply)
                    except StoreUnavailable as error:
                        results[index] = error
            if not again:
                break
            try:
                async with self._talking("append_moves"):
                    if isinstance(self._redis, RedisCluster) and node is not None:
                        await self._redis.execute_command("SCRIPT LOAD", self._append_move_text, target_nodes=node)
                    else:
                        await self._redis.script_load(self._append_move_text)
            except StoreUnavailable as error:
                for index in again:  # they never ran
                    results[index] = error
                break
            todo = again
        return [result if result is not None else StoreUnavailable("append_moves: no answer") for result in results]

    async def _append_pipeline(self, requests: list[AppendRequest], node: ClusterNode | None) -> list[object]:
        """The raw reply of each request; all StoreUnavailable if the round trip itself failed
        (then no one can tell which entries landed). With ``replicas_ack``, one pipeline on one
        connection to the room's master, WAIT last (``_node_pipeline``)."""
        if self.replicas_ack and isinstance(self._redis, RedisCluster) and node is not None:
            commands: list[list[Any]] = []
            for request in requests:
                keys, args = self._append_keys_and_args(request)
                commands.append(["EVALSHA", self._append_move.sha, len(keys), *keys, *args])
            commands.append(["WAIT", self.replicas_ack, self._wait_ms])
            try:
                async with self._talking("append_moves"):
                    *answers, waited = await self._node_pipeline(node, commands)
            except StoreUnavailable as error:
                return [error] * len(requests)
            return self._confirmed(answers, waited)
        try:
            async with self._talking("append_moves"), self._redis.pipeline(transaction=False) as pipe:
                for request in requests:
                    keys, args = self._append_keys_and_args(request)
                    # execute_command: the cluster pipeline blocks its evalsha method, not the command
                    pipe.execute_command("EVALSHA", self._append_move.sha, len(keys), *keys, *args)
                replies: list[object] = await pipe.execute(raise_on_error=False)
        except StoreUnavailable as error:
            return [error] * len(requests)
        return replies

    def _append_result(self, reply: object) -> AppendResult:
        result = APPEND_RESULTS.get(reply) if isinstance(reply, int) else None
        if result is None:
            if isinstance(reply, bytes):  # APPEND_MOVES: this entry failed inside Redis (its error text)
                raise StoreUnavailable(f"Redis at {self._where} failed append_move: {reply.decode(errors='replace')}")
            raise StoreUnavailable(f"Redis at {self._where} answered append_move with {reply!r}")
        return result

    async def load_moves(self, code: str, race: int, player_id: str, start: int = 0) -> list[bytes]:
        check_count("race", race)
        if check_count("start", start) < 0:
            raise ValueError(f"start must be 0 or more, not {start}")
        if not is_identifier(code) or not is_identifier(player_id):
            return []
        key = self.log_key(code, race, player_id)
        async with self._talking("load_moves"):
            if self.replicas_ack:
                (entries,) = await self._confirmed_reads(code, [["LRANGE", key, start, -1]])
            else:
                entries = await self._redis.lrange(key, start, -1)
        return [as_bytes(entry) for entry in cast(list[bytes], entries)]

    async def _confirmed_reads(self, code: str, reads: list[list[Any]]) -> list[object]:
        """``reads`` (of one room's keys), then a throwaway write in the room's slot (its fence key)
        and WAIT, all on one connection to the room's master; their replies. Replication keeps
        order, so once ``replicas_ack`` replicas hold the fence they hold everything read before
        it: what is read here survives the master's loss. StoreUnavailable if they do not confirm
        in time (the caller retries, as after any failed read)."""
        fence = ["SET", self.fence_key(code), b"1", "PX", FENCE_TTL_MS]
        replies = await self._with_wait(self.room_key(code), [*reads, fence], f"room {code}'s read")
        return replies[: len(reads)]

    async def _confirmed_script(self, script: AsyncScript, keys: list[str], args: list[Any], what: str) -> object:
        """A script and WAIT on one connection to the master of its keys' slot (the script loaded
        there first if that master lacks it); its reply once ``replicas_ack`` replicas hold its
        effect. StoreUnavailable if they do not confirm in time: the write's outcome is then
        unknown (it may have landed on the master), as after a dropped connection."""
        call = ["EVALSHA", script.sha, len(keys), *keys, *args]
        try:
            return (await self._with_wait(keys[0], [call], what))[0]
        except redis.exceptions.NoScriptError:  # refused before it ran: load it on that master, once
            if isinstance(self._redis, RedisCluster):
                node = self._redis.get_node_from_key(keys[0])
                await self._redis.execute_command("SCRIPT LOAD", script.script, target_nodes=node)
            else:
                await self._redis.script_load(script.script)
            return (await self._with_wait(keys[0], [call], what))[0]

    async def _with_wait(self, key: str, commands: list[list[Any]], what: str) -> list[object]:
        """``commands`` then WAIT on one connection to the master holding ``key``'s slot (the one
        Redis, or the cluster's master): their replies (an error reply raised), once
        ``replicas_ack`` replicas confirmed; StoreUnavailable if they did not in time."""
        commands = [*commands, ["WAIT", self.replicas_ack, self._wait_ms]]
        if isinstance(self._redis, RedisCluster):
            await self._redis.initialize()  # the slot map (a no-op once read)
            node = self._redis.get_node_from_key(key)
            if node is None:
                raise StoreUnavailable(f"the Redis Cluster at {self._where} has no master for {what}")
            replies = await self._node_pipeline(node, commands)
        else:
            packed = b"".join(pack_command([command_part(part) for part in command]) for command in commands)
            replies = await self._round_trip(packed, len(commands))
        for reply in replies:
            if isinstance(reply, redis.exceptions.ResponseError):
                raise reply
        waited = replies[-1]
        if not isinstance(waited, int) or waited < self.replicas_ack:
            raise StoreUnavailable(
                f"Redis at {self._where}: {waited!r} of {self.replicas_ack} replicas confirmed {what} "
                f"within {self._wait_ms} ms"
            )
        return replies[:-1]

    async def load_logs(self, code: str, race: int, starts: Sequence[tuple[str, int]]) -> list[list[bytes]]:
        """One pipeline (the logs share the room's hash tag: one slot, one master on a cluster)."""
        check_count("race", race)
        for _player_id, start in starts:
            if check_count("start", start) < 0:
                raise ValueError(f"start must be 0 or more, not {start}")
        wanted = [
            (index, self.log_key(code, race, player_id), start)
            for index, (player_id, start) in enumerate(starts)
            if is_identifier(code) and is_identifier(player_id)
        ]
        logs: list[list[bytes]] = [[] for _ in starts]
        if not wanted:
            return logs
        found: list[Any]
        async with self._talking("load_logs"):
            if self.replicas_ack:
                found = await self._confirmed_reads(code, [["LRANGE", key, start, -1] for _index, key, start in wanted])
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for _index, key, start in wanted:
                        pipe.lrange(key, start, -1)
                    found = await pipe.execute()
        for (index, _key, _start), entries in zip(wanted, found, strict=True):
            logs[index] = [as_bytes(entry) for entry in entries]
        return logs
