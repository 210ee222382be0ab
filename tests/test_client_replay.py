"""``plot replay``: a reference record played back on the board (Textual harness at 80x24), and
the command's error paths through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import screen_text, until

from client.cli import main as plot_main
from client.tui.replay import ReplayApp, build_replay
from shared.engine import Game, View

VECTORS = Path(__file__).parent / "vectors"
RECORDS: list[dict[str, Any]] = json.loads((VECTORS / "records.json").read_text())["records"]
WON = next(r for r in RECORDS if r["expect"].get("status") == "won")  # a whole game, won
ILLEGAL = next(r for r in RECORDS if r.get("family") == "space-from-waste")  # stops at an illegal entry
SMALL = (80, 24)


def status_line(app: ReplayApp) -> str:
    return screen_text(app).splitlines()[0]


def view_after(record: dict[str, Any], moves: int) -> View:
    game = Game(record["deal"], undo=record.get("undo", True), blocked_budget=None)
    for entry in record["moves"][:moves]:
        game.play(entry, check_blocked=False)
    return game.view()


def board_shows(app: ReplayApp, view: View) -> bool:
    """The screen's stock and home counts are those of ``view``."""
    text = screen_text(app)
    stock = f"{view.stock} cards" if view.stock else "empty"
    return stock in text and f"{view.foundation_cards}/104 home" in text


async def test_replay_steps_pauses_and_jumps_through_a_reference_record() -> None:
    record = WON["record"]
    total = len(record["moves"])
    replay = build_replay(record["deal"], record["moves"], undo=record.get("undo", True))
    assert replay.moves == total and replay.illegal is None
    app = ReplayApp(replay, speed=1000)
    async with app.run_test(size=SMALL) as pilot:
        # It plays by itself, to the end of the record, and stops there (477 entries: about 12 s on
        # a loaded 2-core machine, where each drawn frame limits the pace; more in a full suite).
        await until(lambda: f"move {total}/{total}" in status_line(app), "the end of the record", 90.0)
        await until(lambda: "paused" in status_line(app), "paused at the end")
        assert "end of the record: won, 104/104 home" in screen_text(app)
        assert "WON" in screen_text(app)
        # Home: the deal.
        await pilot.press("home")
        await until(lambda: f"move 0/{total}" in status_line(app), "the deal")
        assert board_shows(app, view_after(record, 0))
        # Steps, forward and back: the board is the engine's position after that many entries.
        await pilot.press("right", "right", "right")
        await until(lambda: f"move 3/{total}" in status_line(app), "three steps")
        assert board_shows(app, view_after(record, 3))
        assert f"3: {record['moves'][2]}" in screen_text(app)
        await pilot.press("left")
        await until(lambda: f"move 2/{total}" in status_line(app), "a step back")
        assert board_shows(app, view_after(record, 2)) and "paused" in status_line(app)
        # g and a number.
        await pilot.press("g", "2", "0", "0", "enter")
        await until(lambda: f"move 200/{total}" in status_line(app), "move 200")
        assert board_shows(app, view_after(record, 200))
        assert f"200: {record['moves'][199]}" in screen_text(app)
        await pilot.press("g", "x", "enter")
        await until(lambda: "not a move number" in screen_text(app), "a bad move number")
        assert f"move 200/{total}" in status_line(app)
        # Space plays on from there, at the pace chosen.
        await pilot.press("minus")
        await until(lambda: "playing" not in status_line(app), "still paused")
        await pilot.press("space")
        await until(lambda: "playing at" in status_line(app), "playing")
        await until(lambda: f"move 200/{total}" not in status_line(app), "it moves on")
        await pilot.press("space")
        await until(lambda: "paused" in status_line(app), "paused again")
        # End: the last move.
        await pilot.press("end")
        await until(lambda: f"move {total}/{total}" in status_line(app), "the end")
        assert board_shows(app, view_after(record, total))


async def test_replay_of_a_record_with_an_illegal_entry_stops_before_it_and_says_why() -> None:
    record = ILLEGAL["record"]
    index = ILLEGAL["expect"]["error"]["index"]
    replay = build_replay(record["deal"], record["moves"])
    assert replay.moves == index and replay.illegal is not None
    app = ReplayApp(replay, speed=1, paused=True)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert f"move 0/{index}" in status_line(app) and "paused" in status_line(app)
        await pilot.press("end")
        await until(lambda: "the record stops here" in screen_text(app), "the reason")
        text = screen_text(app).replace("\n", " ")
        assert f"entry {index} ({record['moves'][index]}) is illegal" in " ".join(text.split())


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        (None, [], "cannot read"),
        (b"{not json", [], "is not JSON"),
        (b'{"deal": 1}', [], "is not a game record: the game record has no 'moves' field"),
        (b"[1, 2]", [], "is not a game record"),
        (b'{"deal": 1, "moves": []}', ["--speed", "0"], "--speed must be above 0"),
    ],
)
def test_replay_refuses_what_it_cannot_play_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, args: list[str], expected: str
) -> None:
    path = tmp_path / "record.json"
    if content is not None:
        path.write_bytes(content)
    assert plot_main(["replay", str(path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("plot replay: ") and expected in captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""
