"""The client's own check of a revealed day (client/daily_check.py): the deal against the
commitment, every record replayed on the engine to the cards its row shows."""

from __future__ import annotations

import msgspec

from client.bot import choose_move
from client.daily_check import check_day
from shared.engine import Game
from shared.fairplay import commitment
from shared.protocol import DailyBoard, DailyRow

DEAL = 26
SALT = "ab" * 32


def played(moves: int) -> tuple[list[str], int]:
    """The bot's first ``moves`` entries on DEAL, and the cards home after them."""
    game = Game(DEAL)
    entries: list[str] = []
    for _ in range(moves):
        move = choose_move(game.view())
        if move is None or move == "resign":
            break
        game.play(move)
        entries.append(move)
    return entries, game.view().foundation_cards


def revealed(rows: list[tuple[str, list[str], int]], salt: str = SALT) -> DailyBoard:
    return DailyBoard(
        day=7,
        final=True,
        total=len(rows),
        date="1970-01-08",
        commitment=commitment(DEAL, SALT),
        deal=DEAL,
        salt=salt,
        rows=[
            DailyRow(
                name=name,
                claimed=True,
                profile_id=f"p{i}",
                status="stopped",
                cards=cards,
                moves=len(moves),
                elapsed_ms=1000 * (i + 1),
                rank=i + 1,
            )
            for i, (name, moves, cards) in enumerate(rows)
        ],
        records={name: moves for name, moves, _cards in rows},
    )


def test_a_revealed_day_is_verified_and_a_tampered_one_is_not() -> None:
    long, long_cards = played(60)
    short, short_cards = played(20)
    assert long_cards > short_cards > 0
    board = revealed([("ann", long, long_cards), ("bob", short, short_cards)])
    checked = check_day(board)
    assert checked is not None and checked.ok
    assert checked.verdict().startswith("✓") and "all 2 records" in checked.verdict()

    # A row that claims more cards than its record sends home.
    lying = msgspec.structs.replace(board, rows=[msgspec.structs.replace(board.rows[0], cards=104), board.rows[1]])
    checked = check_day(lying)
    assert checked is not None and not checked.ok and checked.commitment_ok
    assert "ann" in checked.verdict() and "the row says 104" in checked.verdict()

    # A salt (or deal) that is not the one committed to.
    checked = check_day(revealed([("ann", long, long_cards)], salt="cd" * 32))
    assert checked is not None and not checked.commitment_ok and checked.verdict().startswith("✗ NOT verified")

    # A record with an illegal entry, and a row without a record.
    bad = msgspec.structs.replace(board, records={"ann": [*long[:5], "t0>t0"], "nobody": []})
    checked = check_day(bad)
    assert checked is not None
    notes = {record.name: record.note for record in checked.records}
    assert "illegal" in notes["ann"] and notes["bob"] == "no record"

    # A day not revealed yet is not checked at all.
    assert check_day(msgspec.structs.replace(board, deal=None, salt=None, records=None)) is None
