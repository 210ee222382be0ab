"""One seat per window, and how a window ends: the race client through
Textual's harness against a real server on loopback, two windows sharing ONE state directory."""

from __future__ import annotations

import json
from pathlib import Path

from client_fixtures import fresh_state_dir, race_server  # noqa: F401  (fixtures: server, state_dir)
from support import SIZE, Client, message, race_against, screen_text, until, url

from client.commands._race_args import exit_summary
from client.tui.race import HOST, JOIN, WATCH, RaceApp, RaceConfig
from server.shell import RaceServer
from shared import protocol as p


def window(server: RaceServer, mode: str, name: str, code: str | None = None, **kwargs: object) -> RaceApp:
    return RaceApp(RaceConfig(url=url(server), name=name, mode=mode, code=code, **kwargs))  # type: ignore[arg-type]


def member_names(app: RaceApp) -> list[str]:
    room = app.model.room
    return [] if room is None else sorted(m.name for m in room.members)


async def hosted(app: RaceApp) -> str:
    await until(lambda: app.model.room is not None, "the room")
    assert app.model.room is not None
    return app.model.room.code


async def test_host_and_join_in_two_windows_are_two_racers(server: RaceServer) -> None:
    alice = window(server, HOST, "alice")
    async with alice.run_test(size=SIZE):
        code = await hosted(alice)
        bob = window(server, JOIN, "bob", code)
        async with bob.run_test(size=SIZE):
            await until(lambda: member_names(alice) == ["alice", "bob"], "bob in alice's lobby")
            await until(lambda: member_names(bob) == ["alice", "bob"], "both in bob's lobby")
            assert alice.model.player_id != bob.model.player_id
            assert "back in room" not in message(bob)
            assert "bob" in screen_text(alice) and "alice" in screen_text(bob)
            assert bob.model.me is not None and bob.model.me.name == "bob" and bob.model.role == p.RACER
            assert alice.model.is_host and not bob.model.is_host


async def test_a_second_window_with_the_same_name_takes_a_new_seat_but_not_the_name_in_the_room(
    server: RaceServer,
) -> None:
    first = window(server, HOST, "alice")
    async with first.run_test(size=SIZE):
        code = await hosted(first)
        second = window(server, JOIN, "alice", code)
        async with second.run_test(size=SIZE):
            await until(lambda: "is already called 'alice'" in message(second), "the name refused in the room")
            assert second.model.player_id is not None and first.model.player_id != second.model.player_id
            assert "--name ANOTHER" in message(second)
            await until(lambda: second.return_code == 1, "the second window ends, exit code 1")
            # The first window is untouched: still the host, still connected, alone in its room.
            assert member_names(first) == ["alice"]
            assert first.connection_state == "connected" and first.model.is_host


async def test_a_window_whose_seat_is_taken_over_says_so_and_stops(server: RaceServer, state_dir: Path) -> None:
    app = window(server, HOST, "alice")
    async with app.run_test(size=SIZE) as pilot:
        code = await hosted(app)
        (token_path,) = (state_dir / "tokens").glob("*.json")
        token = json.loads(token_path.read_text())["token"]
        assert json.loads(token_path.read_text())["room"] == code
        # Elsewhere (another machine, another client), the same seat is resumed.
        other = await Client.open(server, "alice elsewhere")
        welcome = await other.hello("alice", token=token)
        assert welcome.resumed and welcome.room == code
        await until(lambda: app.superseded, "the takeover noticed")
        await pilot.pause()
        assert "taken over by another window" in message(app)
        assert app.model.room is None and app.connection is not None and app.connection.superseded
        # Nothing here acts on the room any more: ready and start are dead keys.
        await pilot.press("enter", "s")
        await pilot.pause()
        room = server.core.room_record(code)
        assert room is not None and room.phase == p.LOBBY
        assert not next(m for m in room.members if m.player_id == welcome.player_id).ready
        assert server.core.player_connections(welcome.player_id) == 1  # the other client's alone
        await other.close()
    assert "taken over" in app.exit_note


