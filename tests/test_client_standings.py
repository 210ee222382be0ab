"""``plot board``, ``plot player`` and ``plot me`` against a real server with 10-second days:
key presses in, the rendered screen out. Today's board follows live; once the day is over its
board comes revealed and the client checks it (the commitment, every record replayed)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from client_fixtures import fresh_state_dir  # noqa: F401  (fixture: state_dir)
from daily_views_support import claim, daily_config, play_attempt
from support import SIZE, running_server, screen_text, until, url

from client.tui.standings import BOARD, PLAYER, STANDING, StandingsApp, StandingsConfig
from server.shell import RaceServer

DAY_S = 10


@pytest.fixture(name="server")
async def short_days() -> AsyncIterator[RaceServer]:
    async with running_server(config=daily_config(day_seconds=DAY_S, time_limit_s=60)) as running:
        yield running


def row_of(text: str, name: str) -> str | None:
    return next((line for line in text.splitlines() if re.match(rf"\s*\d+ {re.escape(name)}\s+✓", line)), None)


async def early_in_a_day() -> None:
    """Polls until a day has just begun (so a test's attempts all fall in one day)."""
    await until(lambda: time.time() % DAY_S < 2.5, "the start of a day", timeout=DAY_S + 5)


async def test_todays_board_live_then_revealed_and_checked_then_the_players_page(
    server: RaceServer, state_dir: Path
) -> None:
    ann = await claim(server, "ann")
    bob = await claim(server, "bob")
    await early_in_a_day()
    first = await play_attempt(server, ann, 40)
    app = StandingsApp(StandingsConfig(url=url(server), what=BOARD, me=ann["profile_id"]))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.board is not None and app.today is not None, "today's board")
        await pilot.pause()
        assert app.today is not None
        day = app.today.day
        text = screen_text(app)
        assert f"day {day} · {app.today.date}" in text and "today, ends in" in text
        assert "1 player · live" in text and row_of(text, "ann") is not None
        assert "The reveal" not in text and "deal" not in text  # nothing of the deal before the day ends
        # Bob's attempt ends: the board follows (watch_daily).
        second = await play_attempt(server, bob, 10)
        await until(lambda: app.board is not None and app.board.total == 2, "bob on the board")
        await pilot.pause()
        text = screen_text(app)
        assert "2 players" in text and row_of(text, "bob") is not None
        # The day ends: the next day's daily_day comes; r asks for the day on show again, revealed.
        await until(lambda: app.today is not None and app.today.day > day, "the next day", timeout=DAY_S + 10)
        await pilot.press("r")
        await until(lambda: app.verdict is not None, "the revealed board checked")
        await pilot.pause()
        text = screen_text(app)
        assert "final" in text and "The reveal" in text and f"deal {app.board.deal}" in text  # type: ignore[union-attr]
        assert "✓ verified here" in text and "all 2 records" in text
        # ] the next day (today, nobody yet), t today, [ back to the revealed one.
        await pilot.press("right_square_bracket")
        await until(lambda: app.board is not None and app.board.day == day + 1, "the next day's board")
        await pilot.pause()
        assert "nobody on this board yet" in screen_text(app)
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert "has not begun" in screen_text(app)
        await pilot.press("left_square_bracket")
        await until(lambda: app.board is not None and app.board.day == day and app.verdict is not None, "back")
        await app.shutdown()
    await first.close()
    await second.close()

    player = StandingsApp(StandingsConfig(url=url(server), what=PLAYER, name="ann", me=ann["profile_id"]))
    async with player.run_test(size=SIZE) as pilot:
        await until(lambda: player.profile is not None, "ann's profile")
        await pilot.pause()
        text = screen_text(player)
        assert "ann ✓ claimed" in text and "1 day played" in text
        history = next(line for line in text.splitlines() if f"day {day}" in line)
        assert "/2" in history and "resigned" in history
        await player.shutdown()

    # The standing board over all days (plot board --standing): a resigned attempt's points are its cards.
    standing = StandingsApp(StandingsConfig(url=url(server), what=STANDING))
    async with standing.run_test(size=SIZE) as pilot:
        await until(lambda: standing.standing is not None, "the standing board")
        await pilot.pause()
        text = screen_text(standing)
        assert "The standing board, all days" in text and "2 players" in text
        assert standing.standing is not None
        for row in standing.standing.rows:
            line = row_of(text, row.name)
            assert line is not None and f"{row.points} pts" in line and "1 day played" in line
        await standing.shutdown()

    nobody = StandingsApp(StandingsConfig(url=url(server), what=PLAYER, name="zed"))
    async with nobody.run_test(size=SIZE) as pilot:
        await until(lambda: "no profile" in screen_text(nobody), "the refusal")
        assert "nobody has claimed the name 'zed'" in screen_text(nobody)
        await nobody.shutdown()


async def test_no_server_answering_ends_with_the_reason(state_dir: Path) -> None:
    app = StandingsApp(StandingsConfig(url="ws://127.0.0.1:9", what=BOARD))
    async with app.run_test(size=SIZE):
        await until(lambda: app.return_code is not None, "the app's end")
    assert app.return_code == 1 and "cannot connect to ws://127.0.0.1:9" in app.exit_note
