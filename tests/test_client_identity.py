"""The client's claimed names (docs/players.md) against a real server on loopback: ``plot claim``,
``--rename``, ``plot identity export/import/list/forget`` through the real ``plot`` entry point,
the secret kept owner-only and never printed, and the race client (Textual's ``run_test``) bound
by it, its name marked claimed in the room, the chat and the leaderboard."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest
from client_fixtures import fresh_state_dir, race_server  # noqa: F401  (fixtures: server, state_dir)
from support import Client, eventually, screen_text, start_race, until, url

from client.cli import main
from client.connection import Connection
from client.identities import identities_path, new_secret
from client.tui.race import HOST, RaceApp, RaceConfig
from server.shell import RaceServer
from shared import protocol as p


async def plot(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = await asyncio.to_thread(main, list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def saved(folder: Path) -> dict[str, dict[str, str | None]]:
    data: dict[str, dict[str, str | None]] = json.loads(identities_path(folder).read_text())
    return data


async def bound_welcome(server_url: str) -> tuple[p.Welcome, list[p.ServerMessage]]:
    """A plain client connection's welcome, with whatever identity the state directory holds."""
    seen: list[p.ServerMessage] = []
    connection = Connection(server_url, "someone")
    connection.on_message = seen.append
    try:
        await connection.start()
        assert connection.welcome is not None
        return connection.welcome, seen
    finally:
        await connection.close()


async def test_claim_keeps_the_secret_private_and_every_later_connection_is_bound(
    server: RaceServer, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await plot(capsys, "claim", "Ann", "--server", url(server))
    assert code == 0, out
    assert "Ann is yours" in out and "✓" in out
    entry = saved(state_dir)[url(server)]
    secret = entry["secret"]
    assert isinstance(secret, str) and len(secret) == 43 and secret not in out
    assert entry["name"] == "Ann" and entry["profile_id"]
    assert stat.S_IMODE(identities_path(state_dir).stat().st_mode) == 0o600
    welcome, _ = await bound_welcome(url(server))
    assert (welcome.name, welcome.claimed, welcome.profile) == ("Ann", True, entry["profile_id"])
    # a second claim on the same server: refused with the way to rename
    code, out = await plot(capsys, "claim", "Bob", "--server", url(server))
    assert code == 1 and "--rename" in out
    code, out = await plot(capsys, "claim", "--rename", "Anna", "--server", url(server))
    assert code == 0 and "Anna is now your name" in out, out
    assert saved(state_dir)[url(server)]["name"] == "Anna"
    code, out = await plot(capsys, "claim", "--rename", "Annie", "--server", url(server))
    assert code == 1 and "rename_too_soon" in out
    code, out = await plot(capsys, "identity", "list")
    assert code == 0 and "Anna" in out and url(server) in out and secret not in out


async def test_export_and_import_move_the_identity_to_another_machine(
    server: RaceServer,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (await plot(capsys, "claim", "Cy", "--server", url(server)))[0] == 0
    moved = tmp_path / "moved.json"
    code, out = await plot(capsys, "identity", "export", str(moved))
    assert code == 0 and "1 identity written" in out
    assert stat.S_IMODE(moved.stat().st_mode) == 0o600
    secret = saved(state_dir)[url(server)]["secret"]
    assert isinstance(secret, str) and secret not in out
    # export without a file writes to standard output only when it is not a terminal (here: captured)
    code, out = await plot(capsys, "identity", "export")
    assert code == 0 and json.loads(out) == saved(state_dir)
    other = tmp_path / "other-machine"
    monkeypatch.setenv("PLOT_STATE_DIR", str(other))
    welcome, _ = await bound_welcome(url(server))
    assert not welcome.claimed  # nothing kept here yet: unclaimed, as ever
    code, out = await plot(capsys, "identity", "import", str(moved))
    assert code == 0 and "1 identity taken in" in out
    welcome, _ = await bound_welcome(url(server))
    assert (welcome.name, welcome.claimed) == ("Cy", True)
    # a look-alike claimed from a third machine: refused
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "third"))
    code, out = await plot(capsys, "claim", "СY", "--server", url(server))  # Cyrillic С
    assert code == 1 and "name_claimed" in out


