"""Every rule of docs/rules.md, "The rules" (and the rules of "Undo"), one test each.

Positions are either a real deal (deal 5: f0 Kh1 so the base rank is King; tableau t0 8d0,
t1 Tc0, t3 2h1, t6 9d0, t9 Ad1, t11 Ac1; reserve top 6c1) or built directly with
:func:`build`, which names every card on the board; cards it does not name are off the
board (the move rules never count cards, only the won check does, and that test places
all 104). Unnamed tableau piles are spaces. An unnamed stock holds one card named nowhere
else, so that a rule test's position does not end as blocked; the blocked tests build
with an empty stock (:func:`dug`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import engine_reference as ref
import pytest

from shared.cards import card_name, parse_card
from shared.deal import deal_layout, parse_deal_number
from shared.engine import BLOCKED, PLAYING, RESIGNED, WON, Game, IllegalMove, replay

RECORDS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "vectors" / "records.json").read_text())["records"]

# Base rank 7 foundation runs, for building positions: f0 complete is 7..6 round the corner.
F0_FULL = "7c0 8c0 9c0 Tc0 Jc0 Qc0 Kc0 Ac0 2c0 3c0 4c0 5c0 6c0"


def cards(text: str) -> list[int]:
    return [parse_card(name) for name in text.split()]


def build(
    *,
    f0: str,
    foundations: dict[int, str] | None = None,
    tableau: dict[int, str] | None = None,
    waste: str = "",
    reserve: str = "",
    stock: str | None = None,
) -> Game:
    """A live game set to this position. Piles are listed bottom first; the stock's first card
    is the next to turn. The base rank is the rank of f0's first card."""
    pos: ref.Position = {name: [] for name in ref.ALL_PILES}
    pos["f0"] = cards(f0)
    for i, text in (foundations or {}).items():
        pos[f"f{i}"] = cards(text)
    for i, text in (tableau or {}).items():
        pos[f"t{i}"] = cards(text)
    pos["waste"], pos["reserve"] = cards(waste), cards(reserve)
    if stock is None:
        pos["stock"] = [max(set(range(104)) - set(ref.cards_of(pos)))]
    else:
        pos["stock"] = cards(stock)
    every = ref.cards_of(pos)
    assert len(every) == len(set(every)), "a position names a card twice"
    return ref.game_at(pos)


def reject(game: Game, entry: str) -> str:
    """Play an entry that must be refused; check the state is unchanged and return the reason."""
    before = (game.state_key(), list(game.entries), game.foundation_cards, game.view_hash())
    with pytest.raises(IllegalMove) as caught:
        game.play(entry)
    assert (game.state_key(), list(game.entries), game.foundation_cards, game.view_hash()) == before
    assert entry not in game.legal_moves()
    if entry not in ("undo", "resign"):
        assert game.reason_illegal(entry) == caught.value.reason
    return caught.value.reason


def accept(game: Game, entry: str) -> None:
    if entry not in ("undo", "resign"):
        assert entry in game.legal_moves()
        assert game.reason_illegal(entry) is None
    game.play(entry)


def top(game: Game, pile: str) -> str | None:
    source = ref.position_of(game)[pile]
    return card_name(source[-1]) if source else None


def test_deal_5_is_the_position_these_tests_describe() -> None:
    layout = deal_layout(5)
    assert card_name(layout.foundation) == "Kh1"
    named = {0: "8d0", 1: "Tc0", 3: "2h1", 6: "9d0", 9: "Ad1", 11: "Ac1"}
    assert {i: card_name(layout.tableau[i]) for i in named} == named
    assert card_name(layout.reserve[-1]) == "6c1"


def test_new_game_is_the_dealt_layout() -> None:
    layout = deal_layout(5)
    game = Game(5)
    pos = ref.position_of(game)
    assert pos["reserve"] == list(layout.reserve)
    assert pos["f0"] == [layout.foundation]
    assert [pos[f"t{i}"] for i in range(12)] == [[card] for card in layout.tableau]
    assert pos["stock"] == list(layout.stock)
    assert pos["waste"] == [] and all(pos[f"f{i}"] == [] for i in range(1, 8))
    assert game.status == PLAYING and game.foundation_cards == 1 and game.restricted
    assert game.base == 13


