"""The store contract: one suite, run against every implementation of ``server.store.base.Store``.

Tests that need Redis itself (stopping it, restarting it, its key layout) come last.
"""

from __future__ import annotations

import asyncio
import math
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.client import PubSub
from redis_cluster_fixture import LocalRedisCluster
from redis_fixture import RedisServer, free_port
from support import eventually

from server.store import MemoryStore, RedisStore, Store, StoreUnavailable, open_store
from server.store.base import AppendRequest, AppendResult, LogLength

APPENDED, LENGTH_MISMATCH, NO_SUCH_RACE = AppendResult.APPENDED, AppendResult.LENGTH_MISMATCH, AppendResult.NO_SUCH_RACE

# cluster: three masters, tests/redis_cluster_fixture.py; replicated: three masters with a replica each,
# the store on replicas_ack=1 (every append, room write and log or room read confirmed by WAIT).
IMPLEMENTATIONS = ["memory", "redis", "cluster", "replicated"]

StoreFactory = Callable[..., Awaitable[Store]]


@pytest.fixture(params=IMPLEMENTATIONS)
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """``await make_store(**options)``: a store on the same data as every other one this test made
    (for Redis: a separate client and connection pool, as another server process would have)."""
    made: list[Store] = []
    memory: list[MemoryStore] = []

    async def make(**options: Any) -> Store:
        store: Store
        if request.param == "memory":
            if not memory:
                memory.append(MemoryStore(**options))
            store = memory[0]
        elif request.param == "replicated":
            url = request.getfixturevalue("replicated_cluster_url")
            # The contract, not WAIT's latency: run first after the cluster's start (`-k replicated`),
            # a replica sometimes let a WAIT pass its default 500 ms once (1 run in 2-3; never in a
            # full run, where the failover tests use the cluster first). 2 s of patience here.
            options = {"socket_timeout": 5.0, "replicas_timeout": 2.0, **options}
            store = RedisStore(url, namespace="contract", replicas_ack=1, **options)
        else:
            url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
            store = RedisStore(url, namespace="contract", **options)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> Store:
    return await make_store()


# Basics ----------------------------------------------------------------------


async def test_ping_answers(store: Store) -> None:
    await store.ping()


