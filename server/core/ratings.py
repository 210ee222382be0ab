"""Ratings (docs/players.md, "Ratings"): which races are rated, and what a rated race does to each
claimed racer's rating. Pure: no I/O, no clock.

openskill's Plackett-Luce model (Weng and Lin's Bayesian approximation for rankings of any number
of players): each profile has (mu, sigma); a race's final ranking (docs/rules.md, "Race ranking";
exact ties share a place) updates every rated racer at once. The figure shown is the
conservative one, shared/identity.py's ``shown_rating``.

The shell applies a race with compare-and-set on each profile's version (server/shell/ratings.py):
it reads the profiles, calls :func:`rate_race` and :func:`with_race` here, and on a refused write
reads again and recomputes, so two races ending at once for one player lose neither update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec
from openskill.models import PlackettLuce

from server.core.records import ProfileRecord
from shared.identity import MU0, RATING_HISTORY_MAX, SIGMA0, RatedRace, Rating, RatingChange, rating_of

GHOST_PREFIX: Final = "ghost:"  # a ghost's player id (a replayed racer): never rated

_MODEL: Final = PlackettLuce(mu=MU0, sigma=SIGMA0)


class RatedRacer(msgspec.Struct, frozen=True):
    """A claimed human racer of a rated race: its place (1-based, ties share one) in the final
    ranking, and the profile its rating belongs to."""

    player_id: str
    profile_id: str
    place: int


def race_is_rated(option: bool | None, racers: Sequence[tuple[str, bool, str | None]]) -> bool:
    """Is a race with these racers (player id, bot, profile id) rated? ``option``: the room's
    ``rated``. False never; otherwise only with at least two claimed humans (bots and ghosts are
    never rated); None (the default) also needs every racer to be one, True rates the claimed
    humans among whoever races."""
    claimed = [pid for pid, bot, profile in racers if profile is not None and not bot and not is_ghost(pid)]
    if option is False or len(claimed) < 2:
        return False
    return option is True or len(claimed) == len(racers)


def is_ghost(player_id: str) -> bool:
    return player_id.startswith(GHOST_PREFIX)


def rated_racers(ranking: Sequence[tuple[str, str | None, bool, int]]) -> list[RatedRacer]:
    """The rated racers of a rated race, from its final ranking: (player id, profile id, bot,
    rank) in rank order. Claimed humans only; their places are renumbered among themselves (the
    others are not in the rated field), exact ties keeping one place."""
    field = [(pid, profile, rank) for pid, profile, bot, rank in ranking if profile and not bot and not is_ghost(pid)]
    out: list[RatedRacer] = []
    place = 0
    last_rank: int | None = None
    for index, (pid, profile, rank) in enumerate(field):
        if rank != last_rank:
            place, last_rank = index + 1, rank
        assert profile is not None
        out.append(RatedRacer(pid, profile, place))
    return out


def rate_race(racers: Sequence[RatedRacer], ratings: dict[str, Rating | None]) -> dict[str, RatingChange]:
    """Each racer's rating change (player id -> change): ``ratings`` holds each profile's rating
    before the race (None: never rated). One profile racing twice in one race (two players bound
    to it) is rated once, at its better place."""
    seen: dict[str, RatedRacer] = {}
    for racer in racers:
        held = seen.get(racer.profile_id)
        if held is None or racer.place < held.place:
            seen[racer.profile_id] = racer
    field = sorted(seen.values(), key=lambda r: r.place)
    if len(field) < 2:
        return {}
    before = {r.profile_id: ratings.get(r.profile_id) or Rating() for r in field}
    teams = [[_MODEL.rating(mu=before[r.profile_id].mu, sigma=before[r.profile_id].sigma)] for r in field]
    after = _MODEL.rate(teams, ranks=[float(r.place) for r in field])
    out: dict[str, RatingChange] = {}
    for racer, (new,) in zip(field, after, strict=True):
        old = before[racer.profile_id]
        now = rating_of(new.mu, new.sigma, old.races + 1)
        out[racer.player_id] = RatingChange(before=old, after=now, change=now.shown - old.shown)
    return out


def race_entry(room: str, race: int, ended_at: int, place: int, racers: int, change: RatingChange) -> RatedRace:
    return RatedRace(
        room=room,
        race=race,
        at=ended_at,
        place=place,
        racers=racers,
        before=change.before.shown,
        after=change.after.shown,
    )


def already_rated(profile: ProfileRecord, room: str, race: int, ended_at: int) -> bool:
    """This race is in the profile's history already (a retried application changes nothing)."""
    return any(h.room == room and h.race == race and h.at == ended_at for h in profile.history)


def with_race(profile: ProfileRecord, change: RatingChange, entry: RatedRace) -> ProfileRecord:
    """The profile after a rated race: its new rating, the race first in its history."""
    history = [entry, *profile.history][:RATING_HISTORY_MAX]
    return msgspec.structs.replace(profile, rating=change.after, history=history)
