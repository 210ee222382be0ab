"""What a new player meets first: the invite that carries the server, practice that says what it
is, the 80x24 lobby, the first join's words, joining during the results, and the commands' exits
(a closed pipe, a server that is down, card names). The real server on loopback, the terminal
client through Textual's ``run_test`` at 80x24, and the ``plot`` command through subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import segno
from client_fixtures import fresh_state_dir  # noqa: F401  (fixtures: state_dir)
from redis_fixture import free_port
from support import (
    Client,
    latest,
    make_room,
    message,
    plot_process,
    room_phase,
    running_server,
    screen_text,
    start_race,
    until,
    url,
)

from client.bot import choose_move
from client.cli import main as plot_main
from client.commands._race_args import room_target
from client.commands.host import watch_url
from client.invite import invite
from client.tui.practice import embedded_server, practice_config
from client.tui.race import HOST, JOIN, RaceApp, RaceConfig
from client.widgets.invite import qr_text
from client.words import readable_cards
from shared import protocol as p

SMALL = (80, 24)


def plot(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``plot ARGS`` as a process, with no $PLOT_SERVER from this shell."""
    env = {k: v for k, v in os.environ.items() if k != "PLOT_SERVER"}
    return subprocess.run(
        [sys.executable, "-m", "client.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def racing(app: RaceApp, race: int) -> Callable[[], bool]:
    return lambda: app.model.phase == p.RACING and app.model.race is not None and app.model.race.race == race


def says(app: RaceApp, start: str) -> Callable[[], bool]:
    return lambda: message(app).startswith(start)


def has_results(client: Client, race: int) -> Callable[[], bool]:
    return lambda: any(isinstance(m, p.Results) and m.race == race for m in client.messages)


# ---------------------------------------------------------------- invites


def test_an_invite_is_the_server_and_the_code_and_reads_back() -> None:
    assert invite("ws://127.0.0.1:9200", "834BK") == "ws://127.0.0.1:9200/834BK"
    assert invite("wss://plot.example.org/game/", "834BK") == "wss://plot.example.org/game/834BK"
    for server in ("ws://127.0.0.1:9200", "wss://plot.example.org", "wss://plot.example.org/game", "ws://[::1]:9"):
        target = room_target(invite(server, "K7M3P"))
        assert (target.server, target.code) == (server, "K7M3P")
    assert room_target("k7-m3p").server is None  # a bare code, typed as people type it


@pytest.mark.parametrize(
    "argument", ["http://127.0.0.1:9200/K7M3P", "ws://127.0.0.1:9200/", "ws://127.0.0.1:9200/K7M30", "ws:///K7M3P"]
)
def test_a_bad_invite_is_refused_with_exit_2(argument: str) -> None:
    done = plot("join", argument)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and ("invite" in done.stderr or "room code" in done.stderr)


def test_an_invite_and_another_server_flag_are_refused() -> None:
    done = plot("join", "ws://127.0.0.1:9200/K7M3P", "--server", "ws://127.0.0.1:9300")
    assert done.returncode == 2
    assert "the invite names ws://127.0.0.1:9200 and --server names ws://127.0.0.1:9300" in done.stdout


@pytest.mark.parametrize("how", ["flag", "environment"])
async def test_the_host_lobby_at_80x24_shows_invites_that_work_when_pasted(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_server() as server:
        server_url = url(server)
        configs: list[RaceConfig] = []

        def capture(config: RaceConfig) -> int:  # the app is run below, under Textual's test pilot
            configs.append(config)
            return 0

        monkeypatch.setattr("client.commands._race_args.run_race_app", capture)
        if how == "flag":
            assert plot_main(["host", "--server", server_url, "--name", "Ann"]) == 0
        else:
            monkeypatch.setenv("PLOT_SERVER", server_url)
            assert plot_main(["host", "--name", "Ann"]) == 0
        (config,) = configs
        app = RaceApp(config)
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            assert app.model.room is not None
            code = app.model.room.code
            link = f"{server_url}/{code}"
            await until(lambda: f"join {link}" in screen_text(app), "the join invite on the lobby")
            lines = screen_text(app).splitlines()
            join_line = next(line for line in lines if f"join {link}" in line)
            watch_line = next(line for line in lines if f"watch {link}" in line)
            browser_line = next(line for line in lines if "/watch/" in line)
            assert f"{watch_url(server_url)}/watch/{code}" in browser_line
            # Whole on the screen (nothing cut at the edge), and the message line is short.
            for line in (join_line, watch_line, browser_line):
                assert len(line.rstrip()) < SMALL[0], line
            await until(lambda: message(app) == f"Room {code} is open: share the invite above", "the short message")
            # Pasted as printed (the program's own path first), the join line seats a second racer.
            pasted = join_line.split()
            assert pasted[1:] == ["join", link]
            joiner = RaceApp(RaceConfig(url=room_target(pasted[2]).server or "", name="Bob", mode=JOIN, code=code))
            async with joiner.run_test(size=SMALL):
                await until(
                    lambda: app.model.room is not None and len(app.model.room.members) == 2, "Bob seated in the room"
                )
                await joiner.shutdown()
            # g: the watch link as a QR code, with the link under it; Esc closes it.
            await pilot.press("g")
            await until(lambda: "Watch on a phone" in screen_text(app), "the QR code")
            assert "▀" in screen_text(app)
            await pilot.press("escape")
            await until(lambda: "Watch on a phone" not in screen_text(app), "the QR code closed")
            await app.shutdown()


def test_the_qr_code_draws_segnos_modules_two_to_a_cell() -> None:
    link = "http://127.0.0.1:8766/watch/K7M3P"
    matrix = [list(row) for row in segno.make(link, error="m", micro=False).matrix_iter(border=2)]
    lines = qr_text(link).split("\n")
    assert len(lines) == (len(matrix) + 1) // 2 and all(len(line) == len(matrix[0]) for line in lines)
    for y, line in enumerate(lines):
        for x, span in enumerate(line.divide(range(1, len(line)))):
            style = str(span.spans[0].style) if span.spans else ""
            top, _, bottom = style.partition(" on ")
            assert (top == "black") == bool(matrix[2 * y][x])
            if 2 * y + 1 < len(matrix):
                assert (bottom == "black") == bool(matrix[2 * y + 1][x])


async def test_practice_says_nobody_can_join_and_quitting_says_the_race_ends(state_dir: Path) -> None:
    async with embedded_server(countdown_ms=200, rate_per_s=1000, burst=2000) as server_url:
        app = RaceApp(practice_config(server_url, name="Ann", bots=1, deal=26, speed=0.5))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            text = screen_text(app)
            assert "plot join" not in text and "is open" not in text and "friends" not in text
            assert "practice: a private room on a server inside this program" in text
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race", 30.0)
            await until(lambda: message(app).startswith("race 1 is on"), "the race's first word")
            await pilot.press("ctrl+c")
            await until(lambda: "Practice ends with this program" in screen_text(app), "the question")
            assert "seat is kept" not in screen_text(app)
            await pilot.press("n")
            await app.shutdown()


# ---------------------------------------------------------------- joining


async def test_a_first_join_with_a_saved_token_does_not_say_reconnected(state_dir: Path) -> None:
    async with running_server() as server:
        clients, code = await make_room(server, ["Ann"])
        # An earlier session on this server left a saved seat (its token) behind, in no room.
        first = RaceApp(RaceConfig(url=url(server), name="Bob", mode=JOIN, code=code))
        async with first.run_test(size=SMALL):
            await until(lambda: first.model.me is not None, "Bob seated")
            await first.shutdown()
        app = RaceApp(RaceConfig(url=url(server), name="Bob", mode=JOIN, code=code))
        async with app.run_test(size=SMALL):
            await until(lambda: app.model.me is not None, "Bob seated again")
            await until(lambda: app.connection_state == "connected", "connected")
            assert "reconnected" not in message(app)
            await app.shutdown()
        for client in clients:
            await client.close()


async def test_joining_during_the_results_says_so_and_saves_under_the_rooms_code(state_dir: Path) -> None:
    async with running_server() as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        await start_race(racers)
        for client in racers:
            await client.send(p.Move(id=1, move="resign"))
        await until(lambda: all(any(isinstance(m, p.Results) for m in c.messages) for c in racers), "the results")
        app = RaceApp(RaceConfig(url=url(server), name="Cy", mode=JOIN, code=code))
        async with app.run_test(size=SMALL):
            await until(lambda: bool(app.model.saved_records), "the records saved")
            folder = next(iter(app.model.saved_records.values())).parent
            assert folder.name == f"{code}-race1"
            await until(lambda: "you have a racer's seat for the next one" in message(app), "the seat said")
            text = screen_text(app)
            assert "not checked: this client did not see the start's commitment" in text
            assert "is the commitment made at the start" not in text and "= the start's" not in text
            await app.shutdown()
        for client in racers:
            await client.close()


def test_an_empty_name_is_refused_not_replaced_by_the_login(monkeypatch: pytest.MonkeyPatch) -> None:
    for command in (["join", "K7M3P"], ["host"], ["watch", "K7M3P"], ["practice"]):
        done = plot(*command, "--name", "")
        assert done.returncode == 2, done
        assert "bad --name ''" in done.stdout


# ---------------------------------------------------------------- records and stale results


async def test_records_are_numbered_by_place_as_the_page_names_them(state_dir: Path) -> None:
    async with running_server() as server:
        clients, code = await make_room(server, ["Ann"], deal=26)  # cards go home early on deal 26
        app = RaceApp(RaceConfig(url=url(server), name="Zed", mode=JOIN, code=code))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.me is not None, "Zed seated")
            await pilot.press("enter")
            await until(lambda: app.model.me is not None and app.model.me.ready, "Zed ready")
            await clients[0].send(p.Ready(ready=True))
            await start_race(clients)
            await until(lambda: app.model.phase == p.RACING, "the race")
            # Zed (seated second) puts a card home before resigning, Ann none: Zed places first.
            await until(lambda: app.model.view is not None, "Zed's board")
            assert app.connection is not None
            while app.model.view is not None and app.model.view.foundation_cards < 2:
                entry = choose_move(app.model.view)
                assert entry is not None and entry != "resign"
                await app.connection.move(entry)
            await pilot.press("R", "y")
            await until(lambda: app.model.view is not None and app.model.view.status != "playing", "Zed resigned")
            await clients[0].send(p.Move(id=1, move="resign"))
            await until(lambda: bool(app.model.saved_records), "the records")
            results = app.model.results
            assert results is not None
            assert results.ranking != list(results.records), "place and seat orders differ here"
            names = {row.player_id: row.name for row in results.racers}
            files = {pid: path.name for pid, path in app.model.saved_records.items()}
            for place, pid in enumerate(results.ranking, start=1):
                assert files[pid] == f"{place:02d}-{names[pid]}.json"
            # A stale results message (another race's) never takes the place of this race's.
            before = app.model.results
            stale = p.Results(
                race=results.race + 5, ranking=[], racers=[], deal=1, salt="x", commitment="y", chosen_deal=False,
                records={},
            )  # fmt: skip
            assert app.model.apply(stale) == set() and app.model.results is before
            await app.shutdown()
        for client in clients:
            await client.close()


async def test_a_rematch_does_not_keep_the_last_races_result_on_the_message_line(state_dir: Path) -> None:
    async with running_server() as server:
        app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST))
        async with app.run_test(size=SMALL) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            assert app.model.room is not None
            bob = await Client.open(server, "Bob")
            await bob.hello("Bob")
            await bob.send(p.Join(code=app.model.room.code))
            await bob.send(p.Ready(ready=True))
            await until(lambda: app.model.room is not None and len(app.model.room.members) == 2, "Bob")
            for race in (1, 2):
                await until(lambda: all(m.ready for m in app.model.room.members if m.name == "Bob"), "Bob ready")  # type: ignore[union-attr]
                await pilot.press("enter")
                await until(lambda: app.model.me is not None and app.model.me.ready, "Ann ready")
                await pilot.press("s")
                await until(racing(app, race), f"race {race}")
                await until(says(app, f"race {race} is on"), "the race's first word")
                assert "race over" not in message(app)
                await bob.send(p.Move(id=race, move="resign"))
                await pilot.press("R", "y")
                await until(lambda: message(app).startswith("race over"), "the race over")
                if race == 1:
                    await pilot.press("n")
                    await until(lambda: app.model.phase == p.LOBBY, "the lobby again")
                    await bob.send(p.Ready(ready=True))
            await app.shutdown()
        await bob.close()


