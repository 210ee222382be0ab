"""The daily deal's pure rules (server/core/daily_rules.py) and the share text (shared/daily_share.py)."""

from __future__ import annotations

import random

from server.core.daily_rules import (
    DailyRowRecord,
    DayRecord,
    attempt_code,
    board_message,
    board_score,
    daily_room,
    day_date,
    day_of,
    day_of_date,
    day_start,
    encode,
    points,
    prepare_at,
    replay_code,
    revealed,
)
from shared.daily_share import cards_curve, clock, ordinal, share_text
from shared.fairplay import commitment


def test_days_count_from_the_epoch_and_have_utc_dates() -> None:
    assert day_of(0, 86400) == 0 and day_date(0, 86400) == "1970-01-01"
    assert day_of_date("2026-12-02", 86400) == 20789
    assert day_date(20789, 86400) == "2026-12-02"
    assert day_of(day_start(20789, 86400), 86400) == 20789
    assert day_of(day_start(20789, 86400) - 1, 86400) == 20788
    assert day_of_date("2026-12-02", 60) is None  # dates name 24-hour days only
    assert day_of_date("2026-2-2", 86400) is None and day_of_date("yesterday", 86400) is None
    assert day_of(125_000, 60) == 2
    # The next day is prepared half a day ahead, at most an hour.
    assert day_start(10, 60) - prepare_at(10, 60) == 30_000
    assert day_start(10, 86400) - prepare_at(10, 86400) == 3_600_000


def test_attempt_codes_name_the_day_and_the_profile_and_never_a_room_code() -> None:
    assert daily_room(attempt_code(20789, "pfab12")) == ("ranked", 20789, "pfab12")
    assert daily_room(replay_code(20789, "pfab12", "K7QXM")) == ("replay", 20789, "pfab12")
    assert daily_room("K7QXM") is None and daily_room("dXY.z") is None


def test_the_packed_score_orders_as_the_race_ranking() -> None:
    rng = random.Random(3)
    entries = []
    for _ in range(500):
        won = rng.random() < 0.3
        cards = 104 if won else rng.randint(0, 103)
        elapsed = rng.randint(0, 1_800_000)
        reached = rng.randint(0, elapsed)
        status = "won" if won else rng.choice(["playing", "blocked", "resigned", "stopped"])
        entries.append((status, cards, elapsed, reached))
    # docs/rules.md, Race ranking: winners by time; then most cards, ties to who reached it first.
    by_rule = sorted(entries, key=lambda e: (0, e[2], 0) if e[0] == "won" else (1, -e[1], e[3]))
    by_score = sorted(entries, key=lambda e: board_score(*e))
    assert [board_score(*e) for e in by_rule] == [board_score(*e) for e in by_score]
    assert board_score("won", 104, 2**45, 0) < board_score("stopped", 104, 0, 0)  # a win first, however slow


def test_points_reward_cards_wins_and_speed() -> None:
    assert points("stopped", 60, 1_800_000, 1800) == 60
    assert points("won", 104, 180_000, 1800) == 104 + 100 + 90
    assert points("won", 104, 1_800_000, 1800) == 204
    assert points("blocked", 0, 1, 1800) == 0


def day_record(day: int = 100, limit: int = 30) -> DayRecord:
    start = day_start(day, 60)
    return DayRecord(
        day=day,
        deal=12345,
        salt="ab" * 32,
        commitment=commitment(12345, "ab" * 32),
        starts_at=start,
        ends_at=start + 60_000,
        time_limit_s=limit,
        created_ms=0,
    )


def test_a_day_is_revealed_once_over_and_every_attempt_ended() -> None:
    rec = day_record()
    assert not revealed(rec, 0, rec.ends_at - 1)  # the day is on
    assert revealed(rec, 0, rec.ends_at)  # over, nothing running: at once
    assert not revealed(rec, 2, rec.ends_at + 1)  # attempts still running
    assert revealed(rec, 2, rec.ends_at + 30_000)  # one limit after the end: every attempt has ended


def test_a_board_frame_hides_the_deal_until_the_reveal() -> None:
    rec = day_record()
    row = encode(DailyRowRecord("ann", True, "won", 104, 200, 300_000, 299_000, "p1"))
    moves = encode(["stock>waste"])
    live = board_message(rec, 60, [("pf1", row)], 1, 0, 1, [moves], rec.ends_at + 1)
    assert not live.final and live.deal is None and live.salt is None and live.records is None
    assert live.rows[0].name == "ann" and live.rows[0].rank == 1 and live.rows[0].profile_id == "pf1"
    final = board_message(rec, 60, [("pf1", row)], 1, 0, 0, [moves], rec.ends_at + 1)
    assert final.final and final.deal == 12345 and final.records == {"ann": ["stock>waste"]}
    other = encode(DailyRowRecord("bob", True, "stopped", 50, 90, 1_000, 900, "p2"))
    mine = board_message(rec, 60, [("pf1", row)], 2, 0, 1, None, rec.ends_at - 1, you=("pf2", other, 1))
    assert mine.you is not None and mine.you.name == "bob" and mine.you.rank == 2


def test_the_share_text() -> None:
    curve = cards_curve([1000, 100_000, 300_000, 372_000], [5, 40, 90, 104], 372_000)
    text = share_text(
        date="2026-12-02",
        status="won",
        cards=104,
        moves=213,
        elapsed_ms=372_000,
        rank=3,
        players=41,
        curve=curve,
        url="https://plot.example.org/daily/2026-12-02",
    )
    assert text.splitlines()[0] == "The Plot daily 2026-12-02 · won 6:12 · 213 moves · 3rd of 41"
    assert text.splitlines()[1] == curve and len(curve) == 12 and curve[-1] == "█"
    assert text.splitlines()[2].endswith("/daily/2026-12-02")
    stopped = share_text(
        date="2026-12-02", status="stopped", cards=60, moves=1, elapsed_ms=1_800_000, rank=None, players=None
    )
    assert stopped == "The Plot daily 2026-12-02 · stopped · 60 cards · 30:00 · 1 move"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 112)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "112th",
    ]  # fmt: skip
    assert clock(3_723_000) == "1:02:03" and cards_curve([], [], 0) == "▁" * 12
