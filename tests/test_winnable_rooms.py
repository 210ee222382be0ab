"""Winnable-deals-only rooms and hints only in practice.

The core's side as plain function calls (FindDeal out, DealFound in); the shell's side against the
real server on 127.0.0.1 with real WebSocket clients: the search runs in a worker process while
other rooms keep racing, and the deal revealed at the results is one the solver proves winnable.
The race client (Textual's harness) refuses hints in a race and gives a legal one in practice.
"""

from __future__ import annotations

import functools
import os
import random
import time
from pathlib import Path

import pytest
from support import (
    Client,
    Shell,
    eventually,
    fast_config,
    latest,
    lobby,
    make_room,
    phase_of,
    pid,
    play,
    record_of,
    room_phase,
    running_server,
    start_race,
    url,
    view_game,
    wait_for_file,
)
from winnable_sources import dies_once, gated_random_deal

from client.words import plot_command
from server.core import ServerCore
from server.core.events import DealFound, FindDeal
from server.winnable import DealFinder, WinnableConfig
from shared import protocol as p
from shared.engine import Game
from shared.fairplay import check_commitment
from shared.solver import WINNABLE, solve

BUDGET = 20_000  # the server's default budget per candidate
UNWINNABLE_DEALS = (129, 164)  # proved unwinnable at once (tests/test_solver.py)


def find_deals(shell: Shell) -> list[FindDeal]:
    return [e for e in shell.effects if isinstance(e, FindDeal)]


def dealing_lobby(shell: Shell) -> tuple[list[int], str, FindDeal]:
    """Ann hosts a winnable-only room, Bob and Cy are ready, Ann starts: the room is dealing."""
    conns, code = lobby(shell, winnable_only=True)
    shell.send(conns[0], p.Start())
    (search,) = find_deals(shell)
    return conns, code, search


# ====================================================================== the core


def test_start_asks_for_a_winnable_deal_and_the_countdown_waits_for_it() -> None:
    shell = Shell()
    conns, code, search = dealing_lobby(shell)
    assert (search.code, search.race) == (code, 1)
    for conn in conns:
        room = shell.room(conn)
        assert room.phase == p.DEALING and room.rules.winnable_only and not room.chosen_deal
        assert room.starts_at is None
        assert not any(isinstance(m, p.Countdown | p.RaceStart) for m in shell.inbox[conn])
    # However long the search takes, nothing starts by itself, and nothing may be played.
    shell.advance(60_000)
    assert phase_of(shell.core, code) == p.DEALING and record_of(shell.core, code).race is None
    rejected = shell.move(conns[1], 1, "stock>waste")
    assert isinstance(rejected, p.MoveRejected) and rejected.code == p.WRONG_PHASE
    # The racers are fixed, as in a countdown: no new racer, no readiness change, no second start.
    shell.send(conns[0], p.Start())
    assert shell.error(conns[0]).code == p.WRONG_PHASE and "winnable deal" in shell.error(conns[0]).message
    shell.send(conns[1], p.Ready(ready=False))
    assert shell.error(conns[1]).code == p.WRONG_PHASE
    late = shell.hello("Dee")
    shell.send(late, p.Join(code=code))
    assert shell.error(late).code == p.WRONG_PHASE and "about to start" in shell.error(late).message
    shell.send(late, p.Join(code=code, role=p.SPECTATOR))
    assert shell.room(late).phase == p.DEALING
    assert len(find_deals(shell)) == 1  # one search, whatever was asked meanwhile
    # The deal arrives: countdown, then the race on exactly that deal, which is not a chosen one.
    deal = 987_654_321_987
    shell.run(DealFound(code, 1, search.search, deal, shell.now))
    countdown = shell.last(conns[1], p.Countdown)
    assert isinstance(countdown, p.Countdown) and countdown.starts_at == shell.now + shell.config.countdown_ms
    assert shell.room(late).phase == p.COUNTDOWN
    shell.advance(shell.config.countdown_ms)
    start = shell.last(conns[1], p.RaceStart)
    assert isinstance(start, p.RaceStart) and not start.chosen_deal
    assert start.view == Game(deal).view()
    assert all(str(deal) not in repr(m) for conn in conns for m in shell.inbox[conn])  # no deal before results
    for i, conn in enumerate(conns):
        shell.move(conn, 100 + i, "resign")
    results = shell.last(conns[0], p.Results)
    assert isinstance(results, p.Results) and results.deal == deal and not results.chosen_deal
    assert check_commitment(deal, results.salt, start.commitment)


