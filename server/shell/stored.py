"""Stored records and logs as the shell reads them: an unreadable record is logged and skipped,
an unreadable log entry keeps its place (the replay skips it)."""

from __future__ import annotations

import logging

import msgspec

from server.core.records import LogEntry, RoomRecord, decode_entry, decode_room
from server.shell.config import log_event
from server.store.base import Store


def decode_stored_room(code: str, data: bytes) -> RoomRecord | None:
    """A stored room record; None (logged) if it cannot be read."""
    try:
        return decode_room(data)
    except msgspec.DecodeError:
        log_event(logging.ERROR, "room_record_unreadable", room=code)
        return None


def decode_entries(code: str, raw: list[bytes]) -> list[LogEntry]:
    entries: list[LogEntry] = []
    for item in raw:
        try:
            entries.append(decode_entry(item))
        except msgspec.DecodeError:
            log_event(logging.ERROR, "log_entry_unreadable", room=code)
            entries.append(LogEntry(move="?", t_ms=0))  # keeps the log length; the replay skips it
    return entries


async def race_logs(
    store: Store, code: str, record: RoomRecord | None, starts: dict[str, int] | None = None
) -> dict[str, list[LogEntry]]:
    """The move logs of the room's current race (none for a room gone, closed or between races);
    ``starts``: racers whose log is read from that index on."""
    logs: dict[str, list[LogEntry]] = {}
    if record is not None and record.race is not None and record.members and not record.closed:
        wanted = [(r.player_id, 0 if starts is None else starts.get(r.player_id, 0)) for r in record.race.racers]
        for (player_id, _start), raw in zip(
            wanted, await store.load_logs(code, record.race.number, wanted), strict=True
        ):
            logs[player_id] = decode_entries(code, raw)
    return logs
