"""Ghosts in the client (docs/ghosts.md): ``plot practice --ghost RECORD`` races a saved record
beside you (its row marked, your split against it live), the results show it apart with the
splits, saved records carry their times (so they race again as they were), and bad files are
refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import DEAL, SIZE, screen_text, until

from client.cli import build_parser
from client.commands import host, practice
from client.ghosts import FRAME_BUDGET, GhostFile, ghost_frames, load_ghost
from client.tui.practice import embedded_server, practice_config
from client.tui.race import RaceApp
from client.widgets.leaderboard import GHOST_MARK
from shared import protocol as p
from shared.engine import Game


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def home_first(deal: int, entries: int) -> list[str]:
    game = Game(deal)
    moves: list[str] = []
    while not game.over and len(moves) < entries:
        legal = game.legal_moves()
        home = [m for m in legal if ">f" in m]
        move = home[0] if home else "stock>waste" if "stock>waste" in legal else legal[0] if legal else "resign"
        game.play(move)
        moves.append(move)
    return moves


def write_record(path: Path, moves: list[str], times: list[int] | None, name: str | None = None) -> Path:
    data: dict[str, object] = {"deal": DEAL, "moves": moves}
    if times is not None:
        data["times"] = times
    if name is not None:
        data["name"] = name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_long_record_goes_in_frames_under_the_servers_limit() -> None:
    moves = tuple(home_first(DEAL, 400)) * 3
    ghost = GhostFile(name="Long", deal=DEAL, moves=moves, times=tuple(range(len(moves))))
    frames = ghost_frames(ghost)
    assert len(frames) > 1 and [f.more for f in frames] == [True] * (len(frames) - 1) + [False]
    assert [f.offset for f in frames] == [sum(len(g.moves) for g in frames[:i]) for i in range(len(frames))]
    assert [m for f in frames for m in f.moves] == list(moves)
    assert all(len(p.encode(f)) < 4096 and sum(len(m) + 6 for m in f.moves) <= FRAME_BUDGET + 16 for f in frames)


def test_bad_ghost_files_are_refused_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "missing.json": None,
        "notjson.json": "{",
        "nodeal.json": json.dumps({"moves": ["stock>waste"]}),
        "times.json": json.dumps({"deal": DEAL, "moves": ["stock>waste"], "times": [1, 2]}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text, encoding="utf-8")
        args = build_parser().parse_args(["practice", "--ghost", str(path)])
        assert practice.run(args) == 2
        assert str(path) in capsys.readouterr().out
    good = write_record(tmp_path / "good.json", home_first(DEAL, 5), None)
    args = build_parser().parse_args(["practice", "--ghost", str(good), "--deal", str(DEAL + 1)])
    assert practice.run(args) == 2
    assert f"deal {DEAL}" in capsys.readouterr().out
    args = build_parser().parse_args(["host", "--ghost", str(good), "--winnable"])
    assert host.run(args) == 2
    assert "--winnable" in capsys.readouterr().out


async def test_practice_against_a_ghost_shows_its_row_the_splits_and_the_results(
    state_dir: Path, tmp_path: Path
) -> None:
    moves = home_first(DEAL, 150)
    game = Game(DEAL)
    for move in moves:
        game.play(move)
    assert game.foundation_cards >= 13  # the ghost reaches the first milestone
    times = [30 * (i + 1) for i in range(len(moves))]
    path = write_record(tmp_path / "best.json", moves, times, name="My best")
    ghost = load_ghost(path)
    assert ghost.name == "My best" and ghost.times == tuple(times)
    args = build_parser().parse_args(["practice", "--ghost", str(path)])
    assert args.ghost == [str(path)] and args.bots is None
    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        config = practice_config(server_url, name="Ann", bots=0, deal=DEAL, ghosts=(ghost,), deal_given=True)
        app = RaceApp(config)
        async with app.run_test(size=SIZE):
            await until(lambda: app.model.phase == p.RACING, "the race", 30)

            def ghost_row() -> p.LeaderboardRow | None:
                board = app.model.leaderboard
                return next((r for r in board.racers if r.ghost), None) if board else None

            await until(lambda: (row := ghost_row()) is not None and row.moves == len(moves), "the ghost's record", 30)
            text = screen_text(app)
            assert "My best" in text and GHOST_MARK in text
            # Behind the ghost at 13 cards (it got there, this racer did not): a "+" split on its row.
            await until(lambda: "+" in screen_text(app).split("My best", 1)[1].split("\n", 1)[0], "the live split")
            app.screen_.request("resign")
            await until(lambda: app.model.results is not None, "the results", 30)
            await until(lambda: "Ghosts (not ranked" in screen_text(app), "the results' ghosts")
            results = app.model.results
            assert results is not None and len(results.ghosts) == 1 and results.ranking == [app.model.player_id]
            await until(lambda: bool(app.model.saved_records), "the records saved")
            saved = json.loads(app.model.saved_records[app.model.player_id or ""].read_text(encoding="utf-8"))
            assert saved["times"] == results.times[app.model.player_id or ""] and saved["name"] == "Ann"
            await app.shutdown()
