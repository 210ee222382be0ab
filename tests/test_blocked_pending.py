"""The blocked check beyond its budget: the engine's budgeted check, the core's pending
flow (CheckBlocked out, BlockedChecked in), and the real server doing the exact check in its worker
process while every other connection is answered.

The position: tests/vectors_blocked.json, a record of a real deal whose last move makes the game
blocked in a way the budgeted check cannot decide with a small budget (see its comment).
"""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from pathlib import Path

import engine_reference as ref
import pytest
from support import (
    BLOCKED_DEAL,
    BLOCKED_MOVES,
    BLOCKED_TINY,
    BLOCKED_VECTOR,
    FAST,
    Client,
    SeededEntropy,
    Shell,
    board,
    fast_config,
    latest,
    make_room,
    phase_of,
    pid,
    racing,
    room_phase,
    running_server,
    start_race,
    wait_for_file,
)
from winnable_sources import gated_random_deal

from server.core import CoreConfig, ServerCore
from server.core.events import BlockedChecked, CheckBlocked, LogReloaded, MovePersistFailed
from server.core.state import LogState
from server.winnable import DealFinder, WinnableConfig, exact_blocked
from shared import protocol as p
from shared.engine import BLOCKED, BLOCKED_BUDGET, PLAYING, RESIGNED, Game, replay

VECTOR = BLOCKED_VECTOR
DEAL: int = BLOCKED_DEAL
MOVES: list[str] = BLOCKED_MOVES
TINY: int = BLOCKED_TINY  # no earlier position of the record is undecided with it


def vector_game(budget: int | None, entries: list[str] = MOVES) -> Game:
    game = Game(DEAL, blocked_budget=budget)
    for entry in entries:
        game.play(entry)
    return game


# ====================================================================== the vector itself


def test_the_vector_is_what_its_comment_says() -> None:
    exact = vector_game(None)
    assert exact.status == BLOCKED and not exact.blocked_pending
    undecided_up_to = VECTOR["undecided_up_to"]
    assert exact.blocked_status(undecided_up_to) is None and exact.blocked_status(undecided_up_to + 1) is True
    # Undecided with the test budget only at the end: the stock empties at stock_empty_at, and no
    # position before the last is blocked (so a live game plays every entry).
    live = Game(DEAL, blocked_budget=TINY)
    for index, entry in enumerate(MOVES):
        assert live.status == PLAYING and not live.blocked_pending, index
        live.play(entry)
        assert bool(live.stock) == (index + 1 < VECTOR["stock_empty_at"])
    assert live.status == PLAYING and live.blocked_pending
    # The last move is a foundation move (undo can take it back) from a position that is not blocked.
    last = MOVES[-1]
    assert ">f" in last and not last.startswith("reserve")
    before = vector_game(None, MOVES[:-1])
    assert before.status == PLAYING and before.blocked_status(None) is False


# ====================================================================== the engine


def test_budgeted_check_agrees_with_the_exact_one_whenever_it_decides() -> None:
    rng = random.Random(21)
    games: list[Game] = []
    for _ in range(30):
        for game, _entry in ref.random_playout(rng, rng.getrandbits(64), 500, check_blocked=False):
            if not game.stock and game.status == PLAYING and rng.random() < 0.3:
                games.append(game.copy())
    games += [ref.game_at(ref.random_position(rng, stock_empty=True, nothing_playable=True)) for _ in range(150)]
    games += [
        ref.game_at(ref.dig_position(rng, spaces=rng.randint(0, 6), dig=rng.randint(5, 22), unrestricted=i % 3 != 0))
        for i in range(120)
    ]
    games.append(vector_game(None))
    undecided = {budget: 0 for budget in (0, 1, 5, 30, BLOCKED_BUDGET)}
    for game in games:
        exact = game.is_blocked()
        assert game.blocked_status(None) is exact
        previous: bool | None = None
        for budget in undecided:  # in increasing order: once decided, decided alike
            verdict = game.blocked_status(budget)
            if verdict is None:
                assert previous is None, ref.position_of(game)
                undecided[budget] += 1
            else:
                assert verdict is exact, ref.position_of(game)
            previous = verdict
    assert len(games) >= 500
    assert undecided[0] >= 50 and undecided[1] > undecided[BLOCKED_BUDGET]  # the small budgets do cut searches
    assert undecided[BLOCKED_BUDGET] <= len(games) // 20


