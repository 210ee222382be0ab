"""The race client's screens at 80x24 against a real loopback server: the help overlay, the
results with a racer's board on show, what practice says of its deal, and replays made once."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Client, running_server, screen_text, until, url

import shared.engine
from client.tui.game import help_rows
from client.tui.practice import attach_hint, embedded_server, practice_config
from client.tui.race import GIVEN_PRACTICE_DEAL, HOST, RANDOM_PRACTICE_DEAL, RaceApp, RaceConfig, RaceScreen
from client.widgets.room import ResultsPanel
from shared import protocol as p
from shared.engine import ReplayResult

SMALL = (80, 24)


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_help_overlay_at_80x24_shows_how_to_close_it_and_reaches_every_key() -> None:
    async with running_server() as server:
        app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST, options=p.RoomOptions()))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            await pilot.press("question_mark")
            await pilot.pause()
            seen = screen_text(app)
            assert "Esc or ? closes" in seen.splitlines()[1]
            for _ in range(4):  # whatever did not fit is reached by scrolling
                await pilot.press("pagedown")
                await pilot.pause()
                seen += "\n" + screen_text(app)
            assert isinstance(app.screen_, RaceScreen)
            rows = app.screen_.help_rows()
            assert len(rows) > len(help_rows())  # the room's own keys are in it
            for keys, what in rows:
                lines = [ln for ln in seen.splitlines() if f" {keys} " in ln and what in ln]
                assert lines, f"{keys}: {what} is not reachable at 80x24"
            for label in ("Ctrl+Q", "Enter", "Shift+E", "[ ]", "Esc"):
                assert label in seen
            await pilot.press("escape")
            await pilot.pause()
            assert "Esc or ? closes" not in screen_text(app)


async def test_results_at_80x24_name_each_board_keep_the_check_and_replay_each_record_once(
    monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    replays: list[int] = []
    real_replay = shared.engine.replay

    def counting_replay(deal: int, entries: list[object], **kwargs: object) -> tuple[object, ReplayResult]:
        replays.append(deal)
        return real_replay(deal, entries, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("client.viewmodel.replay", counting_replay)
    async with running_server() as server:
        app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST, options=p.RoomOptions(deal=4242)))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            assert app.model.room is not None
            bob = await Client.open(server, "Bob")
            await bob.hello("Bob")
            await bob.send(p.Join(code=app.model.room.code))
            await bob.expect(p.Room)
            await bob.send(p.Ready(ready=True))
            await until(lambda: all(m.ready for m in app.model.room.members if m.name == "Bob"), "Bob ready")  # type: ignore[union-attr]
            await pilot.press("enter")
            await until(lambda: app.model.me is not None and app.model.me.ready, "Ann ready")
            await pilot.press("s")
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
            await pilot.press("space")
            await until(lambda: app.model.seq == 1, "Ann's move")
            await bob.send(p.Move(id=1, move="resign"))
            await pilot.press("R", "y")
            await until(lambda: app.model.results is not None and "Results of race 1" in screen_text(app), "results")
            # Each racer's board in turn, named, with the commitment check and the records under it.
            for name, place in (("Ann", "1st"), ("Bob", "2nd")):
                await pilot.press("right_square_bracket")
                await until(lambda name=name: f"Board of {name}" in screen_text(app), f"{name}'s board")  # type: ignore[misc]
                text = screen_text(app)
                assert f"board of {name}" in text.splitlines()[0]
                assert f"Board of {name} · {place}" in text
                assert "✓ verified here" in text
                folder = next(iter(app.model.saved_records.values())).parent
                assert folder.is_relative_to(state_dir)
                unwrapped = "".join(line.strip() for line in text.splitlines())
                assert "Records saved in" in text and f"{folder}/" in unwrapped, text
                assert "RESIGNED" in text  # the board itself
            await pilot.resize_terminal(100, 40)
            await pilot.pause()
            await pilot.resize_terminal(*SMALL)
            await pilot.press("right_square_bracket")  # past the last board: the summary again
            await until(lambda: "Results of race 1" in screen_text(app), "the summary")
            panel = app.screen_.query_one(ResultsPanel)
            for _ in range(3):
                panel.refresh()
                await pilot.pause()
            assert "✓ all 2 records replayed here agree" in screen_text(app)
            # Many repaints and redraws, one replay per record.
            assert replays == [4242, 4242]
            await bob.close()


async def test_practice_says_how_its_deal_was_chosen() -> None:
    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        app = RaceApp(practice_config(server_url, name="Newcomer", bots=1, deal=4242, speed=400, deal_given=True))
        attach_hint(app)
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: "practice deal: the number you gave" in screen_text(app), "the lobby's note")
            assert "⚠" not in screen_text(app) and "chosen deal" not in screen_text(app)
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race", 20.0)
            await pilot.press("R", "y")
            await until(lambda: "Results of race 1" in screen_text(app), "the results", 30.0)
            text = screen_text(app)
            assert f"Deal 4242  (practice deal: {GIVEN_PRACTICE_DEAL})" in text
            assert "chosen by the host" not in text
            await pilot.press("n")  # the next race is on a deal picked at random
            await until(
                lambda: app.model.phase == p.RACING and app.model.race is not None and app.model.race.race == 2,
                "race 2",
                20.0,
            )
            await pilot.press("R", "y")
            await until(lambda: "Results of race 2" in screen_text(app), "the results of race 2", 30.0)
            assert f"(practice deal: {RANDOM_PRACTICE_DEAL})" in screen_text(app)
            await app.shutdown()
