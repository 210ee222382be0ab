"""The store contract for profiles (docs/players.md): run on every store the room contract runs on
(memory, one Redis, a cluster, a cluster with replicas_ack), two clients on the same data as two
server processes would be."""

from __future__ import annotations

import asyncio

import pytest
from support import eventually
from test_store_contract import StoreFactory, make_store  # noqa: F401  (the fixture, registered by import)

from server.store.base import RenameResult, Store
from shared.names import name_key


@pytest.fixture
async def store(make_store: StoreFactory) -> Store:  # noqa: F811
    return await make_store()


async def test_create_then_find_by_secret_name_and_id(store: Store) -> None:
    assert await store.create_profile("pr1", "s" * 64, name_key("Alice"), b"\x00alice\xff")
    assert await store.profile_by_secret("s" * 64) == "pr1"
    assert await store.profile_by_name(name_key("Alice")) == "pr1"
    assert await store.get_profile("pr1") == b"\x00alice\xff"
    assert await store.load_profile("pr1") == (b"\x00alice\xff", 1)
    assert await store.profile_by_secret("t" * 64) is None
    assert await store.profile_by_name(name_key("Bob")) is None
    assert await store.get_profile("pr2") is None
    assert await store.load_profile("pr2") is None


async def test_a_look_alike_or_a_known_secret_is_refused_and_nothing_is_written(store: Store) -> None:
    assert await store.create_profile("pr1", "s" * 64, name_key("Alice"), b"a")
    # Cyrillic а, full-width letters: the same name key
    assert not await store.create_profile("pr2", "t" * 64, name_key("аlice"), b"b")
    assert not await store.create_profile("pr3", "u" * 64, name_key("ＡＬＩＣＥ"), b"c")
    assert not await store.create_profile("pr4", "s" * 64, name_key("Carol"), b"d")  # the secret is bound
    assert not await store.create_profile("pr1", "v" * 64, name_key("Dave"), b"e")  # the id exists
    for pid in ("pr2", "pr3", "pr4"):
        assert await store.get_profile(pid) is None
    for name in ("Carol", "Dave"):
        assert await store.profile_by_name(name_key(name)) is None
    assert await store.profile_by_secret("v" * 64) is None
    assert await store.load_profile("pr1") == (b"a", 1)


async def test_two_processes_claiming_one_name_at_once_one_wins(make_store: StoreFactory) -> None:  # noqa: F811
    stores = [await make_store() for _ in range(4)]
    created = await asyncio.gather(
        *(s.create_profile(f"pr{i}", f"{i}" * 64, name_key("Alice"), f"{i}".encode()) for i, s in enumerate(stores))
    )
    assert sorted(created) == [False, False, False, True]
    winner = created.index(True)
    assert await stores[0].profile_by_name(name_key("alice")) == f"pr{winner}"


async def test_put_profile_compare_and_set(make_store: StoreFactory) -> None:  # noqa: F811
    one, two = await make_store(), await make_store()
    assert await one.create_profile("pr1", "s" * 64, name_key("Alice"), b"v1")
    assert await one.put_profile("pr1", b"v2", expected_version=1) == 2
    assert await two.put_profile("pr1", b"stale", expected_version=1) is None
    assert await two.load_profile("pr1") == (b"v2", 2)
    assert await two.put_profile("pr1", b"v3") == 3  # no expected version: unconditional
    assert await one.put_profile("nobody", b"x") is None
    assert await one.get_profile("nobody") is None


async def test_concurrent_compare_and_set_loses_no_update(make_store: StoreFactory) -> None:  # noqa: F811
    """Two nodes each add one to a counter in the profile at once, retrying on a refused version:
    every increment lands (the pattern the rating updates follow)."""
    stores = [await make_store() for _ in range(3)]
    assert await stores[0].create_profile("pr1", "s" * 64, name_key("Alice"), b"0")

    async def bump(store: Store) -> None:
        while True:
            loaded = await store.load_profile("pr1")
            assert loaded is not None
            data, version = loaded
            if await store.put_profile("pr1", str(int(data) + 1).encode(), expected_version=version) is not None:
                return

    await asyncio.gather(*(bump(s) for s in stores for _ in range(5)))
    assert await stores[0].load_profile("pr1") == (b"15", 16)


