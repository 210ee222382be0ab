"""The store steps of profiles and ratings (docs/players.md): each effect of server/core/profiles.py
carried out on a Store, answered with its event. Plain coroutines over the Store interface, so the
real shell (server/shell/profiles.py), the test shell and the fuzzer run the very same steps.

Every decision is the core's: a rename asks ``plan_rename``, a rated race asks
server/core/ratings.py; these functions only read, write by compare-and-set, and read again when a
write was refused (another node changed the profile meanwhile), recomputing from what is stored.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from server.core.events import (
    ClaimProfile,
    LookupProfile,
    ProfileClaimed,
    ProfileLooked,
    ProfileRenamed,
    RaceRated,
    RateRace,
    RatingsRead,
    ReadRatings,
    RenameProfile,
)
from server.core.profiles import plan_rename
from server.core.ratings import already_rated, race_entry, rate_race, with_race
from server.core.records import ProfileRecord, decode_profile, encode_record
from server.store.base import RenameResult, Store, StoreUnavailable
from shared.identity import RESERVED_MS, Rating, RatingChange, RatingRow

# Compare-and-set rounds before giving up (each refused round means another node wrote the same
# profile in between: a handful of races ending at the same moment for one player).
CAS_ROUNDS = 20

Clock = Callable[[], int]


def _decode(data: bytes | None) -> ProfileRecord | None:
    if data is None:
        return None
    try:
        return decode_profile(data)
    except msgspec.DecodeError:
        return None


async def lookup_profile(store: Store, effect: LookupProfile, now: Clock) -> ProfileLooked:
    try:
        profile_id = await store.profile_by_secret(effect.secret_hash)
        data = await store.get_profile(profile_id) if profile_id is not None else None
    except StoreUnavailable:
        return ProfileLooked(effect.conn, None, now(), failed=True)
    return ProfileLooked(effect.conn, _decode(data), now())


async def claim_profile(store: Store, effect: ClaimProfile, now: Clock) -> ProfileClaimed:
    record = effect.record
    try:
        created = await store.create_profile(
            record.profile_id, effect.secret_hash, record.name_key, encode_record(record)
        )
        if created:
            return ProfileClaimed(effect.conn, record, "created", now())
        bound = await store.profile_by_secret(effect.secret_hash)
        existing = _decode(await store.get_profile(bound)) if bound is not None else None
    except StoreUnavailable:
        return ProfileClaimed(effect.conn, record, "failed", now())
    return ProfileClaimed(effect.conn, record, "taken", now(), existing=existing)


async def rename_profile(store: Store, effect: RenameProfile, now: Clock) -> ProfileRenamed:
    try:
        for _ in range(CAS_ROUNDS):
            loaded = await store.load_profile(effect.profile_id)
            record = None if loaded is None else _decode(loaded[0])
            if loaded is None or record is None:
                return ProfileRenamed(effect.conn, "gone", None, now())
            planned = plan_rename(record, effect.name, now())
            if isinstance(planned, tuple):
                code, _wait, reason = planned
                return ProfileRenamed(effect.conn, "refused", record, now(), code=code, reason=reason)
            done = await store.rename_profile(
                effect.profile_id,
                record.name_key,
                planned.name_key,
                encode_record(planned),
                loaded[1],
                RESERVED_MS / 1000,
            )
            if done is RenameResult.RENAMED:
                return ProfileRenamed(effect.conn, "renamed", planned, now())
            if done is RenameResult.NAME_TAKEN:
                return ProfileRenamed(effect.conn, "taken", record, now())
    except StoreUnavailable:
        pass
    return ProfileRenamed(effect.conn, "failed", None, now())


def _recorded_change(profile: ProfileRecord, code: str, race: int, ended_at: int) -> RatingChange | None:
    """The change a race already applied to this profile made (from its history)."""
    for entry in profile.history:
        if entry.room == code and entry.race == race and entry.at == ended_at:
            after = profile.rating or Rating()
            before = Rating(shown=entry.before)
            return RatingChange(before=before, after=after, change=entry.after - entry.before)
    return None


async def rate_race_profiles(store: Store, effect: RateRace, now: Clock) -> RaceRated:
    """Apply a rated race to each racer's profile, by compare-and-set on its version. A refused
    write reads that profile again and recomputes its change from the stored rating (the others'
    ratings from before the race, as first read), so no update is lost and none counts twice."""
    code, race, ended_at = effect.code, effect.race, effect.ended_at
    profiles = {r.profile_id for r in effect.racers}
    frozen: dict[str, Rating | None] = {}  # the before-race ratings of profiles already written
    changes: dict[str, RatingChange] = {}
    owners: dict[str, list[str]] = {}
    for racer in effect.racers:
        owners.setdefault(racer.profile_id, []).append(racer.player_id)
    try:
        for _ in range(CAS_ROUNDS):
            left = sorted(profiles - frozen.keys())
            if not left:
                break
            loaded: dict[str, tuple[ProfileRecord, int]] = {}
            ratings: dict[str, Rating | None] = dict(frozen)
            for profile_id in left:
                got = await store.load_profile(profile_id)
                record = None if got is None else _decode(got[0])
                if got is None or record is None:
                    frozen[profile_id] = None  # gone: nothing to rate
                    continue
                loaded[profile_id] = (record, got[1])
                ratings[profile_id] = record.rating
            computed = rate_race(effect.racers, ratings)
            rated_field = len({r.profile_id for r in effect.racers})
            for profile_id, (record, version) in loaded.items():
                player = next((pid for pid in owners[profile_id] if pid in computed), None)
                if player is None:
                    frozen[profile_id] = record.rating
                    continue
                if already_rated(record, code, race, ended_at):
                    frozen[profile_id] = record.rating
                    recorded = _recorded_change(record, code, race, ended_at)
                    if recorded is not None:
                        changes[player] = recorded
                    continue
                change = computed[player]
                place = next(r.place for r in effect.racers if r.player_id == player)
                entry = race_entry(code, race, ended_at, place, rated_field, change)
                new = with_race(record, change, entry)
                stored = await store.put_profile(
                    profile_id, encode_record(new), expected_version=version, score=float(change.after.shown)
                )
                if stored is not None:
                    frozen[profile_id] = change.before
                    changes[player] = change
    except StoreUnavailable:
        return RaceRated(code, race, changes, now(), failed=not changes)
    return RaceRated(code, race, changes, now())


async def read_ratings(store: Store, effect: ReadRatings, now: Clock) -> RatingsRead:
    try:
        if effect.profile_id is not None or effect.name_key is not None:
            profile_id = effect.profile_id
            if profile_id is None and effect.name_key is not None:
                profile_id = await store.profile_by_name(effect.name_key)
            record = _decode(await store.get_profile(profile_id)) if profile_id is not None else None
            return RatingsRead(effect.conn, now(), profile=record)
        rows: list[RatingRow] = []
        for profile_id, _score in await store.rating_board(effect.limit):
            record = _decode(await store.get_profile(profile_id))
            if record is None or record.rating is None:
                continue
            rating = record.rating
            rows.append(
                RatingRow(
                    rank=len(rows) + 1,
                    name=record.name,
                    profile_id=profile_id,
                    shown=rating.shown,
                    certainty=rating.certainty,
                    races=rating.races,
                )
            )
        return RatingsRead(effect.conn, now(), board=rows)
    except StoreUnavailable:
        return RatingsRead(effect.conn, now(), failed=True)