async def test_calls_after_close_raise_store_unavailable(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.load_room("ROOM")


# Players ---------------------------------------------------------------------


async def test_player_round_trip_and_token_lookup(store: Store) -> None:
    await store.put_player("p1", "hash1", b"\x00alice\xff")
    assert await store.get_player("p1") == b"\x00alice\xff"
    assert await store.player_by_token("hash1") == "p1"
    assert await store.get_player("p2") is None
    assert await store.player_by_token("hash2") is None


async def test_overwriting_a_player_with_a_new_token_retires_the_old_token(store: Store) -> None:
    await store.put_player("p1", "old", b"v1")
    await store.put_player("p1", "new", b"v2")
    assert await store.get_player("p1") == b"v2"
    assert await store.player_by_token("new") == "p1"
    assert await store.player_by_token("old") is None


async def test_players_expire_after_their_ttl_and_a_put_renews_it(make_store: StoreFactory) -> None:
    store = await make_store(player_ttl=0.6)
    await store.put_player("short", "short-token", b"x")
    await store.put_player("renewed", "renewed-token", b"x")
    await asyncio.sleep(0.35)
    await store.put_player("renewed", "renewed-token", b"y")

    async def short_gone() -> bool:
        return await store.get_player("short") is None and await store.player_by_token("short-token") is None

    await eventually(short_gone)
    assert await store.get_player("renewed") == b"y"  # renewed 0.35 s in, so it has at least 0.25 s left
    assert await store.player_by_token("renewed-token") == "renewed"


@pytest.mark.parametrize("bad", ["", "a:b", "{tag}", "a b", "é", "x" * 129, "line\n"])
async def test_identifiers_outside_the_alphabet_are_refused_on_write_and_unknown_on_read(
    store: Store, bad: str
) -> None:
    with pytest.raises(ValueError, match="bad player id"):
        await store.put_player(bad, "hash", b"x")
    with pytest.raises(ValueError, match="bad room code"):
        await store.create_room(bad, b"x")
    with pytest.raises(ValueError, match="bad room code"):
        await store.append_move(bad, 0, "p1", 0, b"m")
    assert await store.get_player(bad) is None
    assert await store.player_by_token(bad) is None
    assert await store.load_room(bad) is None
    assert await store.save_room(bad, b"x", 1) is None
    assert await store.load_moves(bad, 0, "p1") == []
    await store.delete_room(bad)
    await store.expire_room(bad, 1.0)
    assert await store.listed_rooms() == []


async def test_non_bytes_payloads_are_refused(store: Store) -> None:
    with pytest.raises(TypeError, match="bytes"):
        await store.create_room("ROOM", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        await store.put_player("p1", "hash", bytearray(b"x"))  # type: ignore[arg-type]
    assert await store.create_room("ROOM", b"ok", open_race=0)
    with pytest.raises(TypeError, match="bytes"):
        await store.append_move("ROOM", 0, "p1", 0, "move")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        await store.append_move("ROOM", 0, "p1", "0", b"move")  # type: ignore[arg-type]
    assert await store.load_moves("ROOM", 0, "p1") == []


# Rooms -----------------------------------------------------------------------


async def test_create_room_is_unique_and_starts_at_version_1(store: Store) -> None:
    assert await store.create_room("ROOM", b"first")
    assert not await store.create_room("ROOM", b"second")
    assert await store.load_room("ROOM") == (b"first", 1)
    assert await store.load_room("OTHER") is None


async def test_concurrent_creates_of_one_code_have_exactly_one_winner(make_store: StoreFactory) -> None:
    stores = [await make_store() for _ in range(4)]
    results = await asyncio.gather(*(stores[i % 4].create_room("ROOM", b"by %d" % i) for i in range(16)))
    assert results.count(True) == 1
    assert await stores[0].load_room("ROOM") == (b"by %d" % results.index(True), 1)


async def test_save_room_is_a_compare_and_set_on_the_version(store: Store) -> None:
    await store.create_room("ROOM", b"v1")
    assert await store.save_room("ROOM", b"stale", 0) is None
    assert await store.save_room("ROOM", b"future", 2) is None
    assert await store.load_room("ROOM") == (b"v1", 1)
    assert await store.save_room("ROOM", b"v2", 1) == 2
    assert await store.save_room("ROOM", b"again", 1) is None
    assert await store.save_room("ROOM", b"v3", 2) == 3
    assert await store.load_room("ROOM") == (b"v3", 3)
    assert await store.save_room("NOPE", b"x", 1) is None
    assert await store.load_room("NOPE") is None  # a failed save creates nothing


async def test_save_room_with_logs_lands_only_if_each_log_holds_exactly_its_length(store: Store) -> None:
    """The save that ends a race names each racer's log length its results count (several nodes):
    a log longer (another node stored an entry meanwhile) or shorter refuses it; a log never
    written holds 0."""
    await store.create_room("ROOM", b"v1", open_race=3)
    assert await store.append_moves([AppendRequest("ROOM", 3, "p1", 0, b"m0")]) == [APPENDED]
    assert await store.save_room("ROOM", b"short", 1, logs=[LogLength(3, "p1", 0)]) is None
    assert await store.save_room("ROOM", b"long", 1, logs=[LogLength(3, "p1", 2)]) is None
    assert await store.save_room("ROOM", b"other race", 1, logs=[LogLength(2, "p1", 1)]) is None
    assert await store.load_room("ROOM") == (b"v1", 1)
    counted = [LogLength(3, "p1", 1), LogLength(3, "p2", 0)]
    assert await store.save_room("ROOM", b"ended", 1, notice=b"", logs=counted) == 2
    assert await store.load_room("ROOM") == (b"ended", 2)
    with pytest.raises(ValueError, match="log length"):
        await store.save_room("ROOM", b"x", 2, logs=[LogLength(3, "p1", -1)])


async def test_concurrent_saves_of_one_version_have_exactly_one_winner(make_store: StoreFactory) -> None:
    stores = [await make_store() for _ in range(4)]
    await stores[0].create_room("ROOM", b"v1")
    results = await asyncio.gather(*(stores[i % 4].save_room("ROOM", b"by %d" % i, 1) for i in range(16)))
    assert sorted(results, key=lambda r: r or 0) == [None] * 15 + [2]
    winner = next(i for i, result in enumerate(results) if result == 2)
    assert await stores[0].load_room("ROOM") == (b"by %d" % winner, 2)


async def test_listing_holds_existing_listed_rooms_oldest_first(store: Store) -> None:
    for code in ("A1", "B2", "C3", "D4"):
        await store.create_room(code, b"")
    await store.set_listed("C3", True)
    await store.set_listed("A1", True)
    await store.set_listed("D4", True)
    await store.set_listed("A1", True)  # listing again keeps its place
    assert await store.listed_rooms() == ["C3", "A1", "D4"]
    await store.set_listed("A1", False)
    await store.set_listed("B2", False)  # unlisting an unlisted room is harmless
    assert await store.listed_rooms() == ["C3", "D4"]
    await store.delete_room("C3")
    assert await store.listed_rooms() == ["D4"]
    await store.set_listed("GHOST", True)  # a listing without a room is never shown...
    assert await store.listed_rooms() == ["D4"]
    await store.create_room("GHOST", b"")  # ...and a new room starts unlisted
    assert await store.listed_rooms() == ["D4"]


async def test_delete_room_removes_room_logs_and_listing(store: Store) -> None:
    await store.create_room("ROOM", b"x", open_race=0)
    await store.set_listed("ROOM", True)
    assert await store.append_move("ROOM", 0, "p1", 0, b"m1") == APPENDED
    assert await store.save_room("ROOM", b"x", 1, open_race=1) == 2
    assert await store.append_move("ROOM", 1, "p2", 0, b"m1") == APPENDED
    await store.delete_room("ROOM")
    assert await store.load_room("ROOM") is None
    assert await store.listed_rooms() == []
    assert await store.load_moves("ROOM", 0, "p1") == []
    await store.delete_room("ROOM")  # deleting twice is harmless
    # the code can be used again, with empty logs
    assert await store.create_room("ROOM", b"y", open_race=0)
    assert await store.load_moves("ROOM", 1, "p2") == []
    assert await store.append_move("ROOM", 0, "p1", 0, b"fresh") == APPENDED
    assert await store.load_moves("ROOM", 0, "p1") == [b"fresh"]


# Move logs -------------------------------------------------------------------


async def test_append_move_needs_the_exact_expected_length(store: Store) -> None:
    await store.create_room("ROOM", b"", open_race=0)
    assert await store.append_move("ROOM", 0, "p1", 1, b"too far") == LENGTH_MISMATCH
    assert await store.append_move("ROOM", 0, "p1", -1, b"negative") == LENGTH_MISMATCH
    assert await store.append_move("ROOM", 0, "p1", 0, b"m0") == APPENDED
    assert await store.append_move("ROOM", 0, "p1", 0, b"fork") == LENGTH_MISMATCH
    assert await store.append_move("ROOM", 0, "p1", 2, b"gap") == LENGTH_MISMATCH
    assert await store.append_move("ROOM", 0, "p1", 1, b"m1") == APPENDED
    assert await store.load_moves("ROOM", 0, "p1") == [b"m0", b"m1"]


async def test_logs_are_separate_per_race_and_player(store: Store) -> None:
    await store.create_room("ROOM", b"", open_race=0)
    await store.create_room("ROOM2", b"", open_race=0)
    assert await store.append_move("ROOM", 0, "p1", 0, b"r0p1") == APPENDED
    assert await store.append_move("ROOM", 0, "p2", 0, b"r0p2") == APPENDED
    assert await store.save_room("ROOM", b"", 1, open_race=1) == 2
    assert await store.append_move("ROOM", 1, "p1", 0, b"r1p1") == APPENDED
    assert await store.append_move("ROOM2", 0, "p1", 0, b"room2") == APPENDED
    assert await store.load_moves("ROOM", 0, "p1") == [b"r0p1"]
    assert await store.load_moves("ROOM", 0, "p2") == [b"r0p2"]
    assert await store.load_moves("ROOM", 1, "p1") == [b"r1p1"]
    assert await store.load_moves("ROOM2", 0, "p1") == [b"room2"]
    assert await store.load_moves("ROOM", 2, "p1") == []


async def test_logs_read_from_an_index_on_one_at_a_time_or_together(store: Store) -> None:
    """load_moves and load_logs from an index (a node's incremental read-back, docs/scaling.md):
    the entries past it, nothing past the end, bad identifiers and missing logs empty, in order."""
    await store.create_room("ROOM", b"", open_race=0)
    for index, entry in enumerate((b"a0", b"a1", b"a2")):
        assert await store.append_move("ROOM", 0, "p1", index, entry) == APPENDED
    assert await store.append_move("ROOM", 0, "p2", 0, b"b0") == APPENDED
    assert await store.load_moves("ROOM", 0, "p1", 1) == [b"a1", b"a2"]
    assert await store.load_moves("ROOM", 0, "p1", 3) == []
    assert await store.load_moves("ROOM", 0, "p1", 9) == []
    wanted = [("p1", 2), ("p2", 0), ("p3", 0), ("bad id", 0), ("p1", 0)]
    assert await store.load_logs("ROOM", 0, wanted) == [[b"a2"], [b"b0"], [], [], [b"a0", b"a1", b"a2"]]
    assert await store.load_logs("ROOM", 0, []) == []
    assert await store.load_logs("bad code", 0, [("p1", 0)]) == [[]]
    with pytest.raises(ValueError):
        await store.load_moves("ROOM", 0, "p1", -1)  # never "from the end"
    with pytest.raises(ValueError):
        await store.load_logs("ROOM", 0, [("p1", -1)])


async def test_append_to_a_missing_room_writes_nothing(store: Store) -> None:
    assert await store.append_move("NOPE", 0, "p1", 0, b"m") == NO_SUCH_RACE
    assert await store.load_moves("NOPE", 0, "p1") == []
    assert await store.create_room("NOPE", b"")
    assert await store.load_moves("NOPE", 0, "p1") == []


async def test_appends_need_the_room_s_open_race(store: Store) -> None:
    """A log takes entries only for the race the room record says is open: not before the race
    record is stored, not for another race, not once the finished race's record is saved."""
    assert await store.create_room("ROOM", b"lobby")
    assert await store.append_move("ROOM", 1, "p1", 0, b"early") == NO_SUCH_RACE
    assert await store.save_room("ROOM", b"race 1", 1, open_race=1) == 2
    assert await store.append_move("ROOM", 2, "p1", 0, b"other race") == NO_SUCH_RACE
    assert await store.append_move("ROOM", 1, "p1", 0, b"m0") == APPENDED
    assert await store.append_move("ROOM", 1, "p1", 0, b"fork") == LENGTH_MISMATCH  # still a length check
    assert await store.save_room("ROOM", b"results", 2) == 3  # the race is over: no open race
    assert await store.append_move("ROOM", 1, "p1", 1, b"late") == NO_SUCH_RACE
    assert await store.load_moves("ROOM", 1, "p1") == [b"m0"]
    assert await store.load_moves("ROOM", 2, "p1") == []
    with pytest.raises(TypeError, match="open race"):
        await store.save_room("ROOM", b"x", 3, open_race="1")  # type: ignore[arg-type]


async def test_a_batch_of_appends_gives_each_entry_its_own_result(store: Store) -> None:
    assert await store.create_room("ROOM", b"", open_race=1)
    assert await store.append_move("ROOM", 1, "p2", 0, b"p2 m0") == APPENDED
    batch = [
        AppendRequest("ROOM", 1, "p1", 0, b"p1 m0"),
        AppendRequest("ROOM", 1, "p1", 1, b"p1 m1"),  # same log, applied in batch order
        AppendRequest("ROOM", 1, "p2", 0, b"p2 fork"),  # fails on its own ...
        AppendRequest("ROOM", 1, "p3", 0, b"p3 m0"),  # ... and fails no one else
        AppendRequest("NOPE", 1, "p1", 0, b"no room"),
        AppendRequest("ROOM", 2, "p1", 0, b"no race"),
    ]
    assert await store.append_moves(batch) == [
        APPENDED,
        APPENDED,
        LENGTH_MISMATCH,
        APPENDED,
        NO_SUCH_RACE,
        NO_SUCH_RACE,
    ]
    assert await store.load_moves("ROOM", 1, "p1") == [b"p1 m0", b"p1 m1"]
    assert await store.load_moves("ROOM", 1, "p2") == [b"p2 m0"]
    assert await store.load_moves("ROOM", 1, "p3") == [b"p3 m0"]
    assert await store.append_moves([]) == []
    with pytest.raises(ValueError, match="bad player id"):  # checked before anything is written
        await store.append_moves([AppendRequest("ROOM", 1, "p4", 0, b"ok"), AppendRequest("ROOM", 1, "a:b", 0, b"")])
    assert await store.load_moves("ROOM", 1, "p4") == []


async def test_entries_round_trip_byte_for_byte(store: Store) -> None:
    await store.create_room("ROOM", b"", open_race=3)
    entries = [b"", b"\x00\xff\r\n", bytes(range(256)), random.Random(7).randbytes(100_000)]
    for length, entry in enumerate(entries):
        assert await store.append_move("ROOM", 3, "p1", length, entry) == APPENDED
    assert await store.load_moves("ROOM", 3, "p1") == entries


async def test_concurrent_appends_at_one_length_have_exactly_one_winner(make_store: StoreFactory) -> None:
    stores = [await make_store() for _ in range(4)]
    await stores[0].create_room("ROOM", b"", open_race=0)
    for length in range(5):
        results = await asyncio.gather(
            *(stores[i % 4].append_move("ROOM", 0, "p1", length, b"%d-%d" % (length, i)) for i in range(12))
        )
        assert results.count(APPENDED) == 1
    log = await stores[0].load_moves("ROOM", 0, "p1")
    assert [entry.split(b"-")[0] for entry in log] == [b"0", b"1", b"2", b"3", b"4"]


async def test_many_racing_writers_never_fork_or_lose_a_log(make_store: StoreFactory) -> None:
    """Each writer appends its own entries, reloading the log after every lost race: the final log
    holds every entry exactly once, and each writer's entries in its own order."""
    stores = [await make_store() for _ in range(4)]
    await stores[0].create_room("ROOM", b"", open_race=0)
    writers, per_writer = 8, 10

    async def writer(number: int) -> None:
        store = stores[number % len(stores)]
        for step in range(per_writer):
            entry = b"w%d:%d" % (number, step)
            while True:
                length = len(await store.load_moves("ROOM", 0, "p1"))
                if await store.append_move("ROOM", 0, "p1", length, entry) == APPENDED:
                    break

    await asyncio.gather(*(writer(n) for n in range(writers)))
    log = await stores[0].load_moves("ROOM", 0, "p1")
    assert len(log) == writers * per_writer
    assert len(set(log)) == len(log)
    for number in range(writers):
        own = [entry for entry in log if entry.startswith(b"w%d:" % number)]
        assert own == [b"w%d:%d" % (number, step) for step in range(per_writer)]


# Expiry ----------------------------------------------------------------------


async def room_gone(store: Store, code: str) -> bool:
    return (
        await store.load_room(code) is None
        and await store.load_moves(code, 0, "p1") == []
        and code not in await store.listed_rooms()
    )


async def test_expire_room_removes_room_logs_and_listing_after_the_delay(store: Store) -> None:
    await store.create_room("ROOM", b"v1", open_race=0)
    await store.set_listed("ROOM", True)
    assert await store.append_move("ROOM", 0, "p1", 0, b"early") == APPENDED
    await store.expire_room("ROOM", 0.6)
    # A save and a log started after the expiry was set neither extend nor escape it.
    assert await store.save_room("ROOM", b"v2", 1, open_race=0) == 2
    assert await store.append_move("ROOM", 0, "p2", 0, b"late") == APPENDED
    assert await store.load_room("ROOM") == (b"v2", 2)
    assert await store.listed_rooms() == ["ROOM"]
    assert await store.load_moves("ROOM", 0, "p1") == [b"early"]
    await eventually(lambda: room_gone(store, "ROOM"))
    assert await store.load_moves("ROOM", 0, "p2") == []
    # the code is free again, with nothing left over
    assert await store.create_room("ROOM", b"new")
    assert await store.load_moves("ROOM", 0, "p2") == []
    assert await store.listed_rooms() == []


async def test_expire_room_none_keeps_it_forever_again(store: Store) -> None:
    await store.create_room("KEEP", b"x", open_race=0)
    assert await store.append_move("KEEP", 0, "p1", 0, b"m") == APPENDED
    await store.create_room("GO", b"x")
    await store.expire_room("KEEP", 0.3)
    await store.expire_room("KEEP", None)
    await store.expire_room("GO", 0.3)
    await eventually(lambda: room_gone(store, "GO"))
    await asyncio.sleep(0.1)
    assert await store.load_room("KEEP") == (b"x", 1)
    assert await store.load_moves("KEEP", 0, "p1") == [b"m"]


async def test_expire_room_with_no_time_left_removes_it_now(store: Store) -> None:
    await store.create_room("ROOM", b"x", open_race=0)
    assert await store.append_move("ROOM", 0, "p1", 0, b"m") == APPENDED
    await store.expire_room("ROOM", 0)
    assert await room_gone(store, "ROOM")
    await store.expire_room("NOPE", 1.0)  # expiring a missing room is harmless
    assert await store.load_room("NOPE") is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, "10"])
