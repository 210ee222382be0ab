"""Ghosts through a real server (docs/ghosts.md): a ghost's row follows its record's times within a
tick, never carries what a live racer's row would not (checked over every frame), its board only
in spectators' delayed boards; a rematch with the last race's racers as ghosts; bad records
refused with clear errors; a ghost that survives the server being replaced mid-race."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest
from support import (
    DEAL,
    FAST,
    Client,
    eventually,
    fast_config,
    latest,
    make_room,
    running_server,
    start_race,
    view_game,
)

from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p
from shared.engine import Game

INTERVAL = 100  # the leaderboard tick of these tests (ms)
CONFIG = fast_config(core=replace(FAST, leaderboard_interval_ms=INTERVAL, leaderboard_full_ms=300))
ROW_FIELDS = set(p.LeaderboardRow.__struct_fields__)
ENTRY_FIELDS = set(p.GhostEntry.__struct_fields__)


def greedy_record(deal: int = DEAL, entries: int = 40) -> list[str]:
    """A legal record: home first, then the stock, else any move."""
    game = Game(deal)
    moves: list[str] = []
    while not game.over and len(moves) < entries:
        legal = game.legal_moves()
        home = [m for m in legal if ">f" in m]
        move = home[0] if home else "stock>waste" if "stock>waste" in legal else legal[0] if legal else "resign"
        game.play(move)
        moves.append(move)
    return moves


def cards_after(moves: list[str], n: int, deal: int = DEAL) -> int:
    game = Game(deal)
    for move in moves[:n]:
        game.play(move, check_blocked=False)
    return game.foundation_cards


def leaks(frame: bytes, ghost: str) -> list[str]:
    """What in one raw frame says more of the ghost than a live racer's row does (empty: nothing)."""
    found: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            if ghost in value:
                found.append(f"{where}: keyed by the ghost ({sorted(value)})")
            if value.get("player_id") == ghost and not set(value) <= ROW_FIELDS | ENTRY_FIELDS:
                found.append(f"{where}: a ghost entry with {sorted(set(value) - ROW_FIELDS - ENTRY_FIELDS)}")
            for key, item in value.items():
                walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")

    walk(msgpack.unpackb(frame, raw=False), "$")
    return found


async def add_ghost(host: Client, moves: list[str], times: list[int] | None, name: str = "Past", **kw: Any) -> None:
    await host.send(p.AddGhost(name=name, deal=kw.pop("deal", DEAL), moves=moves, times=times, **kw))


async def test_a_ghost_row_follows_its_times_within_a_tick_and_never_leaks() -> None:
    moves = greedy_record(entries=30)
    times = [400 + 120 * i for i in range(len(moves))]  # about 4 s of race
    async with running_server(config=CONFIG) as server:
        (host,), code = await make_room(server, ["Ann"], deal=DEAL)
        spectator = await Client.open(server, "Spec")
        await spectator.hello("Spec")
        await spectator.send(p.Join(code=code, role="spectator"))
        await spectator.expect(p.Room)
        await add_ghost(host, moves, times, name="Yesterday")
        room = await host.expect(p.Room)
        while not room.ghosts:
            room = await host.expect(p.Room)
        (entry,) = room.ghosts
        ghost = entry.player_id
        assert ghost.startswith(p.GHOST_PREFIX) and entry.name == "Yesterday" and entry.timed
        await host.send(p.Ready(ready=True))
        start, _ = await start_race([host, spectator])
        assert start.chosen_deal
        # The racer plays slowly (a move every ~tick), so that its own rows carry the server's race time.
        game = Game(DEAL)
        move_id = 1
        deadline = time.monotonic() + 30
        while True:
            board = host.leaderboard
            row = next((r for r in board.racers if r.player_id == ghost), None) if board else None
            if row is not None and row.moves == len(moves):
                break
            assert time.monotonic() < deadline, "the ghost never finished its record"
            legal = [m for m in game.legal_moves() if m != "undo"]
            move = "stock>waste" if "stock>waste" in legal else next((m for m in legal if ">t" in m), None)
            if move is not None and not game.over:
                await host.send(p.Move(id=move_id, move=move))
                ok = await host.expect(p.MoveOk)
                game.play(move)
                assert ok.id == move_id
                move_id += 1
            await host.expect(p.Leaderboard)
        await host.send(p.Move(id=move_id, move="resign"))
        results = await host.expect(p.Results)
        await spectator.expect(p.Results)
    # Every leaderboard frame: the ghost's row as its record has it after `moves` entries, never an
    # entry before its time (the frame's receipt), never more than a tick behind the racer's own
    # accepted entry in the same frame.
    seen = 0
    held: p.Leaderboard | None = None
    for msg in host.messages:
        if not isinstance(msg, p.Leaderboard):
            continue
        held = msg.merged_into(held) or held
        rows = {r.player_id: r for r in msg.racers}
        if ghost not in rows:
            continue
        row = rows[ghost]
        n = row.moves
        assert row.ghost and not row.bot and row.connected
        assert row.elapsed_ms == (times[n - 1] if n else 0)
        assert row.cards == cards_after(moves, n)
        assert n >= seen
        seen = n
        mine = rows.get(host.pid)
        if mine is not None and mine.elapsed_ms > 0:
            assert sum(1 for t in times if t <= mine.elapsed_ms - INTERVAL) <= n, (mine.elapsed_ms, n)
        ranks = [r.rank for r in msg.racers]
        assert ranks == sorted(ranks)
    assert seen == len(moves)
    # Over every frame to the racer and the spectator before the results: nothing of the ghost
    # but its row and its name (no board: the room is leak-proof), never a boards frame.
    for client in (host, spectator):
        for frame, msg in zip(client.frames, client.messages, strict=True):
            if isinstance(msg, p.Results):
                break
            assert not isinstance(msg, p.Boards)
            assert leaks(frame, ghost) == [], msg
    # The results: the racer ranked alone; the ghost apart, with its record and times revealed.
    assert results.ranking == [host.pid] and [r.player_id for r in results.racers] == [host.pid]
    (final,) = results.ghosts
    assert final.ghost and final.moves == len(moves) and final.status == p.STOPPED
    assert final.rank == (1 if final.cards > results.racers[0].cards else 2)
    assert results.ghost_records[ghost].moves == moves and results.ghost_times[ghost] == times


