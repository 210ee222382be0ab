"""The solver (shared/solver.py): wins replay, unwinnable positions proved, pruning checked
against a plain exhaustive search on the engine itself, budgets, the server helper, the CLI."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from shared import solver
from shared.cards import CARD_COUNT, rank
from shared.engine import WON, Game, replay
from shared.solver import (
    UNKNOWN,
    UNWINNABLE,
    WINNABLE,
    SolveResult,
    find_winnable_deal,
    hint,
    replays_to_win,
    solve,
)

# ----------------------------------------------------------------------------- helpers


def card_of(rel: int, base: int, copy: int) -> int:
    """A card id of relative rank ``rel`` (0 = base rank); ``copy`` 0..7 picks suit and deck."""
    r = (base - 1 + rel) % 13  # 0-based rank index
    return (copy // 4) * 52 + (copy % 4) * 13 + r


class Builder:
    """Builds an arbitrary legal-looking position of The Plot from relative ranks."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.used: dict[int, int] = {}

    def card(self, rel: int) -> int:
        n = self.used.get(rel, 0)
        assert n < 8, f"more than 8 cards of relative rank {rel}"
        self.used[rel] = n + 1
        return card_of(rel, self.base, n)

    def game(
        self,
        *,
        f0: int,
        others: list[int],
        reserve: list[int],
        waste: list[int],
        stock: list[int],
        tableau: list[tuple[int, int] | None],
    ) -> Game:
        """``f0``/``others``: foundation counts; piles as (top, bottom) relative ranks;
        reserve and waste bottom..top; stock next-to-turn first. The rest of the 104 cards
        must be exactly those the foundations hold."""
        game = Game(0)
        game.base = self.base
        game.foundations = [[self.card(k) for k in range(f0)]] + [[self.card(k) for k in range(c)] for c in others]
        game.reserve = [self.card(x) for x in reserve]
        game.waste = [self.card(x) for x in waste]
        game.stock = [self.card(x) for x in reversed(stock)]
        game.tableau = [[] if p is None else [self.card(x) for x in range(p[1], p[0] - 1, -1)] for p in tableau]
        game.foundation_cards = sum(len(f) for f in game.foundations)
        game.entries = []
        game._undo_stack = []
        assert len(game.all_cards()) == CARD_COUNT and len(set(game.all_cards())) == CARD_COUNT
        return game


def plain_winnable(game: Game, limit: int) -> bool | None:
    """Exhaustive search on the engine itself: no pruning, no automatic moves, every legal move.

    The key only forgets what the rules cannot see (suits and decks, which foundation or
    tableau pile is which). None when the position has more than ``limit`` positions.
    """
    seen: set[object] = set()
    stack = [game]
    while stack:
        g = stack.pop()
        if g.foundation_cards == CARD_COUNT:
            return True
        key = (
            tuple(rank(c) for c in g.stock),
            tuple(rank(c) for c in g.waste),
            tuple(rank(c) for c in g.reserve),
            len(g.foundations[0]),
            tuple(sorted(len(f) for f in g.foundations[1:])),
            tuple(sorted(tuple(rank(c) for c in t) for t in g.tableau)),
        )
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > limit:
            return None
        for move in g.legal_moves():
            child = g.copy()
            child.play(move, check_blocked=False)
            stack.append(child)
    return False


def assert_wins(game: Game, result: SolveResult) -> None:
    assert result.verdict == WINNABLE
    trial = game.copy()
    for move in result.moves:
        trial.play(move)
    assert trial.status == WON


# ----------------------------------------------------------------------------- wins


@pytest.mark.parametrize("deal", [0, 1, 2, 3, 7, 12])
def test_solutions_of_deals_replay_to_a_win(deal: int) -> None:
    result = solve(Game(deal), max_positions=50_000)
    assert result.verdict == WINNABLE, result
    _, replayed = replay(deal, result.moves)
    assert replayed.ok and replayed.status == WON
    assert 180 <= len(result.moves) <= 400  # 78 turns and 103 foundation moves at least
    assert 0 < result.positions <= 50_000


def test_solve_from_a_position_in_mid_play() -> None:
    game = Game(5)
    first = solve(game)
    for move in first.moves[:120]:
        game.play(move)
    snapshot = game.state_key()
    result = solve(game)
    assert game.state_key() == snapshot  # the game is not changed
    assert_wins(game, result)
    hinted = hint(game)
    assert hinted is not None and game.reason_illegal(hinted) is None