async def test_expire_room_refuses_a_nonsense_delay(store: Store, bad: Any) -> None:
    await store.create_room("ROOM", b"x")
    with pytest.raises(ValueError, match="expiry"):
        await store.expire_room("ROOM", bad)
    assert await store.load_room("ROOM") == (b"x", 1)


# MemoryStore only: its clock is injectable ------------------------------------


async def test_memory_store_follows_the_clock_it_is_given() -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0], player_ttl=100.0)
    await store.create_room("ROOM", b"x", open_race=0)
    await store.set_listed("ROOM", True)
    assert await store.append_move("ROOM", 0, "p1", 0, b"m") == APPENDED
    await store.put_player("p1", "token", b"p")
    await store.expire_room("ROOM", 50.0)
    await store.expire_room("ROOM", 60.0)  # the later deadline replaces the earlier one
    now[0] = 1059.9
    assert await store.load_room("ROOM") == (b"x", 1)
    now[0] = 1060.0
    assert await room_gone(store, "ROOM")
    assert await store.get_player("p1") == b"p"
    now[0] = 1100.0
    assert await store.get_player("p1") is None
    assert await store.player_by_token("token") is None


# Redis only: the real server stopped, frozen, restarted; its key layout --------------------


async def test_open_store_picks_the_implementation_from_the_url(redis_server_factory: Any) -> None:
    memory = open_store(None)
    assert isinstance(memory, MemoryStore)
    await memory.close()
    server: RedisServer = redis_server_factory(unix_socket=True)
    for code, url in (("TCP", server.url), ("UNIX", server.unix_url)):
        store = open_store(url, namespace="dispatch")
        assert isinstance(store, RedisStore)
        await store.ping()
        assert await store.create_room(code, url.encode())
        await store.close()
    assert server.command("HGET", "dispatch:room:{UNIX}", "data") == server.unix_url.encode()
    tls = open_store("rediss://127.0.0.1:1/0")  # not contacted: connecting is lazy
    assert isinstance(tls, RedisStore)
    await tls.close()
    with pytest.raises(ValueError, match="scheme 'http'") as refused:
        open_store("http://user:secret@127.0.0.1/")
    assert "secret" not in str(refused.value)


