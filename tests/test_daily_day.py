"""A whole daily day of 60 seconds (--day-seconds) on a real server and a real Redis, through the
real protocol and the JSON API: one attempt each, resume mid-attempt, a second attempt refused, the
board's order, the rollover, the reveal matching the commitment and every record replaying to its
row, and nothing hidden in any frame or API answer before the reveal."""

from __future__ import annotations

import random

from daily_support import (
    DAILY_CORE,
    api,
    assert_api_hides,
    assert_nothing_hidden,
    claimed,
    play_moves,
    start_attempt,
    until_reveal,
)
from support import Client, eventually, fast_config, running_server
from web_helpers import web_server_for

from server.core.daily_rules import board_score
from server.store.redis import RedisStore
from server.web.api import DailyApi
from shared import protocol as p
from shared.engine import replay
from shared.fairplay import commitment


async def test_a_day_of_sixty_seconds(redis_url: str) -> None:
    rng = random.Random(21)
    store = RedisStore(redis_url)
    config = fast_config(core=DAILY_CORE)
    async with running_server(store, config) as server, web_server_for(server) as web:
        web.api = DailyApi(store, day_seconds=DAILY_CORE.day_seconds, ttl_s=0.2)
        watcher = await Client.open(server, "watcher")
        await watcher.hello("watcher")
        await watcher.send(p.WatchDaily())
        ann, _ = await claimed(server, "ann")
        bob, _ = await claimed(server, "bob")
        cy, _ = await claimed(server, "cy")

        day, ann_start = await start_attempt(ann)
        assert day.time_limit_s == DAILY_CORE.daily_time_limit_s
        assert day.ends_at - day.starts_at == DAILY_CORE.day_seconds * 1000
        assert ann_start.ends_at is not None and ann_start.ends_at - ann_start.started_at == day.time_limit_s * 1000
        bob_day, bob_start = await start_attempt(bob)
        cy_day, cy_start = await start_attempt(cy)
        assert {bob_day.day, cy_day.day} <= {day.day, day.day + 1}

        # Ann plays and resigns.
        assert ann_start.view is not None
        view, next_id = await play_moves(ann, ann_start.view, 25, rng)
        await ann.send(p.Move(id=next_id, move="resign"))
        await ann.expect(p.DailyBoard)
        # A second ranked attempt is refused; so is an attempt of a day that has ended.
        await ann.send(p.Daily())
        assert (await ann.expect(p.Error)).code == p.DAILY_DONE
        await ann.send(p.Daily(day=day.day - 1))
        assert (await ann.expect(p.Error)).code == p.DAY_OVER
        # Finished, Ann may replay the deal unranked; it never reaches the board.
        await ann.send(p.Daily(replay=True))
        replay_start = await ann.expect(p.RaceStart)
        assert replay_start.view == ann_start.view
        await ann.send(p.Move(id=1, move="resign"))
        await ann.expect(p.Leaderboard)

        # Bob plays, drops his connection, resumes mid-attempt with his token: the clock ran on.
        assert bob_start.view is not None and bob.welcome is not None
        view, next_id = await play_moves(bob, bob_start.view, 15, rng)
        token = bob.welcome.token
        await bob.close()
        bob2 = await Client.open(server, "bob2")
        welcome = await bob2.hello("bob", token=token)
        assert welcome.resumed and welcome.room is not None and welcome.room.startswith("d")
        snapshot = await bob2.expect(p.RaceStart)
        assert snapshot.started_at == bob_start.started_at and snapshot.ends_at == bob_start.ends_at
        assert snapshot.view == view and snapshot.seq == next_id - 1
        view, next_id = await play_moves(bob2, view, 10, rng, first_id=next_id)
        await bob2.send(p.Move(id=next_id, move="resign"))
        await bob2.expect(p.DailyBoard)

        # Cy makes a few moves and is stopped by the time limit.
        assert cy_start.view is not None
        await play_moves(cy, cy_start.view, 3, rng)
        # The board while an attempt is on: figures only, in rank order, never the deal.
        status, live = await api(web.port, f"/api/daily/{day.day}")
        assert status == 200 and not live["board"].get("final", False)
        assert_api_hides(live)
        status, today = await api(web.port, "/api/daily")
        assert status == 200 and today["day"]["commitment"] in (day.commitment, cy_day.commitment)
        assert_api_hides(today)
        stopped = await cy.expect(p.Leaderboard, timeout=40)
        while stopped.racers[0].status != p.STOPPED:
            stopped = await cy.expect(p.Leaderboard, timeout=40)

        await watcher.send(p.GetBoard(day=day.day, boards=True))
        assert (await watcher.expect(p.Error)).code == p.NO_BOARDS

        # The rollover: the day ends, every attempt is over, so it is revealed at once.
        async def revealed() -> bool:
            await watcher.send(p.GetBoard(day=day.day))
            got = await watcher.expect(p.DailyBoard)
            return got.day == day.day and got.final

        await eventually(revealed, timeout=90, what="the day's reveal")
        final = next(m for m in reversed(watcher.messages) if isinstance(m, p.DailyBoard) and m.final)
        assert final.deal is not None and final.salt is not None and final.records is not None
        for client in (watcher, ann, bob, bob2, cy):  # every frame before the reveal: nothing hidden
            assert_nothing_hidden(
                client.label, until_reveal(client.frames), final.deal, own_board=client is not watcher
            )
        assert commitment(final.deal, final.salt) == day.commitment
        rows = final.rows
        played = {"ann": day.day, "bob": bob_day.day, "cy": cy_day.day}
        assert {r.name for r in rows} == {name for name, d in played.items() if d == day.day}
        for row in rows:  # every record replays (the shared engine, as plot verify) to its row
            game, result = replay(final.deal, final.records[row.name])
            assert result.ok, result
            shown = game.status if game.status != "playing" else p.STOPPED
            assert (shown, game.foundation_cards, len(game.entries)) == (row.status, row.cards, row.moves)
        # Ranked as docs/rules.md says: winners by time, then most cards.
        assert [r.rank for r in rows] == list(range(1, len(rows) + 1))
        keys = [board_score(r.status, r.cards, r.elapsed_ms, r.elapsed_ms) for r in rows]
        assert [k >= 2**47 for k in keys] == sorted(k >= 2**47 for k in keys)
        assert [r.cards for r in rows if r.status != "won"] == sorted(
            (r.cards for r in rows if r.status != "won"), reverse=True
        )
        status, past = await api(web.port, f"/api/daily/{day.day}")
        assert status == 200 and past["board"]["deal"] == final.deal and past["board"].get("final")
        # The watcher was told of the next day when it began.
        await eventually(
            lambda: any(isinstance(m, p.DailyDay) and m.day == day.day + 1 for m in watcher.messages),
            timeout=30,
            what="the next day's daily_day",
        )
        status, player = await api(web.port, "/api/players/ann")
        assert status == 200 and player["days_played"] == 1 and player["history"][0]["day"] == day.day
        status, standing = await api(web.port, "/api/board")
        assert status == 200 and "ann" in {row["name"] for row in standing["rows"]}
        await ann.send(p.GetPlayer(name="nobody-at-all"))
        assert (await ann.expect(p.Error)).code == p.UNKNOWN_PLAYER
        for client in (watcher, ann, bob2, cy):
            await client.close()
