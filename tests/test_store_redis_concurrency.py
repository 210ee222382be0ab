"""RedisStore under many concurrent operations (the load a busy server puts on its pool).

redis-py's asyncio pool refuses a command outright ("Too many connections") once 100 are in
flight, and the store turned that into StoreUnavailable: at 1,000 racers most moves failed and
were replayed from the log. The store must queue for a connection instead, and every
operation must land.
"""

from __future__ import annotations

import asyncio

from server.store.base import AppendResult
from server.store.redis import RedisStore


async def test_hundreds_of_concurrent_appends_all_land(redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        assert await store.create_room("ROOMA", b"room record", open_race=1)  # appends need their room and race
        racers = [f"p{i:04d}" for i in range(400)]
        results = await asyncio.gather(
            *(store.append_move("ROOMA", 1, racer, 0, b"move-1") for racer in racers), return_exceptions=True
        )
        failures = [r for r in results if r is not AppendResult.APPENDED]
        assert failures == [], f"{len(failures)} of {len(racers)} appends failed, first: {failures[0]!r}"
        logs = await asyncio.gather(*(store.load_moves("ROOMA", 1, racer) for racer in racers))
        assert all(log == [b"move-1"] for log in logs)
    finally:
        await store.close()
