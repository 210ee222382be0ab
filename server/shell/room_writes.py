"""Room writes: each room's saves, listing, expiry and reads, in order, written behind.

One queue of typed operations (:data:`~server.shell.room_versions.RoomOp`) per room and one
worker draining it: a save never lands after the expiry that followed it, and a read sees every
write queued before it. Saves are compare-and-set; which version a save expects, and what follows
a save whose outcome is unknown, refused, stale or lost, is :class:`RoomVersions`' decision (pure,
tested on its own); this part only carries it out against the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from server.core.events import (
    CreateRoomRecord,
    Effect,
    Event,
    ReadBack,
    RoomChanged,
    RoomCreated,
    RoomCreateFailed,
    RoomSaved,
    RoomStale,
    SaveRoom,
)
from server.core.records import RoomRecord, encode_record, open_race_of
from server.shell.config import Backoff, log, log_event, now_ms
from server.shell.part import Part, ShellContext
from server.shell.room_versions import (
    Drop,
    ExpireOp,
    ListOp,
    Lost,
    Probe,
    ReadOp,
    Recreate,
    RefreshOp,
    RoomOp,
    RoomVersions,
    SaveOp,
    Write,
)
from server.shell.stored import decode_stored_room, race_logs
from server.store.base import StoreUnavailable


class RoomWrites(Part):
    """``save``, ``set_listed``, ``expire``, ``create``, ``read_room``; ``queued`` for /metrics."""

    def __init__(self, ctx: ShellContext, execute: Callable[[list[Effect]], None]) -> None:
        super().__init__(ctx)
        self.execute = execute  # the effects that waited for a save (SaveRoom.then)
        self.versions = RoomVersions(shared=ctx.link.shared)
        self.ops: dict[str, deque[RoomOp]] = {}
        self.workers: dict[str, asyncio.Task[None]] = {}

    @property
    def queued(self) -> int:
        return sum(len(ops) for ops in self.ops.values())

    # ------------------------------------------------------------------ queueing

    def save(self, effect: SaveRoom) -> None:
        epoch = self.versions.epoch(effect.code)
        self._queue(effect.code, SaveOp(effect.record, epoch, self.versions.commands, effect.then))

    def set_listed(self, code: str, listed: bool) -> None:
        self._queue(code, ListOp(listed))

    def expire(self, code: str, seconds: float | None) -> None:
        self._queue(code, ExpireOp(seconds))

    def read_back(self, effect: ReadBack) -> None:
        """Read the room back from the store (in its queue: after this node's own pending writes,
        or ``first``: before the saves queued behind a save that lost its compare-and-set)."""
        if not self.versions.want_refresh(effect.code):
            return
        op = RefreshOp(effect.race, effect.lengths)
        if effect.first:
            self.ops.setdefault(effect.code, deque()).appendleft(op)
            self._work(effect.code)
        else:
            self._queue(effect.code, op)

    def _queue(self, code: str, op: RoomOp) -> None:
        ops = self.ops.setdefault(code, deque())
        if isinstance(op, SaveOp) and ops and isinstance(ops[-1], SaveOp):
            ops[-1] = op.replacing(ops[-1])  # latest wins (the worker takes an op off before running it)
        else:
            ops.append(op)
        self._work(code)

    def _work(self, code: str) -> None:
        if code not in self.workers:
            self.workers[code] = asyncio.ensure_future(self._worker(code))

    def dropped(self, code: str) -> None:
        """The core forgot the room: its book goes unless writes are still queued (then the worker's end)."""
        if code not in self.workers:
            self.versions.forget(code)

    def loaded(self, code: str, version: int) -> None:
        """The room was read to be held here: its version, unless this node has writes of it pending."""
        if not self.core.has_room(code) and code not in self.workers:
            self.versions.loaded(code, version)

    # ------------------------------------------------------------------ reads behind the writes

    async def read_room(self, code: str) -> tuple[bytes, int] | None:
        """The room as the store has it once every write this process queued for it has landed:
        a read never sees the store from before the shell's own pending writes."""
        if code not in self.ops:
            return await self.store.load_room(code)
        answer: asyncio.Future[tuple[bytes, int] | None] = asyncio.get_running_loop().create_future()
        self._queue(code, ReadOp(answer))
        try:
            # Writes being retried (the store is down) must not hold a client's request for ever.
            return await asyncio.wait_for(asyncio.shield(answer), self.config.read_wait_s)
        except TimeoutError:
            raise StoreUnavailable(
                f"room {code}: this process's pending writes did not land within {self.config.read_wait_s:g} s"
            ) from None

    # ------------------------------------------------------------------ the worker

    async def _worker(self, code: str) -> None:
        """Every failure is logged; the store being unavailable is retried with back-off (a failed
        save is replaced by a newer one queued behind it), anything else drops that one op."""
        ops = self.ops[code]
        backoff = Backoff()
        try:
            while ops:
                op = ops.popleft()
                try:
                    await self._run(code, op)
                except StoreUnavailable as exc:
                    if isinstance(op, ReadOp):
                        if not op.answer.done():
                            op.answer.set_exception(exc)  # the reader answers its client
                        continue
                    kind = type(op).__name__
                    log_event(logging.WARNING, "room_write_failed", room=code, op=kind, error=str(exc), retry=True)
                    if isinstance(op, SaveOp) and ops and isinstance(ops[0], SaveOp):
                        ops[0] = ops[0].replacing(op)
                    else:
                        ops.appendleft(op)
                    await backoff.wait()
                    continue
                except Exception as exc:
                    log.exception(
                        "room_write_failed",
                        extra={"fields": {"room": code, "op": type(op).__name__, "error": repr(exc), "retry": False}},
                    )
                    if isinstance(op, ReadOp) and not op.answer.done():
                        op.answer.set_exception(exc)
                    continue
                backoff.reset()
        finally:
            self.workers.pop(code, None)
            if not ops:
                self.ops.pop(code, None)
                if not self.core.has_room(code):
                    self.versions.forget(code)

    async def _run(self, code: str, op: RoomOp) -> None:
        if isinstance(op, SaveOp):
            await self._save(code, op)
        elif isinstance(op, RefreshOp):
            await self._refresh(code, op)
        elif isinstance(op, ListOp):
            await self.store.set_listed(code, op.listed)
        elif isinstance(op, ExpireOp):
            await self.store.expire_room(code, op.seconds)
        else:
            loaded = await self.store.load_room(code)
            if not op.answer.done():
                op.answer.set_result(loaded)

    async def _save(self, code: str, save: SaveOp) -> None:
        """Compare-and-set on the version this process last wrote; the store is never overwritten
        on a mismatch (RoomVersions decides what follows)."""
        step = self.versions.begin_save(code, save.epoch)
        if isinstance(step, Drop):
            if step.why == "stale":
                log_event(logging.INFO, "room_save_stale", room=code, why="made before the room was read back")
            else:
                log_event(logging.WARNING, "room_save_skipped", room=code, why="another writer changed the room")
            return
        data = encode_record(save.record)
        race = open_race_of(save.record)
        if isinstance(step, Probe):
            probed = self.versions.probed(code, await self.store.load_room(code))
            if isinstance(probed, Recreate):
                await self._recreate(code, save, data, race)
                return
            if isinstance(probed, Lost):
                self._lost(code, probed)
                return
            step = probed
        assert isinstance(step, Write)
        notice = self.link.version_notice(step.version + 1)  # several nodes: published in the save's script
        logs = self.link.counted_logs(save.record)
        try:
            new = await self.store.save_room(code, data, step.version, open_race=race, notice=notice, logs=logs)
        except StoreUnavailable:
            self.versions.save_unknown(code, step.version, data)
            raise
        if new is not None:
            self.versions.save_landed(code, new, save.commands)
            self.link.noticed(1)
            self._landed(code, save)
            return
        refused = self.versions.refused(code, step.version, await self.store.load_room(code))
        if isinstance(refused, Recreate):
            await self._recreate(code, save, data, race)
        else:
            self._lost(code, refused)

    def _landed(self, code: str, save: SaveOp) -> None:
        """What waited for the save goes out (the results), then the core learns it landed (a
        race's start waits for its record's save)."""
        self.execute(list(save.then))
        self.dispatch(RoomSaved(code, save.record.phase, save.record.race_number, now_ms()))

    def _lost(self, code: str, lost: Lost) -> None:
        if lost.refresh:
            # Several nodes: another node committed first; its change stands, this node reads it back.
            log_event(logging.INFO, "room_save_lost", room=code, expected=lost.expected, found=lost.found)
            self.dispatch(RoomStale(code, now_ms(), first=True))
            return
        log_event(logging.ERROR, "room_save_conflict", room=code, expected=lost.expected, found=lost.found)

    async def _recreate(self, code: str, save: SaveOp, data: bytes, race: int | None) -> None:
        """The room vanished from the store while this process still holds it (a finished room
        expired, or someone deleted it): store it afresh rather than lose it."""
        log_event(logging.WARNING, "room_recreated", room=code)
        record = save.record
        if await self.store.create_room(code, data, open_race=race, notice=self.link.version_notice(1)):
            self.versions.created(code)
            self.link.noticed(1)
            if not record.options.private and record.members:
                self.set_listed(code, True)  # next in the room's queue, retried there on failure
            self._landed(code, save)
        else:  # created by someone else meanwhile
            self._lost(code, self.versions.recreate_refused(code))

    async def _refresh(self, code: str, op: RefreshOp) -> None:
        """The room's record and logs as the store has them replace this node's copy (RoomChanged).
        Saves the core made before this were made on the old copy: they are dropped (the epoch)."""
        loaded = await self.store.load_room(code)
        record: RoomRecord | None = None
        if loaded is not None:
            record = decode_stored_room(code, loaded[0])
            if record is None:
                return
        incremental = self.config.readback == "incremental"
        same = record is not None and record.race is not None and record.race.number == op.race
        starts = op.lengths if incremental and same else {}
        logs = await race_logs(self.store, code, record, starts)
        replay = self.versions.refreshed(code, None if loaded is None else loaded[1])
        self.dispatch(RoomChanged(code, record, logs, now_ms(), replay, starts))

    # ------------------------------------------------------------------ creation

    async def create(self, effect: CreateRoomRecord) -> None:
        code = effect.record.code
        await self.link.subscribe(code)
        event: Event
        race = open_race_of(effect.record)
        try:
            created = await self.store.create_room(code, encode_record(effect.record), open_race=race)
        except StoreUnavailable:
            event = RoomCreateFailed(effect.conn, effect.record, False, now_ms())
        else:
            if created:
                self.versions.created(code)
                event = RoomCreated(effect.conn, effect.record, now_ms())
            else:
                event = RoomCreateFailed(effect.conn, effect.record, True, now_ms())
        self.dispatch(event)