def test_solve_after_random_detours_still_finds_real_wins() -> None:
    rng = random.Random(11)
    wins = 0
    for deal in range(20, 30):
        game = Game(deal)
        for _ in range(40):
            moves = game.legal_moves()
            if not moves or game.over:
                break
            game.play(rng.choice(moves))
        if game.over:
            continue
        result = solve(game, max_positions=30_000)
        if result.verdict == WINNABLE:
            wins += 1
            assert_wins(game, result)
    assert wins >= 3


def test_a_won_game_needs_no_moves_and_a_blocked_one_is_lost() -> None:
    game = Game(0)
    for move in solve(game).moves:
        game.play(move)
    assert solve(game) == SolveResult(WINNABLE, [], 0, 0.0)
    assert hint(game) is None
    game = Game(0)
    game.play("resign")
    assert solve(game).verdict == UNWINNABLE


# ----------------------------------------------------------------------------- unwinnable


def test_reserve_order_dead_end_is_proved_unwinnable() -> None:
    # f0 needs an 11 (relative rank), but all eight 11s lie in the reserve under a 12, which can
    # leave only for a foundation: f0 needs the 11 first, f1..f7 need f0 complete. The stock is
    # full, so the game goes on for a long time (never blocked): only foresight proves it lost.
    b = Builder(base=5)
    stock = [x for x in range(13) for _ in range(8)]
    tableau: list[tuple[int, int] | None] = [(x, x) for x in (*range(11), 12)]
    for x in [*range(11), *[11] * 8, 12, *range(11), 12]:
        stock.remove(x)
    rng = random.Random(2)
    rng.shuffle(stock)
    game = b.game(f0=11, others=[0] * 7, reserve=[11] * 8 + [12], waste=[], stock=stock, tableau=tableau)
    assert not game.is_blocked() and game.legal_moves()
    result = solve(game)
    assert result.verdict == UNWINNABLE and result.moves == []


def test_wall_dead_end_is_proved_unwinnable_with_and_without_the_wall_test(monkeypatch: pytest.MonkeyPatch) -> None:
    # f0 needs its last card, a 12 (relative). The reserve's 12s lie under a base-rank card (which
    # cannot leave while f0 is incomplete), the stock and the tableau hold none, and the waste's
    # 12s lie under an 11 that nothing can hold (no pile ends in a 12, so no top 12 can appear).
    # Cards can still be moved about, but f0 can never complete.
    rng = random.Random(4)
    pool = [x for x in range(13) for _ in range(8)]
    reserve = [12, 12, 12, 12, 1, 2, 3, 4, 5, 6, 7, 8, 0]
    tableau: list[tuple[int, int] | None] = [
        (1, 3), (2, 5), (4, 4), (5, 9), (6, 6), (7, 10), (8, 8), (9, 11), (10, 11), (3, 3), (0, 0), (11, 11),
    ]  # fmt: skip
    stock = [3, 9, 4]
    spans = [span for span in tableau if span is not None]
    used = [*range(12), *reserve, *stock, *(x for low, high in spans for x in range(low, high + 1))]
    for x in used:
        pool.remove(x)
    rest = [x for x in pool if x != 12]
    rest.remove(11)
    rng.shuffle(rest)
    waste = [12] * 4 + [11] + rest
    game = Builder(base=7).game(f0=12, others=[0] * 7, reserve=reserve, waste=waste, stock=stock, tableau=tableau)
    assert not game.is_blocked() and len(game.legal_moves()) > 5
    assert solve(game).verdict == UNWINNABLE
    monkeypatch.setattr(solver, "WALL_CHECK", False)
    monkeypatch.setattr(solver, "RESERVE_CHECK", False)
    alone = solve(game)
    assert alone.verdict == UNWINNABLE and alone.positions > 1000


