"""The daily deal's store calls (server/store/daily.py): one suite on every store (the memory
store, one Redis, a Redis Cluster, a replicated cluster), as tests/test_store_contract.py."""

from __future__ import annotations

import random

import pytest
from test_store_contract import StoreFactory, make_store

from server.store.daily import DailyFinish, DailyStats, apply_finish

__all__ = ["make_store"]


def fresh_day() -> int:
    """A day no other test uses (the Redis stores share their data between tests)."""
    return random.randrange(10**6, 10**9)


def finish(day: int, pid: str, score: float, *, won: bool = False, cards: int = 50, points: int = 10) -> DailyFinish:
    return DailyFinish(
        day=day,
        profile_id=pid,
        name=pid.upper(),
        score=score,
        row=f"row-{pid}-final".encode(),
        record=f"rec-{pid}".encode(),
        won=won,
        cards=cards,
        elapsed_ms=1000 + cards,
        points=points,
    )


async def test_a_day_is_written_once(make_store: StoreFactory) -> None:
    one, two = await make_store(), await make_store()
    day = fresh_day()
    assert await one.get_day(day) is None
    assert await one.create_day(day, b"first") == b"first"
    assert await two.create_day(day, b"second") == b"first"  # the loser gets the winner's record
    assert await two.get_day(day) == b"first"


async def test_the_board_is_in_score_order_with_live_and_final_rows(make_store: StoreFactory) -> None:
    store = await make_store()
    day = fresh_day()
    ids = [f"pr{random.randrange(10**9)}x{i}" for i in range(5)]
    for i, pid in enumerate(ids):
        assert await store.daily_progress(day, pid, float(100 - i), f"row-{pid}".encode())
    rows, total = await store.daily_board(day, 0, 3)
    assert total == 5
    assert [pid for pid, _ in rows] == [ids[4], ids[3], ids[2]]
    assert rows[0][1] == f"row-{ids[4]}".encode()
    rest, _ = await store.daily_board(day, 3, 10)
    assert [pid for pid, _ in rest] == [ids[1], ids[0]]
    assert await store.daily_live(day) == 5
    assert await store.daily_finish(finish(day, ids[0], 1.0, won=True))
    assert not await store.daily_finish(finish(day, ids[0], 0.5, won=True))  # final already: unchanged
    assert not await store.daily_progress(day, ids[0], 999.0, b"late")  # a final row never goes back
    entry = await store.daily_entry(day, ids[0])
    assert entry == (f"row-{ids[0]}-final".encode(), 0, True)
    assert await store.daily_entry(day, ids[1]) == (f"row-{ids[1]}".encode(), 4, False)
    assert await store.daily_entry(day, "nobody") is None
    assert await store.daily_live(day) == 4
    assert await store.daily_records(day, [ids[0], ids[1], "nobody"]) == [f"rec-{ids[0]}".encode(), None, None]


async def test_a_profile_counts_each_day_once_with_its_streak(make_store: StoreFactory) -> None:
    store = await make_store()
    day = fresh_day()
    pid = f"pr{random.randrange(10**9)}"
    expected = DailyStats()
    plan = [(day, True, 104, 30), (day + 1, False, 60, 12), (day + 3, True, 104, 25), (day + 4, True, 104, 28)]
    for d, won, cards, points in plan:
        f = finish(d, pid, 1.0, won=won, cards=cards, points=points)
        assert await store.daily_finish(f)
        await store.daily_finish(f)  # a retry counts nothing twice
        expected = apply_finish(expected, f)
    stats = await store.daily_stats(pid)
    assert stats == expected
    assert stats is not None
    assert (stats.days_played, stats.days_won, stats.streak, stats.best_streak) == (4, 3, 2, 2)
    assert stats.best_ms == 1104 and stats.best_cards == 104 and stats.points == 95
    history = await store.daily_history(pid, 2)
    assert [d for d, _ in history] == [day + 4, day + 3]
    assert history[0][1] == f"row-{pid}-final".encode()
    assert await store.daily_stats("nobody-here") is None


async def test_the_standing_board_orders_by_points(make_store: StoreFactory) -> None:
    store = await make_store()
    day = fresh_day()
    tag = random.randrange(10**9)
    ids = [f"st{tag}x{i}" for i in range(3)]
    for pid, points in zip(ids, [5, 50, 20], strict=True):
        await store.daily_finish(finish(day, pid, 1.0, points=points))
    rows, total = await store.daily_standing(0, 1000)
    mine = [(pid, pts) for pid, pts in rows if pid.startswith(f"st{tag}x")]
    assert mine == [(ids[1], 50), (ids[2], 20), (ids[0], 5)]
    assert total >= 3


async def test_bad_arguments_raise_before_anything_is_written(make_store: StoreFactory) -> None:
    store = await make_store()
    day = fresh_day()
    with pytest.raises(ValueError):
        await store.daily_progress(day, "bad id with spaces", 1.0, b"x")
    with pytest.raises(TypeError):
        await store.daily_progress(day, "ok", 1.0, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.create_day(-1, b"x")
    assert (await store.daily_board(day, 0, 10)) == ([], 0)