async def test_quitting_the_lobby_says_the_player_left(server: RaceServer) -> None:
    app = window(server, HOST, "alice")
    async with app.run_test(size=SIZE) as pilot:
        code = await hosted(app)
        await pilot.press("ctrl+q")
        await until(lambda: app.closed, "the quit")
    assert exit_summary(app) == f"you left room {code}"
    await until(lambda: not server.core.has_room(code), "the empty room closed")


async def test_a_spectator_quitting_is_not_told_it_is_seated(server: RaceServer) -> None:
    host = await Client.open(server, "host")
    await host.hello("host")
    await host.send(p.CreateRoom(options=p.RoomOptions()))
    code = (await host.expect(p.Room)).code
    app = window(server, WATCH, "wendy", code, profile="spectator")
    async with app.run_test(size=SIZE) as pilot:
        await until(lambda: app.model.role == p.SPECTATOR, "watching")
        await pilot.press("ctrl+c")  # Ctrl+C quits (no race of ours on: no question)
        await until(lambda: app.closed, "the quit")
    summary = exit_summary(app)
    assert "seated" not in summary and summary == f"you left room {code}"
    await host.close()


async def test_ending_the_race_for_everyone_asks_first(server: RaceServer) -> None:
    app = window(server, HOST, "alice")
    async with app.run_test(size=SIZE) as pilot:
        bob = await race_against(app, pilot, server, "bob")
        await pilot.press("E")
        await until(lambda: "End the race now, for every racer?" in screen_text(app), "the question")
        await pilot.press("n")
        await until(lambda: "the race goes on" in message(app), "the answer")
        assert app.model.phase == p.RACING
        await pilot.press("E")
        await until(lambda: "End the race now" in screen_text(app), "the question again")
        await pilot.press("y")
        await until(lambda: app.model.phase == p.RESULTS, "the results")
        await bob.close()


async def test_ctrl_c_mid_race_asks_then_quits_keeping_the_seat(server: RaceServer) -> None:
    app = window(server, HOST, "alice")
    async with app.run_test(size=SIZE) as pilot:
        bob = await race_against(app, pilot, server, "bob")
        code = app.model.room.code  # type: ignore[union-attr]
        await pilot.press("ctrl+c")
        await until(lambda: "Quit mid-race?" in screen_text(app), "the question")
        await pilot.press("n")
        await until(lambda: "still racing" in message(app), "the answer")
        assert not app.closed and app.model.phase == p.RACING
        await pilot.press("ctrl+c")
        await until(lambda: "Quit mid-race?" in screen_text(app), "the question again")
        await pilot.press("y")
        await until(lambda: app.closed, "the quit")
    assert exit_summary(app).startswith(f"you are still racing in room {code}: run the same command again")
    await bob.close()


async def test_a_request_takes_only_the_error_that_answers_it(server: RaceServer) -> None:
    """Connection.request matches an error by its ref: an error about another message is not its answer."""
    from client.connection import Connection

    host = await Client.open(server, "host")
    await host.hello("host")
    await host.send(p.CreateRoom(options=p.RoomOptions()))
    code = (await host.expect(p.Room)).code
    connection = Connection(url(server), "ann")
    await connection.start()
    errors: list[p.Error] = []
    connection.on_message = lambda msg: errors.append(msg) if isinstance(msg, p.Error) else None
    # Ready outside a room is refused (ref "ready") while the join is under way: the join's answer is the room.
    assert await connection.send(p.Ready(ready=True))
    reply = await connection.request(p.Join(code=code), p.Room)
    assert isinstance(reply, p.Room) and reply.code == code
    await until(lambda: any(e.ref == "ready" for e in errors), "the ready refusal")
    # And the error that does answer it is its answer.
    again = await connection.request(p.Join(code="ZZZZZ"), p.Room)
    assert isinstance(again, p.Error) and again.ref == "join" and again.code == p.WRONG_PHASE
    await connection.close()
    await host.close()