# ---------------------------------------------------------------- foundations


def test_restricted_f0_takes_the_rank_it_needs_from_tableau_waste_and_reserve() -> None:
    game = build(f0="7c0", tableau={0: "8d0"}, waste="9h0", reserve="Kc0 Ts1")
    accept(game, "t0>f0")
    accept(game, "waste>f0")
    accept(game, "reserve>f0")
    assert cards("7c0 8d0 9h0 Ts1") == game.foundations[0]
    assert game.foundation_cards == 4


def test_restricted_f0_refuses_a_wrong_rank_and_names_the_rank_it_needs() -> None:
    game = build(f0="7c0 8c0", tableau={0: "Td0"}, waste="Jh0", reserve="8h1")
    assert reject(game, "t0>f0") == "the first foundation needs a 9; Td0 is a 10"
    assert reject(game, "waste>f0") == "the first foundation needs a 9; Jh0 is a Jack"
    assert reject(game, "reserve>f0") == "the first foundation needs a 9; 8h1 is an 8"


def test_restricted_only_f0_takes_cards_not_even_a_base_rank_card_on_f1_to_f7() -> None:
    game = build(f0="7c0 8c0", tableau={0: "7d0", 1: "9s0"}, waste="7h0", reserve="7s1")
    for src in ("t0", "waste", "reserve"):
        for f in range(1, 8):
            reason = reject(game, f"{src}>f{f}")
            assert reason == "only the first foundation takes cards until it is complete (it needs a 9)"
    accept(game, "t1>f0")  # f0 still works


def test_foundation_round_the_corner_king_then_ace() -> None:
    game = build(f0="Jc0 Qc0 Kc0", waste="2d0 Ad0")
    assert game.needed_rank(0) == 1
    accept(game, "waste>f0")
    assert game.needed_rank(0) == 2
    accept(game, "waste>f0")
    assert game.foundations[0] == cards("Jc0 Qc0 Kc0 Ad0 2d0")


def test_f1_to_f7_start_with_a_base_rank_card_only_after_f0_is_complete() -> None:
    game = build(f0=F0_FULL, tableau={0: "8d0", 1: "7d0"}, waste="7h0")
    assert not game.restricted
    assert reject(game, "t0>f1") == ("f1 needs a 7 (an empty foundation starts with the base rank); 8d0 is an 8")
    # A base-rank card may start any of the empty foundations: they are equivalent.
    assert {m for m in game.legal_moves() if m.startswith("t1>f")} == {f"t1>f{i}" for i in range(1, 8)}
    assert {m for m in game.legal_moves() if m.startswith("waste>f")} == {f"waste>f{i}" for i in range(1, 8)}
    accept(game, "t1>f4")
    assert game.needed_rank(4) == 8
    accept(game, "t0>f4")  # the 8 now goes on the 7
    assert game.foundations[4] == cards("7d0 8d0")


def test_complete_f0_takes_nothing_more() -> None:
    game = build(f0=F0_FULL, waste="7h0")
    assert reject(game, "waste>f0") == "the first foundation is complete and takes nothing more"


def test_a_complete_foundation_takes_nothing_more() -> None:
    full_f3 = "7d0 8d0 9d0 Td0 Jd0 Qd0 Kd0 Ad0 2d0 3d0 4d0 5d0 6d0"
    game = build(f0=F0_FULL, foundations={3: full_f3}, waste="7h0")
    assert reject(game, "waste>f3") == "f3 is complete"
    assert "waste>f3" not in game.legal_moves() and "waste>f2" in game.legal_moves()


def test_cards_never_leave_a_foundation() -> None:
    game = build(f0="7c0 8c0", tableau={0: "9d0"})
    for dst in ("t0", "t5", "f1"):
        assert reject(game, f"f0>{dst}") == "cards never leave a foundation"


# ---------------------------------------------------------------- reserve


