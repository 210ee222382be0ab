"""Shared fixtures. The real-Redis fixtures live in ``redis_fixture.py`` (importable from test files)."""

from redis_cluster_fixture import redis_cluster, redis_cluster_url  # noqa: F401  (the cluster fixtures)
from redis_fixture import (  # noqa: F401  (fixtures, registered by being imported here)
    own_redis_server,
    persistent_redis_server,
    redis_server,
    redis_server_factory,
    redis_url,
)
