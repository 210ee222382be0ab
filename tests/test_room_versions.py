"""The room writes' version bookkeeping (server/shell/room_versions.py), on its own: a table of
steps, each with the decision it must give and the room's book after it, the way h11 tests its
connection-state table. No store, no event loop: the class is pure."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from server.core.events import ClientEvent
from server.shell.room_versions import (
    Drop,
    ExpireOp,
    Lost,
    Probe,
    Recreate,
    RoomBook,
    RoomVersions,
    SaveOp,
    Write,
)
from shared import protocol as p

CODE = "ABCDE"
OURS = b"our record"
THEIRS = b"their record"

Step = tuple[str, tuple[Any, ...], Any, dict[str, Any]]  # method, arguments, its answer, the book's fields after


def run(versions: RoomVersions, steps: list[Step]) -> None:
    for number, (method, args, answer, book) in enumerate(steps):
        got = getattr(versions, method)(CODE, *args)
        assert got == answer, f"step {number} {method}{args}: {got!r}, not {answer!r}"
        state = asdict(versions.book(CODE))
        for name, value in book.items():
            assert state[name] == value, f"step {number} {method}{args}: {name} is {state[name]!r}, not {value!r}"


ONE_NODE: dict[str, list[Step]] = {
    "a loaded room saves on its version, then on the next": [
        ("loaded", (3,), None, {"version": 3}),
        ("begin_save", (0,), Write(3), {}),
        ("save_landed", (4, 0), None, {"version": 4}),
        ("begin_save", (0,), Write(4), {}),
    ],
    "a created room is version 1": [
        ("created", (), None, {"version": 1, "conflict": False}),
        ("begin_save", (0,), Write(1), {}),
    ],
    "an unknown version is probed first": [
        ("begin_save", (0,), Probe(), {"version": None}),
        ("probed", ((OURS, 7),), Lost(None, 7, False), {"conflict": True}),
    ],
    "a save whose outcome was unknown, found landed, goes on from the stored version": [
        ("loaded", (3,), None, {}),
        ("save_unknown", (3, OURS), None, {"version": None, "uncertain": (3, OURS)}),
        ("begin_save", (0,), Probe(), {}),
        ("probed", ((OURS, 4),), Write(4), {"uncertain": None, "conflict": False}),
    ],
    "a save whose outcome was unknown, found not landed and nobody else's, is written again": [
        ("loaded", (3,), None, {}),
        ("save_unknown", (3, OURS), None, {}),
        ("probed", ((b"older", 3),), Write(3), {"uncertain": None}),
    ],
    "another writer's change after an unknown outcome is a conflict, never overwritten": [
        ("loaded", (3,), None, {}),
        ("save_unknown", (3, OURS), None, {}),
        ("probed", ((THEIRS, 4),), Lost(3, 4, False), {"conflict": True, "version": None}),
        ("begin_save", (0,), Drop("conflict"), {}),
    ],
    "a vanished room is recreated, its uncertain save kept for nothing": [
        ("save_unknown", (3, OURS), None, {}),
        ("probed", (None,), Recreate(), {"uncertain": (3, OURS)}),
        ("created", (), None, {"version": 1}),
    ],
    "a refused compare-and-set with the room still stored is a conflict": [
        ("loaded", (3,), None, {}),
        ("refused", (3, (THEIRS, 5)), Lost(3, 5, False), {"conflict": True, "version": None}),
        ("begin_save", (0,), Drop("conflict"), {}),
        ("loaded", (5,), None, {"conflict": False, "version": 5}),
    ],
    "a refused compare-and-set with the room gone recreates it": [
        ("loaded", (3,), None, {}),
        ("refused", (3, None), Recreate(), {"version": 3}),
    ],
    "a recreation beaten by another creator is a conflict": [
        ("recreate_refused", (), Lost(None, 1, False), {"conflict": True}),
    ],
    "one node: the epoch never makes a save stale": [
        ("loaded", (3,), None, {}),
        ("begin_save", (5,), Write(3), {}),
    ],
}

SEVERAL_NODES: dict[str, list[Step]] = {
    "a lost compare-and-set reads the room back instead of a conflict": [
        ("loaded", (3,), None, {}),
        ("refused", (3, (THEIRS, 4)), Lost(3, 4, True), {"conflict": False, "version": None}),
        ("want_refresh", (), True, {"refreshing": True}),
        ("want_refresh", (), False, {}),  # one read-back waits at a time
        ("refreshed", (4,), (), {"refreshing": False, "epoch": 1, "version": 4}),
    ],
    "a save made before a read-back is stale after it": [
        ("loaded", (3,), None, {}),
        ("epoch", (), 0, {}),
        ("want_refresh", (), True, {}),
        ("refreshed", (4,), (), {"epoch": 1}),
        ("epoch", (), 1, {}),
        ("begin_save", (0,), Drop("stale"), {}),
        ("begin_save", (1,), Write(4), {}),
    ],
    "a read-back of a room gone keeps the version it knew": [
        ("loaded", (3,), None, {}),
        ("refreshed", (None,), (), {"version": 3, "epoch": 1}),
    ],
    "a version announced by another node is news only when newer": [
        ("loaded", (3,), None, {}),
        ("is_news", (3,), False, {}),
        ("is_news", (4,), True, {}),
        ("is_news", (2,), False, {}),
        ("is_news", (1,), True, {}),  # stored again after it vanished, counting from 1
    ],
    "version 1 is not news to the node that created it": [
        ("created", (), None, {}),
        ("is_news", (1,), False, {}),
    ],
    "an unknown version makes any announcement news": [
        ("is_news", (1,), True, {}),
    ],
}


@pytest.mark.parametrize("name", list(ONE_NODE))
def test_one_node_table(name: str) -> None:
    run(RoomVersions(shared=False), ONE_NODE[name])


@pytest.mark.parametrize("name", list(SEVERAL_NODES))
def test_several_nodes_table(name: str) -> None:
    run(RoomVersions(shared=True), SEVERAL_NODES[name])


def test_commands_are_kept_until_a_save_holding_them_lands_and_replayed_by_a_read_back() -> None:
    versions = RoomVersions(shared=True)
    ready = ClientEvent(1, p.Ready(ready=True), 0)
    leave = ClientEvent(2, p.Leave(), 0)
    versions.note_command({CODE}, ready)
    made_at = versions.commands  # a save queued now holds the ready
    versions.note_command({CODE}, leave)
    versions.save_landed(CODE, 2, made_at)
    assert [event for _, event in versions.book(CODE).uncommitted] == [leave]
    assert versions.refreshed(CODE, 3) == (leave,)  # handled again on the store's copy


def test_one_node_keeps_no_commands() -> None:
    versions = RoomVersions(shared=False)
    versions.note_command({CODE}, ClientEvent(1, p.Ready(ready=True), 0))
    versions.save_landed(CODE, 2, 0)
    assert len(versions.book(CODE).uncommitted) == 1  # nothing reads them back on one node


def test_a_newer_save_carries_the_older_ones_messages_unless_a_read_back_came_between() -> None:
    from server.core.events import Send
    from server.core.records import RoomRecord

    record = RoomRecord(
        code=CODE,
        options=p.RoomOptions(),
        host="h",
        phase=p.LOBBY,
        version=1,
        race_number=1,
        members=[],
        race=None,
        pending_deal=None,
        created_ms=0,
        last_activity_ms=0,
    )
    results = Send(("h",), p.Pong(t=0, server_time=0))
    older = SaveOp(record, epoch=0, then=(results,))
    assert SaveOp(record, epoch=0).replacing(older).then == (results,)
    assert SaveOp(record, epoch=1).replacing(older).then == ()


def test_a_forgotten_room_starts_a_fresh_book() -> None:
    versions = RoomVersions(shared=True)
    versions.loaded(CODE, 3)
    versions.forget(CODE)
    assert versions.book(CODE) == RoomBook()
    assert ExpireOp(None) != ExpireOp(1.0)  # operations compare by value (the worker's queue holds them)