async def test_spectators_delayed_boards_carry_the_ghost_as_far_behind() -> None:
    moves = greedy_record(entries=12)
    times = [200 * (i + 1) for i in range(len(moves))]
    async with running_server(config=CONFIG) as server:
        (host,), code = await make_room(server, ["Ann"], deal=DEAL, spectator_boards=1)
        spectator = await Client.open(server, "Spec")
        await spectator.hello("Spec")
        await spectator.send(p.Join(code=code, role="spectator"))
        await spectator.expect(p.Room)
        await add_ghost(host, moves, times)
        room = await host.expect(p.Room)
        while not room.ghosts:
            room = await host.expect(p.Room)
        ghost = room.ghosts[0].player_id
        await host.send(p.Ready(ready=True))
        await start_race([host, spectator])

        def caught_up() -> bool:
            boards = [m for m in spectator.messages if isinstance(m, p.Boards)]
            return bool(boards) and boards[-1].as_of_ms >= times[-1]

        await eventually(caught_up, what="the spectator's delayed boards reach the ghost's last entry")
        await host.send(p.Move(id=1, move="resign"))
        await host.expect(p.Results)
    for msg in spectator.messages:
        if isinstance(msg, p.Boards):
            n = sum(1 for t in times if t <= msg.as_of_ms)
            game = Game(DEAL)
            for move in moves[:n]:
                game.play(move, check_blocked=False)
            assert msg.boards[ghost] == game.view()
    assert not any(isinstance(m, p.Boards) for m in host.messages)  # racers never get boards


