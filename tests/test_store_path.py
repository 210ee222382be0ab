"""The shell's store path: a real server, real WebSocket clients, a real Redis.

Each test is one failure the store path must not have: a race outliving the room's store expiry, a store
result taken for another, a write worker stopped by an unexpected error, a read that misses the
shell's own pending writes, a race record written after racers saw its commitment, a room save
that overwrote another writer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace

import pytest
from redis_fixture import RedisServer
from support import (
    FAST,
    Client,
    eventually,
    fast_config,
    latest,
    make_room,
    move_writes,
    play,
    running_server,
    start_race,
    url,
    view_game,
)

from server.core.records import decode_entry, decode_room
from server.store.base import AppendRequest, AppendResult, LogLength, StoreUnavailable
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p


def evalsha_calls(redis_server: RedisServer) -> int:
    stats = redis_server.command("INFO", "commandstats")
    assert isinstance(stats, bytes)
    for line in stats.splitlines():
        if line.startswith(b"cmdstat_evalsha:calls="):
            return int(line.split(b"calls=")[1].split(b",")[0])
    return 0


@pytest.fixture(autouse=True)
def unpause_redis(redis_server: RedisServer) -> Iterator[None]:
    """Tests pause Redis's writes (CLIENT PAUSE ... WRITE); none leaves the pause to the next test."""
    yield
    if redis_server.running:
        redis_server.command("CLIENT", "UNPAUSE")


def logged(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == event]


async def test_a_race_outliving_the_room_ttl_keeps_every_acknowledged_move(
    redis_server: RedisServer, redis_url: str
) -> None:
    """--room-ttl shorter than the race: the room stays in the store while the race runs (no TTL),
    every acknowledged move is in the record, and expiry starts only when the race finishes."""
    rng = random.Random(3)
    ttl_s = 0.5
    store = RedisStore(redis_url)
    config = fast_config(core=replace(FAST, room_ttl_s=ttl_s))
    try:
        async with running_server(store, config) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            room_key = f"plot:room:{{{code}}}"
            assert redis_server.command("PTTL", room_key) == -1  # live: no expiry at all
            assert starts[0].view is not None
            view, next_id = await play(ann, starts[0].view, 3, rng)
            raced_from = time.monotonic()
            # the race outlives the TTL
            await eventually(lambda: time.monotonic() > raced_from + 3 * ttl_s, timeout=10.0)
            calls_before = evalsha_calls(redis_server)
            view, next_id = await play(ann, view, 3, rng, first_id=next_id)
            assert evalsha_calls(redis_server) - calls_before <= 3 * 2  # no retry storm (a save may ride along)
            assert redis_server.command("PTTL", room_key) == -1
            await ann.send(p.Move(id=next_id, move="resign"))
            await bob.send(p.Move(id=1, move="resign"))
            results = await ann.expect(p.Results)
            acked = [m.id for m in ann.messages if isinstance(m, p.MoveOk)]
            entries = [decode_entry(b) for b in await store.load_moves(code, 1, ann.pid)]
            assert [e.id for e in entries] == acked and len(acked) == next_id
            assert [e.move for e in entries] == results.records[ann.pid].moves

            def expiring() -> bool:
                ttl = redis_server.command("PTTL", room_key)
                return isinstance(ttl, int) and ttl > 0

            await eventually(expiring, timeout=10.0)  # finished: now it may expire
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()


async def test_a_room_gone_from_the_store_mid_race_is_never_read_as_a_conflict(
    redis_server: RedisServer, redis_url: str
) -> None:
    """A missing room is NO_SUCH_RACE, not a length conflict: the move gets an answer and the
    server does not loop reloading and re-appending."""
    rng = random.Random(4)
    store = RedisStore(redis_url)
    other = RedisStore(redis_url)
    try:
        async with running_server(store, fast_config()) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            assert starts[0].view is not None
            _view, next_id = await play(ann, starts[0].view, 2, rng)
            await other.delete_room(code)
            calls_before = evalsha_calls(redis_server)
            await ann.send(p.Move(id=next_id, move="stock>waste"))

            def answered() -> bool:
                return ann.closed_code is not None or any(
                    isinstance(m, p.MoveRejected | p.Error | p.Kicked) for m in ann.messages
                )

            await eventually(answered, timeout=10.0)
            assert not [m for m in ann.messages if isinstance(m, p.MoveOk) and m.id == next_id]
            # Before: the append was retried about 2,000 times a second and never answered.
            assert evalsha_calls(redis_server) - calls_before <= 4
            for client in (ann, bob):
                await client.close()
    finally:
        await other.close()
        await store.close()


