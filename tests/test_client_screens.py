"""The race client's screens at 80x24 against a real loopback server: the help overlay, the
results with a racer's board on show, what practice says of its deal, and replays made once."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from client_fixtures import fresh_state_dir  # noqa: F401  (fixtures: state_dir)
from support import (
    latest,
    make_room,
    plot_process,
    race_against,
    room_phase,
    running_server,
    screen_text,
    start_race,
    until,
    url,
)

import shared.engine
from client.tui.game import help_rows
from client.tui.practice import attach_hint, embedded_server, practice_config
from client.tui.race import GIVEN_PRACTICE_DEAL, HOST, JOIN, RANDOM_PRACTICE_DEAL, RaceApp, RaceConfig, RaceScreen
from client.widgets.room import Progress, ResultsPanel, sparkline, splits
from client.words import ordinal
from shared import protocol as p
from shared.engine import ReplayResult

SMALL = (80, 24)


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
                assert lines, f"{keys}: {what} is not reachable at 80x24\n{seen}"
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
            bob = await race_against(app, pilot, server, "Bob")
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
                assert "Cards home ▁" in text
            await pilot.resize_terminal(100, 40)
            await pilot.pause()
            await pilot.resize_terminal(*SMALL)
            await pilot.press("right_square_bracket")  # past the last board: the summary again
            await until(lambda: "Results of race 1" in screen_text(app), "the summary")
            panel = app.screen_.query_one(ResultsPanel)
            for _ in range(3):
                panel.refresh()
                await pilot.pause()
            text = screen_text(app)
            assert "✓ all 2 records replayed here agree" in text
            assert "the lines: cards home over the race (0:00–" in text
            assert all(any(row in line and "▁" in line for line in text.splitlines()) for row in ("Ann", "Bob"))
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


async def test_plot_bot_prints_each_bots_progress_and_the_result() -> None:
    async with running_server() as server:
        (host,), code = await make_room(server, ["Host"])
        proc = await plot_process(
            "bot", "--room", code, "--server", url(server),
            "--count", "2", "--speed", "200", "--races", "1", "--every", "0.05",
        )  # fmt: skip

        def bots_ready() -> bool:
            room = latest(host, p.Room)
            return sum(1 for m in room.members if m.bot and m.ready) == 2

        await until(bots_ready, "both bots ready", 20.0)
        await host.send(p.Ready(ready=True))
        await host.send(p.Start())
        await room_phase(host, p.RACING)
        await host.send(p.Move(id=1, move="resign"))
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        await until(lambda: any(isinstance(m, p.Results) for m in host.messages), "the results")
        results = latest(host, p.Results)
        for name in ("bot-1 (medium)", "bot-2 (medium)"):
            own = [line for line in lines if line.startswith(f"{name}: ")]
            assert any("race 1:" in line and "/104 home" in line for line in own), own
            assert any(line.startswith(f"{name}: room {code}") for line in own), own
            row = next(r for r in results.racers if r.name == name)
            place = results.ranking.index(row.player_id) + 1
            assert f"{name}: race 1 over: placed {ordinal(place)} of 3, {row.status}, {row.cards}/104 home" in lines
        # Progress lines only when something changed: no line twice in a row for a bot.
        for name in ("bot-1 (medium)", "bot-2 (medium)"):
            own = [line for line in lines if line.startswith(f"{name}: ")]
            assert all(a != b for a, b in itertools.pairwise(own))
        assert lines.count(f"race 1 result (deal {results.deal}):") == 1
        for place, row in enumerate(results.racers, start=1):
            assert any(line.startswith(f"  {place}. {row.name}") and f"{row.cards}/104" in line for line in lines)
        await host.close()


def test_sparkline_and_splits_follow_the_cards_over_race_time() -> None:
    progress = Progress(cards=[1, 13, 13, 52, 104], times=[100, 200, 250, 300, 400])
    assert sparkline(progress, 400, 4).plain == "▁▁▄█"
    assert sparkline(progress, 800, 8).plain == "▁▁▄█████"  # flat after the last entry
    assert splits(progress) == [(13, 200), (52, 300), (104, 400)]
    untimed = Progress(cards=[1, 2, 13], times=None)
    assert splits(untimed) == [(13, 3)]
    assert sparkline(untimed, 3, 3).plain == "▁▁▁"


async def test_results_carry_when_each_entry_was_accepted() -> None:
    async with running_server() as server:
        clients, _code = await make_room(server, ["Ann", "Bob"])
        ann, bob = clients
        await start_race(clients)
        accepted: list[int] = []
        for move_id, entry in enumerate(["stock>waste", "stock>waste", "resign"], start=1):
            await ann.send(p.Move(id=move_id, move=entry))
            accepted.append((await ann.expect(p.MoveOk)).t_ms)
        await bob.send(p.Move(id=1, move="resign"))
        results = await ann.expect(p.Results)
        assert results.times[ann.pid] == accepted
        assert len(results.times[bob.pid]) == len(results.records[bob.pid].moves) == 1
        for client in clients:
            await client.close()


async def test_results_summary_of_a_full_room_scrolls_at_80x24(state_dir: Path) -> None:
    """A room of the most racers a room allows: at 80x24 the summary does not fit, and the
    arrows, PgUp / PgDn and Home / End reach every racer's row and the last line."""
    names = [f"Racer{i:02d}" for i in range(1, p.MAX_RACERS_MAX)]
    async with running_server() as server:
        racers, code = await make_room(server, names, max_racers=p.MAX_RACERS_MAX)
        app = RaceApp(RaceConfig(url=url(server), name="Me", mode=JOIN, code=code))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None and app.model.me is not None, "a seat")
            await pilot.press("enter")
            await until(lambda: app.model.me is not None and app.model.me.ready, "ready")
            await start_race(racers)
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
            for racer in racers:
                await racer.send(p.Move(id=1, move="resign"))
            await pilot.press("R", "y")
            await until(lambda: app.model.results is not None and "Results of race 1" in screen_text(app), "results")
            everyone = ["Me", *names]

            def rows_on_screen() -> set[str]:
                text = screen_text(app)
                return {n for n in everyone if any(f" {n} " in ln and "/104" in ln for ln in text.splitlines())}

            first = rows_on_screen()
            assert first, screen_text(app)
            assert "Replay one and check the commitment" not in screen_text(app), "it should not fit 80x24"
            await until(lambda: "↑↓" in screen_text(app).splitlines()[-1], "the footer's scroll key")

            seen = set(first)
            for _ in range(30):  # one row at a time, down to the end
                await pilot.press("down")
                await pilot.pause()
                seen |= rows_on_screen()
                if "Replay one and check the commitment" in screen_text(app):
                    break
            assert seen == set(everyone)
            assert "Replay one and check the commitment" in screen_text(app)
            assert "Results of race 1" not in screen_text(app)  # scrolled: the heading went off the top
            assert rows_on_screen() != first
            await pilot.press("home")
            await until(lambda: "Results of race 1" in screen_text(app), "the top again")
            assert rows_on_screen() == first
            await pilot.press("pagedown", "pagedown", "pagedown")
            await until(lambda: "Replay one and check the commitment" in screen_text(app), "the end by pages")
            await pilot.press("pageup", "pageup", "pageup")
            await until(lambda: "Results of race 1" in screen_text(app), "the top by pages")
            last_line = "each racer's final board"  # the summary's last line
            await pilot.press("end")
            await until(lambda: last_line in screen_text(app), "the end")
            await pilot.press("up")
            await until(lambda: last_line not in screen_text(app), "one line up")
            # The boards still cycle; under a board nothing scrolls, and the footer says so.
            await pilot.press("right_square_bracket")
            await until(lambda: "Board of" in screen_text(app), "a board")
            await until(lambda: "↑↓" not in screen_text(app).splitlines()[-1], "no scroll key under a board")
            await pilot.press("left_square_bracket")
            await until(lambda: "↑↓" in screen_text(app).splitlines()[-1], "the scroll key on the summary again")
        for racer in racers:
            await racer.close()
