"""``plot daily`` against a real server on loopback: key presses in, the rendered screen out.

The attempt is played on the race screen by keys; the day's line counts down to the day's end;
once the attempt is over the day's board (live: another claimed player's attempt shows as it
ends) and the share text are on screen, and the text is on the clipboard (Textual's OSC 52).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from client_fixtures import fresh_state_dir  # noqa: F401  (fixture: state_dir)
from daily_views_support import claim, daily_config, keep_identities, play_attempt
from support import SIZE, message, running_server, screen_text, until, url, view_game

from client.cli import main as plot_main
from client.tui.daily import DAILY, DailyApp, DailyConfig
from client.tui.race import RaceConfig
from client.widgets.board import PILE_KEYS
from server.shell import RaceServer
from shared import protocol as p

PAGES = "http://127.0.0.1:8766"


def board_line(text: str, name: str) -> str | None:
    """The day's board's row of ``name`` (claimed: ✓) on the screen, if there is one."""
    return next((line for line in text.splitlines() if re.match(rf"\s*\d+ {re.escape(name)}\s+✓", line)), None)


@pytest.fixture(name="server")
async def daily_server() -> AsyncIterator[RaceServer]:
    async with running_server(config=daily_config()) as running:
        yield running


def daily_app(server: RaceServer, identity: dict[str, str], replay: bool = False) -> DailyApp:
    """The app ``plot daily`` runs, with ``identity`` kept where the client keeps it."""
    keep_identities(url(server), identity)
    config = RaceConfig(url=url(server), name=identity["name"], mode=DAILY, profile="daily", title="daily deal")
    return DailyApp(config, DailyConfig(replay=replay, page_url=PAGES))


async def test_an_attempt_by_keys_then_the_board_live_and_the_share_text(server: RaceServer, state_dir: Path) -> None:
    ann = await claim(server, "ann")
    bob = await claim(server, "bob")
    app = daily_app(server, ann)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the attempt's board")
        await pilot.pause()
        day = app.day
        assert day is not None
        text = screen_text(app)
        assert f"daily · day {day.day} · {day.date} · ends in" in text and "attempt limit 30:00" in text
        assert app.model.room is not None and "The Plot · today's attempt · racing" in text
        assert app.model.room.code not in text  # the attempt's room is the server's own business
        # The usual board and keys: a move the server accepts.
        view = app.model.view
        assert view is not None
        move = next(m for m in view_game(view).legal_moves() if m != "stock>waste")
        src, dst = move.split(">")
        await pilot.press(PILE_KEYS[src][0], PILE_KEYS[dst][0])
        await until(lambda: app.model.seq == 1, "the move's acknowledgement")
        # No share text and no board of the day while the attempt is on.
        assert "Today's board" not in screen_text(app) and "The Plot daily" not in screen_text(app)
        # Resign (it asks first): the attempt is over.
        await pilot.press("R")
        await pilot.pause()
        await pilot.press("y")
        await until(lambda: app.over and app.board is not None, "the day's board after the attempt")
        await pilot.pause()
        text = screen_text(app)
        assert f"Today's board · {day.date}" in text and "1 player" in text
        # The server's figures: two entries (the move and the resignation), first of one.
        assert f"The Plot daily {day.date} · resigned · " in text and "2 moves · 1st of 1" in text
        assert "your attempt is over (resigned)" in message(app)
        assert f"{PAGES}/daily/{day.date}" in text
        assert "copied to the clipboard (OSC 52)" in text
        assert app.clipboard == app.shared and app.shared is not None and app.shared.startswith("The Plot daily")
        row = board_line(text, "ann")
        assert row is not None and "resigned" in row and "2m" in row
        # Another claimed player's attempt ends: the board follows live (watch_daily).
        other = await play_attempt(server, bob, 30)
        await until(lambda: app.board is not None and app.board.total == 2, "bob on the live board")
        await pilot.pause()
        text = screen_text(app)
        assert "2 players" in text and board_line(text, "bob") is not None
        # y copies the text as it now stands (its place among two).
        await pilot.press("y")
        assert app.clipboard is not None and " of 2" in app.clipboard
        await other.close()
        await app.shutdown()
    # Quitting prints the text again, so it can be selected where OSC 52 did not take.
    assert app.shared is not None


async def test_a_second_attempt_is_refused_and_the_board_shown(server: RaceServer, state_dir: Path) -> None:
    ann = await claim(server, "ann")
    first = await play_attempt(server, ann, 10)
    await first.close()
    app = daily_app(server, ann)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.over and app.board is not None, "the board")
        await pilot.pause()
        assert "today's ranked attempt is used" in message(app) and "plot daily --replay" in message(app)
        assert board_line(screen_text(app), "ann") is not None
        assert app.model.view is None  # no board of a new attempt
        await app.shutdown()
    # The unranked replay: the deal again, its share text without a place.
    replay = daily_app(server, ann, replay=True)
    async with replay.run_test(size=SIZE) as pilot:
        await until(lambda: replay.model.phase == p.RACING and replay.model.view is not None, "the replay's board")
        await pilot.pause()
        assert "unranked replay" in screen_text(replay)
        await pilot.press("R")
        await pilot.pause()
        await pilot.press("y")
        await until(lambda: replay.over and replay.shared is not None, "the replay over")
        assert replay.shared is not None and " of " not in replay.shared.splitlines()[0]
        await replay.shutdown()


async def test_quitting_mid_attempt_keeps_it_and_daily_again_takes_it_up(server: RaceServer, state_dir: Path) -> None:
    ann = await claim(server, "ann")
    app = daily_app(server, ann)
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the attempt")
        await pilot.press("space")  # stock>waste
        await until(lambda: app.model.seq == 1, "the move")
        race = app.model.race
        assert race is not None
        await app.shutdown()
    again = daily_app(server, ann)
    async with again.run_test(size=SIZE) as pilot:
        await until(lambda: again.model.phase == p.RACING and again.model.seq == 1, "the attempt taken up")
        await pilot.pause()
        assert "back in" in message(again)
        assert again.model.race is not None and again.model.race.started_at == race.started_at  # the clock ran on
        await again.shutdown()


def test_plot_daily_without_a_claimed_name_says_how_to_claim_one(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plot_main(["daily", "--server", "ws://127.0.0.1:9"]) == 1
    assert "claim NAME" in capsys.readouterr().out
    assert plot_main(["me", "--server", "ws://127.0.0.1:9"]) == 1
    assert "no claimed name" in capsys.readouterr().out
    with contextlib.suppress(SystemExit):
        plot_main(["board", "not-a-date"])
    assert "not a day" in capsys.readouterr().err
