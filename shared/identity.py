"""The wire messages of profiles (a claimed name bound to a secret) and ratings, and the pure
rules they follow (docs/players.md). shared/protocol.py takes these into its unions and
re-exports them; a client imports them from there like any other message.

Pure: no I/O, no clock (times come in as arguments).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Final

import msgspec

from shared.names import NAME_CHARS_MAX

# ---------------------------------------------------------------- error codes (stable strings)

BAD_IDENTITY: Final = "bad_identity"  # hello or claim with a secret the server does not know (or malformed)
NAME_CLAIMED: Final = "name_claimed"  # claim/rename: the name, or one that looks like it, is claimed
CLAIM_LIMIT: Final = "claim_limit"  # too many claims from your address in the last hour
RENAME_TOO_SOON: Final = "rename_too_soon"  # a claimed name changes at most once per RENAME_EVERY_MS
NOT_CLAIMED: Final = "not_claimed"  # rename (or another claimed-only request) from an unclaimed player

IDENTITY_ERROR_CODES: Final[tuple[str, ...]] = (BAD_IDENTITY, NAME_CLAIMED, CLAIM_LIMIT, RENAME_TOO_SOON, NOT_CLAIMED)

# ---------------------------------------------------------------- limits

SECRET_BYTES: Final = 32  # a client's secret: 32 random bytes, urlsafe base64 without padding (43 characters)
SECRET_MIN: Final = 32  # characters: a shorter secret is refused (bad_identity)
SECRET_MAX: Final = 128
_SECRET_CHARS: Final = re.compile(r"[A-Za-z0-9_-]+")
DAY_MS: Final = 24 * 3600 * 1000
RENAME_EVERY_MS: Final = 30 * DAY_MS  # one change of a claimed name per 30 days
RESERVED_MS: Final = 30 * DAY_MS  # an old name stays its owner's alone this long after a rename
CLAIMS_PER_HOUR: Final = 5  # claims from one address per hour (per node), the default
RATING_BOARD_MAX: Final = 100  # rows of one rating board answer
RATING_HISTORY_MAX: Final = 50  # rated races a profile keeps (the newest)

Secret = Annotated[str, msgspec.Meta(max_length=SECRET_MAX)]
ClaimName = Annotated[str, msgspec.Meta(max_length=NAME_CHARS_MAX * 4)]


def check_secret(secret: str) -> str | None:
    """None if ``secret`` has the shape of a client's secret, else why not (the server never
    learns more about a secret than its SHA-256)."""
    if len(secret) < SECRET_MIN:
        return f"an identity secret has at least {SECRET_MIN} characters (this one has {len(secret)})"
    if _SECRET_CHARS.fullmatch(secret) is None:
        return "an identity secret is urlsafe base64: A-Z a-z 0-9 - _ only"
    return None


def rename_wait_ms(renamed_ms: int | None, now: int) -> int:
    """How long (ms) before a claimed name may change again: 0 now. The first change may come at
    once (a slip of the keyboard at the claim), each later one RENAME_EVERY_MS after the last."""
    return 0 if renamed_ms is None else max(0, renamed_ms + RENAME_EVERY_MS - now)


# ---------------------------------------------------------------- ratings (pure figures)

# openskill's Plackett-Luce defaults: mu 25, sigma 25/3. The figure shown is the conservative
# one, mu - 3 sigma (a player is at least this good with ~99.7% confidence), scaled so that a new
# profile shows RATING_BASE and one skill point is RATING_SCALE shown points.
MU0: Final = 25.0
SIGMA0: Final = 25.0 / 3.0
RATING_BASE: Final = 1000
RATING_SCALE: Final = 40.0


def shown_rating(mu: float, sigma: float) -> int:
    """The figure players see: RATING_BASE + RATING_SCALE * (mu - 3 sigma), rounded."""
    return round(RATING_BASE + RATING_SCALE * (mu - 3.0 * sigma))


def certainty(sigma: float) -> int:
    """How sure the figure is, 0..100: 0 for a new profile, growing as sigma shrinks."""
    return max(0, min(100, math.floor(100.0 * (1.0 - sigma / SIGMA0))))


class Rating(msgspec.Struct, kw_only=True):
    """A profile's rating: openskill's (mu, sigma), the shown figure and its certainty."""

    mu: float = MU0
    sigma: float = SIGMA0
    shown: int = RATING_BASE  # shown_rating(mu, sigma)
    certainty: int = 0  # certainty(sigma), percent
    races: int = 0  # rated races played


def rating_of(mu: float, sigma: float, races: int) -> Rating:
    return Rating(mu=mu, sigma=sigma, shown=shown_rating(mu, sigma), certainty=certainty(sigma), races=races)


class RatingChange(msgspec.Struct, kw_only=True):
    """One racer's rating before and after a rated race (Results.ratings)."""

    before: Rating
    after: Rating
    change: int  # after.shown - before.shown


class RatedRace(msgspec.Struct, kw_only=True):
    """One entry of a profile's rating history, newest first in RatingHistory."""

    room: str
    race: int
    at: int  # server ms the race ended
    place: int  # 1-based, docs/rules.md "Race ranking"
    racers: int  # rated racers in it
    before: int  # shown figure before
    after: int  # shown figure after


class RatingRow(msgspec.Struct, kw_only=True):
    rank: int  # 1-based, by shown figure
    name: str
    profile_id: str
    shown: int
    certainty: int
    races: int


# ---------------------------------------------------------------- client -> server


class Claim(msgspec.Struct, tag="claim", tag_field="type", kw_only=True):
    """Claim ``name`` on this server for the secret ``identity`` (the client's, kept in its state
    directory): the name is then this profile's alone, and this player is bound to it. Outside a
    room. Answered ``claimed``, or name_claimed, claim_limit, name_invalid, bad_identity."""

    name: ClaimName
    identity: Secret


class Rename(msgspec.Struct, tag="rename", tag_field="type", kw_only=True):
    """A claimed player changes its claimed name (outside a room): at most once per 30 days; the
    old name stays reserved for this profile for 30 days. Answered ``claimed`` or an error."""

    name: ClaimName


class GetRatings(msgspec.Struct, tag="get_ratings", tag_field="type", kw_only=True):
    """The rating board: the highest shown figures first."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=RATING_BOARD_MAX)] = 20


class GetRating(msgspec.Struct, tag="get_rating", tag_field="type", kw_only=True):
    """One profile's rating and history, by claimed name (None: your own, claimed players only)."""

    name: ClaimName | None = None


# ---------------------------------------------------------------- server -> client


class Claimed(msgspec.Struct, tag="claimed", tag_field="type", kw_only=True):
    """The claim (or rename) took: this player is bound to the profile and shows ``name``."""

    profile_id: str
    name: str


class RatingBoard(msgspec.Struct, tag="rating_board", tag_field="type", kw_only=True):
    rows: list[RatingRow]


class RatingHistory(msgspec.Struct, tag="rating_history", tag_field="type", kw_only=True):
    name: str
    profile_id: str
    rating: Rating
    history: list[RatedRace]  # newest first, at most RATING_HISTORY_MAX
