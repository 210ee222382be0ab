"""Rated races end to end (docs/players.md, "Ratings"): real servers, real clients, the in-memory
store and a real Redis. Which races are rated, each racer's change in the results, recomputed here
independently with openskill; the rating board and a player's history; and one profile's two
races ending at once on two server processes, neither update lost."""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from dataclasses import replace

from openskill.models import PlackettLuce
from support import FAST, Client, eventually, fast_config, latest, metric, metrics, running_server, start_race

from server.store.redis import RedisStore
from shared import protocol as p
from shared.identity import shown_rating


async def claimed(server: object, name: str, secret: str | None = None) -> tuple[Client, str]:
    secret = secret or secrets.token_urlsafe(32)
    client = await Client.open(server, name)  # type: ignore[arg-type]
    await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=name))
    client.welcome = await client.expect(p.Welcome)
    await client.send(p.Claim(name=name, identity=secret))
    reply = await client.expect(p.Claimed | p.Error)  # type: ignore[arg-type]
    if isinstance(reply, p.Error):  # claimed already (the same secret): bind a fresh connection instead
        assert reply.code in (p.NAME_CLAIMED, p.WRONG_PHASE), reply
    await client.close()
    bound = await Client.open(server, name)  # type: ignore[arg-type]
    await bound.send(p.Hello(v=p.PROTOCOL_VERSION, name="?", identity=secret))
    bound.welcome = await bound.expect(p.Welcome)
    assert bound.welcome.claimed
    return bound, secret


async def unclaimed(server: object, name: str, bot: bool = False) -> Client:
    client = await Client.open(server, name)  # type: ignore[arg-type]
    await client.hello(name, bot=bot)
    return client


async def race(clients: list[Client], resign_order: list[int], **options: object) -> p.Results:
    """A race in a new room of ``clients`` (the first hosts, the others take the next seats); racers
    resign in ``resign_order`` at once, on the cards they start with, so they place in seat order
    (docs/rules.md, "Race ranking": equal cards reached at the start, seat order settles it). The
    final results (with ratings, if rated)."""
    host = clients[0]
    await host.send(p.CreateRoom(options=p.RoomOptions(**options)))  # type: ignore[arg-type]
    code = (await host.expect(p.Room)).code
    for client in clients[1:]:
        await client.send(p.Join(code=code))
        await client.expect(p.Room)
        await client.send(p.Ready(ready=True))
    await start_race(clients)
    for index in resign_order:
        await clients[index].send(p.Move(id=1, move="resign"))
        await clients[index].expect(p.MoveOk)
    results = await host.expect(p.Results)
    if results.rated:
        while not results.ratings:
            results = await host.expect(p.Results)
    for client in clients:
        await client.send(p.Leave())
        await client.expect(p.Left)
    return results


