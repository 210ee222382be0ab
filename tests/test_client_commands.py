"""The network commands through the real ``plot`` entry point: bad input gets a clear error, and
``plot bot`` races in a real server's room from another process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from support import make_room, plot_process, running_server, url

from client.cli import main
from shared import protocol as p


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path))
    return tmp_path


def test_bad_room_codes_are_refused_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("join", "watch"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "0OIL1"])
        assert exit_info.value.code == 2
        assert "not a room code" in capsys.readouterr().err


def test_bad_host_and_practice_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["host", "--max-racers", "1"]) == 2
    assert capsys.readouterr().out == "plot host: --max-racers must be 2..16, not 1\n"
    assert main(["host", "--spectator-delay", "-1"]) == 2
    assert capsys.readouterr().out == "plot host: --spectator-delay must be 0..3600 seconds, not -1\n"
    assert main(["host", "--time-limit", "5"]) == 2
    out = capsys.readouterr().out
    assert out == "plot host: --time-limit must be 10..86400 seconds, not 5\n" and "Expected" not in out
    assert main(["host", "--winnable", "--deal", "7"]) == 2
    assert "leave out --deal or --winnable" in capsys.readouterr().out
    assert main(["host", "--max-racers", "4", "--bots", "4"]) == 2
    assert "--bots must be 0..3" in capsys.readouterr().out
    assert main(["host", "--name", "x" * 25]) == 2
    assert "at most 24 cells wide" in capsys.readouterr().out
    assert main(["practice", "--bots", "0"]) == 2
    assert "--bots must be 1..15" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["host", "--deal", "-4"])
    assert "not a deal number" in capsys.readouterr().err


def test_rooms_says_so_when_no_server_answers(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    assert main(["rooms", "--server", f"127.0.0.1:{port}"]) == 1
    out = capsys.readouterr().out
    assert "cannot connect to ws://127.0.0.1:" in out and "refused" in out


async def test_plot_bot_races_a_room_from_another_process() -> None:
    async with running_server() as server:
        (host,), code = await make_room(server, ["Host"])
        proc = await plot_process(
            "bot", "--room", code.lower(), "--server", url(server),
            "--speed", "300", "--races", "1", "--name", "Robo",
        )  # fmt: skip
        while True:  # the bot joins (marked as a bot) and readies up by itself
            room = await host.expect(p.Room, timeout=20)
            bots = [m for m in room.members if m.bot]
            if bots and bots[0].ready:
                break
        assert bots[0].name == "Robo (medium)"  # the default level, beside the name
        await host.send(p.Ready(ready=True))
        await host.expect(p.Room)
        await host.send(p.Start())
        await host.expect(p.RaceStart)
        await host.send(p.Move(id=1, move="resign"))
        results = await host.expect(p.Results, timeout=30)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        robo = next(row for row in results.racers if row.name == "Robo (medium)")
        assert robo.bot and robo.status in ("won", "blocked", "resigned") and robo.cards > 1
        assert f"Robo (medium): {robo.moves} moves played" in out.decode()
        await host.close()
