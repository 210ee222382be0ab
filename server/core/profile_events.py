"""The room core's events and effects of profiles and ratings (docs/players.md): server/core/
profiles.py emits the effects, server/shell/profile_ops.py carries them out and answers with the
events. Taken into server/core/events.py's unions (and importable from there)."""

from __future__ import annotations

from typing import Literal

import msgspec

from server.core.ratings import RatedRacer
from server.core.records import ProfileRecord
from shared.identity import RatingChange, RatingRow

# ---------------------------------------------------------------- events (shell -> core)


class ProfileLooked(msgspec.Struct, frozen=True):
    """The answer to LookupProfile: the profile the hello's secret is bound to (None: no such
    profile), or ``failed`` (the store did not answer)."""

    conn: int
    record: ProfileRecord | None
    now: int
    failed: bool = False


class ProfileClaimed(msgspec.Struct, frozen=True):
    """The answer to ClaimProfile. ``created``: the profile is stored; ``taken``: the name (or a
    look-alike) is another profile's, or the secret is bound already (``existing``: its profile);
    ``failed``: the store did not answer (the claim may have landed: claiming again with the same
    secret and name answers ``existing``)."""

    conn: int
    record: ProfileRecord
    outcome: Literal["created", "taken", "failed"]
    now: int
    existing: ProfileRecord | None = None


class ProfileRenamed(msgspec.Struct, frozen=True):
    """The answer to RenameProfile: ``record`` is the profile as stored after it (renamed), or as
    read. ``refused``: the core's rule said no (``code`` and ``reason``: too soon, the same name);
    ``taken``: the new name is another's; ``gone``: no such profile; ``failed``: no answer."""

    conn: int
    outcome: Literal["renamed", "refused", "taken", "gone", "failed"]
    record: ProfileRecord | None
    now: int
    code: str = ""
    reason: str = ""


class RaceRated(msgspec.Struct, frozen=True):
    """The answer to RateRace: each rated racer's change (player id -> change), as stored in its
    profile; ``failed``: the store did not answer (no change is shown)."""

    code: str
    race: int
    ratings: dict[str, RatingChange]
    now: int
    failed: bool = False


class RatingsRead(msgspec.Struct, frozen=True):
    """The answer to ReadRatings: the board's rows, or the profile asked for (None: no such name)."""

    conn: int
    now: int
    board: list[RatingRow] | None = None
    profile: ProfileRecord | None = None
    failed: bool = False


# ---------------------------------------------------------------- effects (core -> shell)


class LookupProfile(msgspec.Struct, frozen=True):
    """Find the profile bound to this secret hash, then hand the core ProfileLooked."""

    conn: int
    secret_hash: str


class ClaimProfile(msgspec.Struct, frozen=True):
    """Store a new profile under its name key and secret hash (Store.create_profile), then hand the
    core ProfileClaimed (when refused, with the profile the secret is bound to, if any)."""

    conn: int
    secret_hash: str
    record: ProfileRecord


class RenameProfile(msgspec.Struct, frozen=True):
    """Rename a profile to ``name``: read it, ask server/core/profiles.py's ``plan_rename``
    whether and how (the core's rule), store it by compare-and-set (read again on a refused
    version), then hand the core ProfileRenamed."""

    conn: int
    profile_id: str
    name: str


class RateRace(msgspec.Struct, frozen=True):
    """Apply a rated race to its racers' profiles (server/core/ratings.py decides each change;
    compare-and-set per profile, recomputed on a refused version), then hand the core RaceRated."""

    code: str
    race: int
    ended_at: int
    racers: tuple[RatedRacer, ...]


class ReadRatings(msgspec.Struct, frozen=True):
    """Read the rating board (``limit`` rows) or, with ``name_key`` or ``profile_id``, one
    profile; then hand the core RatingsRead."""

    conn: int
    limit: int = 0
    name_key: str | None = None
    profile_id: str | None = None
    also_keys: tuple[str, ...] = ()  # the name's other look-alike keys (shared/identity.py's claim_keys)
