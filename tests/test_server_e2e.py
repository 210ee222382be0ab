"""The race server end to end: a real server on a free 127.0.0.1 port, real WebSocket clients,
the in-memory store and a real Redis (tests/redis_fixture.py).

The helpers here (``running_server``, ``Client``, ``view_game``) are shared by the other
tests/test_server_*.py files.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import msgpack
import pytest
from store_fixtures import memory_or_redis_store  # noqa: F401  (the fixture store)
from support import (
    Client,
    board,
    eventually,
    fast_config,
    make_room,
    open_connections,
    play,
    room_members,
    room_version,
    running_server,
    start_race,
    url,
    view_game,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from server.core.records import decode_entry
from server.shell import RaceServer
from server.store.base import Store
from server.store.memory import MemoryStore
from shared import protocol as p
from shared.engine import replay
from shared.fairplay import check_commitment

# ====================================================================== tests


async def test_whole_race_three_racers_and_a_spectator(store: Store) -> None:
    rng = random.Random(7)
    async with running_server(store) as server:
        racers, code = await make_room(server, ["Ann", "Bob", "Cy"])
        spectator = await Client.open(server, "Spec")
        await spectator.hello("Spec")
        await spectator.send(p.Join(code=code, role="spectator"))
        await spectator.expect(p.Room)
        countdowns = []
        starts = await start_race([*racers, spectator])
        for client in (*racers, spectator):
            countdown = next(m for m in client.messages if isinstance(m, p.Countdown))
            countdowns.append(countdown.starts_at)
        assert len(set(countdowns)) == 1 and starts[0].started_at == countdowns[0]
        assert all(s.view == starts[0].view for s in starts[:3]) and starts[3].view is None
        assert len({s.commitment for s in starts}) == 1
        # Everyone plays a little, in parallel; then resigns.
        views = await asyncio.gather(*(play(c, s.view, 12, rng) for c, s in zip(racers, starts, strict=False)))  # type: ignore[arg-type]
        # Leaderboards go out on the node's shared tick (every 100 ms): the moves above can take
        # less, so the resigns wait for the spectator's first one.
        await eventually(
            lambda: any(isinstance(m, p.Leaderboard) for m in spectator.messages), what="the spectator's leaderboard"
        )
        for client, (_view, next_id) in zip(racers, views, strict=True):
            await client.send(p.Move(id=next_id, move="resign"))
        results = [await c.expect(p.Results) for c in (*racers, spectator)]
        final = results[0]
        assert all(r == final for r in results)
        assert sorted(final.ranking) == sorted(c.pid for c in racers)
        assert check_commitment(final.deal, final.salt, final.commitment)
        assert final.commitment == starts[0].commitment and not final.chosen_deal
        for row in final.racers:
            record = final.records[row.player_id]
            game, outcome = replay(record.deal, record.moves, undo=record.undo)
            assert outcome.ok and game.foundation_cards == row.cards and row.status == "resigned"
            assert row.moves == len(record.moves)
        # The spectator followed the race on the leaderboard, never a board.
        boards = [m for m in spectator.messages if isinstance(m, p.Leaderboard)]
        assert boards and sorted(r.name for r in boards[0].racers) == ["Ann", "Bob", "Cy"]  # ranked by then
        assert not [m for m in spectator.messages if isinstance(m, p.MoveOk | p.Boards)]
        # Every acknowledged move is in the store's log, in order, with its client id.
        for client in racers:
            raw = await store.load_moves(code, 1, client.pid)
            entries = [decode_entry(b) for b in raw]
            assert [e.move for e in entries] == final.records[client.pid].moves
            acked = [m.id for m in client.messages if isinstance(m, p.MoveOk)]
            assert [e.id for e in entries] == acked
        for client in (*racers, spectator):
            await client.close()


async def test_every_error_code_and_bad_input_hurts_no_one() -> None:
    async with running_server(config=fast_config(max_frame=2048)) as server:
        racers, code = await make_room(server, ["Ann", "Bob"], max_racers=2)
        ann, bob = racers
        room_before = (await ann.expect(p.Room)).version
        probe = await Client.open(server, "probe")

        async def error_for(client: Client, data: bytes | str) -> p.Error:
            await client.send_raw(data)
            return await client.expect(p.Error)

        assert (await error_for(probe, b"\xc1\x00")).code == p.MALFORMED
        assert (await error_for(probe, "hello")).code == p.MALFORMED  # text frame
        assert (await error_for(probe, msgpack.packb([1, 2]))).code == p.MALFORMED
        assert (await error_for(probe, msgpack.packb({"type": "teleport"}))).code == p.UNKNOWN_TYPE
        err = await error_for(probe, msgpack.packb({"type": "hello", "v": 1}))
        assert err.code == p.BAD_FIELD and "'name'" in err.message
        err = await error_for(probe, msgpack.packb({"type": "move", "id": "one", "move": "undo"}))
        assert err.code == p.BAD_FIELD and "'id'" in err.message
        assert (await error_for(probe, p.encode(p.Start()))).code == p.WRONG_PHASE  # before hello
        v = p.PROTOCOL_VERSION
        assert (await error_for(probe, p.encode(p.Hello(v=v, name="\x1b[2J")))).code == p.NAME_INVALID
        assert (await error_for(probe, p.encode(p.Hello(v=v, name="P", token="forged")))).code == p.BAD_TOKEN
        await probe.hello("Probe")
        assert (await error_for(probe, p.encode(p.Join(code="QQQQQ")))).code == p.UNKNOWN_ROOM
        assert (await error_for(probe, p.encode(p.Join(code=code)))).code == p.ROOM_FULL
        assert (await error_for(probe, p.encode(p.Ready()))).code == p.NOT_IN_ROOM
        assert (await error_for(bob, p.encode(p.Start()))).code == p.NOT_HOST
        await ann.send(p.Move(id=1, move="stock>waste"))
        early = await ann.expect(p.MoveRejected)
        assert early.code == p.WRONG_PHASE
        await start_race(racers)
        await ann.send(p.Move(id=1, move="reserve>t0"))
        illegal = await ann.expect(p.MoveRejected)
        assert illegal.code == p.ILLEGAL_MOVE and "foundation" in illegal.reason
        # Nothing of that touched Bob, the room or the race.
        await bob.send(p.Move(id=1, move="stock>waste"))
        assert (await bob.expect(p.MoveOk)).seq == 1
        room = server.core.room_record(code)
        assert room is not None and {m.player_id for m in room.members} == {ann.pid, bob.pid}
        log = server.core.racer_log(code, ann.pid)
        assert room.race is not None and log is not None and log[1] == 0
        assert room_before <= room.version
        # A frame over the size limit closes that connection only (1009), as does a flood (1008).
        big = await Client.open(server, "big")
        await big.send_raw(b"\x00" * 4096)
        assert await big.closed() == 1009
        assert bob.closed_code is None and ann.closed_code is None
        for client in (ann, bob, probe):
            await client.close()
    async with running_server(config=fast_config(rate_per_s=5, burst=5)) as server:
        flood = await Client.open(server, "flood")
        calm = await Client.open(server, "calm")
        await calm.hello("Calm")
        for i in range(20):
            with contextlib.suppress(ConnectionClosed):
                await flood.send(p.Ping(t=i))
        err = await flood.expect(p.Error)
        assert err.code == p.RATE_LIMITED
        assert await flood.closed() == 1008
        await calm.send(p.Ping(t=1))
        assert (await calm.expect(p.Pong)).t == 1
        await calm.close()


async def test_store_unavailable_and_health_check(own_redis_server: Any) -> None:
    from server.store.redis import RedisStore

    store = RedisStore(own_redis_server.url, socket_timeout=0.5, connect_timeout=0.5, retries=0)
    async with running_server(store) as server:
        import urllib.request

        def health() -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()

        status, body = await asyncio.to_thread(health)
        assert status == 200 and '"store_ok": true' in body
        ann = await Client.open(server, "Ann")
        await ann.hello("Ann")
        own_redis_server.stop()
        # /healthz reuses a store status for up to a second (server/probes.py): polled, not asked once.
        await eventually(lambda: asyncio.to_thread(lambda: health()[0] == 503), 10, what="/healthz 503")
        status, body = await asyncio.to_thread(health)
        assert status == 503 and '"store_ok": false' in body
        await ann.send(p.CreateRoom())
        err = await ann.expect(p.Error)
        assert err.code == p.STORE_UNAVAILABLE
        other = await Client.open(server, "Bob")
        await other.send(p.Hello(v=p.PROTOCOL_VERSION, name="Bob"))
        assert (await other.expect(p.Error)).code == p.STORE_UNAVAILABLE
        own_redis_server.start()
        await eventually(lambda: asyncio.to_thread(lambda: health()[0] == 200), 10, what="/healthz 200 again")
        await ann.send(p.CreateRoom())
        assert p.is_room_code((await ann.expect(p.Room)).code)
        await ann.close()
        await other.close()
    await store.close()


async def test_reconnect_mid_race_loses_nothing_and_applies_nothing_twice(store: Store) -> None:
    rng = random.Random(3)
    async with running_server(store) as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        starts = await start_race(racers)
        ann, bob = racers
        assert starts[0].view is not None
        view, next_id = await play(ann, starts[0].view, 6, rng)
        token = ann.welcome.token if ann.welcome else ""
        # Send a move and drop the connection before its ack can be read.
        legal = view_game(view).legal_moves()
        lost_move = next((m for m in legal if ">f" in m), legal[0])
        await ann.send(p.Move(id=next_id, move=lost_move))
        ann.ws.transport.abort()
        await eventually(lambda: server.core.player_connections(ann.pid) == 0)
        back = await Client.open(server, "Ann again")
        welcome = await back.hello("Ann", token=token)
        assert welcome.resumed and welcome.player_id == ann.pid and welcome.room == code
        snapshot = await back.expect(p.RaceStart)
        stored = [decode_entry(b) for b in await store.load_moves(code, 1, ann.pid)]
        assert snapshot.seq == len(stored)
        # The client does not know whether the lost move landed: it resends it with the same id.
        await back.send(p.Move(id=next_id, move=lost_move))
        reply = await back.expect(p.MoveOk)
        assert reply.id == next_id
        stored = [decode_entry(b) for b in await store.load_moves(code, 1, ann.pid)]
        assert [e.id for e in stored].count(next_id) == 1
        assert reply.seq == len(stored)
        # The game goes on from exactly there.
        view, next_id = await play(back, board(reply), 4, rng, first_id=next_id + 1)
        await back.send(p.Move(id=next_id, move="resign"))
        await bob.send(p.Move(id=1, move="resign"))
        results = await back.expect(p.Results)
        moves = results.records[ann.pid].moves
        assert moves == [e.move for e in (decode_entry(b) for b in await store.load_moves(code, 1, ann.pid))]
        game, outcome = replay(results.deal, moves)
        assert outcome.ok and game.view().waste == view.waste
        await back.close()
        await bob.close()


async def test_a_plain_msgpack_client_completes_a_race() -> None:
    """Speaks the protocol with the msgpack library from docs/protocol.md alone: no shared.protocol."""
    async with running_server() as server, connect(url(server), compression=None) as ws:

        async def send(**message: Any) -> None:
            await ws.send(msgpack.packb(message))

        async def expect(kind: str) -> dict[str, Any]:
            while True:
                frame = await asyncio.wait_for(ws.recv(), 5)
                assert isinstance(frame, bytes)
                message = msgpack.unpackb(frame)
                assert isinstance(message, dict) and "type" in message
                if message["type"] == kind:
                    return message

        await send(type="hello", v=2, name="Plain")
        welcome = await expect("welcome")
        await send(type="create_room", options={"max_racers": 2, "private": True})
        room = await expect("room")
        assert room["host"] == welcome["player_id"] and room["rules"]["private"]
        await send(type="start")
        start = await expect("race_start")
        view = start["view"]
        assert view["stock"] == 78 and len(view["tableau"]) == 12
        move_id = 0
        status = "playing"
        stock = view["stock"]
        while status == "playing" and stock > 0:
            move_id += 1
            await send(type="move", id=move_id, move="stock>waste")
            ok = await expect("move_ok")
            assert ok["id"] == move_id and ok["seq"] == move_id
            stock = ok["stock"]  # a small acknowledgement: only what changed (the waste, the stock)
            status = ok.get("status", status)
        if status == "playing":
            move_id += 1
            await send(type="move", id=move_id, move="resign")
        results = await expect("results")
        assert results["ranking"] == [welcome["player_id"]]
        record = results["records"][welcome["player_id"]]
        assert record["moves"][:78] == ["stock>waste"] * 78
        assert check_commitment(results["deal"], results["salt"], results["commitment"])


async def test_host_leaves_lobby_host_passes_and_kick_is_told() -> None:
    async with running_server() as server:
        (ann, bob, cy), code = await make_room(server, ["Ann", "Bob", "Cy"])
        await ann.send(p.Kick(player_id=cy.pid))
        assert (await cy.expect(p.Kicked)).reason == "host"
        await ann.send(p.Leave())
        await ann.expect(p.Left)
        while True:
            room = await bob.expect(p.Room)
            if room.host == bob.pid:
                break
        assert [m.name for m in room.members] == ["Bob"]
        await bob.send(p.ListRooms())
        listing = await bob.expect(p.RoomList)
        assert [r.code for r in listing.rooms] == [code] and listing.rooms[0].host_name == "Bob"
        for client in (ann, bob, cy):
            await client.close()


async def test_a_second_connection_resuming_a_player_supersedes_the_first() -> None:
    """The newer resume wins: the older connection gets `superseded`, then close code 4001."""
    async with running_server() as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        token = ann.welcome.token if ann.welcome else ""
        newer = await Client.open(server, "Ann's second window")
        welcome = await newer.hello("Ann", token=token)
        assert welcome.resumed and welcome.player_id == ann.pid and welcome.room == code
        error = await ann.expect(p.Error)
        assert error.code == p.SUPERSEDED and "another window" in error.message
        assert await ann.closed() == p.CLOSE_SUPERSEDED
        assert ann.ws.close_reason == "superseded by a newer connection"
        # The seat is the newer connection's: it acts for Ann, and Bob still sees her connected.
        await newer.send(p.Ready(ready=True))
        while True:
            room = await bob.expect(p.Room)
            me = next(m for m in room.members if m.player_id == ann.pid)
            if me.ready:
                break
        assert me.connected and room.host == ann.pid
        for client in (newer, bob):
            await client.close()


async def test_shutdown_tells_clients() -> None:
    server = RaceServer(MemoryStore(), fast_config())
    await server.start()
    client = await Client.open(server, "Ann")
    await client.hello("Ann")
    await server.stop()
    shutdown = await client.expect(p.Shutdown)
    assert shutdown.reason and shutdown.retry_after_ms
    assert await client.closed() == 1001


async def test_connection_limit_answers_503() -> None:
    from websockets.exceptions import InvalidStatus

    async with running_server(config=fast_config(max_connections=2)) as server:
        first, second = await Client.open(server, "1"), await Client.open(server, "2")
        with pytest.raises(InvalidStatus) as info:
            await connect(url(server))
        assert info.value.response.status_code == 503
        await first.close()
        await eventually(lambda: open_connections(server) < 2)
        third = await Client.open(server, "3")  # a freed slot can be used again
        await third.hello("Third")
        for client in (second, third):
            await client.close()


FIELD_NAMES = ["v", "name", "token", "code", "role", "ready", "id", "move", "options", "deal", "player_id", "t", "bot"]


async def test_garbage_never_crashes_or_changes_anything() -> None:
    """Random frames (bytes, maps of every type with random fields) from one client: each gets an
    answer, none is an internal error, and a racer next to it plays on undisturbed."""
    rng = random.Random(99)
    values: list[Any] = [None, True, -1, 0, 7, 2**64 - 1, 1.5, "", "x" * 40, "ABCDE", "waste>t3", [], {}, [1, "a"]]
    async with running_server() as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        await start_race(racers)
        version = room_version(server, code)
        noisy = await Client.open(server, "noisy")
        await noisy.hello("Noisy")
        for i in range(300):
            if i % 3 == 0:
                frame = rng.randbytes(rng.randrange(0, 60))
            else:
                kind = rng.choice([*p.CLIENT_TYPES, "nope", 5])
                names = rng.choices(FIELD_NAMES, k=rng.randrange(0, 4))
                fields = {name: rng.choice(values) for name in names}
                frame = msgpack.packb({"type": kind, **fields})
            await noisy.send_raw(frame)
            await noisy.send(p.Ping(t=i))
            await noisy.expect(p.Pong)  # every frame before it was handled (answered or ignored)
        assert not [m for m in noisy.messages if isinstance(m, p.Error) and m.code == p.INTERNAL]
        assert {m.code for m in noisy.messages if isinstance(m, p.Error)} >= {p.MALFORMED, p.UNKNOWN_TYPE, p.BAD_FIELD}
        assert room_version(server, code) == version or noisy.pid in {m.player_id for m in room_members(server, code)}
        await racers[0].send(p.Move(id=1, move="stock>waste"))
        assert (await racers[0].expect(p.MoveOk)).seq == 1
        for client in (*racers, noisy):
            assert client.closed_code is None
            await client.close()


async def test_messages_are_answered_in_order_whatever_their_framing() -> None:
    """A message in one binary frame is handled straight from the frame parser; a fragmented or a
    text message goes through websockets' queue, and the messages after it wait behind it there:
    the answers keep the order of the messages (docs/benchmarks.md, "The move path at saturation")."""
    async with running_server() as server:
        client = await Client.open(server, "order")
        await client.hello("Order")
        pings = [p.encode(p.Ping(t=t)) for t in range(6)]
        await client.send_raw(pings[0])
        await client.ws.send([pings[1][:3], pings[1][3:]])  # one message in two frames
        await client.send_raw(pings[2])  # arrives while the fragmented one may still be queued
        await client.send_raw("text, not MessagePack")  # a text message: its error, in its place
        await client.send_raw(pings[3])
        await client.ws.send([pings[4][:2], pings[4][2:5], pings[4][5:]])
        await client.send_raw(pings[5])

        def answers() -> list[str]:
            return [
                f"pong {m.t}" if isinstance(m, p.Pong) else f"error {m.code}"
                for m in client.messages
                if isinstance(m, p.Pong | p.Error)
            ]

        await eventually(lambda: len(answers()) == 7)
        assert answers() == ["pong 0", "pong 1", "pong 2", f"error {p.MALFORMED}", "pong 3", "pong 4", "pong 5"]
        assert server.stats.frames_in == 8  # the hello and the seven: each counted once, whichever path
        await client.close()


async def test_any_path_and_room_parameter_is_accepted_and_changes_nothing() -> None:
    """Clients name their room in the URL (``/?room=CODE``) for a balancer to hash on
    (docs/deployment.md, "Room affinity"); the server ignores the query, whatever it holds: a room
    that is not the one joined, a malformed value, an unknown path."""
    async with running_server() as server:
        racers, code = await make_room(server, ["Ann", "Bob"])
        base = url(server)
        for target in (f"/?room={code}", "/?room=NOPE1", "/?room=%ZZ%00<>&room=&x", "/any/path?room=" + "A" * 3000):
            client = await Client.open(base + target, target[:20])
            welcome = await client.hello("Spec")
            assert welcome.room is None  # the URL joins nothing
            await client.send(p.Join(code=code, role=p.SPECTATOR))
            assert (await client.expect(p.Room)).code == code
            await client.close()
        await racers[0].send(p.Ready(ready=True))  # the room goes on undisturbed
        await eventually(lambda: all(m.ready for m in room_members(server, code) if m.role == p.RACER), 5)
        for client in racers:
            await client.close()
