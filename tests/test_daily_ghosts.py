"""A past daily deal raced again (docs/ghosts.md): once a short day (--day-seconds) is over on a
real server and Redis, ``plot practice --daily DAY`` reads its revealed board and races its top
attempt and your own as ghosts, each on its record spread over its time, in a practice race."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from daily_support import claimed, play_moves, start_attempt
from support import FAST, SIZE, Client, eventually, fast_config, running_server, until, url

from client.cli import build_parser
from client.commands import practice
from client.daily_ghosts import daily_ghosts, day_number
from client.tui.practice import embedded_server, practice_config
from client.tui.race import RaceApp
from server.store.redis import RedisStore
from shared import protocol as p

SHORT_DAY = replace(FAST, daily=True, day_seconds=6, daily_time_limit_s=10, daily_poll_ms=200)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_day_is_a_number_or_a_date() -> None:
    assert day_number("20424") == 20424
    assert day_number("1970-01-02") == 1
    assert day_number("2026-12-02") == 20789


async def test_a_past_daily_deal_races_its_top_attempt_and_yours(redis_url: str, state_dir: Path) -> None:
    rng = random.Random(3)
    async with running_server(RedisStore(redis_url), fast_config(core=SHORT_DAY)) as server:
        address = url(server)
        ann, ann_secret = await claimed(server, "ann")
        bob, _ = await claimed(server, "bob")
        day, start = await start_attempt(ann)
        bob_day, bob_start = await start_attempt(bob)
        assert start.view is not None and bob_start.view is not None
        _, next_id = await play_moves(ann, start.view, 4, rng)
        await ann.send(p.Move(id=next_id, move="resign"))
        _, next_id = await play_moves(bob, bob_start.view, 12, rng)
        await bob.send(p.Move(id=next_id, move="resign"))
        watcher = await Client.open(server, "watcher")
        await watcher.hello("watcher")

        async def revealed() -> bool:
            await watcher.send(p.GetBoard(day=day.day))
            got = await watcher.expect(p.DailyBoard)
            return got.final

        await eventually(revealed, timeout=60, what="the day's reveal")
        final = next(m for m in reversed(watcher.messages) if isinstance(m, p.DailyBoard) and m.final)
        assert final.deal is not None and final.records is not None
        # Before the day is over a board names no deal: the command says the day is not over.
        await watcher.send(p.GetBoard())
        today = await watcher.expect(p.DailyBoard)
        args = build_parser().parse_args(["practice", "--daily", str(today.day), "--server", address, "--name", "x"])
        assert not today.final and await asyncio.to_thread(practice.run, args) == 2
        # Ann's client holds her claimed name's secret: her own attempt is found by it.
        state_dir.mkdir(parents=True, exist_ok=True)
        identities = {address: {"secret": ann_secret, "profile_id": "", "name": "ann"}}
        (state_dir / "identities.json").write_text(json.dumps(identities), encoding="utf-8")
        deal, ghosts = await daily_ghosts(address, "someone", day.day, top=1)
        for client in (ann, bob, watcher):
            await client.close()
    assert deal == final.deal
    rows = {row.name: row for row in final.rows}
    top = final.rows[0]
    expected = {f"{top.name} #1" if top.name != "ann" else "you #1"}
    if top.name != "ann" or bob_day.day != day.day:
        expected.add(f"you #{rows['ann'].rank}")
    assert {g.name for g in ghosts} == expected
    for ghost in ghosts:
        row = top if ghost.name.endswith("#1") else rows["ann"]
        assert list(ghost.moves) == final.records[row.name]
        assert ghost.times is not None and ghost.times[-1] == row.elapsed_ms
    # The practice race on this machine: the day's deal, its ghosts beside you.
    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        app = RaceApp(practice_config(server_url, name="ann", bots=0, deal=deal, ghosts=ghosts, deal_given=True))
        async with app.run_test(size=SIZE):

            def ghost_rows() -> int:
                board = app.model.leaderboard
                return sum(1 for row in board.racers if row.ghost) if board else 0

            await until(lambda: app.model.phase == p.RACING and ghost_rows() == len(ghosts), "the ghosts", 30)
            await app.shutdown()