async def test_a_stopped_redis_raises_store_unavailable_then_recovers_on_restart(own_redis_server: RedisServer) -> None:
    store = RedisStore(own_redis_server.url, namespace="outage")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        assert await store.append_move("ROOM", 0, "p1", 0, b"m0") == APPENDED
        own_redis_server.stop()
        calls: list[Awaitable[object]] = [
            store.ping(),
            store.append_move("ROOM", 0, "p1", 1, b"m1"),
            store.load_room("ROOM"),
            store.load_moves("ROOM", 0, "p1"),
            store.put_player("p1", "token", b"x"),
            store.listed_rooms(),
        ]
        where = rf"cannot reach Redis at redis://127\.0\.0\.1:{own_redis_server.port} "
        for call in calls:
            with pytest.raises(StoreUnavailable, match=where):
                await asyncio.wait_for(call, 10)
        own_redis_server.start()  # same port, empty (no disk): the same store object works again
        await asyncio.wait_for(store.ping(), 10)
        assert await store.create_room("ROOM", b"again", open_race=0)
        assert await store.append_move("ROOM", 0, "p1", 0, b"m0") == APPENDED
    finally:
        await store.close()


async def test_a_frozen_redis_times_out_as_store_unavailable(own_redis_server: RedisServer) -> None:
    store = RedisStore(own_redis_server.url, namespace="frozen", socket_timeout=0.3, retries=0)
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        assert own_redis_server.process is not None
        own_redis_server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable, match="did not answer in time"):
                await asyncio.wait_for(store.append_move("ROOM", 0, "p1", 0, b"m0"), 10)
        finally:
            own_redis_server.process.send_signal(signal.SIGCONT)
        # The timed-out append may have landed once Redis woke up: reload, then carry on by CAS.
        await asyncio.wait_for(store.ping(), 10)
        length = len(await store.load_moves("ROOM", 0, "p1"))
        assert length in (0, 1)
        assert await store.append_move("ROOM", 0, "p1", length, b"next") == APPENDED
    finally:
        await store.close()


