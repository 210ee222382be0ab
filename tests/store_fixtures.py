"""The ``store`` fixture of the tests that run once on each store. A test file registers it by
importing its function."""

from collections.abc import AsyncIterator

import pytest

from server.store.base import Store
from server.store.memory import MemoryStore


@pytest.fixture(params=["memory", "redis"], name="store")
async def memory_or_redis_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The in-memory store, then a real Redis (tests/redis_fixture.py)."""
    if request.param == "memory":
        made: Store = MemoryStore()
    else:
        from server.store.redis import RedisStore

        made = RedisStore(request.getfixturevalue("redis_url"))
    yield made
    await made.close()
