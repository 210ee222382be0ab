"""The solver queue: deal searches of winnable-only rooms and exact blocked checks.

Against the real server on 127.0.0.1 with real WebSocket clients. A deal source held at a gate
(tests/winnable_sources.py) keeps the search worker busy for as long as a test needs, so every
assertion is on order, queue contents and counts, never on how long something took.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from support import BLOCKED_DEAL as DEAL
from support import BLOCKED_MOVES as MOVES
from support import BLOCKED_TINY as TINY
from support import (
    FAST,
    Client,
    board,
    eventually,
    fast_config,
    held_phase,
    latest,
    make_room,
    room_phase,
    running_server,
    wait_for_file,
)
from winnable_sources import gated_random_deal

from server.shell import ServerConfig
from server.winnable import DealFinder, WinnableConfig
from shared import protocol as p
from shared.engine import BLOCKED, PLAYING

SPAM_ROUNDS = 30  # start/end pairs the spammer sends while the worker is busy


def gated_config(gate: Path, **winnable: object) -> ServerConfig:
    source = functools.partial(gated_random_deal, str(gate))
    return fast_config(winnable=WinnableConfig(seed_source=source, workers=1, **winnable))  # type: ignore[arg-type]


async def ready_to_start(host: Client) -> None:
    """Wait until every racer but the host is ready (the host's latest snapshot says so)."""
    while not all(m.ready for m in latest(host, p.Room).members if m.player_id != host.pid):
        await host.expect(p.Room)


async def settled(client: Client) -> None:
    """Every frame this client sent before has been handled (the server answers in order)."""
    await client.send(p.Ping(t=7))
    await client.expect(p.Pong)


def finished_searches(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The rooms whose deal searches ran in the worker, in the order they finished."""
    return [
        str(r.fields["room"])  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "deal_search_finished"
    ]


async def test_a_spamming_room_does_not_delay_an_honest_rooms_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="plot.server")
    gate = tmp_path / "gate"
    async with running_server(config=gated_config(gate)) as server:
        (spammer,), spam_code = await make_room(server, ["Spam"], winnable_only=True)
        honest, honest_code = await make_room(server, ["Ann", "Bob"], winnable_only=True)
        ann = honest[0]
        await ready_to_start(ann)
        # The spammer's first search holds the worker at the gate ...
        await spammer.send(p.Start())
        await room_phase(spammer, p.DEALING)
        await wait_for_file(Path(str(gate) + ".pid"))
        # ... and it ends and starts again and again: each start asks for a deal, each end gives it up.
        for _ in range(SPAM_ROUNDS):
            await spammer.send(p.EndRace())
            await spammer.send(p.Start())
        await spammer.send(p.EndRace())
        await settled(spammer)
        assert held_phase(server, spam_code) == p.LOBBY
        # The honest room starts now: its search is the only one waiting (the spammer's were dropped,
        # each replaced by the next and the last given up), behind the one already running.
        await ann.send(p.Start())
        for client in honest:
            await room_phase(client, p.DEALING)
        finder = server.deal_finder
        assert finder.queued() == [honest_code] and finder.running() == [spam_code]
        assert finder.searches == SPAM_ROUNDS + 2 and finder.searches_dropped == SPAM_ROUNDS
        gate.write_text("open")
        for client in honest:
            await client.expect(p.RaceStart, timeout=30.0)
        # Only the search already running when the spam began went before the honest room's: the
        # spammer's abandoned ones were never run.
        order = finished_searches(caplog)
        assert order.index(honest_code) <= 1, order
        assert order.count(spam_code) <= 1, order
        assert finder.searches_run == 2 and finder.searches_refused == 0
        assert (finder.queued(), finder.running()) == ([], [])
        for client in (spammer, *honest):
            await client.close()


async def test_a_blocked_check_does_not_wait_behind_a_deal_search(tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # never opened: the deal search holds its worker for the whole test
    config = replace(gated_config(gate), core=replace(FAST, blocked_budget=TINY))
    async with running_server(config=config) as server:
        racers, _code = await make_room(server, ["Ann", "Bob"], deal=DEAL)
        ann = racers[0]
        await ready_to_start(ann)
        await ann.send(p.Start())
        for client in racers:
            await client.expect(p.RaceStart)
        for move_id, move in enumerate(MOVES[:-1], start=1):
            await ann.send(p.Move(id=move_id, move=move))
            reply = await ann.expect(p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
            assert isinstance(reply, p.MoveOk) and board(reply).status == PLAYING, reply
        # Another room's deal search takes the search worker and stays there.
        (dealer,), _ = await make_room(server, ["Cy"], winnable_only=True)
        await dealer.send(p.Start())
        await room_phase(dealer, p.DEALING)
        await wait_for_file(Path(str(gate) + ".pid"))
        # Ann's last move leaves a position only the exact check decides: it is answered anyway.
        await ann.send(p.Move(id=len(MOVES), move=MOVES[-1]))
        last = await ann.expect(p.MoveOk)
        assert board(last).status == PLAYING and last.seq == len(MOVES)
        while True:
            start = await ann.expect(p.RaceStart, timeout=30.0)
            if start.view is not None and start.view.status == BLOCKED:
                break
        assert start.seq == len(MOVES)
        assert server.deal_finder.blocked_checks == 1
        assert latest(dealer, p.Room).phase == p.DEALING  # the search is still held at the gate
        for client in (*racers, dealer):
            await client.close()


async def test_a_full_queue_tells_the_room_the_server_is_busy(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with running_server(config=gated_config(gate, queue=1)) as server:
        finder = server.deal_finder
        rooms = [await make_room(server, [name], winnable_only=True) for name in ("Ann", "Bob", "Cy")]
        (ann,), ann_code = rooms[0]
        (bob,), bob_code = rooms[1]
        (cy,), cy_code = rooms[2]
        # Ann's search runs (held at the gate), Bob's waits: the queue of one is full.
        await ann.send(p.Start())
        await room_phase(ann, p.DEALING)
        await wait_for_file(Path(str(gate) + ".pid"))
        await bob.send(p.Start())
        await room_phase(bob, p.DEALING)
        assert finder.running() == [ann_code] and finder.queued() == [bob_code]
        # Cy's start is refused at once with a clear error, and the room is back in the lobby.
        await cy.send(p.Start())
        busy = await cy.expect(p.Error)
        assert busy.code == p.SERVER_BUSY and busy.ref == "start"
        assert "busy" in busy.message and "start again" in busy.message
        await room_phase(cy, p.LOBBY)
        assert held_phase(server, cy_code) == p.LOBBY
        assert finder.searches_refused == 1 and finder.queued() == [bob_code]
        # The worker is let go: the two queued rooms race, and Cy's next start is served.
        gate.write_text("open")
        for client in (ann, bob):
            await client.expect(p.RaceStart, timeout=30.0)
        await cy.send(p.Start())
        await cy.expect(p.RaceStart, timeout=30.0)
        assert (finder.searches, finder.searches_run, finder.searches_refused) == (4, 3, 1)
        for client in (ann, bob, cy):
            await client.close()


async def test_the_finder_keeps_one_search_per_key_and_drops_unwanted_ones(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    finder = DealFinder(WinnableConfig(seed_source=functools.partial(gated_random_deal, str(gate)), queue=2))
    try:
        held = asyncio.ensure_future(finder.find("A"))
        await wait_for_file(Path(str(gate) + ".pid"))
        first_b = asyncio.ensure_future(finder.find("B"))
        await eventually(lambda: finder.queued() == ["B"], timeout=10.0)
        second_b = asyncio.ensure_future(finder.find("B"))  # the newer search of B replaces the waiting one
        replaced = await first_b
        assert replaced.cancelled and replaced.deal is None and "replaced" in replaced.detail
        await eventually(lambda: finder.queued() == ["B"], timeout=10.0)
        room_c_waits = True
        gone_c = asyncio.ensure_future(finder.find("C", lambda: room_c_waits))
        await eventually(lambda: finder.queued() == ["B", "C"], timeout=10.0)
        refused = await finder.find("D")  # the queue of two is full
        assert refused.busy and refused.deal is None and "2 rooms" in refused.detail
        room_c_waits = False  # C's room stops waiting: the next search asked for takes its place
        late_d = asyncio.ensure_future(finder.find("D"))
        dropped = await gone_c
        assert dropped.cancelled and dropped.candidates == 0 and "stopped waiting" in dropped.detail
        await eventually(lambda: finder.queued() == ["B", "D"], timeout=10.0)
        gate.write_text("open")
        for search in (held, second_b, late_d):
            outcome = await asyncio.wait_for(search, 30.0)
            assert outcome.deal is not None and outcome.candidates >= 1 and not outcome.cancelled
        assert (finder.searches, finder.searches_run, finder.searches_dropped, finder.searches_refused) == (6, 3, 2, 1)
        # A failing "still wanted?" answers that search with the failure; the next search is served.
        failed = await asyncio.wait_for(finder.find("E", _broken_room), 30.0)
        assert failed.deal is None and "the search failed" in failed.detail and "room gone" in failed.detail
        assert (await asyncio.wait_for(finder.find("F"), 30.0)).deal is not None
    finally:
        finder.shutdown()


def _broken_room() -> bool:
    raise RuntimeError("room gone")


def test_server_flags_and_environment_set_the_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.cli import ConfigError, build_parser, config_from_args

    config = config_from_args(build_parser().parse_args([]))
    assert (config.winnable.queue, config.winnable.blocked_workers, config.winnable.blocked_queue) == (32, 1, 256)
    monkeypatch.setenv("PLOT_WINNABLE_QUEUE", "5")
    monkeypatch.setenv("PLOT_BLOCKED_WORKERS", "2")
    monkeypatch.setenv("PLOT_BLOCKED_QUEUE", "9")
    config = config_from_args(build_parser().parse_args(["--blocked-queue", "3"]))  # a flag wins over the env
    assert (config.winnable.queue, config.winnable.blocked_workers, config.winnable.blocked_queue) == (5, 2, 3)
    for flag in ("--winnable-queue", "--blocked-workers", "--blocked-queue"):
        with pytest.raises(ConfigError, match=f"{flag} '0': must be at least 1"):
            config_from_args(build_parser().parse_args([flag, "0"]))


async def test_the_bench_script_measures_a_start_under_spam() -> None:
    """bench/solver_queue_bench.py, briefly, so it cannot rot (its figures: docs/reliability.md)."""
    bench = Path(__file__).resolve().parent.parent / "bench"
    if str(bench) not in sys.path:
        sys.path.append(str(bench))  # a bench script imports machine_info from its own folder
    spec = importlib.util.spec_from_file_location("bench_solver_queue", bench / "solver_queue_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = await module.run(spammers=1, spam_seconds=0.3)
    spam_before, spam_total = result["spam_starts_before_honest_start"], result["spam_starts_total"]
    assert 1 <= spam_before <= spam_total
    assert spam_before + 3 <= result["searches_asked"] <= spam_total + 3  # the honest room started 3 times
    assert result["searches_refused"] == 0 and result["searches_run"] >= 3
    assert result["start_under_spam_s"] > 0 and result["server_code"] == str(bench.parent)
