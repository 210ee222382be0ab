"""The daily deal's store I/O, one coroutine per effect, each ending in the event the core
takes (or nothing, for a write-behind). Shared by the real shell (server/shell/daily.py) and the
test shells (server/testing/), so every target answers the effects alike; the JSON API
(server/web/api.py) reads through the same calls.
"""

from __future__ import annotations

from server.core.daily_events import (
    BoardRead,
    CreateDay,
    DayLoaded,
    FinishDaily,
    ProfileRead,
    PutDailyRow,
    ReadBoard,
    ReadProfile,
    ReadStanding,
    StandingRead,
)
from server.core.daily_rules import decode_day, encode
from server.core.records import decode_profile
from server.store.base import Store, StoreUnavailable
from server.store.daily import DailyFinish, DailyStats
from shared.daily_protocol import BOARD_PAGE, HISTORY_MAX
from shared.names import NameInvalid, name_key


async def load_day(store: Store, day: int, now: int) -> DayLoaded:
    try:
        data = await store.get_day(day)
    except StoreUnavailable:
        return DayLoaded(day, None, now, failed=True)
    return DayLoaded(day, None if data is None else decode_day(data), now)


async def create_day(store: Store, effect: CreateDay, now: int) -> DayLoaded:
    try:
        data = await store.create_day(effect.record.day, encode(effect.record))
    except StoreUnavailable:
        return DayLoaded(effect.record.day, None, now, failed=True)
    return DayLoaded(effect.record.day, decode_day(data), now)


async def put_row(store: Store, effect: PutDailyRow) -> bool:
    """False: the store did not answer (a later row replaces it; the final one is retried)."""
    try:
        await store.daily_progress(effect.day, effect.profile_id, effect.score, effect.row)
    except StoreUnavailable:
        return False
    return True


async def finish(store: Store, effect: FinishDaily) -> bool:
    """False: the store did not answer (the caller retries: the call is idempotent)."""
    try:
        await store.daily_finish(
            DailyFinish(
                day=effect.day,
                profile_id=effect.profile_id,
                name=effect.name,
                score=effect.score,
                row=effect.row,
                record=effect.record,
                won=effect.won,
                cards=effect.cards,
                elapsed_ms=effect.elapsed_ms,
                points=effect.points,
            )
        )
    except StoreUnavailable:
        return False
    return True


async def read_board(store: Store, effect: ReadBoard, now: int) -> BoardRead:
    try:
        data = await store.get_day(effect.day)
        if data is None:
            return BoardRead(
                effect.conn, effect.day, None, [], 0, effect.offset, 0, None, now, player_id=effect.player_id
            )
        rows, total = await store.daily_board(effect.day, effect.offset, BOARD_PAGE)
        live = await store.daily_live(effect.day)
        records = await store.daily_records(effect.day, [pid for pid, _ in rows]) if effect.records else None
        you: tuple[str, bytes, int] | None = None
        if effect.profile_id is not None:
            entry = await store.daily_entry(effect.day, effect.profile_id)
            if entry is not None:
                you = (effect.profile_id, entry[0], entry[1])
    except StoreUnavailable:
        return BoardRead(effect.conn, effect.day, None, [], 0, effect.offset, 0, None, now, failed=True)
    return BoardRead(
        effect.conn, effect.day, decode_day(data), rows, total, effect.offset, live, records, now, you, effect.player_id
    )


def stats_tuple(stats: DailyStats) -> tuple[int, ...]:
    return (
        stats.days_played,
        stats.days_won,
        stats.streak,
        stats.best_streak,
        stats.last_day,
        stats.best_ms,
        stats.best_cards,
        stats.points,
    )


async def read_profile(store: Store, effect: ReadProfile, now: int) -> ProfileRead:
    try:
        key = name_key(effect.name)
    except NameInvalid:
        return ProfileRead(effect.conn, effect.name, None, None, [], now)
    try:
        profile_id = await store.profile_by_name(key)
        data = await store.get_profile(profile_id) if profile_id is not None else None
        if profile_id is None or data is None:
            return ProfileRead(effect.conn, effect.name, None, None, [], now)
        stats = await store.daily_stats(profile_id)
        history: list[tuple[int, bytes, int, int]] = []
        for day, row in await store.daily_history(profile_id, HISTORY_MAX):
            entry = await store.daily_entry(day, profile_id)
            _rows, total = await store.daily_board(day, 0, 0)
            history.append((day, row, 0 if entry is None else entry[1] + 1, total))
    except StoreUnavailable:
        return ProfileRead(effect.conn, effect.name, None, None, [], now, failed=True)
    return ProfileRead(
        effect.conn, effect.name, decode_profile(data), None if stats is None else stats_tuple(stats), history, now
    )


async def read_standing(store: Store, effect: ReadStanding, now: int) -> StandingRead:
    try:
        ranked, total = await store.daily_standing(effect.offset, BOARD_PAGE)
        rows: list[tuple[str, str, int, int, int, int]] = []
        for profile_id, points in ranked:
            stats = await store.daily_stats(profile_id) or DailyStats()
            rows.append((profile_id, stats.name, points, stats.days_played, stats.days_won, stats.best_streak))
    except StoreUnavailable:
        return StandingRead(effect.conn, [], 0, effect.offset, now, failed=True)
    return StandingRead(effect.conn, rows, total, effect.offset, now)