def test_a_constructed_hard_position_is_undecided_with_a_tiny_budget() -> None:
    rng = random.Random(7)
    hard = None
    for _ in range(200):
        game = ref.game_at(ref.dig_position(rng, spaces=rng.randint(1, 4), dig=rng.randint(20, 30)))
        if game.blocked_status(3) is None and game.blocked_status(2_000) is not None:
            hard = game
            break
    assert hard is not None
    exact = hard.is_blocked()
    assert hard.blocked_status(3) is None and hard.blocked_status(2_000) is exact
    assert hard.blocked_status(0) is None
    assert hard.status == PLAYING and not hard.blocked_pending  # asking changes nothing


def test_live_play_leaves_the_undecided_position_pending_and_replay_stays_exact() -> None:
    game = vector_game(TINY)
    assert game.status == PLAYING and game.blocked_pending
    assert game.is_blocked()  # the exact check, unbounded, still answers
    assert game.copy().blocked_pending and game.copy().blocked_budget == TINY
    # The default budget of a live game, and a replay decided once at the end within it.
    assert Game(DEAL).blocked_budget == BLOCKED_BUDGET
    settled = Game(DEAL, blocked_budget=TINY)
    for entry in MOVES:
        settled.play(entry, check_blocked=False)
    assert not settled.blocked_pending
    settled.settle_status()
    assert settled.status == PLAYING and settled.blocked_pending
    # Tools: replay() and an unbudgeted game decide exactly.
    replayed, result = replay(DEAL, MOVES)
    assert result.ok and result.status == BLOCKED and replayed.blocked_budget is None
    assert vector_game(None).status == BLOCKED
    assert exact_blocked(DEAL, MOVES, True) and not exact_blocked(DEAL, MOVES[:-1], True)


def test_resolving_the_pending_question() -> None:
    game = vector_game(TINY)
    game.resolve_blocked(False)
    assert game.status == PLAYING and not game.blocked_pending
    game = vector_game(TINY)
    game.resolve_blocked(True)
    assert game.status == BLOCKED and not game.blocked_pending
    with pytest.raises(ValueError, match="blocked"):
        game.resolve_blocked(True)  # over: nothing to resolve
    with pytest.raises(ValueError, match="stock"):
        Game(DEAL).resolve_blocked(True)  # the stock holds cards: never blocked
    # Undo back to the position before the last move: decided (not blocked), so no longer pending.
    game = vector_game(TINY)
    game.play("undo")
    assert game.status == PLAYING and not game.blocked_pending
    game.play(MOVES[-1])
    assert game.blocked_pending
    game.play("resign")
    assert game.status == RESIGNED and not game.blocked_pending


# ====================================================================== the core


def pending_shell(budget: int = TINY) -> tuple[Shell, list[int], str]:
    shell = Shell(
        CoreConfig(countdown_ms=1000, grace_ms=5000, member_grace_ms=10_000, blocked_budget=budget),
        SeededEntropy(deal=DEAL),
    )
    conns, code = racing(shell, ("Ann", "Bob"))
    return shell, conns, code


def play_moves(shell: Shell, conn: int, moves: list[str], first_id: int = 1) -> p.MoveOk:
    reply: p.ServerMessage | None = None
    for i, move in enumerate(moves):
        reply = shell.move(conn, first_id + i, move)
        assert isinstance(reply, p.MoveOk), (i, move, reply)
    assert isinstance(reply, p.MoveOk)
    return reply


def checks(shell: Shell) -> list[CheckBlocked]:
    return [e for e in shell.effects if isinstance(e, CheckBlocked)]


def answer(shell: Shell, check: CheckBlocked, blocked: bool | None) -> None:
    shell.run(BlockedChecked(check.code, check.race, check.player_id, check.length, blocked, shell.now))


