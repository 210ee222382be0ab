"""The engine against the slow reference implementation (tests/engine_reference.py).

On thousands of positions (random deals played randomly to random depths, and random
positions built directly, restricted and unrestricted, with and without a stock) both must
agree on the legal-move set, on what each legal move does, and every move the reference
deems illegal must be refused by ``Game.play`` with the state unchanged. The blocked check
is compared with the reference's exhaustive search on empty-stock positions. Seeds are
fixed, so a failure names a reproducible position.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import engine_reference as ref
import pytest

from shared.engine import PLAYING, Game, IllegalMove

EVERY_PAIR = [f"{src}>{dst}" for src in ref.ALL_PILES for dst in ref.ALL_PILES]


def played_positions(seed: int, deals: int, steps: int) -> Iterator[Game]:
    """Snapshots of random games after every entry (undo included) while they are playing."""
    rng = random.Random(seed)
    for _ in range(deals):
        deal = rng.getrandbits(64)
        depth = rng.choice((steps // 4, steps, steps * 2))
        for game, _entry in ref.random_playout(rng, deal, depth, undo_chance=0.1, check_blocked=False):
            if game.status == PLAYING:
                yield game.copy()


def built_positions(seed: int, count: int) -> Iterator[Game]:
    rng = random.Random(seed)
    for i in range(count):
        yield ref.game_at(ref.random_position(rng, unrestricted=i % 2 == 0))


def describe(game: Game) -> str:
    return repr(ref.position_of(game))


def assert_same_legal_moves(game: Game) -> None:
    engine_moves = game.legal_moves()
    assert len(engine_moves) == len(set(engine_moves)), f"duplicate moves in {engine_moves}"
    assert set(engine_moves) == ref.legal_moves(ref.position_of(game)), describe(game)


def assert_legal_moves_apply_alike(game: Game) -> None:
    pos = ref.position_of(game)
    for move in game.legal_moves():
        assert game.reason_illegal(move) is None
        after = game.copy()
        after.play(move, check_blocked=False)
        assert ref.position_of(after) == ref.apply_move(pos, move), f"{move} in {describe(game)}"
        assert sorted(after.all_cards()) == sorted(game.all_cards())
        assert after.foundation_cards == sum(len(after.foundations[i]) for i in range(8))


def assert_illegal_moves_refused(game: Game) -> None:
    legal = ref.legal_moves(ref.position_of(game))
    before = (game.state_key(), list(game.entries), game.foundation_cards)
    for move in EVERY_PAIR:
        if move in legal:
            continue
        with pytest.raises(IllegalMove) as caught:
            game.play(move)
        assert caught.value.reason, move
        assert game.reason_illegal(move) == caught.value.reason
        assert (game.state_key(), list(game.entries), game.foundation_cards) == before, move


def test_played_positions_have_the_reference_legal_moves() -> None:
    checked = 0
    for index, game in enumerate(played_positions(seed=1, deals=30, steps=150)):
        assert_same_legal_moves(game)
        if index % 4 == 0:
            assert_legal_moves_apply_alike(game)
        checked += 1
    assert checked >= 3000


def test_built_positions_have_the_reference_legal_moves() -> None:
    unrestricted = 0
    for index, game in enumerate(built_positions(seed=2, count=2000)):
        assert_same_legal_moves(game)
        if index % 4 == 0:
            assert_legal_moves_apply_alike(game)
        unrestricted += not game.restricted
    assert unrestricted >= 900


def test_moves_the_reference_deems_illegal_are_refused_with_the_state_unchanged() -> None:
    games = [g for i, g in enumerate(played_positions(seed=3, deals=10, steps=120)) if i % 10 == 0]
    games += list(built_positions(seed=4, count=150))
    assert len(games) >= 250
    for game in games:
        assert_illegal_moves_refused(game)


def test_garbage_entries_are_refused_with_the_state_unchanged() -> None:
    rng = random.Random(5)
    alphabet = "stockwaserfvu0123456789>< -_"
    game = next(g for i, g in enumerate(played_positions(seed=5, deals=1, steps=60)) if i == 40)
    before = game.state_key()
    for _ in range(3000):
        entry = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if entry in EVERY_PAIR or entry in ("undo", "resign"):
            continue
        with pytest.raises(IllegalMove):
            game.play(entry)
        assert game.state_key() == before


# ---------------------------------------------------------------- the blocked check

MAX_REFERENCE_STATES = 1000


def compare_blocked(games: list[Game]) -> tuple[int, int, int]:
    """(compared, blocked, too large for the reference) over ``games``."""
    compared = blocked = too_large = 0
    for game in games:
        try:
            expected = ref.is_blocked(ref.position_of(game), MAX_REFERENCE_STATES)
        except RuntimeError:
            too_large += 1
            continue
        assert game.is_blocked() is expected, describe(game)
        compared += 1
        blocked += expected
    return compared, blocked, too_large


def test_blocked_check_matches_exhaustive_search_on_played_positions() -> None:
    rng = random.Random(6)
    games: list[Game] = []
    for _ in range(60):
        deal = rng.getrandbits(64)
        after_stock: list[Game] = []
        for game, _entry in ref.random_playout(rng, deal, 500, check_blocked=False):
            if not game.stock and game.status == PLAYING:
                after_stock.append(game.copy())
        games += rng.sample(after_stock, min(len(after_stock), 25))
    compared, blocked, too_large = compare_blocked(games)
    assert compared >= 1000 and too_large <= compared // 50
    assert 100 <= blocked <= compared - 100  # both answers well represented


def test_blocked_check_matches_exhaustive_search_on_built_positions() -> None:
    rng = random.Random(7)
    games = [ref.game_at(ref.random_position(rng, stock_empty=True, nothing_playable=i % 3 != 0)) for i in range(600)]
    compared, blocked, too_large = compare_blocked(games)
    assert compared >= 570 and too_large <= 30
    assert 100 <= blocked <= compared - 100


def test_blocked_check_matches_exhaustive_search_on_dig_positions() -> None:
    # Unrestricted and restricted positions where progress needs digging the waste, with few
    # to many spaces: the engine's cuts (space first, lazy merges, the relaxation) all apply.
    rng = random.Random(8)
    games = [
        ref.game_at(ref.dig_position(rng, spaces=rng.randint(0, 12), dig=rng.randint(3, 14), unrestricted=i % 4 != 0))
        for i in range(400)
    ]
    compared, blocked, too_large = compare_blocked(games)
    assert compared >= 360 and too_large <= 40
    assert 60 <= blocked <= compared - 60