async def test_the_password_never_appears_in_errors() -> None:
    store = RedisStore("redis://racer:hunter2@127.0.0.1:1/0", connect_timeout=1.0, retries=0)
    try:
        with pytest.raises(StoreUnavailable, match=r"redis://127\.0\.0\.1:1 ") as failure:
            await asyncio.wait_for(store.ping(), 10)
        assert "hunter2" not in str(failure.value)
    finally:
        await store.close()


async def write_everything(store: Store) -> None:
    await store.put_player("p1", "token1", b"alice")
    await store.create_room("LIVE", b"live")
    assert await store.save_room("LIVE", b"live v2", 1, open_race=0) == 2
    await store.set_listed("LIVE", True)
    for length in range(3):
        assert await store.append_move("LIVE", 0, "p1", length, b"move %d" % length) == APPENDED
    await store.create_room("DONE", b"done", open_race=0)
    assert await store.append_move("DONE", 0, "p1", 0, b"final") == APPENDED
    await store.expire_room("DONE", 3600)


async def check_everything(store: Store) -> None:
    assert await store.get_player("p1") == b"alice"
    assert await store.player_by_token("token1") == "p1"
    assert await store.load_room("LIVE") == (b"live v2", 2)
    assert await store.listed_rooms() == ["LIVE"]
    assert await store.load_moves("LIVE", 0, "p1") == [b"move 0", b"move 1", b"move 2"]
    assert await store.load_moves("DONE", 0, "p1") == [b"final"]
    # the CAS carries on from where it was
    assert await store.append_move("LIVE", 0, "p1", 2, b"fork") == LENGTH_MISMATCH


async def test_everything_survives_a_redis_restart_and_a_crash_with_an_append_only_file(
    persistent_redis_server: RedisServer,
) -> None:
    server = persistent_redis_server
    store = RedisStore(server.url)
    try:
        await write_everything(store)
        server.restart()  # SIGTERM: a clean shutdown
        await check_everything(store)  # the same client reconnects (and reloads its scripts)
        assert await store.append_move("LIVE", 0, "p1", 3, b"move 3") == APPENDED
        server.kill()  # SIGKILL: a crash; fsync-always means nothing acknowledged is lost
        server.start()
        fresh = RedisStore(server.url)
        try:
            assert (await fresh.load_moves("LIVE", 0, "p1"))[-1] == b"move 3"
            ttl = server.command("PTTL", "plot:room:{DONE}")
            assert isinstance(ttl, int) and 0 < ttl <= 3600 * 1000  # expiry survives too
        finally:
            await fresh.close()
    finally:
        await store.close()


def key_shape(key: str) -> str:
    """A key with its variable parts named as docs/store.md names them."""
    return (
        key.replace("{LIVE}", "{CODE}")
        .replace("{DONE}", "{CODE}")
        .replace(":0:p1", ":RACE:PLAYER")
        .replace(":p1", ":PLAYER")
        .replace(":token1", ":TOKENHASH")
    )


async def test_every_key_is_namespaced_and_documented(redis_server: RedisServer, redis_url: str) -> None:
    store = RedisStore(redis_url, namespace="nsx")
    try:
        await write_everything(store)
    finally:
        await store.close()
    keys = redis_server.command("KEYS", "*")
    assert isinstance(keys, list) and keys
    names = sorted(key.decode() for key in keys if isinstance(key, bytes))
    assert all(name.startswith("nsx:") for name in names), names
    doc = (Path(__file__).resolve().parent.parent / "docs" / "store.md").read_text()
    shapes = {key_shape(name).replace("nsx:", "plot:", 1) for name in names}
    assert shapes == {
        "plot:room:{CODE}",
        "plot:logs:{CODE}",
        "plot:log:{CODE}:RACE:PLAYER",
        "plot:rooms:listed",
        "plot:player:PLAYER",
        "plot:token:TOKENHASH",
    }
    for shape in shapes:
        assert f"`{shape}`" in doc, f"{shape} is not documented in docs/store.md"


async def test_namespaces_keep_stores_apart(redis_url: str) -> None:
    first, second = RedisStore(redis_url, namespace="one"), RedisStore(redis_url, namespace="two")
    try:
        assert await first.create_room("ROOM", b"one")
        assert await second.create_room("ROOM", b"two")
        await first.set_listed("ROOM", True)
        assert await second.listed_rooms() == []
        assert await second.load_room("ROOM") == (b"two", 1)
    finally:
        await first.close()
        await second.close()


async def test_an_expired_room_leaves_no_key_behind(redis_server: RedisServer, redis_url: str) -> None:
    store = RedisStore(redis_url, namespace="gone")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        await store.set_listed("ROOM", True)
        assert await store.append_move("ROOM", 0, "p1", 0, b"m") == APPENDED
        await store.expire_room("ROOM", 0.2)
        assert await store.save_room("ROOM", b"x", 1, open_race=1) == 2
        assert await store.append_move("ROOM", 1, "p1", 0, b"late log") == APPENDED
        await eventually(lambda: room_gone(store, "ROOM"))  # listed_rooms() tidies the listing

        async def no_keys_left() -> bool:
            return redis_server.command("KEYS", "gone:*") == []

        await eventually(no_keys_left)
    finally:
        await store.close()