async def test_a_rematch_races_the_last_races_racers_as_ghosts() -> None:
    async with running_server(config=CONFIG) as server:
        (ann, bob), _ = await make_room(server, ["Ann", "Bob"])
        await start_race([ann, bob])
        # Each plays a few legal moves from its own board (a hidden deal), then resigns.
        for client, count in ((ann, 6), (bob, 3)):
            view = latest(client, p.RaceStart).view
            assert view is not None
            game = view_game(view)
            for move_id in range(1, count + 1):
                legal = [m for m in game.legal_moves() if m != "undo"]
                move = next((m for m in legal if ">f" in m), "stock>waste" if "stock>waste" in legal else legal[0])
                await client.send(p.Move(id=move_id, move=move))
                await client.expect(p.MoveOk)
                game.play(move)
            await client.send(p.Move(id=count + 1, move="resign"))
        first = await ann.expect(p.Results)
        await ann.send(p.Rematch(ghosts=True, deal=5))
        err = await ann.expect(p.Error)
        assert err.code == p.BAD_FIELD and "ghosts" in err.message
        await ann.send(p.Rematch(ghosts=True))

        def lobby_with_ghosts() -> bool:
            room = latest(ann, p.Room)
            return room.phase == p.LOBBY and len(room.ghosts) == 2

        await eventually(lobby_with_ghosts, what="the rematch's lobby lists the two ghosts")
        room = latest(ann, p.Room)
        assert {g.player_id for g in room.ghosts} == {p.GHOST_PREFIX + ann.pid, p.GHOST_PREFIX + bob.pid}
        assert all(g.timed for g in room.ghosts)
        await bob.send(p.Ready(ready=True))
        await eventually(lambda: all(m.ready for m in latest(ann, p.Room).members if m.player_id != ann.pid))
        await start_race([ann, bob])
        ghost_ann = p.GHOST_PREFIX + ann.pid

        def ghosts_done() -> bool:
            board = ann.leaderboard
            rows = {r.player_id: r for r in board.racers} if board else {}
            return ghost_ann in rows and rows[ghost_ann].status == "resigned"

        await eventually(ghosts_done, what="Ann's ghost replays her resignation")
        for client in (ann, bob):
            await client.send(p.Move(id=1, move="resign"))
        second = await ann.expect(p.Results)
    assert second.deal == first.deal and second.chosen_deal
    assert second.ghost_records[ghost_ann].moves == first.records[ann.pid].moves
    assert second.ghost_times[ghost_ann] == first.times[ann.pid]
    assert {r.player_id for r in second.ghosts} == {ghost_ann, p.GHOST_PREFIX + bob.pid}
    assert set(second.ranking) == {ann.pid, bob.pid}  # ghosts are never in the ranking


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ({"deal": DEAL + 1}, p.GHOST_WRONG_DEAL, "another deal"),
        ({"moves": ["t0>t0"], "times": [100]}, p.BAD_GHOST, "not a legal game"),
        ({"times": [5, 4, 3]}, p.BAD_GHOST, "backwards"),
        ({"times": [5]}, p.BAD_GHOST, "times"),
        ({"name": "\x1b[31mred"}, p.NAME_INVALID, "name"),
        ({"offset": 10}, p.BAD_GHOST, "does not follow"),
    ],
)
async def test_a_bad_ghost_is_refused_with_a_clear_error(change: dict[str, Any], code: str, words: str) -> None:
    moves = greedy_record(entries=3)
    fields: dict[str, Any] = {"name": "Past", "deal": DEAL, "moves": moves, "times": [100, 200, 300]}
    fields.update(change)
    async with running_server(config=CONFIG) as server:
        (host, other), _ = await make_room(server, ["Ann", "Bob"], deal=DEAL)
        await host.send(p.AddGhost(**fields))
        err = await host.expect(p.Error)
        assert err.code == code and words in err.message and err.ref == "add_ghost"
        await other.send(p.AddGhost(name="Past", deal=DEAL, moves=moves))
        assert (await other.expect(p.Error)).code == p.NOT_HOST
        # Still a working room: a good ghost in two parts is taken.
        await host.send(p.AddGhost(name="Past", deal=DEAL, moves=moves[:2], times=[100, 200], more=True))
        await host.send(p.AddGhost(name="Past", deal=DEAL, moves=moves[2:], times=[300], offset=2))
        room = await host.expect(p.Room)
        while not room.ghosts:
            room = await host.expect(p.Room)
        assert len(room.ghosts) == 1


async def test_a_winnable_only_room_refuses_a_ghost_of_a_chosen_deal() -> None:
    async with running_server(config=CONFIG) as server:
        (host,), _ = await make_room(server, ["Ann"], winnable_only=True)
        await add_ghost(host, greedy_record(entries=3), None)
        err = await host.expect(p.Error)
        assert err.code == p.GHOST_WRONG_DEAL and "winnable" in err.message


