"""The split arithmetic against a ghost (shared/splits.py), alone: milestones, signs, LiveSplit's
four colours, gold, live bounds and a finished record's foundations."""

from __future__ import annotations

from support import DEAL

from shared import splits as s
from shared.engine import Game


def test_milestones_are_first_reached_and_an_undo_keeps_the_first_time() -> None:
    points = [(100, 5), (900, 13), (1000, 12), (1500, 13), (4000, 27), (5000, 26)]
    assert s.milestone_times(points) == {13: 900, 26: 4000}
    assert s.CARD_MILESTONES == (13, 26, 39, 52, 65, 78, 91, 104)


def test_ahead_and_behind_with_the_four_colours() -> None:
    ghost = {13: 10_000, 26: 20_000, 39: 30_000, 52: 40_000}
    mine = {13: 8_000, 26: 19_000, 39: 32_000, 52: 41_000}
    out = s.splits(mine, ghost)
    assert [x.ahead_ms for x in out] == [2_000, 1_000, -2_000, -1_000]
    assert [x.kind for x in out] == [s.AHEAD_GAINING, s.AHEAD_LOSING, s.BEHIND_LOSING, s.BEHIND_GAINING]
    assert all(x.settled for x in out)
    assert [s.split_text(x) for x in out] == ["-2.0", "-1.0", "+2.0", "+1.0"]
    assert set(s.COLOURS) == {s.AHEAD_GAINING, s.AHEAD_LOSING, s.BEHIND_GAINING, s.BEHIND_LOSING, s.GOLD}


def test_gold_for_a_segment_faster_than_the_best_known() -> None:
    ghost = {13: 10_000, 26: 20_000}
    mine = {13: 11_000, 26: 19_000}  # segments 11 s (ghost 10 s) and 8 s (ghost 10 s)
    assert [x.gold for x in s.splits(mine, ghost)] == [False, True]
    # Against a better best (another ghost's 7-s second segment), no gold.
    best = s.best_segments([ghost, {13: 12_000, 26: 19_000}], s.CARD_MILESTONES)
    assert best == {13: 10_000, 26: 7_000}
    assert [x.gold for x in s.splits(mine, ghost, best=best)] == [False, False]


def test_live_splits_are_bounds_until_both_are_there() -> None:
    ghost = {13: 10_000}
    mine = {13: 8_000, 26: 15_000}
    live = s.splits(mine, ghost, now_ms=17_000)
    assert [(x.milestone, x.ahead_ms, x.settled) for x in live] == [(13, 2_000, True), (26, 2_000, False)]
    assert live[1].ahead and not live[1].gold  # no best known yet while the ghost may still get there
    # Behind: the ghost is there, the racer not yet; nothing past the racer's last milestone.
    behind = s.splits({13: 12_000}, {13: 10_000, 26: 18_000, 39: 25_000}, now_ms=21_000)
    assert [(x.milestone, x.ahead_ms, x.kind) for x in behind] == [
        (13, -2_000, s.BEHIND_LOSING),
        (26, -3_000, s.BEHIND_LOSING),
    ]
    assert s.splits({}, {}, now_ms=5_000) == []


def test_a_finished_run_the_ghost_never_matched_is_ahead_for_good_and_gold() -> None:
    out = s.splits({13: 8_000, 26: 16_000}, {13: 9_000}, now_ms=None)
    last = out[-1]
    assert last.ahead_ms is None and last.ahead and last.kind == s.AHEAD_GAINING and last.gold
    assert s.split_text(last) == "-"
    never = s.splits({13: 8_000}, {13: 9_000, 26: 16_000}, now_ms=None)[-1]
    assert never.ahead_ms is None and not never.ahead and never.kind == s.BEHIND_LOSING


def test_a_record_gives_card_and_foundation_milestones() -> None:
    game = Game(DEAL)
    moves: list[str] = []
    while not game.over and len(moves) < 400:
        legal = game.legal_moves()
        home = [m for m in legal if ">f" in m]
        move = home[0] if home else ("stock>waste" if "stock>waste" in legal else (legal[0] if legal else "resign"))
        game.play(move)
        moves.append(move)
    times = [(i + 1) * 500 for i in range(len(moves))]
    cards, foundations = s.record_times(DEAL, moves, times)
    replayed = Game(DEAL)
    expected: dict[int, int] = {}
    for move, t in zip(moves, times, strict=True):
        replayed.play(move, check_blocked=False)
        for m in s.CARD_MILESTONES:
            if replayed.foundation_cards >= m:
                expected.setdefault(m, t)
    assert cards == expected
    done = sum(1 for pile in replayed.foundations if len(pile) == 13)
    assert sorted(foundations) == list(range(1, done + 1))