async def test_each_compare_and_set_is_one_round_trip(redis_server: RedisServer, redis_url: str) -> None:
    store = RedisStore(redis_url, namespace="trips")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        assert await store.append_move("ROOM", 0, "p1", 0, b"warm") == APPENDED  # the scripts are loaded by now
        await store.save_room("ROOM", b"warm", 1, open_race=0)
        redis_server.command("CONFIG", "RESETSTAT")
        assert await store.append_move("ROOM", 0, "p1", 1, b"m") == APPENDED
        assert await store.save_room("ROOM", b"y", 2, open_race=0) == 3
        stats = redis_server.command("INFO", "commandstats")
        assert isinstance(stats, bytes)
        calls = {
            line.split(b":")[0].removeprefix(b"cmdstat_").decode(): line
            for line in stats.splitlines()
            if line.startswith(b"cmdstat_")
        }
        # commandstats also counts the commands the scripts run inside Redis; the client sent only EVALSHA
        inside_scripts = {"exists", "llen", "rpush", "sadd", "pttl", "pexpire", "hget", "hset", "hdel"}
        assert set(calls) - inside_scripts <= {"evalsha", "info", "config|resetstat"}, calls
        assert calls["evalsha"].startswith(b"cmdstat_evalsha:calls=2,")
    finally:
        await store.close()


async def test_a_batch_on_one_redis_is_one_script_call(redis_server: RedisServer, redis_url: str) -> None:
    """The group commit's batch goes to one Redis as one EVALSHA of APPEND_MOVES (one round trip,
    one reply), not one call per entry; each entry is still its own compare-and-set."""
    store = RedisStore(redis_url, namespace="onecall")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        assert await store.append_moves([AppendRequest("ROOM", 0, "p0", 0, b"warm")]) == [APPENDED]
        redis_server.command("CONFIG", "RESETSTAT")
        batch = [AppendRequest("ROOM", 0, f"p{index}", 0 if index else 1, b"m") for index in range(5)]
        assert await store.append_moves(batch) == [APPENDED] * 5
        stats = redis_server.command("INFO", "commandstats")
        assert isinstance(stats, bytes)
        evalsha = [line for line in stats.splitlines() if line.startswith(b"cmdstat_evalsha:")]
        assert evalsha and evalsha[0].startswith(b"cmdstat_evalsha:calls=1,"), stats
        logs = [await store.load_moves("ROOM", 0, f"p{index}") for index in range(5)]
        assert logs == [[b"warm", b"m"]] + [[b"m"]] * 4
    finally:
        await store.close()


async def test_an_entry_failing_inside_redis_fails_only_itself(redis_server: RedisServer, redis_url: str) -> None:
    """One entry's error inside the batch script (here its log key holds a string, not a list) is
    that entry's StoreUnavailable, with Redis's reason; the entries around it are written."""
    store = RedisStore(redis_url, namespace="oneerr")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        await store._redis.set(store.log_key("ROOM", 0, "p2"), "not a list")
        batch = [AppendRequest("ROOM", 0, f"p{index}", 0, b"m") for index in range(1, 4)]
        results = await store.append_moves(batch)
        assert results[0] == APPENDED and results[2] == APPENDED, results
        assert isinstance(results[1], StoreUnavailable) and "WRONGTYPE" in str(results[1]), results
        assert await store.load_moves("ROOM", 0, "p1") == [b"m"]
        assert await store.load_moves("ROOM", 0, "p3") == [b"m"]
    finally:
        await store.close()


async def test_a_batch_survives_redis_forgetting_its_scripts(redis_server: RedisServer, redis_url: str) -> None:
    store = RedisStore(redis_url, namespace="flushed")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        assert await store.append_moves([AppendRequest("ROOM", 0, "p1", 0, b"m0")]) == [APPENDED]
        redis_server.command("SCRIPT", "FLUSH")  # as after a Redis restart without persistence of scripts
        batch = [AppendRequest("ROOM", 0, "p1", 1, b"m1"), AppendRequest("ROOM", 0, "p1", 1, b"fork")]
        assert await store.append_moves(batch) == [APPENDED, LENGTH_MISMATCH]
        assert await store.load_moves("ROOM", 0, "p1") == [b"m0", b"m1"]
    finally:
        await store.close()


async def room_channel_listener(store: RedisStore, code: str) -> PubSub:
    """A subscription to the room's channel, confirmed: SSUBSCRIBE on the room's master on a
    cluster (sharded pub/sub), SUBSCRIBE on one Redis."""
    await store.load_slot_map()
    channel = store.events_channel(code)
    shard = store.shard_of(channel)
    assert shard is not None
    pubsub = store.subscriber(shard)
    if store.cluster:
        await pubsub.ssubscribe(channel)
    else:
        await pubsub.subscribe(channel)
    assert (await pubsub.get_message(timeout=2))["type"] in ("subscribe", "ssubscribe")
    return pubsub


async def test_an_append_s_notice_is_published_only_when_the_entry_lands(any_redis_url: str) -> None:
    """Several nodes: the append's own script publishes its notice on the room's channel (one
    round trip, no publish of an entry the compare-and-set refused); on a cluster with SPUBLISH,
    heard by an SSUBSCRIBE on the room's master."""
    store = RedisStore(any_redis_url, namespace="notice")
    pubsub = await room_channel_listener(store, "ROOM")
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        batch = [
            AppendRequest("ROOM", 0, "p1", 0, b"m0", notice=b"p1 stored m0"),
            AppendRequest("ROOM", 0, "p1", 0, b"fork", notice=b"p1 fork: must not be heard"),
            AppendRequest("ROOM", 0, "p2", 0, b"quiet"),  # no notice: nothing published
            AppendRequest("ROOM", 0, "p1", 1, b"m1", notice=b"p1 stored m1"),
            AppendRequest("ROOM", 9, "p1", 0, b"no race", notice=b"no race: must not be heard"),
        ]
        assert await store.append_moves(batch) == [APPENDED, LENGTH_MISMATCH, APPENDED, APPENDED, NO_SUCH_RACE]
        assert await store.append_moves([AppendRequest("ROOM", 0, "p1", 2, b"m2", notice=b"last")]) == [APPENDED]
        heard: list[bytes] = []
        while not heard or heard[-1] != b"last":  # read up to the last one published (in order)
            message = await pubsub.get_message(timeout=2)
            assert message is not None, heard
            heard.append(message["data"])
        assert heard == [b"p1 stored m0", b"p1 stored m1", b"last"]
        assert await store.load_moves("ROOM", 0, "p1") == [b"m0", b"m1", b"m2"]
    finally:
        await store.close_subscriber(pubsub)
        await store.close()


