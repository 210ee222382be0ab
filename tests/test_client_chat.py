"""The race client's chat, finish events, pace and podium at 80x24, against a real server on
loopback: keys in through Textual's ``run_test``, rendered screen text out. The other members are
the server tests' plain WebSocket ``Client``."""

from __future__ import annotations

import re

import msgspec
import pytest
from client_fixtures import fresh_state_dir, race_server  # noqa: F401  (fixtures: server, state_dir)
from support import Client, eventually, screen_text, until, url

from client.cli import main
from client.tui.race import HOST, RaceApp, RaceConfig
from client.widgets.chat import finish_text, podium
from client.widgets.leaderboard import row_text
from server.shell import RaceServer
from shared import protocol as p

SMALL = (80, 24)


async def member(server: RaceServer, code: str, name: str, role: str = p.RACER) -> Client:
    client = await Client.open(server, name)
    await client.hello(name)
    await client.send(p.Join(code=code, role=role))  # type: ignore[arg-type]
    await client.expect(p.Room)
    return client


def texts(client: Client) -> list[str]:
    return [m.line.text for m in client.messages if isinstance(m, p.ChatSaid)]


async def test_chat_finish_events_pace_and_podium_at_80x24(server: RaceServer) -> None:
    app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST))
    async with app.run_test(size=SMALL) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        assert app.model.room is not None
        code = app.model.room.code
        bob = await member(server, code, "Bob")
        zed = await member(server, code, "Zed", p.SPECTATOR)
        # Typing a chat line: c opens the line, Enter sends it; the others get it.
        await pilot.press("c")
        await pilot.press(*"good luck")
        await pilot.press("enter")
        await eventually(lambda: texts(bob) == ["good luck"] and texts(zed) == ["good luck"], what="Ann's line")
        await until(lambda: "Ann: good luck" in screen_text(app), "Ann's own line on screen")
        # Esc leaves the line unsent.
        await pilot.press("c")
        await pilot.press(*"never mind")
        await until(lambda: "never mind" in screen_text(app), "the line being typed")
        await pilot.press("escape")
        await until(lambda: "never mind" not in screen_text(app), "the line closed")
        assert not app.screen_.has_class("-chatting")
        # Lines from the others show, names as in the room (a spectator marked watching).
        await bob.send(p.Chat(text="thanks, you too"))
        await zed.send(p.Chat(text="go Bob"))
        await until(lambda: "Zed (watching): go Bob" in screen_text(app), "the spectator's line")
        assert "Bob: thanks, you too" in screen_text(app)
        # The host mutes the spectator by name; its next line is refused.
        await pilot.press("c")
        await pilot.press(*"/mute Zed")
        await pilot.press("enter")
        await eventually(lambda: latest_muted(zed), what="Zed muted")
        await zed.send(p.Chat(text="still here"))
        refused = await zed.expect(p.Error)
        assert refused.code == p.MUTED
        # The race: Ann readies and starts; Bob resigns: the finish event shows as it happens.
        await bob.send(p.Ready(ready=True))
        await until(lambda: all(m.ready for m in app.model.room.members if m.player_id != app.model.player_id), "ready")  # type: ignore[union-attr]
        await pilot.press("enter")
        await until(lambda: app.model.me is not None and app.model.me.ready, "Ann ready")
        await pilot.press("s")
        await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
        await bob.expect(p.RaceStart)
        await pilot.press("space")  # stock>waste: Ann has a time, so a pace
        await until(lambda: app.model.seq >= 1, "Ann's move")
        await bob.send(p.Move(id=1, move="resign"))
        await until(lambda: "» Bob resigned at " in screen_text(app), "Bob's finish event")
        assert re.search(r"» Bob resigned at 0:0\d with 1 card \(2nd for now\)", screen_text(app))
        assert texts(bob) == ["good luck", "thanks, you too", "go Bob"]  # "never mind" went nowhere
        # The pace column on the leaderboard: none yet, a few seconds into the race.
        assert re.search(r"Ann .* 0:0\d +-\s*$", screen_text(app), re.MULTILINE), screen_text(app)
        # A chat line during the race, by keys, while the board keeps its keys otherwise.
        await pilot.press("c")
        await pilot.press(*"gg")
        await pilot.press("enter")
        await eventually(lambda: "gg" in texts(bob), what="Ann's race line")
        assert app.model.seq == 1  # typing the line played no move
        # Ann resigns too: her finish, then the results with the podium.
        await pilot.press("R")
        await pilot.press("y")
        await until(lambda: app.model.results is not None, "the results")
        await until(lambda: "1st" in screen_text(app) and "2nd" in screen_text(app), "the podium")
        text = screen_text(app)
        assert "Results of race 1" in text and "» Ann resigned at" in text and "(1st)" in text
        podium = [line for line in text.splitlines() if "██" in line]
        assert podium and any("1st" in line for line in podium) and any("2nd" in line for line in podium)
        for client in (bob, zed):
            await client.close()


