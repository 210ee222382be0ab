"""The several-node glue, built only when nodes share rooms (``--multi-node``): the pub/sub link
(server/nodes.py), other nodes' changes turned into core events, deal searches under a lease, and
the room commands kept until a save commits them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

import msgspec

from server.core import ServerCore
from server.core.events import (
    Event,
    FindDeal,
    NodesGone,
    RemoteBatch,
    RemoteMoves,
    RoomStale,
)
from server.core.records import LogEntry, RoomRecord, decode_entry
from server.nodes import Appended, NodeLink, RoomVersion
from server.shell.config import ServerConfig, log_event, now_ms
from server.shell.link import Link
from server.store.base import LogLength
from server.store.redis import RedisStore
from server.winnable import DealFinder, SearchOutcome
from shared import protocol as p


class SharedRooms(Link):
    shared = True

    def __init__(
        self,
        config: ServerConfig,
        store: RedisStore,
        core: ServerCore,
        dispatch: Callable[[Event], None],
        on_lag: Callable[[float], None] | None,
    ) -> None:
        self.config = config
        self.core = core
        self.dispatch = dispatch
        node_id = core.config.node_id or None
        self.link = NodeLink(store, self._on_messages, self._on_missed, node_id=node_id, on_lag=on_lag)
        self.node_id = self.link.node_id
        self.is_news: Callable[[str, int], bool] = lambda code, version: True  # the room writes' (attach)
        self._sweeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def attach(self, is_news: Callable[[str, int], bool]) -> None:
        self.is_news = is_news

    async def start(self) -> None:
        await self.link.start()
        self._sweeper = asyncio.ensure_future(self._sweep())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.link.close()

    async def _sweep(self) -> None:
        """Every second: members of the rooms held here whose node stopped renewing its liveness are
        away (NodesGone); every ``node_sweep_s``: channels of rooms no longer held are dropped."""
        swept = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            others = self.core.remote_nodes()
            gone = await self.link.gone(others) if others else set()
            if gone:
                log_event(logging.WARNING, "nodes_gone", nodes=sorted(gone))
                self.dispatch(NodesGone(frozenset(gone), now_ms()))
            if time.monotonic() - swept >= self.config.node_sweep_s:
                swept = time.monotonic()
                await self.link.retain(self.core.holds)

    # ------------------------------------------------------------------ what the parts tell the others

    async def subscribe(self, code: str) -> None:
        await self.link.subscribe(code)

    def appended_notice(self, race: int, player: str, start: int, entry: bytes) -> bytes:
        return self.link.appended_notice(race, player, start, entry)

    def version_notice(self, version: int) -> bytes:
        return self.link.version_notice(version)

    def noticed(self, count: int) -> None:
        self.link.noticed(count)

    def counted_logs(self, record: RoomRecord) -> tuple[LogLength, ...]:
        """The logs a finished race's results count, each as long as the ending node's copy held it:
        the save lands only if the store's logs hold exactly these (another node's entry stored but
        not yet heard here refuses it, and the room is read back, logs and all)."""
        race = record.race
        if race is None or race.log_lengths is None or record.phase != p.RESULTS:
            return ()
        return tuple(LogLength(race.number, pid, length) for pid, length in race.log_lengths.items())

    def pubsub_counts(self) -> tuple[int, int, int]:
        return self.link.published, self.link.received, self.link.missed

    # ------------------------------------------------------------------ what the others tell this node

    def _on_messages(self, batch: list[tuple[str, RoomVersion | Appended]]) -> None:
        """Other nodes' changes to rooms, as one read of the subscription brought them: a new version
        (read the room back), or stored moves. A racer's entries that follow on from each other make
        one RemoteMoves, and the read's RemoteMoves go to the core together, as one RemoteBatch."""
        runs: dict[tuple[str, int, str], list[tuple[int, list[LogEntry]]]] = {}
        for code, message in batch:
            if not self.core.has_room(code):
                continue
            if isinstance(message, RoomVersion):
                if self.is_news(code, message.version):
                    self.dispatch(RoomStale(code, now_ms()))
                continue
            try:
                entry = decode_entry(message.entry)
            except msgspec.DecodeError:
                log_event(logging.ERROR, "log_entry_unreadable", room=code)
                continue
            racer_runs = runs.setdefault((code, message.race, message.player), [])
            if racer_runs and racer_runs[-1][0] + len(racer_runs[-1][1]) == message.start:
                racer_runs[-1][1].append(entry)
            else:
                racer_runs.append((message.start, [entry]))
        now = now_ms()
        moves = tuple(
            RemoteMoves(code, race, player, start, entries, now)
            for (code, race, player), racer_runs in runs.items()
            for start, entries in racer_runs
        )
        if len(moves) == 1:
            self.dispatch(moves[0])
        elif moves:  # one core event for the whole read (docs/scaling.md, "Reading the subscription")
            self.dispatch(RemoteBatch(moves, now))

    def _on_missed(self, codes: Collection[str]) -> None:
        """Pub/sub messages of these rooms may have been lost (a gap or a dropped connection on
        their shard): those held here are read back from the store."""
        now = now_ms()
        for code in codes:
            self.dispatch(RoomStale(code, now))

    # ------------------------------------------------------------------ deal searches under a lease

    async def find_deal(self, effect: FindDeal, finder: DealFinder, wanted: Callable[[], bool]) -> SearchOutcome | None:
        """Every node holding a dealing room is asked for its deal, but one searches, the holder of
        the room's deal lease; the others wait for the room to move on (the holder commits the
        countdown, they read it back) or for the lease to lapse (the holder died or stopped: one of
        them takes over). None: this node did not search and the room moved on."""
        lease = self.link.deal_lease(effect.code, effect.race, self.config.deal_lease_s)
        waiting = False
        while True:
            if not wanted():
                return None
            if not await lease.take():
                if not waiting:
                    log_event(logging.INFO, "deal_search_waiting", room=effect.code, race=effect.race, why="leased")
                waiting = True
                await asyncio.sleep(self.config.deal_lease_s / 6)
                continue
            if waiting:
                log_event(logging.INFO, "deal_search_taken_over", room=effect.code, race=effect.race)
            lease.keep()
            try:
                outcome = await finder.find(effect.code, lambda: wanted() and lease.held)
            finally:
                await lease.stop()
            if outcome.deal is not None or lease.held:
                if outcome.deal is None and not outcome.cancelled:
                    await lease.stop(release=True)  # back to the lobby: the host may start again at once
                return outcome
            waiting = True  # lost the lease mid-search (cut off from Redis): wait for it again
