"""The reference vectors (copies of the contract's deals.json and records.json) reproduced exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.cards import card_name
from shared.deal import SplitMix64, deal_layout, shuffled_cards
from shared.engine import replay

VECTORS = Path(__file__).parent / "vectors"
DEALS: dict[str, Any] = json.loads((VECTORS / "deals.json").read_text())
RECORDS: dict[str, Any] = json.loads((VECTORS / "records.json").read_text())


def test_splitmix64_first_draws_from_seed_zero() -> None:
    rng = SplitMix64(0)
    assert [str(rng.next()) for _ in range(3)] == DEALS["splitmix64_seed0_first3"]
    assert SplitMix64(0).next() == 0xE220A8397B1DCDAF


@pytest.mark.parametrize("vector", DEALS["deals"], ids=lambda v: str(v["deal"]))
def test_deal_order_matches_reference(vector: dict[str, Any]) -> None:
    cards = shuffled_cards(vector["deal"])
    assert cards == vector["ids"]
    assert " ".join(card_name(c) for c in cards) == vector["order"]
    layout = deal_layout(vector["deal"])
    assert list(layout.reserve) == vector["ids"][:13]
    assert layout.foundation == vector["ids"][13]
    assert list(layout.tableau) == vector["ids"][14:26]
    assert list(layout.stock) == vector["ids"][26:]


@pytest.mark.parametrize(
    "case",
    RECORDS["records"],
    ids=lambda c: c.get("family") or f"{c['record']['deal']}-{len(c['record']['moves'])}",
)
def test_record_result_matches_reference(case: dict[str, Any]) -> None:
    record = case["record"]
    expect = case["expect"]
    _, result = replay(record["deal"], record["moves"], undo=record.get("undo", True))
    assert result.ok == expect["ok"]
    assert result.foundation_cards == expect["foundation_cards"]
    if expect["ok"]:
        assert result.error is None
        assert result.moves == expect["moves"]
        assert result.status == expect["status"]
    else:
        assert result.error is not None
        assert result.error.index == expect["error"]["index"]
        assert result.error.move == expect["error"]["move"]
        assert result.error.reason  # a sentence a player can act on
        assert result.moves == expect["error"]["index"]