async def test_a_ghost_without_times_is_paced_evenly_and_survives_a_new_server() -> None:
    """The ghost is part of the room's record: a new server on the same store rebuilds it where
    the race's clock says it is."""
    moves = greedy_record(entries=200)
    store = MemoryStore()
    async with running_server(store, config=CONFIG) as server:
        (host,), code = await make_room(server, ["Ann"], deal=DEAL)
        await add_ghost(host, moves, None)
        room = await host.expect(p.Room)
        while not room.ghosts:
            room = await host.expect(p.Room)
        ghost = room.ghosts[0].player_id
        assert not room.ghosts[0].timed
        await host.send(p.Ready(ready=True))
        await start_race([host])

        def ghost_moves(client: Client) -> int:
            board = client.leaderboard
            row = next((r for r in board.racers if r.player_id == ghost), None) if board else None
            return row.moves if row else 0

        await eventually(lambda: ghost_moves(host) >= 2, what="the untimed ghost moves")
        token = host.welcome.token if host.welcome else None
        await host.close()
    async with running_server(store, config=CONFIG) as second:
        again = await Client.open(second, "Ann")
        welcome = await again.hello("Ann", token=token)
        assert welcome.resumed and welcome.room == code
        await eventually(lambda: ghost_moves(again) >= 3, what="the rebuilt ghost goes on")
        board = again.leaderboard
        assert board is not None
        row = next(r for r in board.racers if r.player_id == ghost)
        assert row.elapsed_ms == row.moves * p.GHOST_PACE_MS and row.cards == cards_after(moves, row.moves)
        await again.send(p.Move(id=1, move="resign"))
        results = await again.expect(p.Results)
    assert results.ghost_times[ghost] == [(i + 1) * p.GHOST_PACE_MS for i in range(len(moves))]


async def test_a_ghost_races_on_two_nodes_and_follows_its_host_to_the_other(redis_url: str) -> None:
    """Several nodes: the ghost is in the room record, so the node that loads the room races it
    too (each node plays it on the race's clock), and a host that resumes on the other node finds
    it where the record's times put it."""
    moves = greedy_record(entries=60)
    times = [300 + 100 * i for i in range(len(moves))]
    shared = fast_config(core=replace(FAST, shared_rooms=True, leaderboard_interval_ms=INTERVAL))
    async with (
        running_server(RedisStore(redis_url), shared) as a,
        running_server(RedisStore(redis_url), shared) as b,
    ):
        (host,), code = await make_room(a, ["Ann"], deal=DEAL)
        await add_ghost(host, moves, times)
        await eventually(lambda: bool(latest(host, p.Room).ghosts), what="the ghost in the room")
        ghost = latest(host, p.Room).ghosts[0].player_id
        bob = await Client.open(b, "Bob")
        await bob.hello("Bob")
        await bob.send(p.Join(code=code))  # node B loads the room, its ghost with it
        await bob.expect(p.Room)
        await bob.send(p.Ready(ready=True))
        await eventually(
            lambda: any(m.player_id == bob.pid and m.ready for m in latest(host, p.Room).members),
            timeout=40,
            what="bob (on node B) ready, as node A shows him",
        )
        await start_race([host, bob])

        def ghost_moves(client: Client) -> int:
            board = client.leaderboard
            row = next((r for r in board.racers if r.player_id == ghost), None) if board else None
            return row.moves if row else -1

        await eventually(lambda: ghost_moves(bob) >= 5, what="node B races the ghost")
        token = host.welcome.token if host.welcome else None
        await host.close()
        moved = await Client.open(b, "Ann")
        assert (await moved.hello("Ann", token=token)).resumed
        await eventually(lambda: ghost_moves(moved) > 10, what="the ghost on the host's new node")
        for msg in [*bob.messages, *moved.messages]:
            if isinstance(msg, p.Leaderboard):
                for row in msg.racers:
                    if row.player_id == ghost:
                        assert row.elapsed_ms == (times[row.moves - 1] if row.moves else 0)
                        assert row.cards == cards_after(moves, row.moves)
        for client, move_id in ((moved, 1), (bob, 1)):
            await client.send(p.Move(id=move_id, move="resign"))
        results = await bob.expect(p.Results)
    assert [r.player_id for r in results.ghosts] == [ghost]
    for client in (bob, moved):
        await client.close()


def test_the_ghost_cost_bench_runs() -> None:
    """bench/ghost_cost.py, small: ghosts raced on the simulated clock carry leaderboard frames."""
    path = Path(__file__).resolve().parent.parent / "bench" / "ghost_cost.py"
    spec = importlib.util.spec_from_file_location("bench_ghost_cost", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    none = bench.simulate(rooms=2, ghosts=0, pace=4.0, seconds=5.0, seed=1)
    two = bench.simulate(rooms=2, ghosts=2, pace=4.0, seconds=5.0, seed=1)
    assert two["leaderboard_frames_per_room_s"] > none["leaderboard_frames_per_room_s"]
    assert two["record_bytes_per_ghost"] > 0 and two["core_us_per_room_s"] > 0
