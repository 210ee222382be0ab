"""The pure rules of profiles and ratings (docs/players.md): which races are rated, the rated
places, renames; and the core through the test shell (server/testing/shell.py): a claim, a hello
bound to it, a rated race's changes in its results and in the race's record."""

from __future__ import annotations

import pytest
from support import Shell

from server.core.events import HelloEvent, RateRace
from server.core.profiles import plan_rename
from server.core.ratings import RatedRacer, race_is_rated, rate_race, rated_racers
from server.core.records import ProfileRecord, decode_profile, encode_record
from server.shell.profile_ops import rate_race_profiles
from server.store.memory import MemoryStore
from shared import protocol as p
from shared.identity import DAY_MS, RENAME_EVERY_MS, Rating, certainty, check_secret, shown_rating
from shared.names import name_key

A, B, C = ("pa", False, "pfa"), ("pb", False, "pfb"), ("pc", False, "pfc")
UNCLAIMED, BOT, GHOST = ("pu", False, None), ("pbot", True, None), ("ghost:pa", False, "pfa")


@pytest.mark.parametrize(
    ("option", "racers", "rated"),
    [
        (None, [A, B], True),
        (None, [A], False),
        (None, [A, B, UNCLAIMED], False),
        (None, [A, B, BOT], False),
        (True, [A, B, UNCLAIMED, BOT], True),
        (True, [A, UNCLAIMED], False),
        (True, [A, GHOST], False),
        (False, [A, B, C], False),
    ],
)
def test_which_races_are_rated(option: bool | None, racers: list[tuple[str, bool, str | None]], rated: bool) -> None:
    assert race_is_rated(option, racers) is rated


def test_rated_places_leave_out_the_unrated_and_keep_ties() -> None:
    ranking = [
        ("pa", "pfa", False, 1),
        ("pbot", None, True, 2),
        ("pb", "pfb", False, 3),
        ("pc", "pfc", False, 3),
        ("ghost:x", "pfx", False, 5),
        ("pd", "pfd", False, 6),
    ]
    assert rated_racers(ranking) == [
        RatedRacer("pa", "pfa", 1),
        RatedRacer("pb", "pfb", 2),
        RatedRacer("pc", "pfc", 2),
        RatedRacer("pd", "pfd", 4),
    ]


def test_a_profile_racing_twice_is_rated_once_at_its_better_place() -> None:
    racers = [RatedRacer("p1", "pfa", 1), RatedRacer("p2", "pfb", 2), RatedRacer("p3", "pfa", 3)]
    changes = rate_race(racers, {})
    assert set(changes) == {"p1", "p2"}
    assert changes["p1"].change > 0 > changes["p2"].change
    assert rate_race([RatedRacer("p1", "pfa", 1), RatedRacer("p2", "pfa", 2)], {}) == {}


def test_the_shown_figure_and_certainty() -> None:
    assert shown_rating(25.0, 25.0 / 3.0) == 1000 and certainty(25.0 / 3.0) == 0
    assert shown_rating(30.0, 2.0) == 1000 + round(40 * 24.0)
    assert certainty(0.0) == 100 and certainty(99.0) == 0
    assert Rating().shown == 1000


def test_secret_shapes() -> None:
    assert check_secret("a" * 43) is None
    assert check_secret("a" * 31) is not None
    assert check_secret("a" * 42 + "=") is not None


def test_rename_rules() -> None:
    now = 1_000 * DAY_MS
    profile = ProfileRecord(profile_id="pf1", name="Ann", name_key=name_key("Ann"), created_ms=now - DAY_MS)
    renamed = plan_rename(profile, "  Anna ", now)
    assert isinstance(renamed, ProfileRecord)
    assert (renamed.name, renamed.name_key, renamed.renamed_ms) == ("Anna", name_key("Anna"), now)
    assert renamed.previous == [(name_key("Ann"), now + 30 * DAY_MS)]
    soon = plan_rename(renamed, "Annie", now + RENAME_EVERY_MS - DAY_MS)
    assert isinstance(soon, tuple) and soon[0] == p.RENAME_TOO_SOON and soon[1] == DAY_MS and "1 day" in soon[2]
    later = plan_rename(renamed, "Ann", now + RENAME_EVERY_MS)
    assert isinstance(later, ProfileRecord)  # taking its own old name back: no reservation of it left
    assert later.previous == [(name_key("Anna"), now + RENAME_EVERY_MS + 30 * DAY_MS)]
    same = plan_rename(profile, "Ann", now)
    assert isinstance(same, tuple) and same[0] == p.BAD_FIELD
    bad = plan_rename(profile, "", now)
    assert isinstance(bad, tuple) and bad[0] == p.NAME_INVALID
    case_only = plan_rename(profile, "ANN", now)  # the same key: a new spelling, nothing reserved
    assert isinstance(case_only, ProfileRecord) and case_only.previous == []