async def test_rating_board_orders_by_score(store: Store) -> None:
    for i, score in enumerate([1000.0, 1250.5, 900.0]):
        assert await store.create_profile(f"pr{i}", f"{i}" * 64, name_key(f"P{i}"), b"x")
        assert await store.put_profile(f"pr{i}", b"y", score=score) == 2
    assert await store.rating_board(10) == [("pr1", 1250.5), ("pr0", 1000.0), ("pr2", 900.0)]
    assert await store.rating_board(1) == [("pr1", 1250.5)]
    assert await store.rating_board(0) == []
    await store.put_profile("pr2", b"z", score=2000.0)  # a later score replaces the first
    assert [pid for pid, _ in await store.rating_board(10)] == ["pr2", "pr1", "pr0"]
    await store.put_profile("pr0", b"z")  # no score: its place is kept
    assert ("pr0", 1000.0) in await store.rating_board(10)


async def test_a_refused_put_leaves_the_board(store: Store) -> None:
    assert await store.create_profile("pr1", "s" * 64, name_key("Alice"), b"x")
    assert await store.put_profile("pr1", b"y", expected_version=7, score=5.0) is None
    assert await store.rating_board(10) == []


async def test_rename_moves_the_name_and_reserves_the_old_one(make_store: StoreFactory) -> None:  # noqa: F811
    store = await make_store()
    assert await store.create_profile("pr1", "s" * 64, name_key("Alice"), b"v1")
    assert await store.create_profile("pr2", "t" * 64, name_key("Bob"), b"b1")
    old, new = name_key("Alice"), name_key("Alicia")
    assert await store.rename_profile("pr1", old, name_key("Bob"), b"v2", 1, 60.0) is RenameResult.NAME_TAKEN
    assert await store.rename_profile("pr1", old, new, b"v2", 7, 60.0) is RenameResult.CONFLICT
    assert await store.rename_profile("nobody", old, new, b"v2", 1, 60.0) is RenameResult.CONFLICT
    assert await store.load_profile("pr1") == (b"v1", 1)
    assert await store.rename_profile("pr1", old, new, b"v2", 1, 60.0) is RenameResult.RENAMED
    assert await store.load_profile("pr1") == (b"v2", 2)
    assert await store.profile_by_name(new) == "pr1"
    assert await store.profile_by_name(old) == "pr1"  # reserved for its owner
    assert not await store.create_profile("pr3", "u" * 64, name_key("alice"), b"c")  # not for anyone else
    # its owner may take it back (the reservation becomes its name for good)
    assert await store.rename_profile("pr1", new, old, b"v3", 2, 60.0) is RenameResult.RENAMED
    assert await store.profile_by_name(old) == "pr1"
    assert await store.profile_by_name(new) == "pr1"


async def test_a_reserved_old_name_frees_itself(make_store: StoreFactory) -> None:  # noqa: F811
    store = await make_store()
    assert await store.create_profile("pr1", "s" * 64, name_key("Alice"), b"v1")
    assert await store.rename_profile("pr1", name_key("Alice"), name_key("Alicia"), b"v2", 1, 0.2) is (
        RenameResult.RENAMED
    )

    async def freed() -> bool:
        return await store.profile_by_name(name_key("Alice")) is None

    await eventually(freed, timeout=10.0)
    assert await store.create_profile("pr2", "t" * 64, name_key("ALICE"), b"b")
    assert await store.profile_by_name(name_key("Alicia")) == "pr1"  # the new name never expires


async def test_bad_arguments_raise_before_anything_is_written(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.create_profile("bad id", "s" * 64, name_key("A"), b"x")
    with pytest.raises(ValueError):
        await store.create_profile("pr1", "bad:hash", name_key("A"), b"x")
    with pytest.raises(ValueError):
        await store.create_profile("pr1", "s" * 64, "", b"x")
    with pytest.raises(TypeError):
        await store.create_profile("pr1", "s" * 64, name_key("A"), "text")  # type: ignore[arg-type]
    assert await store.profile_by_name(name_key("A")) is None
    assert await store.profile_by_secret("bad:hash") is None
    assert await store.get_profile("bad id") is None