def test_reserve_plays_only_to_a_foundation() -> None:
    game = build(f0="7c0", tableau={0: "Tc0"}, reserve="Kc0 9h0")
    assert reject(game, "reserve>t0") == "the reserve plays only to a foundation"  # a 9 would fit on the 10
    assert reject(game, "reserve>t1") == "t1 is a space: only the waste may fill a space"
    assert not [m for m in game.legal_moves() if m.startswith("reserve>")]


# ---------------------------------------------------------------- tableau building


def test_build_down_by_one_from_waste_and_tableau_whatever_the_suits() -> None:
    game = build(f0="7c0", tableau={0: "Th0", 1: "9d0", 2: "Jd0"}, waste="8h1")
    accept(game, "t1>t0")  # red 9 on red 10
    accept(game, "waste>t0")
    assert game.tableau[0] == cards("Th0 9d0 8h1")
    assert game.tableau[1] == []


def test_build_refuses_a_card_that_is_not_one_rank_lower() -> None:
    game = build(f0="7c0", tableau={0: "Th0", 1: "8d0", 2: "Jd0"})
    assert reject(game, "t1>t0") == "t0's top is a 10: it takes only a 9, not an 8"
    assert reject(game, "t2>t0") == "t0's top is a 10: it takes only a 9, not a Jack"


def test_one_card_moves_at_a_time() -> None:
    game = build(f0="7c0", tableau={0: "Jh0 Th0 9h0", 1: "Qd0", 2: "Td1"})
    assert reject(game, "t0>t1") == "t1's top is a Queen: it takes only a Jack, not a 9"  # not the Jack's run
    game.play("t0>t2")  # the 9 alone goes onto the other 10
    assert game.tableau[0] == cards("Jh0 Th0") and game.tableau[2] == cards("Td1 9h0")


def test_tableau_round_the_corner_king_on_ace_and_ace_on_two() -> None:
    game = build(f0="7c0", tableau={0: "Ad0", 1: "2s0", 2: "Ah1"}, waste="Kd0")
    accept(game, "waste>t0")  # a King on an Ace
    accept(game, "t2>t1")  # an Ace on a Two
    assert game.tableau[0] == cards("Ad0 Kd0") and game.tableau[1] == cards("2s0 Ah1")


def test_round_the_corner_still_never_builds_on_or_with_the_base_rank() -> None:
    # Base rank King: a King is never built on an Ace, nothing goes on a King in the tableau.
    game = build(f0="Kc0", tableau={0: "Ad0", 1: "Kh0", 2: "Qs0"}, waste="Kd0")
    assert reject(game, "waste>t0") == "Kd0 is the base rank King: it is never built on a tableau card"
    assert reject(game, "t2>t1") == "t1's top is the base rank King: nothing may be built on it"


@pytest.mark.parametrize("unrestricted", [False, True], ids=["restricted", "unrestricted"])
def test_a_base_rank_card_is_never_built_onto_a_tableau_card(unrestricted: bool) -> None:
    game = build(f0=F0_FULL if unrestricted else "7c0", tableau={0: "8d0", 1: "7h0"}, waste="7s0")
    assert reject(game, "t1>t0") == "7h0 is the base rank 7: it is never built on a tableau card"
    assert reject(game, "waste>t0") == "7s0 is the base rank 7: it is never built on a tableau card"


@pytest.mark.parametrize("unrestricted", [False, True], ids=["restricted", "unrestricted"])
def test_nothing_is_ever_built_onto_a_base_rank_card_in_the_tableau(unrestricted: bool) -> None:
    game = build(f0=F0_FULL if unrestricted else "7c0", tableau={0: "7d0", 4: "6h0"}, waste="6s0")
    assert reject(game, "t4>t0") == "t0's top is the base rank 7: nothing may be built on it"
    assert reject(game, "waste>t0") == "t0's top is the base rank 7: nothing may be built on it"


def test_a_base_rank_card_in_the_tableau_may_go_to_a_foundation_once_unrestricted() -> None:
    game = build(f0=F0_FULL, tableau={0: "7d0"})
    accept(game, "t0>f1")
    assert game.tableau[0] == [] and game.foundations[1] == cards("7d0")


