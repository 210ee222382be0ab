"""Player writes: a new player stored before its welcome, and every later record written behind
(per player, the latest wins)."""

from __future__ import annotations

import asyncio
import logging

from server.core.events import Event, PlayerRegistered, RegisterFailed, RegisterPlayer, SavePlayer
from server.core.records import encode_record
from server.shell.config import Backoff, log, log_event, now_ms
from server.shell.part import Part, ShellContext
from server.store.base import StoreUnavailable


class PlayerWrites(Part):
    def __init__(self, ctx: ShellContext) -> None:
        super().__init__(ctx)
        self.saves: dict[str, SavePlayer] = {}  # the latest record of each player not yet written
        self.workers: dict[str, asyncio.Task[None]] = {}

    async def register(self, effect: RegisterPlayer) -> None:
        event: Event
        try:
            await self.store.put_player(
                effect.record.player_id, effect.token_hash, encode_record(effect.record), ttl_s=effect.ttl_s
            )
        except StoreUnavailable:
            event = RegisterFailed(effect.conn, now_ms())
        else:
            event = PlayerRegistered(effect.conn, effect.record, effect.token_hash, effect.token, now_ms())
        self.dispatch(event)

    def save(self, effect: SavePlayer) -> None:
        pid = effect.record.player_id
        self.saves[pid] = effect
        if pid not in self.workers:
            self.workers[pid] = asyncio.ensure_future(self._worker(pid))

    async def _worker(self, pid: str) -> None:
        """Every failure is logged; an unexpected one drops that write (retrying it could only
        fail again), never the worker."""
        backoff = Backoff()
        try:
            while pid in self.saves:
                effect = self.saves[pid]
                try:
                    data = encode_record(effect.record)
                    await self.store.put_player(pid, effect.token_hash, data, ttl_s=effect.ttl_s)
                except StoreUnavailable as exc:
                    log_event(logging.WARNING, "player_write_failed", player=pid, error=str(exc), retry=True)
                    await backoff.wait()
                    continue
                except Exception as exc:
                    log.exception(
                        "player_write_failed", extra={"fields": {"player": pid, "error": repr(exc), "retry": False}}
                    )
                backoff.reset()
                if self.saves.get(pid) is effect:
                    del self.saves[pid]
        finally:
            self.workers.pop(pid, None)