def test_no_deal_found_returns_to_the_lobby_and_tells_everyone() -> None:
    shell = Shell()
    conns, code, search = dealing_lobby(shell)
    shell.run(DealFound(code, 1, search.search, None, shell.now, "20 random deals, none proved"))
    for conn in conns:
        error = shell.last(conn, p.Error)
        assert isinstance(error, p.Error) and error.code == p.NO_WINNABLE_DEAL and error.ref == "start"
        assert "20 random deals, none proved" in error.message and "start again" in error.message
        room = shell.room(conn)
        assert room.phase == p.LOBBY and room.race == 1
    assert record_of(shell.core, code).race is None
    assert all(m.ready for m in shell.room(conns[0]).members if m.player_id != pid(shell, conns[0]))
    # Start again: a new search; an answer to the old one no longer counts.
    shell.send(conns[0], p.Start())
    first, second = find_deals(shell)
    assert second.search != first.search and shell.room(conns[1]).phase == p.DEALING
    shell.run(DealFound(code, 1, first.search, 5, shell.now))
    assert phase_of(shell.core, code) == p.DEALING
    shell.run(DealFound(code, 1, second.search, 6, shell.now))
    assert phase_of(shell.core, code) == p.COUNTDOWN and record_of(shell.core, code).race.deal == 6  # type: ignore[union-attr]


def test_host_can_cancel_the_search_and_a_late_answer_is_ignored() -> None:
    shell = Shell()
    conns, code, search = dealing_lobby(shell)
    shell.send(conns[1], p.EndRace())
    assert shell.error(conns[1]).code == p.NOT_HOST
    shell.send(conns[0], p.EndRace())
    assert shell.room(conns[1]).phase == p.LOBBY
    shell.run(DealFound(code, 1, search.search, 5, shell.now))
    assert phase_of(shell.core, code) == p.LOBBY and record_of(shell.core, code).race is None
    shell.advance(10_000)
    assert not any(isinstance(m, p.Countdown) for m in shell.inbox[conns[1]])


def test_when_every_racer_leaves_the_search_is_dropped() -> None:
    shell = Shell()
    conns, code, search = dealing_lobby(shell)
    watcher = shell.hello("Sue")
    shell.send(watcher, p.Join(code=code, role=p.SPECTATOR))
    shell.send(conns[1], p.Leave())
    assert shell.room(watcher).phase == p.DEALING  # Ann and Cy still race
    shell.send(conns[2], p.Join(code=code, role=p.SPECTATOR))  # Cy would rather watch
    shell.send(conns[0], p.Leave())
    room = shell.room(watcher)
    assert room.phase == p.LOBBY and all(m.role == p.SPECTATOR for m in room.members)
    shell.run(DealFound(code, 1, search.search, 5, shell.now))
    assert phase_of(shell.core, code) == p.LOBBY


def test_a_winnable_room_takes_no_chosen_deal() -> None:
    shell = Shell()
    ann = shell.hello("Ann")
    shell.send(ann, p.CreateRoom(options=p.RoomOptions(winnable_only=True, deal=42)))
    error = shell.error(ann)
    assert error.code == p.BAD_FIELD and "options.deal" in error.message and "winnable_only" in error.message
    assert shell.core.room_count() == 0 and not [e for e in shell.effects if type(e).__name__ == "CreateRoomRecord"]
    # A rematch in a winnable room cannot choose a deal either; without one it searches again.
    conns, code, search = dealing_lobby(shell)
    shell.run(DealFound(code, 1, search.search, 11, shell.now))
    shell.advance(shell.config.countdown_ms)
    for i, conn in enumerate(conns):
        shell.move(conn, i + 1, "resign")
    assert shell.room(conns[0]).phase == p.RESULTS
    shell.send(conns[0], p.Rematch(deal=7))
    assert shell.error(conns[0]).code == p.BAD_FIELD and shell.room(conns[0]).phase == p.RESULTS
    shell.send(conns[0], p.Rematch())
    for conn in conns[1:]:
        shell.send(conn, p.Ready())
    shell.send(conns[0], p.Start())
    again = find_deals(shell)[-1]
    assert (again.code, again.race) == (code, 2) and shell.room(conns[0]).phase == p.DEALING
    # The room list says so too.
    summary = shell.core.summary(code)
    assert summary is not None and summary.winnable_only


