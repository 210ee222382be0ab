"""Bot levels: every level plays only legal moves from its own View, the levels order by
strength, two bots of one level part ways, the options reach the bots, and a search never runs
on the bot's event loop.

The engine-side tests hand a level exactly what the server sends a racer (``Game.view()``: no
stock order, no buried reserve card, no deal number); the others race through a real server on
loopback. Where a search level's result must not depend on the machine's load, its time limit
per move is lifted (``unhurried``): its choices then depend on the View and the seed alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from client_fixtures import race_server  # noqa: F401  (fixtures: server)
from support import SIZE, make_room, plot_process, screen_text, until, url

from client.bot import Bot
from client.bot_levels import LEVEL_NAMES, LEVELS, Level, Player, level_named, parse_levels
from client.bot_search import SearchBudget, unseen_cards
from client.cli import build_parser, main
from client.tui.practice import embedded_server, practice_config
from client.tui.race import RaceApp
from client.viewmodel import legal_moves
from server.shell import RaceServer
from shared import protocol as p
from shared.engine import PLAYING, RESIGN, Game

# Proved-winnable deals (bench/results/winrate.jsonl), small enough a sample for a test.
DEALS = (2, 3)


def unhurried(level: Level) -> Level:
    """``level`` with no time limit per move: only its budget in positions bounds a search."""
    if level.search is None:
        return level
    return dataclasses.replace(level, search=dataclasses.replace(level.search, seconds=1e9))


def play_from_view(deal: int, player: Player, max_entries: int | None = None) -> Game:
    """A game of ``deal`` where every entry comes from ``player`` shown the racer's View only;
    each must be legal in that View (and so on the server)."""
    game = Game(deal)
    while game.status == PLAYING and (max_entries is None or len(game.entries) < max_entries):
        view = game.view()
        entry = player.choose_here(view)
        if entry is None:
            break
        assert entry == RESIGN or entry in legal_moves(view), (deal, len(game.entries), entry)
        game.play(entry)
    if game.status == PLAYING and game.blocked_pending and max_entries is None:
        game.resolve_blocked(game.is_blocked())
    return game


# ---------------------------------------------------------------- legal moves, from the View only


@pytest.mark.parametrize("name", LEVEL_NAMES)
def test_each_level_plays_only_legal_moves_from_its_view(name: str) -> None:
    level = unhurried(level_named(name))
    entries = None if level.search is None else 60  # a search level's whole game costs seconds
    for deal in DEALS[:2]:
        game = play_from_view(deal, Player(level, seed=deal), entries)
        assert len(game.entries) >= (60 if entries else 30)


@pytest.mark.parametrize("name", LEVEL_NAMES)
def test_a_level_sees_no_more_than_its_view(name: str) -> None:
    """Two deals that differ only in cards the View hides (the stock's two last cards swapped) get
    the very same entries from the same seed, for as long as their Views agree."""
    level = unhurried(level_named(name))
    first = Game(4242)
    second = first.copy()
    second.stock[0], second.stock[1] = second.stock[1], second.stock[0]  # the last two to be turned
    assert second.stock != first.stock and unseen_cards(first.view()) == unseen_cards(second.view())
    one, two = Player(level, seed=7), Player(level, seed=7)
    played = 0
    limit = 200 if level.search is None else 50
    while first.status == PLAYING and played < limit and first.view() == second.view():
        a, b = one.choose_here(first.view()), two.choose_here(second.view())
        assert a == b, f"entry {played}: {a} against {b} from the same View"
        if a is None or b is None:
            break
        first.play(a)
        second.play(b)
        played += 1
    assert played >= min(limit, 30)


def test_a_search_level_redraws_its_samples_for_a_new_race() -> None:
    """A rematch deals a new deal whose View has the very counts the last one began with: every
    sample then holds exactly the cards the new View hides, never the last deal's."""
    player = Player(unhurried(level_named("expert")), seed=1)
    first = Game(4242)
    player.choose_here(first.view())  # the first race, resigned at once
    second = Game(2).view()
    assert (second.stock, second.reserve_count) == (first.view().stock, first.view().reserve_count)
    entry = player.choose_here(second)
    assert entry in legal_moves(second)
    hidden = unseen_cards(second)
    assert player.memory.samples and all(sorted(s.stock + s.buried) == hidden for s in player.memory.samples)


async def test_bots_of_every_level_race_through_a_real_server_without_a_rejected_move(
    server: RaceServer, caplog: pytest.LogCaptureFixture
) -> None:
    (host,), code = await make_room(server, ["Host"], deal=4242, max_racers=len(LEVELS) + 1)
    bots = [Bot(url(server), code, name=f"b-{lv.name}", speed=400, level=lv, seed=i) for i, lv in enumerate(LEVELS)]
    caplog.set_level(logging.INFO, logger="plot.bot")
    tasks = [asyncio.ensure_future(bot.run()) for bot in bots]
    try:
        await until(lambda: all(b.model.me is not None and b.model.me.ready for b in bots), "every bot ready")
        await host.send(p.Ready(ready=True))
        await host.send(p.Start())
        await host.expect(p.RaceStart)
        await host.send(p.Move(id=1, move="resign"))
        # The greedy levels play their whole game at this speed; the search levels a good part.
        await until(lambda: all(b.moves_played >= 40 or b.model.results is not None for b in bots), "40 moves each", 60)
        await host.send(p.EndRace())
        results = await host.expect(p.Results, timeout=30)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await host.close()
    assert "rejected" not in caplog.text
    by_name = {row.name: row for row in results.racers}
    for bot in bots:
        row = by_name[bot.name]
        assert row.bot and row.moves == bot.moves_played >= 40
        record = results.records[row.player_id]
        assert len(record.moves) == bot.moves_played  # every move the bot sent was accepted


# ---------------------------------------------------------------- strength


def test_the_levels_order_by_strength_on_a_fixed_sample() -> None:
    """Cards home, summed: beginner < easy < medium over many deals (the greedy levels cost
    milliseconds a game), and medium < hard < expert-or-hard on a few."""
    many = range(40)
    greedy = {
        name: sum(play_from_view(d, Player(level_named(name), seed=d)).foundation_cards for d in many)
        for name in ("beginner", "easy", "medium")
    }
    assert greedy["beginner"] < greedy["easy"] < greedy["medium"], greedy
    few = {
        name: sum(play_from_view(d, Player(unhurried(level_named(name)), seed=d)).foundation_cards for d in DEALS)
        for name in ("medium", "hard", "expert")
    }
    assert few["medium"] < few["hard"] <= few["expert"], few
    assert few["expert"] == 104 * len(DEALS)


# ---------------------------------------------------------------- two bots of one level


@pytest.mark.parametrize("name", LEVEL_NAMES)
def test_two_bots_of_one_level_play_differently(name: str) -> None:
    level = unhurried(level_named(name))
    one, two = Player(level, seed=1), Player(level, seed=2)
    assert one.pace != two.pace
    assert [one.delay() for _ in range(5)] != [two.delay() for _ in range(5)]
    entries = 120 if level.search is None else 40
    games = [play_from_view(deal, player, entries) for deal, player in ((4242, one), (4242, two))]
    assert games[0].entries != games[1].entries


async def test_two_bots_of_one_level_race_differently_through_a_server(server: RaceServer) -> None:
    (host,), code = await make_room(server, ["Host"], deal=4242)
    medium = level_named("medium")
    bots = [Bot(url(server), code, name=f"twin-{i}", speed=400, level=medium, races=1) for i in (1, 2)]
    tasks = [asyncio.ensure_future(bot.run()) for bot in bots]
    await until(lambda: all(b.model.me is not None and b.model.me.ready for b in bots), "both bots ready")
    await host.send(p.Ready(ready=True))
    await host.send(p.Start())
    await host.expect(p.RaceStart)
    await host.send(p.Move(id=1, move="resign"))
    results = await host.expect(p.Results, timeout=60)
    await asyncio.gather(*tasks)
    await host.close()
    twins = [results.records[row.player_id].moves for row in results.racers if row.bot]
    assert len(twins) == 2 and twins[0] != twins[1]


# ---------------------------------------------------------------- options


def test_level_options_parse_and_bad_ones_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["practice", "--bots", "3", "--level", "hard"])
    assert args.level == ("hard",) and args.bots == 3
    assert parser.parse_args(["bot", "--room", "ABCDE", "--level", "Easy, hard"]).level == ("easy", "hard")
    assert parser.parse_args(["host", "--bot-level", "expert"]).bot_level == ("expert",)
    assert parser.parse_args(["bot", "--room", "ABCDE"]).level == ("medium",)
    for argv in (["practice", "--level", "godlike"], ["bot", "--room", "ABCDE", "--level", "easy,"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "no bot level" in err and "beginner, easy, medium, hard, expert" in err
    assert main(["bot", "--room", "ABCDE", "--name", "a-very-long-bot-name", "--level", "beginner"]) == 2
    assert "a-very-long-bot-name (beginner)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no bot level 'x'"):
        parse_levels("easy,x")


async def test_plot_bot_level_names_each_bot_with_its_level(server: RaceServer) -> None:
    (host,), code = await make_room(server, ["Host"], deal=4242)
    proc = await plot_process(
        "bot", "--room", code, "--server", url(server), "--name", "Robo",
        "--count", "3", "--level", "easy,hard", "--speed", "300", "--races", "1", "--seed", "5",
    )  # fmt: skip
    try:
        while True:
            room = await host.expect(p.Room, timeout=30)
            bots = [m for m in room.members if m.bot]
            if len(bots) == 3 and all(m.ready for m in bots):
                break
        assert sorted(m.name for m in bots) == ["Robo-1 (easy)", "Robo-2 (hard)", "Robo-3 (easy)"]
        await host.send(p.Ready(ready=True))
        await host.send(p.Start())
        await host.expect(p.RaceStart)
        await host.send(p.Move(id=1, move="resign"))
        await host.expect(p.Leaderboard)
        await until(
            lambda: host.leaderboard is not None and all(r.moves >= 20 for r in host.leaderboard.racers if r.bot),
            "the bots playing",
            60,
        )
        await host.send(p.EndRace())
        results = await host.expect(p.Results, timeout=30)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await host.close()
    assert proc.returncode == 0, err.decode()
    assert {row.name for row in results.racers if row.bot} == {"Robo-1 (easy)", "Robo-2 (hard)", "Robo-3 (easy)"}
    assert "Robo-2 (hard): " in out.decode()


async def test_practice_with_mixed_levels_shows_each_level_beside_its_bot() -> None:
    args = build_parser().parse_args(["practice", "--bots", "3", "--level", "easy,hard", "--speed", "50"])
    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        config = practice_config(
            server_url, name="Newcomer", bots=args.bots, deal=4242, speed=args.speed, levels=args.level
        )
        app = RaceApp(config)
        async with app.run_test(size=SIZE):
            await until(lambda: app.model.phase == p.RACING and app.model.leaderboard is not None, "the race", 30)
            names = {row.name for row in app.model.leaderboard.racers}  # type: ignore[union-attr]
            assert names == {"Newcomer", "bot-1 (easy)", "bot-2 (hard)", "bot-3 (easy)"}
            await until(lambda: "bot-2 (hard)" in screen_text(app), "the level on the leaderboard")
            await app.shutdown()


# ---------------------------------------------------------------- off the event loop


async def test_a_searching_bot_never_holds_up_its_event_loop(server: RaceServer) -> None:
    """A search level made to think a second and a half a move (more samples than it can solve
    in that time): while it thinks, a ticker on the bot's own event loop keeps its pace, because
    the search runs in a worker process."""
    slow = Level("slow", 1000.0, 0.0, SearchBudget(samples=2000, positions=200_000, seconds=1.5), "thinks long")
    (host,), code = await make_room(server, ["Host"], deal=4242)
    bot = Bot(url(server), code, name="thinker", level=slow, seed=3)
    racing = asyncio.ensure_future(bot.run())
    gaps: list[float] = []
    moves_at: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        seen = 0
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            if bot.moves_played != seen:
                seen = bot.moves_played
                moves_at.append(now)

    ticker = asyncio.ensure_future(tick())
    try:
        await until(lambda: bot.model.me is not None and bot.model.me.ready, "the bot ready")
        await host.send(p.Ready(ready=True))
        await host.send(p.Start())
        await host.expect(p.RaceStart)
        started = time.monotonic()
        gaps.clear()
        await until(lambda: len(moves_at) >= 2, "two moves", 60)
    finally:
        ticker.cancel()
        racing.cancel()
        await asyncio.gather(ticker, racing, return_exceptions=True)
        await host.close()
    # Each move came a whole search after the last (its pace is a millisecond a move), and
    # meanwhile the loop never stalled for anything like a search.
    assert moves_at[0] - started > 1.2 and moves_at[1] - moves_at[0] > 1.2, (started, moves_at)
    assert max(gaps) < 0.5, max(gaps)


# ---------------------------------------------------------------- the bench


def test_the_bench_plays_each_level_and_writes_its_figures(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parent.parent / "bench"
    if str(bench) not in sys.path:
        sys.path.append(str(bench))  # a bench script imports its neighbours from bench/
    spec = importlib.util.spec_from_file_location("bench_bot_levels", bench / "bot_levels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "levels.json"
    assert module.main(["--deals", "3", "--levels", "beginner,medium", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["levels"]) == ["beginner", "medium"] and len(report["deals"]) == 3
    assert len(report["games"]) == 6 and {g["level"] for g in report["games"]} == {"beginner", "medium"}
    for name, figures in report["levels"].items():
        games = [g for g in report["games"] if g["level"] == name]
        assert figures["wins"] == sum(g["status"] == "won" for g in games) and figures["games"] == 3
        low, high = figures["win_rate_95"]
        assert 0 <= low <= figures["win_rate"] <= high <= 1
        assert figures["settings"]["pace"] == level_named(name).pace


SEARCH_UNDER_A_CAPTURED_STDERR = """
import asyncio, multiprocessing, sys

class Captured:  # as a running Textual app's stderr capture: no real descriptor behind it
    def write(self, text): return len(text)
    def flush(self): pass
    def fileno(self): return -1

from client.bot_levels import Player, level_named
from shared.engine import Game

async def main():
    sys.stderr = Captured()
    player = Player(level_named("hard"), seed=1)
    move = await player.choose(Game(DEAL).view())
    print(move, len(multiprocessing.active_children()))

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_a_searching_level_searches_under_a_terminal_app_s_captured_stderr(tmp_path: Path) -> None:
    """``plot practice`` runs its bots under Textual, whose stderr capture has no descriptor: the
    search pool still starts (its workers are running) and the bot gets a move."""
    script = tmp_path / "search_under_capture.py"
    script.write_text(SEARCH_UNDER_A_CAPTURED_STDERR.replace("DEAL", "4242"))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent
    )
    assert done.returncode == 0, done.stderr
    move, workers = done.stdout.split()
    assert move != "None"
    assert int(workers) >= 1, "the search ran on no worker process"