# ---------------------------------------------------------------- the commands' exits


async def test_plot_rooms_into_a_closed_pipe_ends_quietly() -> None:
    async with running_server() as server:
        clients = [(await make_room(server, [f"Host{i}"]))[0][0] for i in range(3)]
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line (as `| head -1` once it has one)
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "client.cli", "rooms", "--server", url(server)],
                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert done.returncode == 141, done.stderr
        assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
        for client in clients:
            await client.close()


def test_plot_join_against_a_server_that_is_down_exits_1_in_bounded_time() -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    done = plot("join", f"ws://127.0.0.1:{port}/K7M3P", "--name", "Ann", timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"cannot connect to ws://127.0.0.1:{port}" in done.stdout
    assert "Traceback" not in done.stderr
    rooms = plot("rooms", "--server", f"ws://127.0.0.1:{port}", timeout=60)
    assert rooms.returncode == 1 and f"cannot connect to ws://127.0.0.1:{port}" in rooms.stdout
    assert took < 45, took  # bounded (a few tries with backoff), not "not connected" forever


def test_plot_verify_names_cards_as_the_board_shows_them(tmp_path: Path) -> None:
    record = tmp_path / "bad.json"
    record.write_text(json.dumps({"deal": 5, "moves": ["t0>f0"]}))
    done = plot("verify", str(record))
    assert done.returncode == 1
    assert "8♦ is an 8" in done.stdout and not re.search(r"\b[A2-9TJQK][cdhs][01]\b", done.stdout), done.stdout
    assert readable_cards("Th1 on Jc0, then 8d1") == "10♥ on J♣, then 8♦"


async def test_plot_bot_counts_each_races_moves_as_its_results_do() -> None:
    async with running_server() as server:
        (host,), code = await make_room(server, ["Host"])
        proc = await plot_process(
            "bot", "--room", code, "--server", url(server),
            "--speed", "200", "--races", "2", "--every", "0.05", "--count", "2",
        )  # fmt: skip
        for race in (1, 2):

            def bot_ready() -> bool:
                room = latest(host, p.Room)
                return room.phase == p.LOBBY and any(m.bot and m.ready for m in room.members)

            await until(bot_ready, f"the bot ready for race {race}", 20.0)
            await host.send(p.Ready(ready=True))
            await host.send(p.Start())
            await room_phase(host, p.RACING)
            await host.send(p.Move(id=race, move="resign"))
            await until(has_results(host, race), f"the results of race {race}")
            if race == 1:
                await host.send(p.Rematch())
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        for race in (1, 2):
            results = next(m for m in host.messages if isinstance(m, p.Results) and m.race == race)
            row = next(r for r in results.racers if r.name == "bot-1 (medium)")
            counts = [
                int(m[1])
                for line in lines
                if (m := re.match(rf"bot-1 \(medium\): race {race}: .* (\d+) moves?,", line))
            ]
            assert counts, lines
            assert max(counts) <= row.moves and counts[-1] > 0, (race, counts, row.moves)
        await host.close()


async def test_ctrl_c_on_workers_logs_no_worker_deaths(own_redis_server: object) -> None:
    """Ctrl+C reaches the supervisor and its workers at once (one process group): a shutdown."""
    from support import server_environment, wait_healthy

    port = free_port()
    args = ("--port", str(port), "--redis", own_redis_server.url, "--workers", "2")  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=server_environment(),
        start_new_session=True,
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_healthy, proc, port)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl+C
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.stderr is not None
    events = [json.loads(line).get("event") for line in proc.stderr.read().splitlines() if line.startswith("{")]
    proc.stderr.close()
    assert "workers_stopped" in events and "worker_died" not in events, events


