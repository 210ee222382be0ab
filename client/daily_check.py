"""A revealed day checked by the client itself: the deal against the commitment published before
the day began, and every record replayed to the figures its row on the board shows
(docs/daily.md). Pure: what the server sent in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.engine import replay
from shared.fairplay import check_commitment
from shared.protocol import DailyBoard


@dataclass(frozen=True, slots=True)
class RecordCheck:
    name: str
    ok: bool
    cards: int  # cards home after the replay
    note: str = ""  # what does not agree, when not ok


@dataclass(frozen=True, slots=True)
class DayCheck:
    commitment_ok: bool
    records: list[RecordCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.commitment_ok and all(record.ok for record in self.records)

    def verdict(self) -> str:
        """One line: ``✓ …`` when everything agrees, else ``✗`` and what does not."""
        if not self.commitment_ok:
            return "✗ NOT verified: sha256(the-plot:<deal>:<salt>) is not the commitment published before the day"
        bad = [record for record in self.records if not record.ok]
        if bad:
            notes = "; ".join(f"{record.name}: {record.note}" for record in bad[:3])
            return (
                f"✗ the deal matches its commitment, but {len(bad)} of {len(self.records)} records "
                f"do not replay to their rows ({notes})"
            )
        return (
            f"✓ verified here: the deal matches the commitment published before the day, and all "
            f"{len(self.records)} records on show replay to their rows"
        )


def check_day(board: DailyBoard, commitment: str | None = None) -> DayCheck | None:
    """The check of a revealed board (None: not revealed). ``commitment``: the one this client saw
    before the day ended, when it has one (else the board's own)."""
    if board.deal is None or board.salt is None:
        return None
    expected = commitment or board.commitment
    ok = check_commitment(board.deal, board.salt, expected)
    records = board.records or {}
    checks: list[RecordCheck] = []
    for row in board.rows:
        moves = records.get(row.name)
        if moves is None:
            checks.append(RecordCheck(row.name, False, 0, "no record"))
            continue
        _game, result = replay(board.deal, list(moves))
        problems = []
        if not result.ok:
            problems.append(f"entry {result.error.index + 1 if result.error else '?'} is illegal")
        if result.foundation_cards != row.cards:
            problems.append(f"{result.foundation_cards} cards home, the row says {row.cards}")
        checks.append(RecordCheck(row.name, not problems, result.foundation_cards, ", ".join(problems)))
    return DayCheck(ok, checks)