def test_other_rooms_still_start_at_once() -> None:
    shell = Shell()
    conns, code = lobby(shell)
    shell.send(conns[0], p.Start())
    assert not find_deals(shell) and shell.room(conns[1]).phase == p.COUNTDOWN
    summary = shell.core.summary(code)
    assert summary is not None and not summary.winnable_only


def test_a_restarted_core_searches_again_for_a_room_left_dealing() -> None:
    shell = Shell()
    conns, code, old = dealing_lobby(shell)
    record = shell.rooms[code]
    assert record.phase == p.DEALING  # written behind like any phase change
    token = shell.welcome(conns[1]).token
    shell.core = ServerCore(shell.config)
    shell.conns_of.clear()
    loaded = shell.core.load_room(record, {}, shell.now)
    shell.apply(loaded)
    (search,) = [e for e in loaded if isinstance(e, FindDeal)]
    assert search.search != 0 and old.code == search.code
    assert search.code == code and search.race == 1
    bob = shell.hello("Bob", token=token)
    assert shell.room(bob).phase == p.DEALING
    shell.run(DealFound(code, 1, search.search, 77, shell.now))
    assert shell.room(bob).phase == p.COUNTDOWN


# ====================================================================== the real server


def winnable_config(source: object, *, budget: int = BUDGET, tries: int = 20) -> object:
    return fast_config(winnable=WinnableConfig(budget=budget, tries=tries, seed_source=source))  # type: ignore[arg-type]