def test_an_undecided_move_asks_the_shell_and_a_blocked_answer_ends_the_game() -> None:
    shell, (ann, bob), code = pending_shell()
    ann_id = pid(shell, ann)
    last = play_moves(shell, ann, MOVES)
    assert board(last).status == PLAYING and last.seq == len(MOVES)
    (check,) = checks(shell)  # asked once, for the last position only
    assert (check.code, check.race, check.player_id) == (code, 1, ann_id)
    assert check.length == len(MOVES) and list(check.entries) == MOVES and check.deal == DEAL and check.undo
    assert shell.core.rooms[code].race.racers[ann_id].game.blocked_pending  # type: ignore[union-attr]
    # The deal number never reaches a client (the check carries it to the worker only).
    assert all(str(DEAL) not in repr(m) for conn in (ann, bob) for m in shell.inbox[conn])
    shell.take(ann)
    answer(shell, check, True)
    start = shell.last(ann, p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.view is not None and start.view.status == BLOCKED
    assert start.seq == len(MOVES)
    refused = shell.move(ann, 999, "waste>t6")
    assert isinstance(refused, p.MoveRejected) and "over (blocked)" in refused.reason
    shell.advance(shell.config.leaderboard_interval_ms)
    lb = shell.leaderboards[bob]
    assert next(r for r in lb.racers if r.player_id == ann_id).status == BLOCKED
    # The race's end check: Bob resigns, and the race is over with Ann blocked.
    shell.move(bob, 1, "resign")
    results = shell.last(ann, p.Results)
    assert isinstance(results, p.Results)
    assert next(r for r in results.racers if r.player_id == ann_id).status == BLOCKED
    assert results.records[ann_id].moves == MOVES
    assert len(checks(shell)) == 1


def test_a_blocked_answer_after_an_undo_is_ignored_and_the_new_position_asks_again() -> None:
    shell, (ann, _bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    (check,) = checks(shell)
    play_moves(shell, ann, ["undo"], first_id=500)  # the log changed: back to a position that is not blocked
    answer(shell, check, True)
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.status == PLAYING and not racer.game.blocked_pending
    assert not any(isinstance(m, p.RaceStart) for m in shell.take(ann)[-3:])
    assert len(checks(shell)) == 1  # that position was decided on the spot: nothing to ask
    # Playing the last move again: undecided again, a new question, and this answer counts.
    play_moves(shell, ann, [MOVES[-1]], first_id=501)
    second = checks(shell)[-1]
    assert len(checks(shell)) == 2 and second.length == len(MOVES) + 2
    answer(shell, second, True)
    assert racer is shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.status == BLOCKED


def test_a_blocked_answer_covers_moves_made_since_without_undo() -> None:
    # From a blocked position (stock empty) every move keeps it blocked: the answer still applies.
    shell, (ann, _bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    (check,) = checks(shell)
    tableau_move = next(m for m in vector_game(TINY).legal_moves() if ">t" in m)
    play_moves(shell, ann, [tableau_move], first_id=500)
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.status == PLAYING and len(checks(shell)) == 1  # one question in flight per racer
    answer(shell, check, True)
    assert racer.game.status == BLOCKED and racer.game.entries == [*MOVES, tableau_move]
    assert replay(DEAL, racer.game.entries)[1].status == BLOCKED  # (and so it is, exactly)
    start = shell.last(ann, p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.view is not None and start.view.status == BLOCKED


def test_an_answer_while_a_move_is_being_written_applies_once_it_lands() -> None:
    shell, (ann, _bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    (check,) = checks(shell)
    first = next(m for m in vector_game(TINY).legal_moves() if ">t" in m)
    shell.hold_persists = True
    shell.send(ann, p.Move(id=500, move=first))  # written, not yet acknowledged ...
    shell.send(ann, p.Move(id=501, move="undo"))  # ... and one queued behind it
    answer(shell, check, True)
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.status == PLAYING and racer.state is LogState.WRITING  # the write decides first
    shell.hold_persists = False
    shell.release()
    assert racer.game.status == BLOCKED and racer.game.entries == [*MOVES, first]
    replies = {m.id: m for m in shell.inbox[ann] if isinstance(m, p.MoveOk | p.MoveRejected)}
    assert isinstance(replies[500], p.MoveOk)
    refused = replies[501]
    assert isinstance(refused, p.MoveRejected) and "over (blocked)" in refused.reason  # never undone
    assert shell.logs[(code, 1, ann_id)][-1].move == first and len(shell.logs[(code, 1, ann_id)]) == len(MOVES) + 1


def test_a_reloaded_log_keeps_the_question_in_flight() -> None:
    shell, (ann, _bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    (check,) = checks(shell)
    shell.hold_persists = True
    shell.send(ann, p.Move(id=500, move="undo"))
    (held,) = shell.held
    shell.held.clear()
    # The store stopped answering mid-write: the core reloads the log (the undo never landed).
    shell.run(MovePersistFailed(code, 1, ann_id, "uncertain", shell.now))
    assert shell.reloads and shell.reloads[-1].player_id == ann_id and held.entry.move == "undo"
    shell.run(LogReloaded(code, 1, ann_id, list(shell.logs[(code, 1, ann_id)]), shell.now))
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.blocked_pending and racer.blocked_asked == len(MOVES)
    assert len(checks(shell)) == 1  # the rebuilt racer knows its question is already asked
    answer(shell, check, True)
    assert racer.game.status == BLOCKED


def test_a_not_blocked_answer_changes_nothing_and_a_stale_one_asks_for_the_newest() -> None:
    # Budget 0: every position after the stock empties that needs a dig is undecided.
    shell, (ann, _bob), code = pending_shell(budget=0)
    ann_id = pid(shell, ann)
    probe = Game(DEAL, blocked_budget=0)
    pending: list[int] = []  # record lengths whose position is undecided with budget 0
    for entry in MOVES:
        probe.play(entry)
        if probe.blocked_pending:
            pending.append(len(probe.entries))
    stop = next(n for n in pending[1:] if n + 1 in pending)
    assert pending[0] == VECTOR["stock_empty_at"] and not replay(DEAL, MOVES[: stop + 1])[0].is_blocked()
    play_moves(shell, ann, MOVES[:stop])
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    first = checks(shell)[0]
    assert len(checks(shell)) == 1 and first.length < stop and racer.game.blocked_pending
    answer(shell, first, False)  # for an older position: the newest one is asked now
    newest = checks(shell)[-1]
    assert len(checks(shell)) == 2 and newest.length == stop and racer.game.blocked_pending
    shell.take(ann)
    answer(shell, newest, False)
    assert racer.game.status == PLAYING and not racer.game.blocked_pending
    assert shell.take(ann) == [] and len(checks(shell)) == 2
    # A failed check (None) leaves the question open, without a retry loop: the next move asks.
    play_moves(shell, ann, MOVES[stop : stop + 1], first_id=500)
    failing = checks(shell)[-1]
    assert len(checks(shell)) == 3 and racer.game.blocked_pending
    answer(shell, failing, None)
    assert racer.game.status == PLAYING and racer.game.blocked_pending and len(checks(shell)) == 3
    # Answers for another race or room are ignored.
    shell.run(BlockedChecked(code, 7, ann_id, newest.length, True, shell.now))
    shell.run(BlockedChecked("ZZZZZ", 1, ann_id, newest.length, True, shell.now))
    assert racer.game.status == PLAYING


def test_a_rebuilt_room_asks_again_instead_of_checking_on_the_event_loop() -> None:
    shell, (ann, bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    record = shell.rooms[code]
    logs = {key[2]: list(entries) for key, entries in shell.logs.items() if key[0] == code}
    token = shell.welcome(ann).token
    # A restart: a new core rebuilds the room from the store's record and move logs.
    shell.core = ServerCore(shell.config)
    shell.conns_of.clear()
    loaded = shell.core.load_room(record, logs, shell.now)
    shell.effects.extend(loaded)
    shell.apply(loaded)
    (check,) = [e for e in loaded if isinstance(e, CheckBlocked)]
    assert check.length == len(MOVES) and check.player_id == ann_id
    racer = shell.core.rooms[code].race.racers[ann_id]  # type: ignore[union-attr]
    assert racer.game.status == PLAYING and racer.game.blocked_pending  # the replay's check is budgeted too
    ann = shell.hello("Ann", token=token)
    answer(shell, check, True)
    assert racer.game.status == BLOCKED
    start = shell.last(ann, p.RaceStart)
    assert isinstance(start, p.RaceStart) and start.view is not None and start.view.status == BLOCKED
    assert bob  # Bob is still racing


def test_a_room_rebuilt_after_its_race_gets_the_final_status_right() -> None:
    shell, (ann, bob), code = pending_shell()
    ann_id = pid(shell, ann)
    play_moves(shell, ann, MOVES)
    answer(shell, checks(shell)[0], True)
    shell.move(bob, 1, "resign")
    assert phase_of(shell.core, code) == p.RESULTS
    record = shell.rooms[code]
    logs = {key[2]: list(entries) for key, entries in shell.logs.items() if key[0] == code}
    shell.core = ServerCore(shell.config)
    loaded = shell.core.load_room(record, logs, shell.now)
    (check,) = [e for e in loaded if isinstance(e, CheckBlocked)]
    shell.core.handle(BlockedChecked(check.code, check.race, check.player_id, check.length, True, shell.now))
    race = shell.core.rooms[code].race
    assert race is not None and race.final_rows is not None
    assert next(r for r in race.final_rows if r.player_id == ann_id).status == BLOCKED


# ====================================================================== the real server


async def test_the_server_ends_an_undecided_game_through_its_worker_while_others_play_on(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    config = fast_config(
        core=replace(FAST, blocked_budget=TINY),
        winnable=WinnableConfig(seed_source=functools.partial(gated_random_deal, str(gate)), workers=1),
    )
    async with running_server(config=config) as server:
        racers, _code = await make_room(server, ["Ann", "Bob"], deal=DEAL)
        ann, bob = racers
        starts = await start_race(racers)
        assert starts[0].view == Game(DEAL).view()
        for move_id, move in enumerate(MOVES[:-1], start=1):
            await ann.send(p.Move(id=move_id, move=move))
            reply = await ann.expect(p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
            assert isinstance(reply, p.MoveOk) and board(reply).status == PLAYING, reply
        assert server.deal_finder.blocked_checks == 0  # every position so far decided on the spot
        # Another room takes the single search worker with a deal search held at a gate (blocked
        # checks have their own worker: tests/test_solver_queue.py) ...
        dealers, _ = await make_room(server, ["Cy", "Dee"], winnable_only=True)
        while not all(m.ready for m in latest(dealers[0], p.Room).members if m.player_id != dealers[0].pid):
            await dealers[0].expect(p.Room)
        await dealers[0].send(p.Start())
        await room_phase(dealers[0], p.DEALING)
        await wait_for_file(Path(str(gate) + ".pid"))
        # ... and Ann's undecided last move is accepted, the game still playing until the exact check answers.
        await ann.send(p.Move(id=len(MOVES), move=MOVES[-1]))
        last = await ann.expect(p.MoveOk)
        assert board(last).status == PLAYING and last.seq == len(MOVES)
        assert server.deal_finder.blocked_checks == 1
        # Meanwhile the event loop answers everyone: Bob's moves, a ping from a new connection.
        bob_view = starts[1].view
        assert bob_view is not None
        for move_id in range(1, 4):
            await bob.send(p.Move(id=move_id, move="stock>waste"))
            ok = await bob.expect(p.MoveOk)
            assert ok.seq == move_id
        probe = await Client.open(server, "probe")
        await probe.send(p.Ping(t=1))
        assert (await probe.expect(p.Pong)).t == 1
        # The exact check says blocked, and Ann's game ends so.
        gate.write_text("open")
        while True:
            start = await ann.expect(p.RaceStart, timeout=30.0)
            if start.view is not None and start.view.status == BLOCKED:
                break
        assert start.seq == len(MOVES)
        await ann.send(p.Move(id=len(MOVES) + 1, move="undo"))
        refused = await ann.expect(p.MoveRejected)
        assert "over (blocked)" in refused.reason
        while True:
            await bob.expect(p.Leaderboard)
            lb = bob.leaderboard
            assert lb is not None
            if next(r for r in lb.racers if r.player_id == ann.pid).status == BLOCKED:
                break
        await bob.send(p.Move(id=99, move="resign"))
        results = await ann.expect(p.Results, timeout=10.0)
        assert next(r for r in results.racers if r.player_id == ann.pid).status == BLOCKED
        assert replay(DEAL, results.records[ann.pid].moves)[1].status == BLOCKED
        for client in (*racers, *dealers, probe):
            await client.close()


async def test_the_pool_answers_blocked_checks_outside_the_server() -> None:
    finder = DealFinder(WinnableConfig())
    try:
        assert await finder.blocked(DEAL, MOVES, True) is True
        assert await finder.blocked(DEAL, MOVES[:-1], True) is False
    finally:
        finder.shutdown()
    assert await finder.blocked(DEAL, MOVES, True) is None  # after shutdown: a clear "could not", never a hang
