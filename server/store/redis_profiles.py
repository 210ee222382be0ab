"""The Redis store's profiles (docs/players.md, docs/store.md "Profiles"): a part of RedisStore
in its own module.

Every profile key carries the one hash tag ``{profiles}``, so a claim (the profile, its secret's
key, its name's key) and a rename (the profile, its old and new name keys) are each one Lua
script on one slot, on one Redis or a cluster alike. The cost: all profiles live on one cluster
slot, so on one master; a profile is a few hundred bytes and is read once per hello and written
once per rated race, which one master carries far past the player counts the rooms allow.

Keys (``ns`` the namespace):

- ``ns:profile:{profiles}:id``     hash    data, version (never expires)
- ``ns:psecret:{profiles}:hash``   string  profile id, by the SHA-256 of the client's secret
- ``ns:pname:{profiles}:sha``      string  profile id, by the SHA-256 of the name key (a reserved
                                            old name: with a time to live)
- ``ns:ratings:{profiles}``        zset    profile ids scored by shown rating
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from server.store.base import RenameResult, check_identifier, is_identifier
from server.store.memory_profiles import check_name_key

# KEYS: profile, secret, name. ARGV: profile id, data. 1 created; 0 a key taken (nothing written).
CREATE_PROFILE = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1
   or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'version', 1)
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], ARGV[1])
return 1
"""

# KEYS: profile, rating board. ARGV: data, expected version ('' any), score ('' none), profile id.
# The new version; -1 no such profile or another version.
PUT_PROFILE = """
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return -1 end
if ARGV[2] ~= '' and version ~= ARGV[2] then return -1 end
local new = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'data', ARGV[1])
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4]) end
return new
"""

# KEYS: profile, old name, new name. ARGV: data, expected version, profile id, reserve ms.
# 1 renamed; 0 the new name is another profile's; -1 no such profile or another version.
RENAME_PROFILE = """
local version = redis.call('HGET', KEYS[1], 'version')
if not version or version ~= ARGV[2] then return -1 end
local holder = redis.call('GET', KEYS[3])
if holder and holder ~= ARGV[3] then return 0 end
if KEYS[2] ~= KEYS[3] and redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'data', ARGV[1])
return 1
"""

TAG = "{profiles}"


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


class RedisProfiles:
    """Profiles on Redis: mixed into RedisStore, which supplies the client and its error handling."""

    namespace: str
    replicas_ack: int
    _redis: aioredis.Redis | RedisCluster

    def _talking(self, operation: str) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError  # RedisStore's

    async def _confirmed_script(self, script: AsyncScript, keys: list[str], args: list[Any], what: str) -> object:
        raise NotImplementedError  # RedisStore's

    def _profiles_init(self) -> None:
        self._create_profile = self._redis.register_script(CREATE_PROFILE)
        self._put_profile = self._redis.register_script(PUT_PROFILE)
        self._rename_profile = self._redis.register_script(RENAME_PROFILE)

    def profile_key(self, profile_id: str) -> str:
        return f"{self.namespace}:profile:{TAG}:{profile_id}"

    def secret_key(self, secret_hash: str) -> str:
        return f"{self.namespace}:psecret:{TAG}:{secret_hash}"

    def name_key(self, name_key: str) -> str:
        digest = hashlib.sha256(name_key.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self.namespace}:pname:{TAG}:{digest}"

    def ratings_key(self) -> str:
        return f"{self.namespace}:ratings:{TAG}"

    async def _script(self, script: AsyncScript, keys: list[str], args: list[Any], what: str) -> object:
        if self.replicas_ack:  # a claim told to its client only once replicas hold it
            return await self._confirmed_script(script, keys, args, what)
        return await script(keys=keys, args=args)

    async def create_profile(self, profile_id: str, secret_hash: str, name_key: str, data: bytes) -> bool:
        check_identifier("profile id", profile_id)
        check_identifier("secret hash", secret_hash)
        check_name_key(name_key)
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        keys = [self.profile_key(profile_id), self.secret_key(secret_hash), self.name_key(name_key)]
        async with self._talking("create_profile"):
            created = await self._script(self._create_profile, keys, [profile_id, data], f"profile {profile_id}")
        return created == 1

    async def profile_by_secret(self, secret_hash: str) -> str | None:
        if not is_identifier(secret_hash):
            return None
        async with self._talking("profile_by_secret"):
            found = await self._redis.get(self.secret_key(secret_hash))
        return None if found is None else _bytes(found).decode()

    async def get_profile(self, profile_id: str) -> bytes | None:
        if not is_identifier(profile_id):
            return None
        async with self._talking("get_profile"):
            data = await self._redis.hget(self.profile_key(profile_id), "data")
        return None if data is None else _bytes(data)

    async def load_profile(self, profile_id: str) -> tuple[bytes, int] | None:
        if not is_identifier(profile_id):
            return None
        async with self._talking("load_profile"):
            data, version = await self._redis.hmget(self.profile_key(profile_id), ["data", "version"])
        if data is None or version is None:
            return None
        return _bytes(data), int(version)

    async def profile_by_name(self, name_key: str) -> str | None:
        if not isinstance(name_key, str) or not name_key:
            return None
        async with self._talking("profile_by_name"):
            found = await self._redis.get(self.name_key(name_key))
        return None if found is None else _bytes(found).decode()

    async def put_profile(
        self, profile_id: str, data: bytes, *, expected_version: int | None = None, score: float | None = None
    ) -> int | None:
        check_identifier("profile id", profile_id)
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        keys = [self.profile_key(profile_id), self.ratings_key()]
        args: list[Any] = [
            data,
            "" if expected_version is None else str(int(expected_version)),
            "" if score is None else repr(float(score)),
            profile_id,
        ]
        async with self._talking("put_profile"):
            version = await self._script(self._put_profile, keys, args, f"profile {profile_id}")
        return None if not isinstance(version, int) or version < 0 else version

    async def rename_profile(
        self,
        profile_id: str,
        old_key: str,
        new_key: str,
        data: bytes,
        expected_version: int,
        reserve_s: float,
    ) -> RenameResult:
        check_identifier("profile id", profile_id)
        check_name_key(old_key)
        check_name_key(new_key)
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        keys = [self.profile_key(profile_id), self.name_key(old_key), self.name_key(new_key)]
        args: list[Any] = [data, str(int(expected_version)), profile_id, max(1, round(reserve_s * 1000))]
        async with self._talking("rename_profile"):
            done = await self._script(self._rename_profile, keys, args, f"profile {profile_id}'s rename")
        if done == 1:
            return RenameResult.RENAMED
        return RenameResult.NAME_TAKEN if done == 0 else RenameResult.CONFLICT

    async def rating_board(self, limit: int) -> list[tuple[str, float]]:
        if limit <= 0:
            return []
        async with self._talking("rating_board"):
            rows = cast(
                "list[tuple[bytes, float]]",
                await self._redis.zrevrange(self.ratings_key(), 0, limit - 1, withscores=True),
            )
        return [(_bytes(member).decode(), float(score)) for member, score in rows]