async def test_winnable_room_races_a_proved_winnable_deal_while_other_rooms_play_on(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    source = functools.partial(gated_random_deal, str(gate))
    async with running_server(config=winnable_config(source)) as server:  # type: ignore[arg-type]
        assert not server.deal_finder.started  # no worker process until a room needs one
        # Another room is racing already.
        others, _ = await make_room(server, ["Cy", "Dee"])
        (cy_start, _) = await start_race(others)
        assert cy_start.view is not None
        # The winnable room starts: it deals first.
        racers, code = await make_room(server, ["Ann", "Bob"], winnable_only=True)
        ann, bob = racers
        await room_phase(ann, p.LOBBY)
        while not all(m.ready for m in latest(ann, p.Room).members if m.player_id != ann.pid):
            await ann.expect(p.Room)
        await ann.send(p.Start())
        for client in racers:
            room = await room_phase(client, p.DEALING)
            assert room.rules.winnable_only and not room.chosen_deal
        # The search runs in another process (the source wrote its pid there) and waits at the gate ...
        worker = int(await wait_for_file(Path(str(gate) + ".pid")))
        assert worker != os.getpid()
        # ... while the other room's moves are acknowledged and the winnable room plays nothing.
        view, _ = await play(others[0], cy_start.view, 8, random.Random(5))
        assert view is not None and latest(others[0], p.MoveOk).seq >= 1
        await ann.send(p.Move(id=1, move="stock>waste"))
        early = await ann.expect(p.MoveRejected)
        assert early.code == p.WRONG_PHASE
        assert not any(isinstance(m, p.Countdown) for m in ann.messages)
        gate.write_text("open")
        starts = [await c.expect(p.RaceStart, timeout=30.0) for c in racers]
        assert starts[0].view == starts[1].view and not starts[0].chosen_deal
        assert starts[0].view is not None
        await play(ann, starts[0].view, 5, random.Random(1), first_id=2)
        for client, move_id in ((ann, 100), (bob, 100)):
            await client.send(p.Move(id=move_id, move="resign"))
        results = await ann.expect(p.Results, timeout=10.0)
        # The revealed deal: the solver proves it winnable within the same budget, and it is the one raced.
        verdict = solve(Game(results.deal), max_positions=BUDGET)
        assert verdict.verdict == WINNABLE
        assert Game(results.deal).view() == starts[0].view
        assert check_commitment(results.deal, results.salt, starts[0].commitment)
        # The room list shows the option.
        await bob.send(p.ListRooms())
        listed = await bob.expect(p.RoomList)
        assert any(s.code == code and s.winnable_only for s in listed.rooms)
        assert server.deal_finder.searches == 1
        for client in (*racers, *others):
            await client.close()


async def test_no_winnable_deal_within_the_budget_tells_the_room(tmp_path: Path) -> None:
    async with running_server(config=winnable_config(UNWINNABLE_DEALS, budget=5_000, tries=2)) as server:  # type: ignore[arg-type]
        racers, _code = await make_room(server, ["Ann", "Bob"], winnable_only=True)
        ann, bob = racers
        while not all(m.ready for m in latest(ann, p.Room).members if m.player_id != ann.pid):
            await ann.expect(p.Room)
        await ann.send(p.Start())
        for client in racers:
            error = await client.expect(p.Error, timeout=30.0)
            assert error.code == p.NO_WINNABLE_DEAL and "2 random deals" in error.message
            await room_phase(client, p.LOBBY)
        assert not any(isinstance(m, p.Countdown | p.RaceStart) for m in bob.messages)
        # A chosen deal in a winnable room is refused with a clear error.
        probe = await Client.open(server, "probe")
        await probe.hello("Probe")
        await probe.send(p.CreateRoom(options=p.RoomOptions(winnable_only=True, deal=4242)))
        refused = await probe.expect(p.Error)
        assert refused.code == p.BAD_FIELD and "winnable_only" in refused.message
        for client in (*racers, probe):
            await client.close()


async def test_shutdown_stops_a_search_in_flight(tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # never opened: the search would wait 30 s
    source = functools.partial(gated_random_deal, str(gate))
    server_cm = running_server(config=winnable_config(source))  # type: ignore[arg-type]
    server = await server_cm.__aenter__()
    try:
        racers, _code = await make_room(server, ["Ann", "Bob"], winnable_only=True)
        ann = racers[0]
        while not all(m.ready for m in latest(ann, p.Room).members if m.player_id != ann.pid):
            await ann.expect(p.Room)
        await ann.send(p.Start())
        worker = int(await wait_for_file(Path(str(gate) + ".pid")))
    finally:
        started = time.monotonic()
        await server_cm.__aexit__(None, None, None)
    assert time.monotonic() - started < 5.0  # the server did not wait for the search
    await eventually(
        lambda: not Path(f"/proc/{worker}").exists() or "Z" in _proc_state(worker),
        what="the worker process outlived the server",
    )


def _proc_state(process_id: int) -> str:
    try:
        for line in Path(f"/proc/{process_id}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        return "gone"
    return "?"


async def test_deal_finder_outside_the_server() -> None:
    """The finder on its own: a proved deal from a list, the budget respected, a bad config refused."""
    finder = DealFinder(WinnableConfig(budget=BUDGET, tries=3, seed_source=(129, 4242, 7)))
    try:
        outcome = await finder.find()
        assert outcome.deal == 4242 and 0 < outcome.positions <= BUDGET
    finally:
        finder.shutdown()
    assert (await finder.find()).deal is None  # after shutdown: a clear no, never a hang
    with pytest.raises(ValueError, match="at least 1"):
        DealFinder(WinnableConfig(budget=0))


async def test_a_dead_worker_is_a_clear_failure_and_the_next_search_works(tmp_path: Path) -> None:
    finder = DealFinder(WinnableConfig(tries=1, seed_source=functools.partial(dies_once, str(tmp_path / "died"))))
    try:
        failed = await finder.find()
        assert failed.deal is None and "worker process died" in failed.detail
        assert not finder.started  # the broken pool is gone ...
        again = await finder.find()
        assert again.deal == 4242  # ... and the next search has a new one
    finally:
        finder.shutdown()


# ====================================================================== hints: practice only


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_hint_key_refuses_in_a_race_joined_over_the_network(state_dir: Path) -> None:
    from support import SIZE, message, screen_text, until

    from client.tui.race import JOIN, RaceApp, RaceConfig

    async with running_server() as server:
        host, code = await make_room(server, ["Ann"], deal=4242)  # a chosen deal: even then, no hint
        app = RaceApp(RaceConfig(url=url(server), name="Bob", mode=JOIN, code=code))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            await pilot.press("enter")
            await until(lambda: app.model.me is not None and app.model.me.ready, "ready")
            await host[0].send(p.Start())
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race")
            await pilot.pause()
            await pilot.press("h")
            await until(lambda: "hint" in message(app), "an answer to the hint key")
            hint = f"no hints in a race: a hint knows the stock (practice games only: {plot_command()} practice)"
            assert message(app) == hint
            assert "no hints in a race" in screen_text(app)
            assert app.model.seq == 0 and app.accepted_entries == []  # the key played nothing
            await app.shutdown()
        await host[0].close()


async def test_the_host_sees_the_search_then_races_and_gets_no_hint(state_dir: Path, tmp_path: Path) -> None:
    """``plot host --winnable`` as a person sees it: the rules say so, the search shows, then the race."""
    from support import SIZE, message, screen_text, until

    from client.tui.race import HOST, RaceApp, RaceConfig

    gate = tmp_path / "gate"
    source = functools.partial(gated_random_deal, str(gate))
    async with running_server(config=winnable_config(source)) as server:  # type: ignore[arg-type]
        options = p.RoomOptions(winnable_only=True)
        app = RaceApp(RaceConfig(url=url(server), name="Ann", mode=HOST, options=options))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: app.model.room is not None, "the room")
            assert app.model.room is not None
            assert "winnable deals only" in screen_text(app)
            bob = await Client.open(server, "Bob")
            await bob.hello("Bob")
            await bob.send(p.Join(code=app.model.room.code))
            await bob.expect(p.Room)
            await bob.send(p.Ready())
            await until(lambda: any(m.name == "Bob" and m.ready for m in app.model.room.members), "Bob ready")  # type: ignore[union-attr]
            await pilot.press("enter")
            await until(lambda: app.model.me is not None and app.model.me.ready, "the host ready")
            await pilot.press("s")
            await until(lambda: app.model.phase == p.DEALING, "the search")
            await pilot.pause()
            text = screen_text(app)
            assert "Finding a deal the solver proves winnable" in text and "· dealing" in text
            assert "Bob" in text  # the lobby stays on show: who races, while the deal is found
            await pilot.press("s")  # keys for the lobby do nothing now (not even an error)
            gate.write_text("open")
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race", 30.0)
            await pilot.pause()
            await pilot.press("h")
            await until(lambda: "hint" in message(app), "an answer to the hint key")
            assert message(app).startswith("no hints in a race")
            assert app.model.seq == 0
            await app.shutdown()
        await bob.close()


async def test_hint_key_gives_a_legal_move_in_practice(state_dir: Path) -> None:
    from support import SIZE, message, until

    from client.tui.practice import attach_hint, embedded_server, practice_config
    from client.tui.race import RaceApp

    async with embedded_server(countdown_ms=100, rate_per_s=1000, burst=2000) as server_url:
        app = RaceApp(practice_config(server_url, name="Learner", bots=1, deal=4242, speed=0.2))
        attach_hint(app)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: app.model.phase == p.RACING and app.model.view is not None, "the race", 20.0)
            await pilot.press("h")
            await until(lambda: message(app).startswith("hint"), "a hint")
            text = message(app)
            assert text.startswith("hint: "), text  # deal 4242 is solved at once: a real move, not "no hint"
            move = text.removeprefix("hint: ")
            assert app.model.view is not None and move in view_game(app.model.view).legal_moves()
            # Played, the server accepts it: the hint was for the position the server holds.
            await pilot.press("t")
            await pilot.press(*move)
            await pilot.press("enter")
            await until(lambda: app.model.seq == 1, "the hinted move accepted")
            assert app.accepted_entries == [move]
            await app.shutdown()


# ====================================================================== plot-server flags


def test_server_flags_and_environment_set_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.cli import ConfigError, build_parser, config_from_args

    config = config_from_args(build_parser().parse_args([]))
    assert (config.winnable.budget, config.winnable.tries, config.winnable.workers) == (20_000, 20, 1)
    monkeypatch.setenv("PLOT_WINNABLE_BUDGET", "50000")
    monkeypatch.setenv("PLOT_WINNABLE_WORKERS", "2")
    config = config_from_args(build_parser().parse_args(["--winnable-tries", "5"]))
    assert (config.winnable.budget, config.winnable.tries, config.winnable.workers) == (50_000, 5, 2)
    config = config_from_args(build_parser().parse_args(["--winnable-budget", "1000"]))  # a flag wins over the env
    assert config.winnable.budget == 1000
    with pytest.raises(ConfigError, match="at least 1"):
        config_from_args(build_parser().parse_args(["--winnable-workers", "0"]))