def test_a_base_rank_card_in_the_tableau_has_no_move_but_to_a_foundation() -> None:
    # Restricted: t0's 7d0 (base rank) can go neither onto t1's 8s0 nor into a space (t2..t11)
    # nor, while f0 needs an 8, to any foundation: it sits where it was dealt.
    game = build(f0="7c0", tableau={0: "7d0", 1: "8s0"})
    assert not [m for m in game.legal_moves() if m.startswith("t0>")]
    assert reject(game, "t0>t2") == "t2 is a space: only the waste may fill a space"
    assert reject(game, "t0>f1").startswith("only the first foundation takes cards")


# ---------------------------------------------------------------- spaces


def test_only_the_waste_fills_a_space() -> None:
    game = build(f0=F0_FULL, tableau={0: "9d0"}, waste="7h0", reserve="8s0")
    assert reject(game, "t0>t1") == "t1 is a space: only the waste may fill a space"
    assert reject(game, "reserve>t1") == "t1 is a space: only the waste may fill a space"
    accept(game, "waste>t1")


def test_restricted_only_a_base_rank_card_fills_a_space() -> None:
    game = build(f0="7c0", tableau={0: "9d0"}, waste="7h0 Qs0")
    assert reject(game, "waste>t1") == (
        "while the first foundation is incomplete only a base-rank card (7) may fill a space"
    )
    game.waste.pop()  # set the position: the base-rank 7h0 on top of the waste
    spaces = {f"waste>t{i}" for i in range(1, 12)}
    assert spaces <= set(game.legal_moves())
    accept(game, "waste>t5")
    assert game.tableau[5] == cards("7h0")


def test_unrestricted_any_waste_card_fills_a_space() -> None:
    game = build(f0=F0_FULL, tableau={0: "9d0"}, waste="Qs0")
    assert {f"waste>t{i}" for i in range(1, 12)} <= set(game.legal_moves())
    accept(game, "waste>t11")
    assert game.tableau[11] == cards("Qs0")


def test_a_space_may_stay_empty() -> None:
    game = build(f0="7c0", tableau={0: "9d0"}, waste="7h0", stock="Qs0 Js0")
    accept(game, "stock>waste")  # the base-rank 7h0 need not fill a space first
    assert game.tableau[1:] == [[] for _ in range(11)]
    assert game.status == PLAYING


# ---------------------------------------------------------------- stock


def test_stock_turns_in_dealing_order_and_there_is_no_redeal() -> None:
    layout = deal_layout(5)
    game = Game(5)
    assert reject(game, "stock>t0") == "the stock only turns onto the waste: play stock>waste"
    for turned in range(78):
        accept(game, "stock>waste")
        assert game.waste == list(layout.stock[: turned + 1])
    assert game.status == PLAYING  # deal 5 still has t9>f0, so it is not blocked
    assert "stock>waste" not in game.legal_moves()
    assert reject(game, "stock>waste") == "the stock is empty, and there is no redeal"
    for src in ("waste", "t0"):
        assert reject(game, f"{src}>stock") == "nothing may be played to the stock"


def test_nothing_is_played_to_the_waste_or_the_reserve() -> None:
    game = build(f0="7c0", tableau={0: "9d0"}, waste="8d0")
    assert reject(game, "t0>waste") == "nothing may be played to the waste"
    assert reject(game, "waste>reserve") == "nothing may be played to the reserve"


def test_moves_that_do_not_parse_or_name_no_pile() -> None:
    game = Game(5)
    assert reject(game, "t12>t0") == "unknown pile 't12': piles are stock, waste, reserve, f0..f7 and t0..t11"
    assert reject(game, "waste>x") == "unknown pile 'x': piles are stock, waste, reserve, f0..f7 and t0..t11"
    assert reject(game, "waste") == (
        "'waste' is not a move: write SRC>DST (e.g. waste>t3, stock>waste), undo or resign"
    )
    assert reject(game, "").startswith("'' is not a move")
    assert reject(game, "t0>t0") == "t0 cannot be played onto itself"
    assert reject(game, "waste>t0") == "the waste is empty: there is no card to move"
    assert reject(game, "WASTE>T0").startswith("unknown pile 'WASTE'")


# ---------------------------------------------------------------- undo (docs/rules.md, "Undo")