# Lost positions found by random construction and checked by the plain search below: f0 stuck
# short of complete, the stock nearly empty, cards still able to move (never blocked at once).
LOST_RESTRICTED: list[dict[str, Any]] = [
    {"base": 11, "f0": 11, "reserve": [1, 7, 6, 9, 2, 6, 1, 9, 1, 11, 7, 11, 3],
     "waste": [1, 12, 5, 4, 7, 10, 6, 10, 3, 0, 11, 5, 8, 10, 3, 6, 4, 7, 6, 2, 8, 5, 10, 4, 5, 11, 12, 10, 11, 0,
               12, 2, 0, 5, 1, 8, 5, 3, 9, 11, 9, 9, 2, 2, 6, 1, 0, 7, 0, 8, 4, 3, 6, 7, 0, 8, 12, 8, 9],
     "stock": [4, 3],
     "tableau": [(7, 7), (9, 12), (2, 2), (0, 0), (12, 12), (4, 5), (4, 4), (1, 3), (8, 8), (12, 12), (10, 11),
                 (12, 12)]},
    {"base": 5, "f0": 10, "reserve": [0, 12, 1, 10, 11, 7, 11, 2, 0, 4, 12, 8, 4],
     "waste": [11, 3, 1, 5, 2, 3, 12, 12, 6, 12, 11, 10, 10, 1, 12, 2, 10, 6, 10, 3, 7, 0, 5, 1, 5, 4, 11, 4, 9, 0,
               8, 7, 10, 8, 0, 9, 2, 12, 5, 12, 6],
     "stock": [3, 6],
     "tableau": [(1, 1), (2, 7), (1, 2), (3, 8), (7, 11), (0, 0), (0, 0), (11, 11), (1, 11), (9, 9), (8, 9), (9, 9)]},
    {"base": 11, "f0": 11, "reserve": [1, 9, 1, 4, 3, 12, 3, 0, 4, 5, 5, 1, 2],
     "waste": [3, 9, 2, 12, 3, 0, 3, 11, 3, 10, 6, 8, 9, 6, 6, 7, 0, 2, 0, 8, 9, 7, 1, 4, 0, 11, 11, 6, 7, 1, 0, 8,
               12, 2, 5, 7, 4, 2, 5, 12, 8, 11, 4, 11, 1, 9, 2, 10, 10, 12, 8],
     "stock": [1],
     "tableau": [(10, 12), (10, 10), (4, 6), (12, 12), (0, 0), (7, 8), (9, 9), (10, 11), (7, 12), (2, 2), (5, 6),
                 (3, 7)]},
    {"base": 4, "f0": 10, "reserve": [2, 2, 5, 7, 0, 6, 2, 5, 0, 7, 4, 0, 10],
     "waste": [0, 8, 6, 1, 10, 3, 11, 4, 10, 12, 0, 8, 5, 2, 3, 2, 6, 3, 10, 7, 1, 1, 7, 8, 4, 12, 9, 6, 1, 1, 11, 3,
               12, 4, 1, 5, 9, 1, 8, 12, 2, 9, 8, 0, 12, 6, 6, 4, 4, 3, 3, 5],
     "stock": [7],
     "tableau": [(7, 7), (11, 11), (6, 6), (7, 12), (11, 11), (8, 12), (2, 3), (4, 5), (0, 0), (9, 12), (5, 5),
                 (9, 11)]},
]  # fmt: skip