class ListingFails(MemoryStore):
    """A memory store whose listing write fails with an error the store does not expect."""

    async def set_listed(self, code: str, listed: bool) -> None:
        raise RuntimeError("injected listing failure")


async def test_an_unexpected_room_write_error_is_logged_and_later_writes_still_land(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="plot.server")
    store = ListingFails()
    async with running_server(store, fast_config()) as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])

        async def both_stored() -> bool:
            loaded = await store.load_room(code)
            return loaded is not None and len(decode_room(loaded[0]).members) == 2

        await eventually(both_stored, timeout=10.0)
        failures = logged(caplog, "room_write_failed")
        assert failures and "injected listing failure" in str(getattr(failures[0], "fields", {}))
        for client in (ann, bob):
            await client.close()


class PlayerSaveFailsOnce(MemoryStore):
    """put_player fails once, unexpectedly, for a player already registered."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.failed = False

    async def put_player(self, player_id: str, token_hash: str, data: bytes, ttl_s: float | None = None) -> None:
        if player_id in self.seen and not self.failed:
            self.failed = True
            raise RuntimeError("injected player failure")
        self.seen.add(player_id)
        await super().put_player(player_id, token_hash, data, ttl_s=ttl_s)


async def test_an_unexpected_player_write_error_is_logged_and_the_worker_carries_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="plot.server")
    store = PlayerSaveFailsOnce()
    async with running_server(store, fast_config()) as server:
        (ann,), code = await make_room(server, ["Ann"])
        await eventually(lambda: bool(logged(caplog, "player_write_failed")), timeout=10.0)
        await ann.send(p.Leave())
        await ann.expect(p.Left)

        async def left_stored() -> bool:
            from server.core.records import decode_player

            data = await store.get_player(ann.pid)
            return data is not None and decode_player(data).room is None

        await eventually(left_stored, timeout=10.0)
        assert code
        await ann.close()


async def test_room_reads_come_after_the_room_s_pending_writes(redis_server: RedisServer, redis_url: str) -> None:
    store = RedisStore(redis_url)
    try:
        async with running_server(store, fast_config()) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])

            async def members() -> int:
                loaded = await store.load_room(code)
                return 0 if loaded is None else len(decode_room(loaded[0]).members)

            await eventually(lambda: members_equal(members, 2), timeout=10.0)
            carl = await Client.open(server, "Carl")
            await carl.hello("Carl")
            redis_server.command("CLIENT", "PAUSE", "700", "WRITE")  # writes wait; reads go on
            await carl.send(p.Join(code=code))
            await carl.expect(p.Room)
            assert await members() == 2  # Carl's room save is still waiting in the shell's queue
            read = await server.read_room(code)
            assert read is not None and len(decode_room(read[0]).members) == 3
            for client in (ann, bob, carl):
                await client.close()
    finally:
        await store.close()


async def members_equal(count: Callable[[], Awaitable[int]], expected: int) -> bool:
    return await count() == expected


async def test_the_race_record_is_stored_before_any_racer_sees_its_commitment(
    redis_server: RedisServer, redis_url: str
) -> None:
    store = RedisStore(redis_url)
    reader = RedisStore(redis_url)
    try:
        async with running_server(store, fast_config()) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            await eventually(lambda: bob_ready(ann), timeout=10.0)
            redis_server.command("CLIENT", "PAUSE", "600", "WRITE")  # the countdown (0.1 s) ends first
            await ann.send(p.Start())
            start = await ann.expect(p.RaceStart)
            loaded = await reader.load_room(code)
            assert loaded is not None
            race = decode_room(loaded[0]).race
            assert race is not None and race.commitment == start.commitment
            for client in (ann, bob):
                await client.close()
    finally:
        await reader.close()
        await store.close()


def bob_ready(host: Client) -> bool:
    rooms = [m for m in host.messages if isinstance(m, p.Room)]
    return bool(rooms) and all(m.ready for m in rooms[-1].members if m.player_id != host.pid)


async def test_a_room_save_never_overwrites_another_writer(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="plot.server")
    store = RedisStore(redis_url)
    other = RedisStore(redis_url)  # another process, or an operator, writing the same room
    try:
        async with running_server(store, fast_config()) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            await eventually(lambda: bob_ready(ann), timeout=10.0)

            async def settled() -> bool:
                loaded = await store.load_room(code)
                return loaded is not None and all(
                    m.ready for m in decode_room(loaded[0]).members if m.player_id != ann.pid
                )

            await eventually(settled, timeout=10.0)
            loaded = await store.load_room(code)
            assert loaded is not None
            assert await other.save_room(code, b"foreign record", loaded[1]) == loaded[1] + 1
            await bob.send(p.Ready(ready=False))  # a change: the server saves the room
            await eventually(lambda: bool(logged(caplog, "room_save_conflict")), timeout=10.0)
            await server.flush(2.0)
            assert await store.load_room(code) == (b"foreign record", loaded[1] + 1)
            for client in (ann, bob):
                await client.close()
    finally:
        await other.close()
        await store.close()


class CountingRedisStore(RedisStore):
    """The real Redis store, recording the size of every batch of appends the server sends."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.batches: list[int] = []

    async def append_moves(self, batch: Sequence[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        self.batches.append(len(batch))
        return await super().append_moves(batch)


async def first_moves(starts: list[p.RaceStart]) -> list[str]:
    moves = []
    for start in starts:
        assert start.view is not None
        moves.append(view_game(start.view).legal_moves()[0])
    return moves


async def test_moves_waiting_together_go_to_the_store_in_one_batch(redis_server: RedisServer, redis_url: str) -> None:
    """Group commit: while one batch is out, every move that arrives waits and goes in the next
    one; each move is acknowledged once its own entry is stored."""
    store = CountingRedisStore(redis_url)
    try:
        async with running_server(store, fast_config(append_batches_in_flight=1)) as server:
            names = [f"R{i}" for i in range(8)]
            racers, code = await make_room(server, names)
            starts = await start_race(racers)
            moves = await first_moves(starts)
            before = len(store.batches)
            redis_server.command("CLIENT", "PAUSE", "400", "WRITE")  # the first batch waits in Redis
            for racer, move in zip(racers, moves, strict=True):
                await racer.send(p.Move(id=1, move=move))
            oks = [await racer.expect(p.MoveOk) for racer in racers]
            assert all(ok.id == 1 and ok.seq == 1 for ok in oks)
            sent = store.batches[before:]
            assert sum(sent) == 8 and len(sent) <= 2, sent  # one move per round trip would be 8
            for racer in racers:
                assert [decode_entry(e).id for e in await store.load_moves(code, 1, racer.pid)] == [1]
            for racer in racers:
                await racer.close()
    finally:
        await store.close()


@pytest.mark.parametrize("limit", ["backlog", "stall"])
async def test_a_backed_up_store_answers_busy_at_once_and_the_move_can_be_resent(
    redis_server: RedisServer, redis_url: str, limit: str
) -> None:
    store = RedisStore(redis_url)
    limits = {"append_backlog_limit": 1} if limit == "backlog" else {"append_stall_ms": 50}
    try:
        async with running_server(store, fast_config(core=replace(FAST, busy_retry_ms=100), **limits)) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            ann_move, bob_move = await first_moves(starts)
            redis_server.command("CLIENT", "PAUSE", "600", "WRITE")
            sent = time.monotonic()
            await ann.send(p.Move(id=1, move=ann_move))  # its batch waits in the store
            await eventually(lambda: move_writes(server) >= 1 and time.monotonic() > sent + 0.1, timeout=10.0)
            await bob.send(p.Move(id=1, move=bob_move))
            busy = await bob.expect(p.MoveRejected, timeout=0.4)  # before the store answers
            assert busy.id == 1 and busy.code == p.BUSY and "writing moves" in busy.reason
            hint = re.search(r"retry_ms=(\d+)", busy.reason)
            assert hint is not None and 50 <= int(hint.group(1)) <= 150  # 100 ms, spread by half either way
            assert (await ann.expect(p.MoveOk)).id == 1
            await eventually(lambda: move_writes(server) == 0, timeout=10.0)
            await bob.send(p.Move(id=1, move=bob_move))  # resent, same id
            assert (await bob.expect(p.MoveOk)).seq == 1
            assert len(await store.load_moves(code, 1, bob.pid)) == 1
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()


async def test_the_plot_client_sends_a_busy_move_again_after_the_hint(
    redis_server: RedisServer, redis_url: str
) -> None:
    """client/connection.py: a move answered busy is sent again (same id) after retry_ms, and is
    played once the server takes it on; the caller sees only the move_ok."""
    from client.connection import Connection

    store = RedisStore(redis_url)
    try:
        config = fast_config(core=replace(FAST, busy_retry_ms=40), append_backlog_limit=1)
        async with running_server(store, config) as server:
            plot = Connection(url(server), "Plot")
            await plot.start()
            (ann,), code = await make_room(server, ["Ann"], max_racers=2)
            await plot.send(p.Join(code=code))
            await plot.send(p.Ready())
            await eventually(
                lambda: len(latest(ann, p.Room).members) == 2 and all(m.ready for m in latest(ann, p.Room).members[1:]),
                timeout=10.0,
                what="plot joined and ready",
            )
            start = (await start_race([ann]))[0]
            await eventually(lambda: plot.board.view is not None, timeout=10.0, what="plot's race_start")
            ann_move = (await first_moves([start]))[0]
            redis_server.command("CLIENT", "PAUSE", "60000", "WRITE")
            try:
                await ann.send(p.Move(id=1, move=ann_move))  # its batch waits in the store: backlog 1
                await eventually(lambda: move_writes(server) >= 1, timeout=10.0)
                moving = asyncio.ensure_future(plot.move("stock>waste"))
                await eventually(lambda: plot.busy_resends >= 1, timeout=10.0, what="a busy answer, resent")
                assert not moving.done()
            finally:
                redis_server.command("CLIENT", "UNPAUSE")
            answer = await asyncio.wait_for(moving, 10.0)
            assert isinstance(answer, p.MoveOk) and answer.seq == 1, answer
            player = next(m.player_id for m in latest(ann, p.Room).members if m.player_id != ann.pid)
            assert len(await store.load_moves(code, 1, player)) == 1
            await plot.close()
            await ann.close()
    finally:
        await store.close()


async def test_a_room_read_behind_stuck_writes_fails_clearly_instead_of_hanging(
    redis_server: RedisServer, redis_url: str
) -> None:
    store = RedisStore(redis_url)
    try:
        async with running_server(store, fast_config(read_wait_s=0.2)) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            # make_room does not wait for bob's ready: see it handled and every save landed first, so
            # the only save behind the pause is the unready below.
            await eventually(
                lambda: any(m.player_id == bob.pid and m.ready for m in latest(ann, p.Room).members),
                timeout=10.0,
                what="bob's ready seen by ann",
            )
            await eventually(lambda: not server.writes_pending(code), timeout=10.0, what="the room's saves landed")
            # Paused until we say so: a timed pause could run out on a busy machine before the read.
            redis_server.command("CLIENT", "PAUSE", "60000", "WRITE")
            try:
                await bob.send(p.Ready(ready=False))  # a room save, stuck in Redis
                # The broadcast shows the core handled it (its save queued in the same turn): a
                # worker seen before that may be make_room's own saves, landing before the pause.
                await eventually(
                    lambda: any(m.player_id == bob.pid and not m.ready for m in latest(ann, p.Room).members),
                    timeout=10.0,
                    what="bob's unready seen by ann",
                )
                await eventually(lambda: server.writes_pending(code), timeout=10.0)
                with pytest.raises(StoreUnavailable, match="pending writes did not land"):
                    await server.read_room(code)
            finally:
                redis_server.command("CLIENT", "UNPAUSE")
            # the pause is over, the save landed
            await eventually(lambda: not server.writes_pending(code), timeout=10.0)
            read = await server.read_room(code)
            assert read is not None and decode_room(read[0]).members[1].ready is False
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()


class FailingAppends(RedisStore):
    """The real Redis store; the first ``failures`` append batches holding ``player``'s entry get no
    answer (StoreUnavailable: the outcome is unknown), and the time of each such attempt is kept."""

    def __init__(self, url: str, failures: int) -> None:
        super().__init__(url)
        self.failures = failures
        self.player: str | None = None
        self.attempts: list[float] = []

    async def append_moves(self, batch: Sequence[AppendRequest]) -> list[AppendResult | StoreUnavailable]:
        if self.player is not None and any(r.player_id == self.player for r in batch):
            self.attempts.append(time.monotonic())
            if len(self.attempts) <= self.failures:
                raise StoreUnavailable("injected: no answer")
        return await super().append_moves(batch)


async def test_a_failed_append_is_retried_after_the_core_s_back_off_alone(redis_url: str) -> None:
    """One back-off per retry: the core's RETRYING state (here a fixed 300 ms). The shell used to
    add its own delay on top (50 ms doubling per failure), so each retry came later than the last."""
    core = replace(FAST, retry_first_ms=300, retry_max_ms=300, store_outage_ms=30_000)
    store = FailingAppends(redis_url, failures=5)
    try:
        async with running_server(store, fast_config(core=core)) as server:
            (ann, bob), code = await make_room(server, ["Ann", "Bob"])
            starts = await start_race([ann, bob])
            ann_move, _bob_move = await first_moves(starts)
            store.player = ann.pid
            await ann.send(p.Move(id=1, move=ann_move))
            ok = await ann.expect(p.MoveOk, timeout=15.0)
            assert ok.id == 1 and ok.seq == 1 and not ok.duplicate
            assert [decode_entry(e).id for e in await store.load_moves(code, 1, ann.pid)] == [1]
            for client in (ann, bob):
                await client.close()
    finally:
        await store.close()
    assert len(store.attempts) == 6  # five without an answer, then the one that lands
    gaps = [later - earlier for earlier, later in zip(store.attempts, store.attempts[1:], strict=False)]
    assert min(gaps) >= 0.3, gaps  # the core's back-off holds in the real shell...
    # ...and it is the only one: with the shell's second back-off the gaps grew by 50, 100, 200,
    # 400 and 800 ms on top (a spread of 0.75 s).
    assert max(gaps) - min(gaps) < 0.3, gaps


class ResultsSaveFails(MemoryStore):
    """The save that ends a race fails (StoreUnavailable: its outcome unknown) while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.failures = 0

    async def save_room(
        self,
        code: str,
        data: bytes,
        expected_version: int,
        *,
        open_race: int | None = None,
        notice: bytes = b"",
        logs: Sequence[LogLength] = (),
    ) -> int | None:
        if self.down and decode_room(data).phase == p.RESULTS:
            self.failures += 1
            raise StoreUnavailable("injected: the store is down")
        return await super().save_room(code, data, expected_version, open_race=open_race, notice=notice, logs=logs)


async def test_results_wait_for_their_save_through_a_store_outage_and_go_out_once() -> None:
    """The race ends while the store is down: the save that ends it is retried, and the results go
    out once it lands, exactly once, never before (every accepted change is stored before it is
    announced)."""
    store = ResultsSaveFails()
    async with running_server(store, fast_config()) as server:
        clients, code = await make_room(server, ["Ann", "Bob"])
        await start_race(clients)
        for n, client in enumerate(clients):
            await client.send(p.Move(id=100 + n, move="resign"))
        await eventually(lambda: store.failures >= 2, what="the results save retried")
        await eventually(lambda: all(latest(c, p.Room).phase == p.RESULTS for c in clients), what="results phase")
        assert not any(isinstance(m, p.Results) for c in clients for m in c.messages)
        store.down = False
        got = [await c.expect(p.Results) for c in clients]
        assert got[0] == got[1]
        loaded = await store.load_room(code)
        assert loaded is not None and decode_room(loaded[0]).phase == p.RESULTS
        for client in clients:
            await client.send(p.Ping(t=1))
            await client.expect(p.Pong)
            assert sum(isinstance(m, p.Results) for m in client.messages) == 1
            await client.close()