async def test_an_identity_the_server_does_not_know_plays_unclaimed_and_can_be_forgotten(
    server: RaceServer, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    body = {url(server): {"secret": new_secret(), "profile_id": "pfgone", "name": "Ghost"}}
    identities_path(state_dir).write_text(json.dumps(body))
    welcome, seen = await bound_welcome(url(server))
    assert not welcome.claimed and welcome.name == "someone"
    assert any(isinstance(m, p.Error) and m.code == p.BAD_IDENTITY and "forget" in m.message for m in seen)
    code, out = await plot(capsys, "identity", "forget", "--server", url(server))
    assert code == 0 and "forgot" in out
    assert saved(state_dir) == {}
    code, out = await plot(capsys, "identity", "import", "/nonexistent/file.json")
    assert code == 1 and "plot identity" in out


async def test_the_race_client_shows_its_claimed_name_marked(
    server: RaceServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await plot(capsys, "claim", "Ann", "--server", url(server)))[0] == 0
    app = RaceApp(RaceConfig(url=url(server), name="typed-name", mode=HOST))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        assert app.model.room is not None
        await until(lambda: "Ann ✓" in screen_text(app), "the claimed mark beside the host's name")
        bob = await Client.open(server, "Bob")
        await bob.hello("Bob")
        await bob.send(p.Join(code=app.model.room.code))
        await bob.expect(p.Room)
        await until(lambda: "Bob" in screen_text(app), "Bob in the room")
        assert "Bob ✓" not in screen_text(app)
        await pilot.press("c")
        await pilot.press(*"hello")
        await pilot.press("enter")
        said = await bob.expect(p.ChatSaid)
        assert (said.line.name, said.line.claimed) == ("Ann", True)
        await until(lambda: "Ann ✓: hello" in screen_text(app), "the mark in the chat")
        await bob.send(p.Ready(ready=True))
        await until(lambda: any(m.name == "Bob" and m.ready for m in app.model.room.members), "Bob ready")  # type: ignore[union-attr]
        await pilot.press("enter")
        await until(lambda: app.model.me is not None and app.model.me.ready, "the host ready")
        await pilot.press("s")
        await until(lambda: app.model.phase == p.RACING, "the race")

        def marked_row(name: str) -> bool:
            return any(name in line and "/104" in line and "✓" in line for line in screen_text(app).splitlines())

        await eventually(lambda: marked_row("Ann"), what="the mark on Ann's leaderboard row")
        assert not marked_row("Bob")
        await bob.close()


async def test_the_race_client_shows_a_rated_races_changes(
    server: RaceServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await plot(capsys, "claim", "Ann", "--server", url(server)))[0] == 0
    secret = new_secret()
    claimer = await Client.open(server, "Bob")
    await claimer.hello("Bob")
    await claimer.send(p.Claim(name="Bob", identity=secret))
    await claimer.expect(p.Claimed)
    await claimer.close()
    app = RaceApp(RaceConfig(url=url(server), name="typed-name", mode=HOST))
    async with app.run_test(size=(120, 30)) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        assert app.model.room is not None
        bob = await Client.open(server, "Bob")
        await bob.send(p.Hello(v=p.PROTOCOL_VERSION, name="?", identity=secret))
        bob.welcome = await bob.expect(p.Welcome)
        await bob.send(p.Join(code=app.model.room.code))
        await bob.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        await until(lambda: any(m.name == "Bob" and m.ready for m in app.model.room.members), "Bob ready")  # type: ignore[union-attr]
        await pilot.press("enter")
        await until(lambda: app.model.me is not None and app.model.me.ready, "the host ready")
        await pilot.press("s")
        await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
        await bob.send(p.Move(id=1, move="resign"))
        await bob.expect(p.MoveOk)
        await pilot.press("R")
        await pilot.press("y")
        await until(lambda: app.model.results is not None and bool(app.model.results.ratings), "the ratings")
        results = app.model.results
        assert results is not None and results.rated
        mine = results.ratings[app.model.player_id or ""]
        said = f"rating {mine.after.shown} ({mine.change:+d})"
        await until(lambda: said in screen_text(app), "the change said on screen")
        theirs = results.ratings[bob.pid]
        await until(lambda: f"{theirs.after.shown} {theirs.change:>+5}" in screen_text(app), "Bob's row's change")
        await bob.close()


async def test_plot_ratings_prints_the_board_and_a_history(
    server: RaceServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await plot(capsys, "ratings", "--server", url(server))
    assert code == 0 and "no rated races" in out
    players = []
    for name in ("Ann", "Bob"):
        secret = new_secret()
        first = await Client.open(server, name)
        await first.hello(name)
        await first.send(p.Claim(name=name, identity=secret))
        await first.expect(p.Claimed)
        await first.close()
        bound = await Client.open(server, name)
        await bound.send(p.Hello(v=p.PROTOCOL_VERSION, name="?", identity=secret))
        bound.welcome = await bound.expect(p.Welcome)
        players.append(bound)
    ann, bob = players
    await ann.send(p.CreateRoom())
    room = (await ann.expect(p.Room)).code
    await bob.send(p.Join(code=room))
    await bob.expect(p.Room)
    await bob.send(p.Ready(ready=True))
    await start_race([ann, bob])
    for client in (ann, bob):
        await client.send(p.Move(id=1, move="resign"))
    results = await ann.expect(p.Results)
    while not results.ratings:
        results = await ann.expect(p.Results)
    # a node reads the board once a second at most (server/shell/profiles.py): the empty one read
    # above may answer for up to a second more
    shown: list[str] = []

    async def board_shows_both() -> bool:
        code, out = await plot(capsys, "ratings", "--server", url(server))
        shown[:] = out.splitlines()
        return code == 0 and len(shown) == 3

    await eventually(board_shows_both, what="the board with both racers")
    lines = shown
    assert "Ann" in lines[1] and "Bob" in lines[2], lines
    assert str(results.ratings[ann.pid].after.shown) in lines[1]
    code, out = await plot(capsys, "ratings", "bob", "--server", url(server))
    assert code == 0 and f"room {room} race 1: 2 of 2" in out, out
    code, out = await plot(capsys, "ratings", "Nobody", "--server", url(server))
    assert code == 1 and "unknown_player" in out
    code, out = await plot(capsys, "ratings", "--limit", "0", "--server", url(server))
    assert code == 2
    for client in (ann, bob):
        await client.close()