def test_undo_takes_back_the_last_moves_one_by_one() -> None:
    game = Game(5)
    start = game.state_key()
    accept(game, "t0>t6")  # 8d0 onto 9d0
    after_first = game.state_key()
    accept(game, "t9>f0")  # Ad1 onto the King
    assert game.foundation_cards == 2
    accept(game, "undo")  # a card taken back from a foundation by undo is not a move
    assert game.state_key() == after_first and game.foundation_cards == 1
    accept(game, "undo")
    assert game.state_key() == start
    assert reject(game, "undo") == "there is no move to undo"
    assert game.entries == ["t0>t6", "t9>f0", "undo", "undo"]


def test_undo_never_passes_a_stock_turn() -> None:
    game = Game(5)
    accept(game, "t0>t6")
    accept(game, "stock>waste")
    assert reject(game, "undo") == "stock>waste turned a card: it cannot be undone"
    accept(game, "t9>f0")
    accept(game, "undo")  # the move after the turn may be undone ...
    assert reject(game, "undo") == "stock>waste turned a card: it cannot be undone"  # ... but not past it
    assert game.tableau[6] == cards("9d0 8d0")


def test_undo_never_passes_a_reserve_move() -> None:
    game = build(f0="7c0", tableau={0: "Td0", 1: "9s0"}, reserve="Kc0 8h0")
    accept(game, "t1>t0")
    accept(game, "reserve>f0")
    assert reject(game, "undo") == "reserve>f0 uncovered a reserve card: it cannot be undone"
    assert game.tableau[0] == cards("Td0 9s0")


def test_undo_off() -> None:
    game = Game(5, undo=False)
    accept(game, "t0>t6")
    assert reject(game, "undo") == "undo is off in this game"
    assert game.record() == {"deal": 5, "moves": ["t0>t6"], "undo": False}
    _, result = replay(5, ["t0>t6", "undo"], undo=False)
    assert result.error is not None and result.error.index == 1 and result.error.reason == "undo is off in this game"
    _, allowed = replay(5, ["t0>t6", "undo"])
    assert allowed.ok


# ---------------------------------------------------------------- end of the game


def test_won_when_all_104_cards_are_on_the_foundations_and_then_final() -> None:
    runs = []
    for deck in range(2):
        for suit in "cdhs":
            runs.append(" ".join(f"{r}{suit}{deck}" for r in "789TJQKA23456"))
    last = runs[7].split()[-1]
    foundations = {i: runs[i] for i in range(1, 7)} | {7: " ".join(runs[7].split()[:-1])}
    game = build(f0=runs[0], foundations=foundations, waste=last, stock="")
    assert len(ref.cards_of(ref.position_of(game))) == 104
    accept(game, "waste>f7")
    assert game.status == WON and game.foundation_cards == 104
    assert game.legal_moves() == []
    for entry in ("undo", "resign", "waste>t0"):
        assert reject(game, entry) == "the game is over (won): nothing more is accepted"


def test_won_reference_record_is_won_live_too() -> None:
    record = next(c["record"] for c in RECORDS if c["expect"].get("status") == WON)
    game = Game(record["deal"])
    for entry in record["moves"]:
        game.play(entry)
    assert game.status == WON and game.foundation_cards == 104


def test_blocked_when_the_last_stock_card_turns_and_then_final() -> None:
    game = Game(13)  # turning all of deal 13's stock leaves no way to a foundation
    for _ in range(77):
        game.play("stock>waste")
    assert game.status == PLAYING
    game.play("stock>waste")
    assert game.status == BLOCKED
    assert ref.is_blocked(ref.position_of(game))
    assert game.legal_moves() == []
    for entry in ("undo", "resign", "t0>t1", "stock>waste"):
        assert reject(game, entry) == "the game is over (blocked): nothing more is accepted"


def test_blocked_is_checked_after_every_move_not_only_stock_turns() -> None:
    # Empty stock, base 7, f0 needs an 8, which is under the 9h0 on the waste. 9h0 onto Td0
    # would free it; moving t1's 9s0 there instead leaves t1 a space only a 7 may fill.
    game = dug(f0="7c0", tableau={0: "Td0", 1: "9s0"}, waste="8c0 9h0")
    assert game.status == PLAYING and not game.is_blocked()
    accept(game, "t1>t0")
    assert game.status == BLOCKED
    assert reject(game, "undo") == "the game is over (blocked): nothing more is accepted"


