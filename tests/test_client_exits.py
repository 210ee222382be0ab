"""Exit codes and the words the client says: a join to a missing room ends the
window with exit code 1 and says so; server refusals reach the player as sentences, never a
validator's text; counts come in the right number."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from client_fixtures import fresh_state_dir, race_server  # noqa: F401  (fixtures: server, state_dir)
from support import SIZE, Client, message, plot_process, until, url

from client.bot import Bot
from client.commands._race_args import finish
from client.connection import ConnectionFailed
from client.tui.race import JOIN, RaceApp, RaceConfig
from client.words import describe_error, plural
from server.shell import RaceServer
from shared import protocol as p


async def test_joining_a_room_that_does_not_exist_says_so_and_exits_1(
    server: RaceServer, capsys: pytest.CaptureFixture[str]
) -> None:
    app = RaceApp(RaceConfig(url=url(server), name="ann", mode=JOIN, code="ZZZZZ"))
    async with app.run_test(size=SIZE):
        await until(lambda: "there is no room ZZZZZ" in message(app), "the refusal on screen")
        await until(lambda: app.return_code == 1, "the window ends by itself, exit code 1")
    assert finish(app) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"cannot join room ZZZZZ: there is no room ZZZZZ on {url(server)}")


async def test_plot_join_of_a_missing_room_exits_non_zero_through_the_entry_point(server: RaceServer) -> None:
    proc = await plot_process("join", "zzzzz", "--server", url(server), "--name", "ann")
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1, err.decode()
    assert f"cannot join room ZZZZZ: there is no room ZZZZZ on {url(server)}" in out.decode()


async def test_a_bot_that_cannot_join_says_why_once(server: RaceServer) -> None:
    host = await Client.open(server, "host")
    await host.hello("host")
    await host.send(p.CreateRoom(options=p.RoomOptions(bots_allowed=False)))
    code = (await host.expect(p.Room)).code
    with pytest.raises(ConnectionFailed) as info:
        await Bot(url(server), code, name="bot").run()
    assert str(info.value) == f"cannot join room {code}: this room does not let bots race"
    await host.close()


def test_server_errors_read_as_sentences() -> None:
    raw = p.Error(
        code=p.BAD_FIELD, message="field 'options.max_racers' of create_room: Expected `int` >= 2", ref="create_room"
    )
    text = describe_error(raw)
    assert "Expected" not in text and "options.max_racers" in text and "check the command's options" in text
    full = p.Error(code=p.ROOM_FULL, message="room ABCDE has all 2 racers")
    assert describe_error(full) == "room ABCDE has all 2 racers"
    assert "update the client" in describe_error(p.Error(code=p.UNSUPPORTED_VERSION, message="v2"))
    closed = describe_error(p.Error(code=p.RATE_LIMITED, message="too many messages (limit 30 messages per second)"))
    assert "closed the connection" in closed
    budget = "the server has sent too much in answer to this connection's requests (limit 4096 bytes a second)"
    spent = p.Error(code=p.RATE_LIMITED, message=f"{budget}: try again in 1.5 s; retry_ms=1500", ref="join")
    assert describe_error(spent) == f"{budget}: try again in 1.5 s"  # open still: says how long to wait


def test_counts_are_in_the_right_number() -> None:
    assert [plural(n, "card") for n in (0, 1, 2)] == ["0 cards", "1 card", "2 cards"]
    assert plural(1, "entry") == "1 entry" and plural(3, "entry") == "3 entries" and plural(1, "move") == "1 move"


def test_the_printed_plot_command_works_where_it_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`plot` when it is on the PATH as this program; else this program's full path."""
    from client.words import plot_command, typed_path

    script = tmp_path / "venv bin" / "plot"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "practice"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert plot_command() == f"'{script}'"  # not on the PATH: the full path, quoted for the shell
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert plot_command() == "plot"  # `source .venv/bin/activate` done: the short name works
    monkeypatch.setenv("HOME", str(tmp_path))
    assert typed_path(tmp_path / "records" / "a b.json") == "~/'records/a b.json'"
