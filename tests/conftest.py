"""Shared fixtures. The real-Redis fixtures live in ``redis_fixture.py`` (importable from test files)."""

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright
from redis_cluster_fixture import (  # noqa: F401  (the cluster fixtures)
    redis_cluster,
    redis_cluster_url,
    replicated_cluster,
    replicated_cluster_url,
)
from redis_fixture import (  # noqa: F401  (fixtures, registered by being imported here)
    own_redis_server,
    persistent_redis_server,
    redis_server,
    redis_server_factory,
    redis_url,
    shipped_redis_server,
)
from web_helpers import find_chromium


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # The system's Chromium, never Playwright's own download (none can be fetched here).
        launched = await playwright.chromium.launch(executable_path=find_chromium())
        try:
            yield launched
        finally:
            await launched.close()