def claimed(shell: Shell, name: str, secret: str) -> int:
    conn = shell.hello("someone")
    shell.send(conn, p.Claim(name=name, identity=secret))
    assert isinstance(shell.take(conn)[-1], p.Claimed)
    shell.disconnect(conn)
    bound = shell.connect()
    shell.run(HelloEvent(bound, p.Hello(v=p.PROTOCOL_VERSION, name="x", identity=secret), shell.now))
    welcome = shell.welcome(bound)
    assert welcome.claimed and welcome.name == name
    return bound


def test_the_core_rates_a_race_once_its_results_are_stored() -> None:
    shell = Shell()
    ann, bob = claimed(shell, "Ann", "a" * 43), claimed(shell, "Bob", "b" * 43)
    shell.send(ann, p.CreateRoom())
    code = shell.room(ann).code
    shell.send(bob, p.Join(code=code))
    shell.send(bob, p.Ready())
    shell.send(ann, p.Start())
    shell.advance(shell.config.countdown_ms)
    for conn in (ann, bob):
        shell.send(conn, p.Move(id=1, move="resign"))
    results = [m for m in shell.take(ann) if isinstance(m, p.Results)]
    assert [bool(r.ratings) for r in results] == [False, True] and all(r.rated for r in results)
    record = shell.rooms[code].race
    assert record is not None and record.rated and set(record.ratings) == set(results[-1].ratings)
    # a hello with an unknown secret, and a claim of a look-alike, through the core
    stranger = shell.connect()
    shell.run(HelloEvent(stranger, p.Hello(v=p.PROTOCOL_VERSION, name="x", identity="c" * 43), shell.now))
    assert shell.error(stranger).code == p.BAD_IDENTITY
    other = shell.hello("Zed")
    shell.send(other, p.Claim(name="Аnn", identity="d" * 43))  # Cyrillic А
    assert shell.error(other).code == p.NAME_CLAIMED


class AnotherRaceFirst(MemoryStore):
    """A store on which, just before the first rating write of profile ``pfa``, another race of
    that profile lands (as another node's write would): the first write's compare-and-set is
    refused and the application must read again and recompute."""

    def __init__(self) -> None:
        super().__init__()
        self.interleaved = False
        self.refused = 0

    async def put_profile(
        self, profile_id: str, data: bytes, *, expected_version: int | None = None, score: float | None = None
    ) -> int | None:
        if profile_id == "pfa" and not self.interleaved:
            self.interleaved = True
            other = RateRace("OTHER", 1, 5, (RatedRacer("x1", "pfa", 1), RatedRacer("x2", "pfc", 2)))
            assert not (await rate_race_profiles(self, other, lambda: 0)).failed
        stored = await super().put_profile(profile_id, data, expected_version=expected_version, score=score)
        if stored is None:
            self.refused += 1
        return stored


async def test_two_races_of_one_profile_at_once_lose_no_update() -> None:
    store = AnotherRaceFirst()
    for pid in ("pfa", "pfb", "pfc"):
        record = ProfileRecord(profile_id=pid, name=pid, name_key=pid, created_ms=0)
        assert await store.create_profile(pid, pid * 16, pid, encode_record(record))
    race = RateRace("ROOM1", 1, 9, (RatedRacer("p1", "pfa", 1), RatedRacer("p2", "pfb", 2)))
    rated = await rate_race_profiles(store, race, lambda: 0)
    assert store.interleaved and store.refused == 1 and set(rated.ratings) == {"p1", "p2"}
    loaded = await store.load_profile("pfa")
    assert loaded is not None
    ann = decode_profile(loaded[0])
    assert ann.rating is not None and ann.rating.races == 2
    assert [(h.room, h.place) for h in ann.history] == [("ROOM1", 1), ("OTHER", 1)]
    # the change shown is the one stored, computed from the rating the other race left
    assert rated.ratings["p1"].after == ann.rating and rated.ratings["p1"].before.races == 1
    # applied again (an answer lost, a second node): nothing changes
    again = await rate_race_profiles(store, race, lambda: 0)
    assert again.ratings["p1"].after == ann.rating
    assert decode_profile((await store.load_profile("pfa") or (b"", 0))[0]).rating == ann.rating
