"""The daily deal's JSON API on the web port (server/web/api.py): its paths, its errors, the
reveal, and its cache (a burst of readers costs one store read). A real web server on loopback
over the memory store, its day written through the store's own calls."""

from __future__ import annotations

import asyncio
import time

from daily_support import api
from web_helpers import web_server_for

from server.core.daily_rules import DailyRowRecord, DayRecord, board_score, day_start, encode
from server.core.records import ProfileRecord, encode_record
from server.store.daily import DailyFinish
from server.store.memory import MemoryStore
from server.web.api import DailyApi
from shared.fairplay import commitment
from shared.names import name_key

DAY_SECONDS = 86400


async def a_day(store: MemoryStore, day: int) -> DayRecord:
    start = day_start(day, DAY_SECONDS)
    record = DayRecord(
        day=day,
        deal=987654321987654321,
        salt="cd" * 32,
        commitment=commitment(987654321987654321, "cd" * 32),
        starts_at=start,
        ends_at=start + DAY_SECONDS * 1000,
        time_limit_s=1800,
        created_ms=start - 1000,
    )
    await store.create_day(day, encode(record))
    return record


async def finish(store: MemoryStore, day: int, pid: str, name: str, status: str, cards: int, ms: int) -> None:
    row = DailyRowRecord(name, True, status, cards, 50, ms, ms, "p" + pid)
    await store.daily_finish(
        DailyFinish(
            day=day,
            profile_id=pid,
            name=name,
            score=board_score(status, cards, ms, ms),
            row=encode(row),
            record=encode(["stock>waste"] * 50),
            won=status == "won",
            cards=cards,
            elapsed_ms=ms,
            points=cards,
        )
    )


async def test_the_api_answers_today_a_past_day_and_hides_today_until_the_reveal() -> None:
    store = MemoryStore()
    today = int(time.time()) // DAY_SECONDS
    past, now = await a_day(store, today - 1), await a_day(store, today)
    for pid, name in (("pfa", "ann"), ("pfb", "bob")):  # claimed names (identity's profile records)
        profile = ProfileRecord(profile_id=pid, name=name, name_key=name_key(name), created_ms=1)
        assert await store.create_profile(pid, "h" + pid, name_key(name), encode_record(profile))
    await finish(store, past.day, "pfa", "ann", "won", 104, 300_000)
    await finish(store, past.day, "pfb", "bob", "stopped", 80, 1_800_000)
    await finish(store, now.day, "pfa", "ann", "blocked", 40, 100_000)
    await store.daily_progress(
        now.day, "pfb", board_score("playing", 0, 0, 0), encode(DailyRowRecord("bob", True, "playing", 0, 0, 0, 0))
    )
    async with web_server_for(lambda: 1) as web:
        web.api = DailyApi(store, day_seconds=DAY_SECONDS)
        status, body = await api(web.port, "/api/daily")
        assert status == 200 and body["day"]["day"] == today and body["day"]["commitment"] == now.commitment
        board = body["board"]
        assert [r["name"] for r in board["rows"]] == ["ann", "bob"] and board["total"] == 2
        assert "deal" not in board and "salt" not in board and "records" not in board and "final" not in board
        status, body = await api(web.port, f"/api/daily/{past.day}")
        board = body["board"]
        assert status == 200 and board["final"] and board["deal"] == past.deal and board["salt"] == past.salt
        assert [r["name"] for r in board["rows"]] == ["ann", "bob"] and [r["rank"] for r in board["rows"]] == [1, 2]
        assert board["records"]["ann"] == ["stock>waste"] * 50
        date = body["day"]["date"]
        status, by_date = await api(web.port, f"/api/daily/{date}")
        assert status == 200 and by_date["board"] == body["board"]
        status, body = await api(web.port, f"/api/daily/{past.day}?offset=1")
        assert status == 200 and [r["rank"] for r in body["board"]["rows"]] == [2]
        status, body = await api(web.port, "/api/players/ann")
        assert status == 200 and body["days_played"] == 2 and body["days_won"] == 1 and body["best_ms"] == 300_000
        assert body["streak"] == 2 and [h["day"] for h in body["history"]] == [today, today - 1]
        status, body = await api(web.port, "/api/board")
        assert status == 200 and [r["name"] for r in body["rows"]] == ["ann", "bob"]
        for path, code, expected in (
            (f"/api/daily/{today + 1}", 404, "no_day"),
            ("/api/daily/1970-13-01", 404, "no_day"),
            ("/api/daily/12", 404, "no_day"),
            ("/api/players/nobody", 404, "unknown_player"),
            ("/api/daily?offset=x", 400, "bad_field"),
        ):
            status, body = await api(web.port, path)
            assert (status, body["error"]) == (code, expected), path


async def test_a_burst_of_readers_costs_one_store_read() -> None:
    store = MemoryStore()
    today = int(time.time()) // DAY_SECONDS
    await a_day(store, today)
    async with web_server_for(lambda: 1, conns_per_address=0) as web:
        web.api = DailyApi(store, day_seconds=DAY_SECONDS, ttl_s=60.0)
        answers = await asyncio.gather(*(api(web.port, "/api/daily") for _ in range(40)))
        assert all(status == 200 for status, _ in answers)
        assert web.api.stats.answered == 40 and web.api.stats.store_reads == 1