def test_resign_at_any_time_and_then_final() -> None:
    game = Game(5)
    accept(game, "resign")
    assert game.status == RESIGNED and game.legal_moves() == []
    for entry in ("undo", "resign", "t0>t6"):
        assert reject(game, entry) == "the game is over (resigned): nothing more is accepted"
    assert game.record() == {"deal": 5, "moves": ["resign"]}


def test_replay_decides_blocked_once_at_the_end_and_live_play_after_every_move() -> None:
    # A record may shuffle tableau cards after its position became blocked (the reference
    # vectors hold one); replay accepts it, a live game ends at the blocking move.
    record = next(c["record"] for c in RECORDS if c["expect"].get("status") == BLOCKED)
    replayed, result = replay(record["deal"], record["moves"])
    assert result.ok and replayed.status == BLOCKED
    live = Game(record["deal"])
    stopped_at = None
    for index, entry in enumerate(record["moves"]):
        if live.status != PLAYING:
            stopped_at = index
            break
        live.play(entry)
    assert live.status == BLOCKED
    if stopped_at is not None:
        assert stopped_at < len(record["moves"])
        assert reject(live, record["moves"][stopped_at]).startswith("the game is over (blocked)")


# ---------------------------------------------------------------- the blocked check, exactly


def dug(**position: Any) -> Game:
    """:func:`build` with an empty stock: the position where the blocked check applies."""
    return build(stock="", **position)


def check_blocked(game: Game, expected: bool) -> None:
    assert game.is_blocked() is expected
    assert ref.is_blocked(ref.position_of(game)) is expected


FILLER_KINGS = {2: "Kd0", 3: "Kh0", 4: "Ks0", 5: "Kc1", 6: "Kd1", 7: "Kh1", 8: "Ks1"}  # no Ace, Queen tops
FILLER_JACKS = {9: "Jd0", 10: "Jh0", 11: "Js0"}  # no Queen or Ten tops: stuck where they are
FILLERS = FILLER_KINGS | FILLER_JACKS  # t2..t11, base rank 7


def test_blocked_needed_card_under_a_card_with_nowhere_to_go() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "Kh0"}, waste="8c0 5d0"), True)


def test_not_blocked_while_the_stock_holds_cards() -> None:
    check_blocked(build(f0="7c0", tableau={0: "Kh0"}, waste="8c0 5d0", stock="Qd0"), False)


def test_not_blocked_when_a_needed_card_is_on_top_somewhere() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "8h0"}, waste="5d0"), False)
    check_blocked(dug(f0="7c0", tableau={0: "Kh0"}, waste="5d0 8h0"), False)
    check_blocked(dug(f0="7c0", tableau={0: "Kh0"}, waste="5d0", reserve="Qh0 8h0"), False)


def test_blocked_when_the_needed_card_is_under_the_reserve_top() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "Kh0"}, waste="5d0", reserve="8h0 Qh0"), True)


def test_blocked_when_the_needed_card_is_buried_in_the_tableau() -> None:
    # f0 needs a 9: t0's 9d0 lies under an 8, which could only go onto another 9 on top.
    check_blocked(dug(f0="7c0 8c0", tableau={0: "9d0 8d0", 1: "Jh0"}, waste="Qs0 3c0"), True)


def test_not_blocked_digging_the_waste_in_order_onto_one_pile() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "6h0"}, waste="8c0 3d0 4d0 5d0"), False)


def test_blocked_when_the_waste_above_the_needed_card_is_in_the_wrong_order() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "6h0"}, waste="8c0 5d0 4d0"), True)


def test_not_blocked_emptying_a_pile_so_the_waste_can_fill_the_space() -> None:
    # Unrestricted (f0 complete, f1..f7 empty need a 7). The 7h0 is under the 5d0, which has
    # no 6 to go on and no space; but t0's lone 3d0 can go onto t1's 4d0, and the 5d0 then
    # fills the space t0 leaves.
    game = dug(f0=F0_FULL, tableau={0: "3d0", 1: "4d0"} | FILLERS, waste="7h0 5d0")
    check_blocked(game, False)
    for entry in ("t0>t1", "waste>t0", "waste>f1"):
        game.play(entry)
    assert game.foundation_cards == 14


