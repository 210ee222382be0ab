"""Reads for the core: a resume token's player, a room (record and logs), the room list, a log.

Each answers one effect with one event. A room is read behind this process's own pending writes
of it (:meth:`RoomWrites.read_room`), so a read never sees the store from before them.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from server.core.events import (
    ListRooms,
    LoadRoom,
    LogReloaded,
    LookupToken,
    ReloadLog,
    RoomLoaded,
    RoomsListed,
    TokenLooked,
)
from server.core.records import PlayerRecord, RoomRecord, decode_player, decode_room
from server.shell.config import log_event, now_ms
from server.shell.part import Part, ShellContext
from server.shell.room_writes import RoomWrites
from server.shell.stored import decode_entries, decode_stored_room, race_logs
from server.store.base import StoreUnavailable


class Reads(Part):
    def __init__(self, ctx: ShellContext, writes: RoomWrites) -> None:
        super().__init__(ctx)
        self.writes = writes
        self.closing = False

    async def lookup_token(self, effect: LookupToken) -> None:
        """The player a resume token names (its record), for the core's hello."""
        record: PlayerRecord | None = None
        try:
            player_id = await self.store.player_by_token(effect.token_hash)
            data = await self.store.get_player(player_id) if player_id is not None else None
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=effect.conn, op="lookup_token", error=str(exc))
            self.dispatch(TokenLooked(effect.conn, effect.token_hash, None, now_ms(), failed=True))
            return
        if data is not None:
            try:
                record = decode_player(data)
            except msgspec.DecodeError:
                log_event(logging.ERROR, "player_record_unreadable", player=player_id)
        self.dispatch(TokenLooked(effect.conn, effect.token_hash, record, now_ms()))

    async def load_room(self, effect: LoadRoom) -> None:
        """A room's record and its current race's move logs, for the core (retried with back-off
        while the store does not answer, unless ``once``)."""
        code = effect.code
        await self.link.subscribe(code)  # before the read: no change committed after it is missed
        delay = 0.05
        while True:
            try:
                loaded = await self.writes.read_room(code)
                record = None if loaded is None else decode_stored_room(code, loaded[0])
                logs = await race_logs(self.store, code, record)
            except StoreUnavailable as exc:
                log_event(logging.WARNING, "store_unavailable", room=code, op="load_room", error=str(exc))
                if effect.once or self.closing:
                    self.dispatch(RoomLoaded(code, None, {}, now_ms(), failed=True))
                    return
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            if record is not None and loaded is not None:
                self.writes.loaded(code, loaded[1])
            self.dispatch(RoomLoaded(code, record, logs, now_ms()))
            return

    async def list_rooms(self, effect: ListRooms) -> None:
        """The listed rooms, for the core's room list: codes, and the records of those it does not hold."""
        codes: list[str] = []
        records: dict[str, RoomRecord] = {}
        try:
            for code in await self.store.listed_rooms():
                if len(codes) >= self.config.list_limit:
                    break
                if self.core.has_room(code):
                    codes.append(code)
                    continue
                loaded = await self.writes.read_room(code)
                if loaded is None:
                    continue
                try:
                    record = decode_room(loaded[0])
                except msgspec.DecodeError:
                    continue
                if record.members and not record.closed:
                    codes.append(code)
                    records[code] = record
        except StoreUnavailable as exc:
            log_event(logging.WARNING, "store_unavailable", conn=effect.conn, op="list_rooms", error=str(exc))
            self.dispatch(RoomsListed(effect.conn, [], {}, now_ms(), failed=True))
            return
        self.dispatch(RoomsListed(effect.conn, codes, records, now_ms()))

    async def reload(self, effect: ReloadLog) -> None:
        delay = 0.05
        while self.core.has_room(effect.code):
            try:
                raw = await self.store.load_moves(effect.code, effect.race, effect.player_id)
            except StoreUnavailable:
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            entries = decode_entries(effect.code, raw)
            self.dispatch(LogReloaded(effect.code, effect.race, effect.player_id, entries, now_ms()))
            return
