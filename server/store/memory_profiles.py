"""The in-memory store's profiles (docs/players.md): a part of MemoryStore in its own module.

Each call runs to completion without awaiting, so every step is atomic. A reserved old name
frees itself once its deadline passes (checked on each look-up, on the store's clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from server.store.base import RenameResult, check_identifier, is_identifier


@dataclass
class _Profile:
    data: bytes
    version: int
    secret_hash: str


def check_name_key(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > 1024:
        raise ValueError(f"bad name key {value!r}: expected a non-empty string of at most 1024 characters")
    return value


class MemoryProfiles:
    """Profiles, their secret and name indexes and the rating board, in one process's memory."""

    def _profiles_init(self) -> None:
        self._profiles: dict[str, _Profile] = {}
        self._secrets: dict[str, str] = {}
        # name key -> (profile id, until: store clock seconds; None for good)
        self._names: dict[str, tuple[str, float | None]] = {}
        self._scores: dict[str, float] = {}

    def _begin(self) -> float:
        raise NotImplementedError  # MemoryStore's: refuse after close, expire, the time now

    def _name_holder(self, name_key: str, now: float) -> str | None:
        held = self._names.get(name_key)
        if held is None:
            return None
        if held[1] is not None and held[1] <= now:
            del self._names[name_key]
            return None
        return held[0]

    async def create_profile(self, profile_id: str, secret_hash: str, name_key: str, data: bytes) -> bool:
        now = self._begin()
        check_identifier("profile id", profile_id)
        check_identifier("secret hash", secret_hash)
        check_name_key(name_key)
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        if profile_id in self._profiles or secret_hash in self._secrets or self._name_holder(name_key, now):
            return False
        self._profiles[profile_id] = _Profile(data, 1, secret_hash)
        self._secrets[secret_hash] = profile_id
        self._names[name_key] = (profile_id, None)
        return True

    async def profile_by_secret(self, secret_hash: str) -> str | None:
        self._begin()
        return self._secrets.get(secret_hash) if is_identifier(secret_hash) else None

    async def get_profile(self, profile_id: str) -> bytes | None:
        self._begin()
        profile = self._profiles.get(profile_id)
        return None if profile is None else profile.data

    async def load_profile(self, profile_id: str) -> tuple[bytes, int] | None:
        self._begin()
        profile = self._profiles.get(profile_id)
        return None if profile is None else (profile.data, profile.version)

    async def profile_by_name(self, name_key: str) -> str | None:
        now = self._begin()
        if not isinstance(name_key, str):
            return None
        return self._name_holder(name_key, now)

    async def put_profile(
        self, profile_id: str, data: bytes, *, expected_version: int | None = None, score: float | None = None
    ) -> int | None:
        self._begin()
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        profile = self._profiles.get(profile_id)
        if profile is None or (expected_version is not None and profile.version != expected_version):
            return None
        profile.data = data
        profile.version += 1
        if score is not None:
            self._scores[profile_id] = float(score)
        return profile.version

    async def rename_profile(
        self,
        profile_id: str,
        old_key: str,
        new_key: str,
        data: bytes,
        expected_version: int,
        reserve_s: float,
    ) -> RenameResult:
        now = self._begin()
        check_name_key(old_key)
        check_name_key(new_key)
        if not isinstance(data, bytes):
            raise TypeError(f"profile data must be bytes, not {type(data).__name__}")
        profile = self._profiles.get(profile_id)
        if profile is None or profile.version != expected_version:
            return RenameResult.CONFLICT
        holder = self._name_holder(new_key, now)
        if holder is not None and holder != profile_id:
            return RenameResult.NAME_TAKEN
        if old_key != new_key and self._name_holder(old_key, now) == profile_id:
            self._names[old_key] = (profile_id, now + max(0.0, float(reserve_s)))
        self._names[new_key] = (profile_id, None)
        profile.data = data
        profile.version += 1
        return RenameResult.RENAMED

    async def rating_board(self, limit: int) -> list[tuple[str, float]]:
        self._begin()
        ranked = sorted(self._scores.items(), key=lambda item: (-item[1], item[0]))
        return ranked[: max(0, limit)]