def test_blocked_when_no_pile_can_be_emptied() -> None:
    # As above, but t1 holds a Jack: the 3d0 has nowhere to go, so no space can be made.
    check_blocked(dug(f0=F0_FULL, tableau={0: "3d0", 1: "Jh1"} | FILLERS, waste="7h0 5d0"), True)


def test_blocked_when_restricted_and_the_card_to_dig_is_not_base_rank() -> None:
    # A space can be made (3d0 onto 4d0), but while restricted only a base-rank card fills it.
    tableau = {0: "3d0", 1: "4d0"} | FILLERS
    check_blocked(dug(f0="7c0 8c0 9c0 Tc0 Jc0", tableau=tableau, waste="Qh0 5d0"), True)
    # With a base-rank 7 on top of the waste instead, the space takes it and the Queen is free.
    check_blocked(dug(f0="7c0 8c0 9c0 Tc0 Jc0", tableau=tableau, waste="Qh0 7d0"), False)


def test_not_blocked_digging_past_base_rank_cards_into_spaces() -> None:
    check_blocked(dug(f0="7c0", tableau={0: "Kh0"}, waste="8c0 7d0 7h0 7s0"), False)  # 11 spaces
    no_space = {0: "Jc0", 1: "Jc1"} | FILLERS
    check_blocked(dug(f0="7c0", tableau=no_space, waste="8c0 7d0"), True)  # no space for the 7


def test_long_waste_many_spaces_exactly_at_the_limit() -> None:
    # Unrestricted, twelve spaces; above the needed 7h0 lie Kings and Jacks, which build on
    # nothing here (no Ace, no Queen). Twelve of them fit in the twelve spaces, thirteen do not.
    kings_jacks = "Kd0 Jd0 Kh0 Jh0 Ks0 Js0 Kc1 Jc1 Kd1 Jd1 Kh1 Jh1 Ks1"
    twelve = " ".join(kings_jacks.split()[:12])
    check_blocked(dug(f0=F0_FULL, waste=f"7h0 {twelve}"), False)
    check_blocked(dug(f0=F0_FULL, waste=f"7h0 {kings_jacks}"), True)


def test_long_waste_dug_with_builds_and_spaces_together() -> None:
    # Unrestricted, two spaces (t10, t11). Above the needed 7h0: a Jack, then 5d0 4d0 3d0
    # (3d0 on top). Park the 3 and the 4 in the spaces, put the 5 on t0's 6h0, move the 4 and
    # the 3 from the spaces onto it (tableau to tableau), and both spaces are free again for
    # Jacks, which build on nothing here. Two Jacks fit; three do not.
    tableau = {0: "6h0", 1: "Jh1"} | {i: name for i, name in FILLERS.items() if i not in (10, 11)}
    check_blocked(dug(f0=F0_FULL, tableau=tableau, waste="7h0 Js0 Jh0 5d0 4d0 3d0"), False)
    check_blocked(dug(f0=F0_FULL, tableau=tableau, waste="7h0 Js0 Jh0 Jc1 5d0 4d0 3d0"), True)


def test_reason_illegal_answers_for_undo_and_resign_too() -> None:
    game = Game(5)
    assert game.reason_illegal("undo") == "there is no move to undo"
    assert game.reason_illegal("resign") is None
    game.play("stock>waste")
    assert game.reason_illegal("undo") == "stock>waste turned a card: it cannot be undone"
    game.play("resign")
    assert game.reason_illegal("resign") == "the game is over (resigned): nothing more is accepted"
    assert Game(5, undo=False).reason_illegal("undo") == "undo is off in this game"


@pytest.mark.parametrize("text", ["٣", "²", "-1", "1e3", "", "18446744073709551616"])
def test_deal_numbers_are_plain_ascii_decimal(text: str) -> None:
    with pytest.raises(ValueError):
        parse_deal_number(text)
    assert parse_deal_number(" 42 ") == 42