@pytest.mark.parametrize("spec", LOST_RESTRICTED, ids=range(len(LOST_RESTRICTED)))
@pytest.mark.parametrize("checks", [True, False], ids=["dead-end-tests", "search-alone"])
def test_constructed_lost_positions_are_proved_unwinnable(
    spec: dict[str, Any], checks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(solver, "RESERVE_CHECK", checks)
    monkeypatch.setattr(solver, "WALL_CHECK", checks)
    game = Builder(spec["base"]).game(
        f0=spec["f0"], others=[0] * 7, reserve=spec["reserve"], waste=spec["waste"], stock=spec["stock"],
        tableau=spec["tableau"],
    )  # fmt: skip
    assert not game.is_blocked() and game.legal_moves()
    result = solve(game)
    assert result.verdict == UNWINNABLE
    if not checks:
        assert result.positions > 10  # a real search, not a refusal at the root
        assert plain_winnable(game, 20_000) is False


# ----------------------------------------------------------------------------- soundness


def late_positions(count: int, seed: int) -> Iterator[Game]:
    """Real positions late in a game, some lost and some not. Two in three follow a deal's
    winning line to near its end, then make random moves that mostly keep cards off the
    foundations; the others play random moves from the deal, rarely to a foundation, until a
    few stock cards remain (f0 usually incomplete: lost, but only a search can tell)."""
    rng = random.Random(seed)
    produced = 0
    for deal in itertools.count(seed * 1000):
        if produced >= count:
            return
        game = Game(deal)
        if deal % 3:
            line = solve(game, max_positions=20_000)
            if line.verdict != WINNABLE:
                continue
            cut = rng.randrange(len(line.moves) - 100, len(line.moves) - 20)
            for move in line.moves[:cut]:
                game.play(move)
            detour, prefer_home = rng.randrange(2, 16), 0.2
        else:
            detour, prefer_home = 1000, 0.05
        for _ in range(detour):
            moves = game.legal_moves()
            if not moves or game.over or (detour == 1000 and len(game.stock) <= deal % 2):
                break
            home = [m for m in moves if ">f" in m]
            game.play(rng.choice(home) if home and rng.random() < prefer_home else rng.choice(moves))
        if not game.over:
            produced += 1
            yield game


@pytest.fixture(scope="module")
def checked_positions() -> list[tuple[Game, bool]]:
    """Late positions with the plain search's verdict (those it can finish in 3,000 positions)."""
    out = []
    for game in late_positions(36, seed=3):
        plain = plain_winnable(game, 3_000)
        if plain is not None:
            out.append((game, plain))
    return out


@pytest.mark.parametrize(("reserve_check", "wall_check"), [(True, True), (True, False), (False, True), (False, False)])
def test_pruned_search_agrees_with_plain_exhaustive_search(
    monkeypatch: pytest.MonkeyPatch, reserve_check: bool, wall_check: bool, checked_positions: list[tuple[Game, bool]]
) -> None:
    """Same verdict as the plain search on every position the plain search can finish; with each
    dead-end test on and off (with both off, lost positions need the search itself)."""
    monkeypatch.setattr(solver, "RESERVE_CHECK", reserve_check)
    monkeypatch.setattr(solver, "WALL_CHECK", wall_check)
    verdicts = {True: 0, False: 0}
    searched_losses = 0
    for game, plain in checked_positions:
        result = solve(game, max_positions=200_000)
        assert result.verdict == (WINNABLE if plain else UNWINNABLE), game.state_key()
        if plain:
            assert_wins(game, result)
        elif result.positions > 1:
            searched_losses += 1
        verdicts[plain] += 1
    assert verdicts[True] >= 5 and verdicts[False] >= 4, verdicts
    if not reserve_check and not wall_check:
        assert searched_losses >= 4


# ----------------------------------------------------------------------------- tableau algebra


def brute_outcomes(pairs: tuple[tuple[int, int], ...], op: int, a: int) -> set[tuple[tuple[int, int], ...]]:
    """Every canonical tableau reachable by: any sequence of re-pairing moves, then the operation
    on any pile. Computed by a plain breadth-first search over labelled piles."""
    start = tuple(pairs)
    seen = {start}
    frontier = [start]
    while frontier:
        nxt = []
        for tab in frontier:
            for i, p in enumerate(tab):
                for j, q in enumerate(tab):
                    if i != j and p[0] != 0 and p[1] > p[0] and q[0] == p[0] + 1:
                        new = list(tab)
                        new[i] = (p[0] + 1, p[1])
                        new[j] = (p[0], q[1])
                        t = tuple(new)
                        if t not in seen:
                            seen.add(t)
                            nxt.append(t)
        frontier = nxt
    results = set()
    for tab in seen:
        for i, p in enumerate(tab):
            rest = list(tab[:i] + tab[i + 1 :])
            if op == solver.OP_TAKE and p[0] == a:
                results.add(solver._canon(rest + ([(a + 1, p[1])] if p[1] > a else [])))
            elif op == solver.OP_PUT and p[0] == a + 1:
                results.add(solver._canon([*rest, (a, p[1])]))
            elif op == solver.OP_EMPTY and p == (a, a):
                for j, q in enumerate(rest):
                    if q[0] == a + 1:
                        new = list(rest)
                        new[j] = (a, q[1])
                        results.add(solver._canon(new))
    return results


def random_tableau(rng: random.Random) -> tuple[tuple[int, int], ...]:
    piles = []
    for _ in range(rng.randrange(1, 9)):
        if rng.random() < 0.1:
            piles.append((0, 0))
        else:
            top = rng.randrange(1, 13)
            piles.append((top, rng.randrange(top, min(12, top + 4) + 1)))
    return tuple(piles)


def test_tableau_outcomes_match_a_brute_force_over_all_pairings() -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(400):
        pairs = random_tableau(rng)
        canon = solver._canon(pairs)
        for op in (solver.OP_TAKE, solver.OP_PUT, solver.OP_EMPTY):
            for a in range(0, 12):
                if op != solver.OP_TAKE and a == 0:
                    continue
                expected = brute_outcomes(pairs, op, a)
                assert set(solver._op_outcomes(canon, op, a)) == expected, (pairs, op, a)
                checked += len(expected)
    assert checked > 500


# ----------------------------------------------------------------------------- budgets


def test_position_budget_is_never_exceeded() -> None:
    for budget in (1, 50, 333, 2_000):
        result = solve(Game(117), max_positions=budget)  # deal 117 needs far more
        assert result.verdict == UNKNOWN and result.moves == []
        assert result.positions <= budget


def test_time_budget_uses_the_injected_clock() -> None:
    ticks = itertools.count()

    def clock() -> float:
        return float(next(ticks))  # one "second" per reading

    result = solve(Game(117), max_seconds=3.0, clock=clock)
    assert result.verdict == UNKNOWN
    # The clock is read every CLOCK_EVERY positions: the deadline stops the search within that slack.
    assert result.positions <= 4 * solver.CLOCK_EVERY
    with pytest.raises(ValueError, match="clock"):
        solve(Game(117), max_seconds=1.0)


# ----------------------------------------------------------------------------- server helper


def test_find_winnable_deal_returns_only_proved_winnable_deals() -> None:
    found = find_winnable_deal([129, 164, 117, 6], tries=4, max_positions=5_000)
    assert found is not None
    deal, result = found
    assert deal == 6  # 129 and 164 are lost, 117 needs more than the budget
    assert result.verdict == WINNABLE and replays_to_win(Game(deal), result.moves)
    assert find_winnable_deal([129, 164], tries=5, max_positions=5_000) is None
    assert find_winnable_deal([3], tries=0, max_positions=5_000) is None
    source = iter([255, 8])
    found = find_winnable_deal(lambda: next(source), tries=2, max_positions=5_000)
    assert found is not None and found[0] == 8


def test_find_winnable_deal_runs_in_a_process_pool() -> None:
    from concurrent.futures import ProcessPoolExecutor

    from shared.fairplay import random_deal

    with ProcessPoolExecutor(max_workers=1) as pool:
        found = pool.submit(find_winnable_deal, random_deal, tries=20, max_positions=20_000).result(timeout=120)
    assert found is not None
    deal, result = found
    _, replayed = replay(deal, result.moves)
    assert replayed.status == WON


# ----------------------------------------------------------------------------- CLI


def plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "client.cli", "solve", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_json_is_one_object_with_a_winning_line() -> None:
    out = plot("4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert list(data) == ["deal", "verdict", "moves", "positions", "seconds"]
    assert data["deal"] == 4 and data["verdict"] == WINNABLE
    _, replayed = replay(4, data["moves"])
    assert replayed.status == WON
    assert isinstance(data["positions"], int) and isinstance(data["seconds"], float)


def test_cli_unwinnable_and_unknown() -> None:
    lost = json.loads(plot("129", "--json").stdout)
    assert lost["verdict"] == UNWINNABLE and lost["moves"] == []
    out = plot("117", "--budget", "300", "--json")
    data = json.loads(out.stdout)
    assert data["verdict"] == UNKNOWN and data["positions"] <= 300 and data["moves"] == []
    text = plot("1")
    assert text.returncode == 0 and "winnable" in text.stdout and "stock>waste" in text.stdout


@pytest.mark.parametrize("bad", ["-1", "abc", "18446744073709551616", "1.5"])
def test_cli_bad_deal_number_exits_2_with_one_line(bad: str) -> None:
    out = plot(bad)
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "plot solve" in out.stderr


def test_cli_bad_budget_exits_2() -> None:
    out = plot("3", "--budget", "0")
    assert out.returncode == 2 and "--budget" in out.stderr


def test_shorten_replaces_detours_by_the_same_position() -> None:
    assert solver.shorten(["waste>t1", "t1>t2", "t3>t4", "t4>t3", "stock>waste"]) == ["waste>t2", "stock>waste"]
    assert solver.shorten(["t0>t1", "t1>t2", "t2>t5"]) == ["t0>t5"]
    assert solver.shorten(["t0>f1", "t1>t0"]) == ["t0>f1", "t1>t0"]
    # On real solutions: same final position as the long form, and shorter.
    for deal in (3, 9):
        game = Game(deal)
        state, seq, reserve, concrete = solver._position(game)
        search = solver._Search(seq, reserve, 100_000, None, None)
        steps = search.run(state)
        assert steps is not None
        long_form = concrete.moves(steps)
        short = solver.shorten(long_form)
        assert len(short) < len(long_form)
        assert replay(deal, short)[1].status == replay(deal, long_form)[1].status == WON


def test_an_impossible_position_is_refused_with_a_reason() -> None:
    game = Game(0)
    game.tableau[0] = [card_of(9, game.base, 0), card_of(3, game.base, 1)]  # not a run down by one
    with pytest.raises(ValueError, match="t0 is not a run"):
        solve(game)
    with pytest.raises(ValueError, match="max_positions"):
        solve(Game(0), max_positions=-1)