# ---------------------------------------------------------------- 80 columns


async def test_a_long_rejection_and_the_status_box_are_whole_at_80x24() -> None:
    from client.tui.play import PlayApp
    from client.widgets.board import STATUS_TEXT
    from shared.engine import Game

    app = PlayApp(26)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("t", *"t0>f1", "enter")
        reason = Game(26).reason_illegal("t0>f1")
        assert reason is not None and len(f"✗ t0>f1: {reason}") > SMALL[0] - 2  # longer than the line
        await until(lambda: message(app).startswith("✗"), "the refusal")
        lines = screen_text(app).splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("✗ t0>f1"))
        shown = " ".join(line.strip() for line in lines[start : start + 2])
        assert shown == f"✗ t0>f1: {reason}"
        assert "help" in lines[-1]  # the footer is still on screen
        info = app.screen.query_one("#info")
        for text in STATUS_TEXT.values():
            assert len(text) <= info.content_region.width, text


async def test_the_replay_header_keeps_the_deal_number_at_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from client.tui.replay import ReplayApp

    deal = 14604373617339541229
    record = tmp_path / "01-a-rather-long-racer-name.json"
    record.write_text(json.dumps({"deal": deal, "moves": ["stock>waste"] * 3}))
    apps: list[ReplayApp] = []
    monkeypatch.setattr(ReplayApp, "run", lambda self, *args, **kwargs: apps.append(self))  # run below, under test
    assert plot_main(["replay", str(record), "--paused"]) == 0
    (app,) = apps
    async with app.run_test(size=SMALL):
        await until(lambda: "Replay" in screen_text(app), "the replay")
        header = next(line for line in screen_text(app).splitlines() if "Replay" in line)
        assert f"deal {deal}" in header, header