async def test_a_room_save_s_notice_is_published_only_when_the_save_lands(any_redis_url: str) -> None:
    """Several nodes: a room change's new version is announced by the save's own script, so a
    committed change cannot go unannounced because a separate publish failed, and a save the
    compare-and-set refused is never announced; on a cluster with SPUBLISH on the room's master.
    The same for a room created again after it vanished (create_room's notice): announced only
    if this creation made it."""
    store = RedisStore(any_redis_url, namespace="savenotice")
    pubsub = await room_channel_listener(store, "ROOM")
    try:
        assert await store.create_room("ROOM", b"v1", open_race=None, notice=b"version 1")
        assert not await store.create_room("ROOM", b"taken", notice=b"taken: must not be heard")
        assert await store.save_room("ROOM", b"v2", 1, notice=b"version 2") == 2
        assert await store.save_room("ROOM", b"stale", 1, notice=b"stale: must not be heard") is None
        assert await store.save_room("ROOM", b"v3", 2) == 3  # no notice: nothing published
        assert await store.save_room("ROOM", b"v4", 3, open_race=0, notice=b"version 4") == 4
        heard: list[bytes] = []
        while not heard or heard[-1] != b"version 4":
            message = await pubsub.get_message(timeout=2)
            assert message is not None, heard
            heard.append(message["data"])
        assert heard == [b"version 1", b"version 2", b"version 4"]
        assert await store.load_room("ROOM") == (b"v4", 4)
        with pytest.raises(TypeError, match="room notice must be bytes"):
            await store.save_room("ROOM", b"v5", 4, notice="text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="room notice must be bytes"):
            await store.create_room("OTHER", b"v1", notice="text")  # type: ignore[arg-type]
    finally:
        await store.close_subscriber(pubsub)
        await store.close()


async def test_a_batch_to_a_stopped_redis_reports_every_entry_unknown(own_redis_server: RedisServer) -> None:
    store = RedisStore(own_redis_server.url, namespace="batchdown", retries=0)
    try:
        await store.create_room("ROOM", b"x", open_race=0)
        own_redis_server.stop()
        results = await asyncio.wait_for(
            store.append_moves([AppendRequest("ROOM", 0, "p1", 0, b"m0"), AppendRequest("ROOM", 0, "p2", 0, b"m0")]), 10
        )
        assert len(results) == 2 and all(isinstance(r, StoreUnavailable) for r in results), results
        assert "cannot reach Redis" in str(results[0])
    finally:
        await store.close()


# Redis and the cluster: what makes the scripts single-slot ---------------------------------------


@pytest.fixture(params=["redis", "cluster"])
def any_redis_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    return url


async def test_a_token_the_player_record_does_not_name_is_no_token(any_redis_url: str) -> None:
    """put_player writes the token's key, then the player's record, then retires the old token:
    three slots on a cluster. A put stopped after its first step leaves a token key behind that
    must not authenticate anyone; one stopped before retiring leaves an old token that must not."""
    store = RedisStore(any_redis_url, namespace="steps")
    try:
        await store.put_player("p1", "current", b"v1")
        await store._redis.set(store.token_key("half-written"), "p1")  # step one of a put that stopped
        await store._redis.set(store.token_key("retired"), "p1")  # a retirement that never happened
        assert await store.player_by_token("half-written") is None
        assert await store.player_by_token("retired") is None
        assert await store.player_by_token("current") == "p1"
        await store.put_player("p1", "half-written", b"v2")  # the put completed later: now it counts
        assert await store.player_by_token("half-written") == "p1"
        assert await store.player_by_token("current") is None
        assert await store._redis.exists(store.token_key("current")) == 0  # retired, not just ignored
    finally:
        await store.close()


async def test_pruning_a_gone_room_keeps_a_room_listed_again_since(any_redis_url: str) -> None:
    """listed_rooms prunes codes whose room is gone, but the room may be created and listed again
    between its look and its prune (other slots, so no one script can check): the new listing stays."""
    store = RedisStore(any_redis_url, namespace="prune")
    try:
        assert await store.create_room("OLD", b"x")
        await store.set_listed("OLD", True)
        await store._redis.delete(store.room_key("OLD"))  # gone without delete_room, as by expiry
        stale = await store._redis.zscore(store._listed_key, "OLD")
        assert await store.create_room("OLD", b"again")
        await store.set_listed("OLD", True)  # listed anew: a later score
        assert await store._redis.zscore(store._listed_key, "OLD") != stale
        await store._prune_listed(keys=[store._listed_key], args=["OLD", repr(stale)])  # the late prune
        assert await store.listed_rooms() == ["OLD"]
        await store._redis.delete(store.room_key("OLD"))
        assert await store.listed_rooms() == []  # and a truly gone room is pruned
        assert await store._redis.zcard(store._listed_key) == 0
    finally:
        await store.close()


async def test_rooms_spread_over_the_cluster_s_masters(redis_cluster: Any, redis_cluster_url: str) -> None:
    store = RedisStore(redis_cluster_url, namespace="spread")
    codes = [f"R{index}" for index in range(12)]
    try:
        for code in codes:
            assert await store.create_room(code, code.encode(), open_race=0)
            await store.set_listed(code, True)
            assert await store.append_moves([AppendRequest(code, 0, "p1", 0, b"m")]) == [APPENDED]
        assert await store.listed_rooms() == codes
        # Twelve hash tags on three masters: each master holds some (all on one: odds of 3 in 3^12).
        assert all(node.command("DBSIZE") for node in redis_cluster.nodes)
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("redis+cluster://", "no host"),
        ("redis+cluster://racer:hunter2@127.0.0.1:7000/3", "db"),
        ("redis+cluster://127.0.0.1:port", "integer"),
        ("redis+cluster://racer:hunter2@127.0.0.1:7000,127.0.0.1:x", "integer"),
        ("redis+cluster://racer:hunter2@127.0.0.1:7000,", "no host"),
    ],
)
def test_a_bad_cluster_url_is_a_clear_error_without_its_password(url: str, fault: str) -> None:
    with pytest.raises(ValueError, match="bad Redis Cluster URL") as refused:
        RedisStore(url)
    assert fault in str(refused.value) and "hunter2" not in str(refused.value)