def latest_muted(client: Client) -> bool:
    room = next(m for m in reversed(client.messages) if isinstance(m, p.Room))
    return any(m.player_id == client.pid and m.muted for m in room.members)


def test_pace_shows_cards_home_per_minute_on_the_leaderboard_and_results() -> None:
    """The pace figure from a row's cards and race time (10 s of race time at least)."""
    rows = [
        p.LeaderboardRow(
            player_id="p1", name="Ann", bot=False, cards=104, moves=300, status="won", elapsed_ms=459_000, rank=1,
            connected=True,
        ),
        p.LeaderboardRow(
            player_id="p2", name="Bob", bot=False, cards=30, moves=80, status="playing", elapsed_ms=9_000, rank=2,
            connected=True,
        ),
    ]  # fmt: skip
    assert row_text(rows[0], 78, me=False).plain.rstrip().endswith("13.6/min")  # 104 cards in 7:39
    assert row_text(rows[1], 78, me=False).plain.rstrip().endswith("-")  # 9 s: too soon to say
    lines = podium(rows, 78).plain.splitlines()
    assert len(lines) == 4 and "Ann 7:39" in lines[0] and "Bob 30 cards" in lines[1]
    assert "1st" in lines[1] and "2nd" in lines[2]


async def test_a_room_whose_racers_read_the_spectators_chat_says_so_and_delivers_it(server: RaceServer) -> None:
    options = p.RoomOptions(spectator_chat=p.CHAT_ALWAYS)
    app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST, options=options))
    async with app.run_test(size=SMALL) as pilot:
        await until(lambda: app.model.room is not None, "the room")
        assert app.model.room is not None
        await until(lambda: "racers read the spectators' chat" in screen_text(app), "the rule in the lobby")
        zed = await member(server, app.model.room.code, "Zed", p.SPECTATOR)
        await pilot.press("s")  # Ann alone: she starts at once
        await until(lambda: app.model.phase == p.RACING, "the race")
        await zed.send(p.Chat(text="you can do it"))
        await until(lambda: "Zed (watching): you can do it" in screen_text(app), "the spectator's line mid-race")
        await zed.close()


def test_plot_host_refuses_an_unknown_spectator_chat_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["host", "--spectator-chat", "never"])
    assert exit_info.value.code == 2
    assert "--spectator-chat: invalid choice: 'never'" in capsys.readouterr().err


def test_finish_events_read_as_a_race_site_says_them() -> None:
    won = p.Finished(race=1, player_id="p2", name="bob", status="won", place=3, cards=104, elapsed_ms=459_000)
    assert finish_text(won) == "bob finished 3rd at 7:39"
    blocked = p.Finished(race=1, player_id="p3", name="cy", status="blocked", place=2, cards=61, elapsed_ms=312_000)
    assert finish_text(blocked) == "cy is blocked at 5:12 with 61 cards (2nd for now)"
    final = msgspec.structs.replace(blocked, final=True)
    assert finish_text(final) == "cy is blocked at 5:12 with 61 cards (2nd)"
