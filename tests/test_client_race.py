"""The race client against a real server on loopback: key presses in, rendered screen text out.

The server is the real one (``server.shell.RaceServer``, memory store) started the way the
server's own end-to-end tests start it; the other racers are the server tests' plain
WebSocket ``Client`` (not this client's code), or this client's bots where a test says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

from client_fixtures import fresh_state_dir, race_server  # noqa: F401  (fixtures: server, state_dir)
from support import (
    FAST,
    SIZE,
    Client,
    board,
    fast_config,
    make_room,
    message,
    plot_process,
    running_server,
    screen_text,
    until,
    url,
    view_game,
)

from client.bot import Bot, choose_move
from client.connection import FOLLOW_TRIES, Connection, room_url
from client.tui.practice import attach_hint, practice_config
from client.tui.race import HOST, JOIN, WATCH, RaceApp, RaceConfig
from client.widgets.board import PILE_KEYS
from client.widgets.cards import card_plain
from client.widgets.room import verify_command
from client.words import plot_command
from server.shell import RaceServer
from shared import protocol as p
from shared.engine import View, view_hash


def pile_text(app: RaceApp, pile: str) -> str:
    box = app.screen.query_one(f"#pile-{pile}")
    return "\n".join(strip.text for strip in box.render_lines(box.region.reset_offset)).rstrip()


def on_leaderboard(app: RaceApp, name: str) -> bool:
    """Is ``name`` on the rendered leaderboard yet? (A condition to wait for: never raises.)"""
    return any(re.match(rf"\s*\d+ {re.escape(name)}\s", line) for line in screen_text(app).splitlines())


def leaderboard_line(app: RaceApp, name: str) -> str:
    for line in screen_text(app).splitlines():
        if re.match(rf"\s*\d+ {re.escape(name)}\s", line):
            return line
    raise AssertionError(f"{name} is not on the leaderboard:\n{screen_text(app)}")


def config(server_url: str, mode: str, name: str, code: str | None = None, **options: object) -> RaceConfig:
    return RaceConfig(url=server_url, name=name, mode=mode, code=code, options=p.RoomOptions(**options))  # type: ignore[arg-type]


async def join_racer(server: RaceServer, code: str, name: str) -> Client:
    client = await Client.open(server, name)
    await client.hello(name)
    await client.send(p.Join(code=code))
    await client.expect(p.Room)
    await client.send(p.Ready(ready=True))
    return client


async def host_and_start(app: RaceApp, pilot: object, server: RaceServer, others: list[str]) -> list[Client]:
    """The app hosts; ``others`` join as plain clients; the host readies up and starts (keys)."""
    await until(lambda: app.model.room is not None, "the room")
    assert app.model.room is not None
    code = app.model.room.code
    clients = [await join_racer(server, code, name) for name in others]
    await until(lambda: all(m.ready for m in app.model.room.members if m.player_id != app.model.player_id), "ready")  # type: ignore[union-attr]
    await pilot.press("enter")  # type: ignore[attr-defined]
    await until(lambda: app.model.me is not None and app.model.me.ready, "the host ready")
    await pilot.press("s")  # type: ignore[attr-defined]
    await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
    await pilot.pause()  # type: ignore[attr-defined]  # the screen has drawn the race's board
    return clients


async def test_host_plays_legal_and_illegal_moves_and_sees_a_rival_progress(server: RaceServer) -> None:
    app = RaceApp(config(url(server), HOST, "Ann", deal=4242))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        assert app.model.room is not None
        text = screen_text(app)
        assert f"Room {app.model.room.code}" in text and "plot join" in text and "chosen deal" in text
        (bob,) = await host_and_start(app, pilot, server, ["Bob"])
        assert "Leaderboard" in screen_text(app)
        # A legal move, by keys: the card moves on screen once the server accepts it.
        view = app.model.view
        assert view is not None
        game = view_game(view)
        move = next(m for m in game.legal_moves() if m.startswith("t") and ">f" in m)
        src, dst = move.split(">")
        card = view.tableau[int(src[1:])][-1]
        await pilot.press(PILE_KEYS[src][0], PILE_KEYS[dst][0])
        await until(lambda: app.model.seq == 1, "the move's acknowledgement")
        await pilot.pause()
        assert card_plain(card) in pile_text(app, dst) and "space" in pile_text(app, src)
        assert f"✓ {move}" in message(app)
        # An illegal one: the server's reason, and nothing changes.
        view = app.model.view
        assert view is not None
        game = view_game(view)
        legal = set(game.legal_moves())
        illegal = next(f"t{a}>t{b}" for a in range(12) for b in range(12) if a != b and f"t{a}>t{b}" not in legal)
        reason = game.reason_illegal(illegal)
        assert reason is not None
        before = {pile: pile_text(app, pile) for pile in PILE_KEYS}
        await pilot.press(PILE_KEYS[illegal.split(">")[0]][0], PILE_KEYS[illegal.split(">")[1]][0])
        await until(lambda: "✗" in message(app), "the refusal")
        assert message(app) == f"✗ {illegal}: {reason}"
        assert app.model.seq == 1 and {pile: pile_text(app, pile) for pile in PILE_KEYS} == before
        # The rival plays: the leaderboard bar grows on our screen.
        bob_start = next(m for m in bob.messages if isinstance(m, p.RaceStart))
        assert bob_start.view is not None
        bars_before = leaderboard_line(app, "Bob").count("█")
        bob_view: View = bob_start.view
        move_id = 1
        while bob_view.foundation_cards < 30:
            entry = choose_move(bob_view)
            assert entry is not None and entry != "resign"
            await bob.send(p.Move(id=move_id, move=entry))
            reply = await bob.expect(p.MoveOk)
            bob_view, move_id = board(reply), move_id + 1
        cards = bob_view.foundation_cards
        await until(lambda: f"{cards:>3}/104" in leaderboard_line(app, "Bob"), "Bob's progress on screen")
        assert leaderboard_line(app, "Bob").count("█") > bars_before
        await bob.close()


async def test_countdown_shows_before_the_start() -> None:
    async with running_server(config=fast_config(core=replace(FAST, countdown_ms=1500))) as server:
        app = RaceApp(config(url(server), HOST, "Ann"))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            code = app.model.room.code  # type: ignore[union-attr]
            rival = await join_racer(server, code, "Bob")
            await until(lambda: all(m.ready for m in app.model.room.members if m.name == "Bob"), "Bob ready")  # type: ignore[union-attr]
            await pilot.pause()
            assert "s start the race" in screen_text(app)  # the footer offers what the host may do now
            await pilot.press("enter", "s")
            await until(lambda: app.model.phase == p.COUNTDOWN, "the countdown")
            await pilot.pause(0.3)
            text = screen_text(app)
            assert re.search(r"Starting in [12]…", text) and re.search(r"starts in [12]", text)
            await until(lambda: app.model.phase == p.RACING, "the start")
            await pilot.pause()
            assert "Starting in" not in screen_text(app) and "Leaderboard" in screen_text(app)
            await rival.close()


async def test_spectator_sees_no_board_while_the_delay_runs(server: RaceServer) -> None:
    # Boards 3 s behind: the checks made while the delay runs come a few hundred ms into the race
    # on a loaded machine (up to 0.5 s seen with two busy loops on the 2 cores), well inside it.
    delay_s = 3
    (host,), code = await make_room(server, ["Host"], spectator_boards=delay_s)
    rival = await join_racer(server, code, "Rival")
    app = RaceApp(config(url(server), WATCH, "Spec", code=code))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.room is not None and app.model.role == p.SPECTATOR, "a spectator's seat")
        await until(lambda: "not leak-proof" in screen_text(app), "the room marked not leak-proof")
        await host.send(p.Ready(ready=True))
        await until(lambda: all(m.ready for m in app.model.room.members if m.role == p.RACER), "ready")  # type: ignore[union-attr]
        await host.send(p.Start())
        await until(lambda: app.model.phase == p.RACING, "the race")
        start = await host.expect(p.RaceStart)
        assert start.view is not None
        await host.send(p.Move(id=1, move="stock>waste"))
        await host.expect(p.MoveOk)
        await until(lambda: on_leaderboard(app, "Host"), "the leaderboard")
        await pilot.pause()
        # The delay runs: the leaderboard is live, the board is nowhere. (The screen is read
        # first, then the clock: a clock inside the delay means the screen was read inside it.)
        board_shown, text = app.screen.query_one("Board").display, screen_text(app)
        assert (app.model.race_clock_ms() or 0) < delay_s * 1000, "the checks came after the delay: not a check"
        assert not board_shown
        assert "stock" not in text and "Host" in text
        # Past the delay, a board shows, marked as behind, with the move played before it.
        await until(lambda: "board of" in screen_text(app), "the delayed boards", 20.0)
        await until(lambda: "77 cards" in pile_text(app, "stock"), "the host's stock turn, delayed", 20.0)
        assert app.screen.query_one("Board").display and f"{delay_s}s behind" in screen_text(app)
        assert "Host" in screen_text(app).split("board of")[1].splitlines()[0]
        await host.close()
        await rival.close()


async def test_leak_proof_room_shows_spectators_boards_only_after_the_race(server: RaceServer) -> None:
    (host,), code = await make_room(server, ["Host"])
    rival = await join_racer(server, code, "Rival")
    app = RaceApp(config(url(server), WATCH, "Spec", code=code))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.role == p.SPECTATOR, "a spectator's seat")
        await host.send(p.Ready(ready=True))
        await until(lambda: all(m.ready for m in app.model.room.members if m.role == p.RACER), "ready")  # type: ignore[union-attr]
        await host.send(p.Start())
        await until(lambda: app.model.phase == p.RACING, "the race")
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert not app.screen.query_one("Board").display
        for client in (host, rival):
            await client.send(p.Move(id=1, move="resign"))
        await until(lambda: app.model.results is not None, "the results")
        await pilot.pause()
        text = screen_text(app)
        assert "Results of race 1" in text and "✓ verified here" in text
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert app.screen.query_one("Board").display and "board of" in screen_text(app)
        await host.close()
        await rival.close()


class DroppingProxy:
    """A TCP relay between the client and the server that can drop every connection and refuse
    new ones for a while: from the client's side, the server dropped it. It keeps each
    connection's request target (``/?room=CODE``), as a balancer would see it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.refusing = False
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.targets: list[str] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]
        request_line = await reader.readline()  # GET /?room=CODE HTTP/1.1
        self.targets.append(request_line.decode().split(" ")[1])
        up_writer.write(request_line)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def drop_all(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def close(self) -> None:
        self.drop_all()
        if self.server is not None:
            self.server.close()


async def test_reconnect_after_the_connection_drops_brings_the_board_back(server: RaceServer) -> None:
    proxy = DroppingProxy(server.port)
    port = await proxy.start()
    app = RaceApp(config(f"ws://127.0.0.1:{port}", HOST, "Ann", deal=77))
    async with app.run_test(size=SIZE) as pilot:
        (bob,) = await host_and_start(app, pilot, server, ["Bob"])
        await pilot.press("space")
        await until(lambda: app.model.seq == 1, "a first move")
        await pilot.pause()
        board_before = {pile: pile_text(app, pile) for pile in PILE_KEYS}
        hash_before = view_hash(app.model.view)  # type: ignore[arg-type]
        proxy.refusing = True
        proxy.drop_all()
        await until(lambda: "reconnecting…" in screen_text(app), "the reconnecting notice")
        # A move made while the line is down is sent after the resume, and applied once.
        await pilot.press("space")
        await asyncio.sleep(0.3)
        proxy.refusing = False
        await until(lambda: app.connection_state == "connected" and app.model.seq == 2, "the resume", 15.0)
        await pilot.pause()
        assert "reconnecting…" not in screen_text(app)
        assert app.model.view is not None and app.model.view.stock == 76
        assert hash_before != view_hash(app.model.view)
        # The board is the server's, exactly: replaying what the server holds gives the same view.
        await pilot.press("z")
        await until(lambda: "cannot be undone" in message(app), "the undo refusal")
        assert {pile: pile_text(app, pile) for pile in ("reserve", "f0", *(f"t{i}" for i in range(12)))} == {
            pile: board_before[pile] for pile in ("reserve", "f0", *(f"t{i}" for i in range(12)))
        }
        assert app.connection is not None and app.connection.reconnects >= 1
        await bob.close()
    await proxy.close()


async def test_a_closed_client_rejoins_its_race_with_the_saved_token(server: RaceServer, state_dir: Path) -> None:
    first = RaceApp(config(url(server), HOST, "Ann", deal=5))
    async with first.run_test(size=SIZE) as pilot:
        (bob,) = await host_and_start(first, pilot, server, ["Bob"])
        await pilot.press("space")
        await until(lambda: first.model.seq == 1, "a move")
        code = first.model.room.code  # type: ignore[union-attr]
        view = first.model.view
        await first.shutdown()
    tokens = list((state_dir / "tokens").iterdir())
    assert len(tokens) == 1 and json.loads(tokens[0].read_text())["token"]
    assert tokens[0].stat().st_mode & 0o077 == 0  # owner-only
    again = RaceApp(config(url(server), JOIN, "Ann", code=code))
    async with again.run_test(size=SIZE) as pilot:
        await until(lambda: again.model.view is not None, "the race again")
        await pilot.pause()
        assert again.model.view == view and again.model.phase == p.RACING
        assert card_plain(view.waste[-1]) in pile_text(again, "waste")  # type: ignore[union-attr]
        await bob.close()


async def test_names_and_server_text_are_plain_text(server: RaceServer) -> None:
    app = RaceApp(config(url(server), HOST, "[b]Ann[/b]"))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        code = app.model.room.code  # type: ignore[union-attr]
        rival = await join_racer(server, code, "[red on red]x[/]")
        await until(lambda: len(app.model.room.members) == 2, "the rival")  # type: ignore[union-attr]
        await pilot.pause()
        text = screen_text(app)
        assert "[b]Ann[/b]" in text and "[red on red]x[/]" in text
        await rival.close()


def assert_sound_hint(app: RaceApp) -> None:
    """The hint came from the solver on the rebuilt position: a legal move, or no win found."""
    text = message(app)
    assert app.model.view is not None
    if text.startswith("hint: "):
        assert text.removeprefix("hint: ") in view_game(app.model.view).legal_moves()
    else:
        assert text == "no hint from the solver here", text


async def test_practice_runs_a_race_to_the_end_with_bots(state_dir: Path) -> None:
    """``plot practice``'s own parts: the embedded server, the practice room, bots, the hint key."""
    from client.tui.practice import embedded_server

    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        assert server_url.startswith("ws://127.0.0.1:")
        app = RaceApp(practice_config(server_url, name="Newcomer", bots=2, deal=4242, speed=400))
        attach_hint(app)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race", 20.0)
            await pilot.press("h")
            await until(lambda: "hint" in message(app), "a hint")
            assert_sound_hint(app)
            await pilot.press("R", "y")
            await until(lambda: app.model.results is not None, "the results", 30.0)
            await pilot.pause()
            results = app.model.results
            assert results is not None and len(results.racers) == 3
            assert {row.name for row in results.racers} == {"Newcomer", "bot-1 (medium)", "bot-2 (medium)"}
            assert all(row.status in ("won", "blocked", "resigned") for row in results.racers)
            assert sum(row.bot for row in results.racers) == 2
            text = screen_text(app)
            assert "✓ verified here" in text and "records replayed here agree" in text
            assert f"{plot_command()} verify" in text
            assert len(app.model.saved_records) == 3
            for path in app.model.saved_records.values():
                assert path.is_relative_to(state_dir)
            # The line the screen gives for plot verify works, through the real entry point.
            mine = app.model.saved_records[app.model.player_id or ""]
            line = verify_command(mine, results)
            assert f"Replay one and check the commitment: {plot_command()} verify" in text and "--reveal" in text
            assert line.replace(" ", "") in "".join(text.split())  # on screen whole (wrapped at most)
            typed = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
            assert typed.returncode == 0, typed.stdout + typed.stderr
            assert "legal: " in typed.stdout and "commitment matches deal" in typed.stdout
            assert "race over: you placed 3rd of 3" in text
            # Another race in the same room: n, and the bots are back at it (a new deal, hints still work).
            await pilot.press("n")
            await until(lambda: app.model.phase == p.RACING and app.model.race.race == 2, "race 2", 20.0)  # type: ignore[union-attr]
            assert app.model.results is None and app.accepted_entries == []
            await pilot.press("space")
            await until(lambda: app.model.seq == 1, "a move in race 2")
            await pilot.press("h")
            await until(lambda: "hint" in message(app), "a hint in race 2")
            assert_sound_hint(app)
            await app.shutdown()


async def test_plot_rooms_lists_open_rooms_through_the_entry_point(server: RaceServer) -> None:
    host = await Client.open(server, "Lister")
    await host.hello("Lister")
    await host.send(p.CreateRoom(options=p.RoomOptions(deal=3)))
    code = (await host.expect(p.Room)).code
    proc = await plot_process(
        "rooms", "--server", url(server),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert code in out.decode() and "Lister" in out.decode() and "chosen deal" in out.decode()
    await host.close()


async def test_bots_race_in_a_hosted_room_from_their_views(server: RaceServer) -> None:
    app = RaceApp(RaceConfig(url=url(server), name="Host", mode=HOST, bots=2, bot_speed=400))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.room is not None and len(app.model.room.members) == 3, "two bots")
        await until(lambda: all(m.ready for m in app.model.room.members if m.bot), "bots ready")  # type: ignore[union-attr]
        assert "⚙ bot" in screen_text(app)
        await pilot.press("enter", "s")
        await until(lambda: app.model.phase == p.RACING, "the race")
        await until(
            lambda: (
                app.model.leaderboard is not None
                and all(r.status != "playing" for r in app.model.leaderboard.racers if r.bot)
            ),
            "the bots to finish",
            30.0,
        )
        assert all(r.cards > 1 for r in app.model.leaderboard.racers if r.bot)  # type: ignore[union-attr]
        await app.shutdown()


def test_room_url_sets_the_room_parameter_and_keeps_the_rest_of_the_url() -> None:
    assert room_url("ws://localhost:8765", "K7M3P") == "ws://localhost:8765/?room=K7M3P"
    assert room_url("wss://h:9/plot?x=a%20b&room=OLD&y#top", "K7M3P") == "wss://h:9/plot?x=a%20b&y&room=K7M3P#top"
    assert room_url("ws://h/?room=K7M3P&x=1", None) == "ws://h/?x=1"
    assert room_url("ws://h:1/path?roomy=2", None) == "ws://h:1/path?roomy=2"  # only `room` itself


async def test_the_host_reconnects_naming_its_new_room_unseen_and_the_room_races(
    server: RaceServer, state_dir: Path
) -> None:
    """docs/deployment.md, "Room affinity": the host connects naming no room (it has none yet), and
    once the server answers create_room it connects again with ?room=CODE and resumes: the lobby
    stays on screen, nothing is said, the room works. A member's reconnection names its room too,
    and so does a client started again (its token file's room)."""
    proxy = DroppingProxy(server.port)
    port = await proxy.start()
    app = RaceApp(config(f"ws://127.0.0.1:{port}", HOST, "Ann", deal=77))
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        code = app.model.room.code  # type: ignore[union-attr]
        await until(lambda: proxy.targets == ["/", f"/?room={code}"], "the host's second connection, naming its room")
        connection = app.connection
        assert connection is not None
        await until(lambda: connection.welcome is not None and connection.welcome.resumed, "the resume")
        assert connection.welcome is not None and connection.welcome.room == code
        assert connection.reconnects == 0 and app.connection_state == "connected"
        text = screen_text(app)
        assert f"Room {code} is open" in message(app) and "reconnect" not in text and "✗" not in text
        (bob,) = await host_and_start(app, pilot, server, ["Bob"])
        await pilot.press("space")
        await until(lambda: app.model.seq == 1, "a first move")
        proxy.drop_all()  # a member's reconnection names its room
        await until(lambda: len(proxy.targets) == 3 and app.connection_state == "connected", "the reconnection")
        assert proxy.targets[2] == f"/?room={code}"
        await pilot.press("space")
        await until(lambda: app.model.seq == 2, "a move after it")
        await app.shutdown()
    again = RaceApp(config(f"ws://127.0.0.1:{port}", HOST, "Ann"))  # started again: its token file's room
    async with again.run_test(size=SIZE):
        await until(lambda: again.model.phase == p.RACING and again.model.view is not None, "back in the race")
        assert proxy.targets[3] == f"/?room={code}" and again.model.room.code == code  # type: ignore[union-attr]
        await again.shutdown()
    await bob.close()
    await proxy.close()


async def test_join_watch_and_bots_name_their_room_in_the_url(server: RaceServer) -> None:
    (host,), code = await make_room(server, ["Host"])
    proxy = DroppingProxy(server.port)
    base = f"ws://127.0.0.1:{await proxy.start()}/?other=1"  # a URL's own query is kept
    for mode, name in ((JOIN, "Jo"), (WATCH, "Wat")):
        app = RaceApp(config(base, mode, name, code=code))
        async with app.run_test(size=SIZE):
            await until(lambda: app.model.room is not None, f"{name} in the room")  # noqa: B023
            await app.shutdown()
    bot = Bot(base, code, name="Botty", speed=50, races=1)
    racing = asyncio.ensure_future(bot.run())
    await until(lambda: bot.model.room is not None, "the bot in the room")
    racing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await racing
    assert proxy.targets == [f"/?other=1&room={code}"] * 3
    await host.close()
    await proxy.close()


async def test_a_follow_whose_resume_lacks_the_room_tries_again_unseen_then_hands_it_on(server: RaceServer) -> None:
    """On several nodes the node that created a room writes the host's player record (the room in
    it) behind its answer: the node the host then resumes on may read it before, and resume it in
    no room. follow_room then connects again, 50 ms doubling, FOLLOW_TRIES times, saying nothing,
    and hands on the last answer. Here the room is one the player is not in: every try lacks it."""
    proxy = DroppingProxy(server.port)
    connection = Connection(f"ws://127.0.0.1:{await proxy.start()}", "Ann")
    states: list[str] = []
    welcomes: list[p.Welcome] = []
    connection.on_state = lambda state, detail: states.append(state)
    connection.on_welcome = welcomes.append
    await connection.start()
    assert not await connection.follow_room("ABCDE")
    assert proxy.targets == ["/", *["/?room=ABCDE"] * (1 + FOLLOW_TRIES)]
    assert len(welcomes) == 2 and welcomes[1].resumed and welcomes[1].room is None
    assert states == ["connected"] and connection.reconnects == 0
    assert isinstance(await connection.request(p.ListRooms(), p.RoomList), p.RoomList)
    await connection.close()
    await proxy.close()