def expected_after(places: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """openskill's own Plackett-Luce update for (mu, sigma) in finishing order."""
    model = PlackettLuce()
    teams = [[model.rating(mu=mu, sigma=sigma)] for mu, sigma in places]
    after = model.rate(teams, ranks=[float(i + 1) for i in range(len(places))])
    return [(team[0].mu, team[0].sigma) for team in after]


async def test_a_race_of_claimed_players_is_rated_and_matches_openskill() -> None:
    async with running_server() as server:
        ann, _ = await claimed(server, "Ann")
        bob, _ = await claimed(server, "Bob")
        cy, _ = await claimed(server, "Cy")
        # everyone resigns at once: Ann, Bob, Cy place in seat order
        results = await race([ann, bob, cy], [2, 1, 0])
        assert results.rated
        order = results.ranking
        changes = [results.ratings[pid] for pid in order]
        expected = expected_after([(25.0, 25.0 / 3.0)] * 3)
        for change, (mu, sigma) in zip(changes, expected, strict=True):
            assert abs(change.after.mu - mu) < 1e-9 and abs(change.after.sigma - sigma) < 1e-9
            assert change.after.shown == shown_rating(mu, sigma)
            assert change.before.shown == 1000 and change.after.races == 1
            assert change.change == change.after.shown - change.before.shown
        assert changes[0].after.mu > 25.0 > changes[2].after.mu
        assert changes[0].after.certainty > 0
        # a second race starts from the stored ratings
        second = await race([bob, ann], [0, 1])  # Bob hosts: Bob first this time
        b_before = results.ratings[bob.pid].after
        a_before = results.ratings[ann.pid].after
        expected = expected_after([(b_before.mu, b_before.sigma), (a_before.mu, a_before.sigma)])
        assert second.ranking == [bob.pid, ann.pid]
        for pid, (mu, sigma) in zip((bob.pid, ann.pid), expected, strict=True):
            assert abs(second.ratings[pid].after.mu - mu) < 1e-9 and abs(second.ratings[pid].after.sigma - sigma) < 1e-9
        assert second.ratings[bob.pid].before == b_before
        # the rating board, highest first, and a player's history, newest first
        await cy.send(p.GetRatings(limit=10))
        board = await cy.expect(p.RatingBoard)
        shown = [row.shown for row in board.rows]
        assert shown == sorted(shown, reverse=True) and {row.name for row in board.rows} == {"Ann", "Bob", "Cy"}
        assert [row.rank for row in board.rows] == [1, 2, 3]
        await cy.send(p.GetRating(name="ann"))
        history = await cy.expect(p.RatingHistory)
        assert history.name == "Ann" and history.rating.races == 2
        assert [(h.race, h.place, h.racers) for h in history.history] == [(1, 2, 2), (1, 1, 3)]
        await ann.send(p.GetRating())
        assert (await ann.expect(p.RatingHistory)).profile_id == ann.welcome.profile  # type: ignore[union-attr]


async def test_casual_rooms_bots_and_unclaimed_racers_are_not_rated() -> None:
    async with running_server() as server:
        ann, _ = await claimed(server, "Ann")
        bob, _ = await claimed(server, "Bob")
        assert not (await race([ann, bob], [0, 1], rated=False)).rated
        zed = await unclaimed(server, "Zed")
        assert not (await race([ann, bob, zed], [2, 1, 0])).rated  # the default: every racer claimed
        bot = await unclaimed(server, "Robo", bot=True)
        assert not (await race([ann, bot], [1, 0], rated=True)).rated  # one claimed human is not a field
        # rated=True: the claimed humans among the racers are rated, the others are not
        results = await race([ann, bob, zed, bot], [3, 2, 1, 0], rated=True)
        assert results.rated and set(results.ratings) == {ann.pid, bob.pid}
        assert results.ratings[ann.pid].change > 0 > results.ratings[bob.pid].change
        await zed.send(p.GetRating())
        assert (await zed.expect(p.Error)).code == p.NOT_CLAIMED
        await zed.send(p.GetRating(name="Nobody"))
        assert (await zed.expect(p.Error)).code == p.UNKNOWN_PLAYER


async def test_one_profiles_races_ending_at_once_on_two_nodes_lose_no_update(redis_url: str) -> None:
    """Ann plays two races at once (two seats bound to one profile), one on each of two server
    processes on one Redis; both end at the same moment. Each rating write is a compare-and-set on
    the profile's version: both races are in her history and her rating counts both."""
    config = fast_config()
    async with (
        running_server(RedisStore(redis_url), config) as one,
        running_server(RedisStore(redis_url), config) as two,
    ):
        ann_one, secret = await claimed(one, "Ann")
        ann_two, _ = await claimed(two, "Ann", secret)
        bob, _ = await claimed(one, "Bob")
        cy, _ = await claimed(two, "Cy")
        rooms = []
        for host, guest in ((ann_one, bob), (ann_two, cy)):
            await host.send(p.CreateRoom())
            code = (await host.expect(p.Room)).code
            await guest.send(p.Join(code=code))
            await guest.expect(p.Room)
            await guest.send(p.Ready(ready=True))
            await start_race([host, guest])
            await guest.send(p.Move(id=1, move="resign"))
            await guest.expect(p.MoveOk)
            rooms.append(code)
        # both of Ann's seats resign in one go: two races end together, on two nodes
        await asyncio.gather(*(c.send(p.Move(id=1, move="resign")) for c in (ann_one, ann_two)))

        async def rated(client: Client) -> p.Results:
            results = await client.expect(p.Results)
            while not results.ratings:
                results = await client.expect(p.Results)
            return results

        first, second = await asyncio.gather(rated(ann_one), rated(ann_two))
        assert first.ratings[ann_one.pid].change > 0 and second.ratings[ann_two.pid].change > 0
        await bob.send(p.GetRating(name="Ann"))
        history = await bob.expect(p.RatingHistory)
        assert history.rating.races == 2
        assert sorted(h.room for h in history.history) == sorted(rooms)
        # the stored rating is the later of the two changes applied on top of the earlier one
        last = max((first.ratings[ann_one.pid], second.ratings[ann_two.pid]), key=lambda c: c.after.races)
        assert last.after.races == 2 and history.rating == last.after


async def test_a_flood_of_board_requests_reads_the_store_once_a_second(redis_url: str) -> None:
    async with running_server(RedisStore(redis_url), fast_config()) as server:
        ann, _ = await claimed(server, "Ann")
        bob, _ = await claimed(server, "Bob")
        await race([ann, bob], [0, 1])
        assert server.metrics_port is not None
        before = metric(
            await asyncio.to_thread(metrics, server.metrics_port), "plot_store_calls_total", op="rating_board"
        )
        started = time.monotonic()
        for _ in range(30):
            await ann.send(p.GetRatings(limit=5))
        boards = [await ann.expect(p.RatingBoard) for _ in range(30)]
        elapsed = time.monotonic() - started
        assert all([row.name for row in board.rows] == ["Ann", "Bob"] for board in boards)
        after = metric(
            await asyncio.to_thread(metrics, server.metrics_port), "plot_store_calls_total", op="rating_board"
        )
        assert 1 <= after - before <= 1 + math.ceil(elapsed)  # one read per second at most, not one per request


async def test_a_rated_race_in_a_room_shared_by_two_nodes_is_applied_once(redis_url: str) -> None:
    """``--multi-node``: Ann hosts on node A, Bob races from node B, Sue watches from B. The race's
    ratings reach every member on both nodes, and each profile counts the race once."""
    shared = fast_config(core=replace(FAST, shared_rooms=True))
    async with (
        running_server(RedisStore(redis_url), shared) as a,
        running_server(RedisStore(redis_url), shared) as b,
    ):
        ann, _ = await claimed(a, "Ann")
        bob, _ = await claimed(b, "Bob")
        sue = await unclaimed(b, "Sue")
        await ann.send(p.CreateRoom())
        code = (await ann.expect(p.Room)).code
        await bob.send(p.Join(code=code))
        await bob.expect(p.Room)
        await sue.send(p.Join(code=code, role=p.SPECTATOR))
        await sue.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        await eventually(
            lambda: any(m.name == "Bob" and m.ready for m in latest(ann, p.Room).members), what="Bob ready, seen on A"
        )
        await ann.send(p.Start())
        for client in (ann, bob):
            await client.expect(p.RaceStart)
        for client in (ann, bob):
            await client.send(p.Move(id=1, move="resign"))

        async def rated(client: Client) -> p.Results:
            results = await client.expect(p.Results)
            while not results.ratings:
                results = await client.expect(p.Results)
            return results

        seen = await asyncio.gather(rated(ann), rated(bob), rated(sue))
        assert all(r.ratings == seen[0].ratings for r in seen) and set(seen[0].ratings) == {ann.pid, bob.pid}
        for name in ("Ann", "Bob"):
            await sue.send(p.GetRating(name=name))
            history = await sue.expect(p.RatingHistory)
            assert history.rating.races == 1 and [h.room for h in history.history] == [code]
