"""Where rooms, players and move logs live: one interface, two implementations.

``MemoryStore`` is the embedded default; ``RedisStore`` needs the ``server`` extra (redis with
hiredis). Redis is imported only when a Redis store is asked for, so a client-only install
can still import this package and ``server.store.memory``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from server.store.base import Store, StoreUnavailable
from server.store.memory import MemoryStore

if TYPE_CHECKING:
    from server.store.redis import RedisStore

__all__ = ["MemoryStore", "RedisStore", "Store", "StoreUnavailable", "open_store"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        return _redis_store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _redis_store_class() -> type[RedisStore]:
    try:
        from server.store.redis import RedisStore
    except ImportError as error:  # the client-only install has no redis package
        raise ImportError(
            f"the Redis store needs the server extra: pip install 'the-plot-race[server]' ({error})"
        ) from error
    return RedisStore


def open_store(url: str | None, **options: Any) -> Store:
    """The store for ``url``: None (or empty) -> MemoryStore; redis://, rediss://, unix:// -> RedisStore
    on one Redis; redis+cluster://host:port, rediss+cluster:// -> RedisStore on a Redis Cluster.

    ``options`` go to the store's constructor (for example ``player_ttl``, or ``namespace``
    for Redis). Connecting happens lazily, on the first call: ``await store.ping()`` to check."""
    if not url:
        return MemoryStore(**options)
    if url.startswith(REDIS_SCHEMES):
        return _redis_store_class()(url, **options)
    scheme = url.split("://", 1)[0] if "://" in url else ""  # never echo the rest: it may hold a password
    raise ValueError(
        f"unsupported store URL (scheme {scheme!r}): expected redis://, rediss://, unix://, "
        "redis+cluster:// or rediss+cluster://"
    )