async def test_a_fresh_cluster_client_s_first_command_goes_to_its_key_s_master(
    redis_cluster: LocalRedisCluster, redis_cluster_url: str
) -> None:
    """redis-py picks a command's route before it first reads the slot map, and with no map a keyed
    command went to a random master (another master redirected it with MOVED). During a failover
    that master could be the dead one, every retry: a node's first read failed (seen in CI). Ten
    fresh stores each read a log first: no other master ever sees the read."""
    owner = redis_cluster.master_of(RedisStore(redis_cluster_url).log_key("FIRST", 1, "p1"))
    others = [node for node in redis_cluster.nodes if node is not owner]
    for node in redis_cluster.nodes:
        node.command("CONFIG", "RESETSTAT")
    for _ in range(10):
        store = RedisStore(redis_cluster_url)
        try:
            assert await store.load_moves("FIRST", 1, "p1") == []
        finally:
            await store.close()

    def lrange_calls(node: Any) -> str:
        stats = node.command("INFO", "commandstats")
        assert isinstance(stats, bytes)
        return next((line for line in stats.decode().splitlines() if line.startswith("cmdstat_lrange:")), "")

    assert "calls=10," in lrange_calls(owner), lrange_calls(owner)
    assert all(lrange_calls(node) == "" for node in others), [lrange_calls(node) for node in others]


async def test_a_cluster_url_may_name_several_seeds_the_first_of_them_down(redis_cluster_url: str) -> None:
    """The client reads the slot map from the first seed that answers: a node that restarts
    while the first node its URL names is down still finds the cluster."""
    seeds = f"redis+cluster://127.0.0.1:{free_port()},{redis_cluster_url.split('://', 1)[1]}"
    store = open_store(seeds, connect_timeout=0.5)
    try:
        await store.ping()
        assert await store.create_room("SEEDS", b"room", open_race=None)
        assert await store.load_room("SEEDS") is not None
    finally:
        await store.close()


async def test_an_unreachable_cluster_raises_store_unavailable() -> None:
    store = open_store(f"redis+cluster://127.0.0.1:{free_port()}", connect_timeout=0.5, retries=0)
    try:
        with pytest.raises(StoreUnavailable, match=r"Redis Cluster at redis\+cluster://127\.0\.0\.1"):
            await store.ping()
    finally:
        await store.close()


async def test_a_busy_cluster_store_queues_past_its_connections_instead_of_failing(redis_cluster_url: str) -> None:
    store = RedisStore(redis_cluster_url, namespace="busy", max_connections=2)
    try:
        codes = [f"B{index}" for index in range(8)]
        for code in codes:
            assert await store.create_room(code, b"x", open_race=0)
        appends = [store.append_move(code, 0, f"p{racer}", 0, b"m") for code in codes for racer in range(10)]
        assert await asyncio.gather(*appends) == [APPENDED] * len(appends)
    finally:
        await store.close()


async def test_a_dead_master_stops_only_its_own_rooms() -> None:
    """One of three masters killed (no replica; cluster-require-full-coverage no, as docs/cluster.md
    advises: "Running it"): rooms on the other two go on, rooms on it fail with StoreUnavailable instead of
    hanging, and once it is back (empty: no disk) the cluster serves every slot again."""
    with LocalRedisCluster() as cluster:
        for node in cluster.nodes:
            node.command("CONFIG", "SET", "cluster-require-full-coverage", "no")
        store = RedisStore(cluster.url, namespace="dead", socket_timeout=0.5, connect_timeout=0.5, retries=1)
        try:
            codes = [f"D{index}" for index in range(12)]
            for code in codes:
                assert await store.create_room(code, b"x", open_race=0)
            victim = cluster.nodes[2]
            on_victim = [code for code in codes if cluster.node_of(store.room_key(code)) is victim]
            elsewhere = [code for code in codes if code not in on_victim]
            assert on_victim and elsewhere
            victim.kill()
            for code in on_victim:
                with pytest.raises(StoreUnavailable, match="cannot reach Redis"):
                    await asyncio.wait_for(store.append_move(code, 0, "p1", 0, b"m"), 10)

            async def others_go_on() -> bool:  # the first call may land in the client's slot-map refresh
                try:
                    results = [await store.append_move(code, 0, "p1", 0, b"m") for code in elsewhere]
                except StoreUnavailable:
                    return False
                assert set(results) <= {APPENDED, LENGTH_MISMATCH}  # a retried call may have landed before
                return True

            await eventually(others_go_on)
            assert all([await store.load_moves(code, 0, "p1") == [b"m"] for code in elsewhere])
            # A batch over every room (the group commit): one result per entry, never a raise; the
            # dead master's entries fail (the live ones may too: docs/cluster.md, "Failures and what each costs").
            batch = [AppendRequest(code, 0, "p1", 1, b"m2") for code in codes]
            results = await asyncio.wait_for(store.append_moves(batch), 10)
            assert len(results) == len(codes)
            assert all(isinstance(results[codes.index(code)], StoreUnavailable) for code in on_victim)
            victim.start()  # same port and nodes.conf: it rejoins with its slots, without its data
            await asyncio.to_thread(cluster.wait_ok, 20.0)

            async def victim_serves() -> bool:
                try:
                    return await store.create_room(on_victim[0], b"again", open_race=0)
                except StoreUnavailable:
                    return False

            await eventually(victim_serves, timeout=20)
        finally:
            await store.close()
