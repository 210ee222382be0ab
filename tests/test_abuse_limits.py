"""The limits a public server needs against one abusive address (docs/reliability.md,
Limits): a real server on loopback, real WebSocket clients (some written by hand, to never read).

Other loopback addresses (127.0.0.2, ...) stand for other clients: Linux routes all of 127/8."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

import pytest
from support import (
    Client,
    eventually,
    fast_config,
    metric,
    metrics,
    open_connections,
    raw_upgrade,
    room_members,
    running_server,
    url,
    ws_frame,
)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.limits import AddressLimits, LimitsConfig, address_key
from server.shell import ServerConfig
from server.store.memory import MemoryStore
from server.store.redis import RedisStore
from shared import protocol as p


def limited(**caps: Any) -> ServerConfig:
    return fast_config(limits=replace(LimitsConfig.per_address_off(), **caps))


async def test_a_connection_without_hello_is_closed_at_the_deadline() -> None:
    async with running_server(config=limited(hello_timeout_s=0.3)) as server:
        silent = await Client.open(server, "silent")
        talker = await Client.open(server, "talker")
        await talker.hello("Ann")
        assert await silent.closed() == 1008
        assert silent.ws.close_reason == "no hello within 0.3 s"
        assert server.stats.hello_timeouts == 1
        await talker.send(p.Ping(t=1))  # the one that said hello is still served, past the deadline
        assert (await talker.expect(p.Pong)).t == 1
        await talker.close()


async def test_connections_per_address_are_refused_past_the_cap_with_429() -> None:
    async with running_server(config=limited(conns_per_address=3)) as server:
        held = [await Client.open(server) for _ in range(3)]
        with pytest.raises(InvalidStatus) as refused:
            await connect(url(server))
        assert refused.value.response.status_code == 429
        assert b"too many connections from your address (limit 3)" in refused.value.response.body
        other = await Client.open(server, local_addr=("127.0.0.2", 0))  # another address is not held back
        await other.hello("Bea")
        await held[0].close()

        async def accepted() -> bool:
            try:
                again = await Client.open(server)
            except InvalidStatus:
                return False
            await again.close()
            return True

        await eventually(accepted, what="a slot given back when a connection closes")
        assert server.stats.refused_per_address >= 1
        for client in (*held[1:], other):
            await client.close()


async def test_hellos_per_minute_per_address() -> None:
    async with running_server(config=limited(hellos_per_minute=3)) as server:
        clients = [await Client.open(server) for _ in range(4)]
        for i, client in enumerate(clients[:3]):
            await client.hello(f"P{i}")
        await clients[3].send(p.Hello(v=p.PROTOCOL_VERSION, name="P3"))
        error = await clients[3].expect(p.Error)
        assert error.code == p.RATE_LIMITED and error.ref == "hello"
        assert "too many hellos from your address (limit 3 a minute)" in error.message
        assert "retry_ms=" in error.message
        elsewhere = await Client.open(server, local_addr=("127.0.0.3", 0))
        await elsewhere.hello("Other")
        samples = await asyncio.to_thread(metrics, server.metrics_port)
        assert metric(samples, "plot_limited_total", limit="hellos_per_minute") == 1
        assert metric(samples, "plot_limited_total", limit="rooms_per_minute") == 0
        for client in (*clients, elsewhere):
            await client.close()


async def test_rooms_per_minute_per_address() -> None:
    async with running_server(config=limited(rooms_per_minute=2)) as server:
        clients = [await Client.open(server) for _ in range(3)]
        for i, client in enumerate(clients):
            await client.hello(f"H{i}")
        for client in clients[:2]:
            await client.send(p.CreateRoom())
            await client.expect(p.Room)
        await clients[2].send(p.CreateRoom())
        error = await clients[2].expect(p.Error)
        assert error.code == p.RATE_LIMITED and error.ref == "create_room" and "rooms created" in error.message
        assert server.core.room_count() == 2
        for client in clients:
            await client.close()


async def test_joins_of_unknown_rooms_have_a_budget_per_address() -> None:
    async with running_server(config=limited(join_failures_per_minute=3)) as server:
        host = await Client.open(server, local_addr=("127.0.0.2", 0))
        await host.hello("Host")
        await host.send(p.CreateRoom(options=p.RoomOptions(private=True)))
        code = (await host.expect(p.Room)).code
        guesser = await Client.open(server)
        await guesser.hello("Guess")
        wrong = [c for c in ("22222", "33333", "44444", "55555") if c != code]
        for guess in wrong[:3]:
            await guesser.send(p.Join(code=guess))
            assert (await guesser.expect(p.Error)).code == p.UNKNOWN_ROOM
        await guesser.send(p.Join(code=code))  # even the right code: the budget is spent
        error = await guesser.expect(p.Error)
        assert error.code == p.RATE_LIMITED and error.ref == "join" and "retry_ms=" in error.message
        assert {m.player_id for m in room_members(server, code)} == {host.pid}
        friend = await Client.open(server, local_addr=("127.0.0.3", 0))
        await friend.hello("Friend")
        await friend.send(p.Join(code=code))
        await friend.expect(p.Room)
        for client in (host, guesser, friend):
            await client.close()


async def test_a_join_sent_before_welcome_is_wrong_phase_and_spends_no_budget() -> None:
    async with running_server(config=limited(join_failures_per_minute=2)) as server:
        eager = await Client.open(server, "eager")
        for _ in range(5):
            await eager.send(p.Join(code="22222"))
            error = await eager.expect(p.Error)
            assert error.code == p.WRONG_PHASE and error.message == "say hello first", error
        await eager.hello("Eager")
        for _ in range(2):  # the whole budget is still there
            await eager.send(p.Join(code="22222"))
            assert (await eager.expect(p.Error)).code == p.UNKNOWN_ROOM
        await eager.send(p.Join(code="22222"))
        assert (await eager.expect(p.Error)).code == p.RATE_LIMITED
        await eager.close()


async def test_joins_sent_at_once_over_many_connections_cannot_overdraw_the_budget() -> None:
    async with running_server(config=limited(join_failures_per_minute=3)) as server:
        guessers = [await Client.open(server) for _ in range(6)]
        for i, guesser in enumerate(guessers):
            await guesser.hello(f"G{i}")
        await asyncio.gather(*(guesser.send(p.Join(code="22222")) for guesser in guessers))
        codes = sorted([(await guesser.expect(p.Error)).code for guesser in guessers])
        assert codes == [p.RATE_LIMITED] * 3 + [p.UNKNOWN_ROOM] * 3
        for guesser in guessers:
            await guesser.close()


async def test_a_join_that_loads_its_room_from_the_store_and_succeeds_gives_its_token_back() -> None:
    store = MemoryStore()
    strict = limited(join_failures_per_minute=1)
    async with running_server(store, limited()) as first, running_server(store, strict) as second:
        host = await Client.open(first)
        await host.hello("Host")
        await host.send(p.CreateRoom())
        code = (await host.expect(p.Room)).code
        joiner = await Client.open(second)
        await joiner.hello("Joiner")
        assert not second.core.has_room(code)
        await joiner.send(p.Join(code=code))  # the second server loads the room from the store
        await joiner.expect(p.Room)
        await joiner.send(p.Leave())
        await joiner.expect(p.Left)
        await joiner.send(p.Join(code="22222" if code != "22222" else "33333"))
        assert (await joiner.expect(p.Error)).code == p.UNKNOWN_ROOM  # the one token was given back
        for client in (host, joiner):
            await client.close()


async def test_websocket_pings_count_in_the_message_rate() -> None:
    async with running_server(config=fast_config(rate_per_s=5, burst=10)) as server:
        client = await Client.open(server)
        await client.hello("Pinger")
        for _ in range(40):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await client.ws.ping()  # not waiting for the pongs
        assert await client.closed() == 1008
        assert "rate limit" in (client.ws.close_reason or "")
        assert server.stats.rate_limited == 1


async def test_a_client_that_never_reads_is_cut_on_the_timer() -> None:
    """Pongs to a ping flood never go through the game's send path: only the timer sees them pile up."""
    config = fast_config(
        write_soft_limit=4096, write_hard_limit=16384, buffer_check_s=0.05, socket_sndbuf=4096, rate_per_s=5000,
        burst=10000,
    )  # fmt: skip
    async with running_server(config=config) as server:
        _reader, writer = await raw_upgrade(server.port, rcvbuf=4096)
        ping = ws_frame(0x9, b"x" * 125)

        async def flood() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(5000):
                    writer.write(ping)
                    await writer.drain()

        flooding = asyncio.ensure_future(flood())
        await eventually(lambda: server.stats.slow_disconnects == 1, what="the non-reader cut")
        await eventually(lambda: open_connections(server) == 0, what="its slot given back")
        flooding.cancel()
        with contextlib.suppress(BaseException):
            await flooding
        writer.close()


async def test_the_defaults_let_a_host_and_eight_bots_in_from_one_address() -> None:
    """`plot bot --count 8` from one machine, with every default limit on."""
    async with running_server(config=fast_config(limits=LimitsConfig())) as server:
        host = await Client.open(server)
        await host.hello("Host")
        await host.send(p.CreateRoom(options=p.RoomOptions(max_racers=9)))
        code = (await host.expect(p.Room)).code
        bots = [await Client.open(server) for _ in range(8)]
        for i, bot in enumerate(bots):
            await bot.hello(f"bot{i}", bot=True)
            await bot.send(p.Join(code=code))
            await bot.expect(p.Room)
        assert len(room_members(server, code)) == 9
        for client in (host, *bots):
            await client.close()


async def test_identity_churn_leaves_nothing_behind(redis_url: str) -> None:
    """Each hello's player record lives an hour, not a week, until it joins a room; the core
    forgets players with no room and no connection."""
    store = RedisStore(redis_url, namespace="churn")
    async with running_server(store, fast_config()) as server:
        drifter = await Client.open(server)
        await drifter.hello("Drifter")
        ttl = await store._redis.pttl(store.player_key(drifter.pid))
        assert 0 < ttl <= 3600 * 1000
        roomer = await Client.open(server)
        await roomer.hello("Roomer")
        await roomer.send(p.CreateRoom())
        await roomer.expect(p.Room)
        await roomer.send(p.Leave())
        await roomer.expect(p.Left)
        gone = (drifter.pid, roomer.pid)
        await drifter.close()
        await roomer.close()
        await eventually(lambda: not any(server.core.knows_player(pid) for pid in gone), what="players forgotten")
    await store.close()


def test_addresses_are_counted_by_ipv4_or_ipv6_64_and_idle_ones_forgotten() -> None:
    assert address_key(("203.0.113.7", 5000)) == "203.0.113.7"
    assert address_key(("2001:db8:1:2:aaaa::1", 5000, 0, 0)) == address_key(("2001:db8:1:2:bbbb::9", 1, 0, 0))
    assert address_key(("2001:db8:1:2:aaaa::1", 5000, 0, 0)) != address_key(("2001:db8:1:3::1", 1, 0, 0))
    assert address_key(("::ffff:203.0.113.7", 1, 0, 0)) == "203.0.113.7"
    assert address_key(None) == "local"
    now = [0.0]
    limits = AddressLimits(LimitsConfig(hellos_per_minute=2), clock=lambda: now[0])
    assert limits.take_hello("a") == 0.0 and limits.take_hello("a") == 0.0
    assert limits.take_hello("a") == pytest.approx(30.0)  # one token back every 30 s at 2 a minute
    now[0] = 30.0
    assert limits.take_hello("a") == 0.0
    now[0] = 200.0
    limits.prune()
    assert len(limits) == 0


async def test_the_client_waits_out_a_refused_hello_and_gets_in() -> None:
    from client.connection import Connection

    async with running_server(config=limited(hellos_per_minute=60)) as server:
        crowd = [await Client.open(server) for _ in range(60)]
        for i, client in enumerate(crowd):
            await client.hello(f"C{i}")  # the address's whole budget: the next hello waits a second
        states: list[tuple[str, str]] = []
        late = Connection(url(server), "Late")
        late.on_state = lambda state, detail: states.append((state, detail))
        welcome = await asyncio.wait_for(late.start(), 10)
        assert server.core.knows_player(welcome.player_id)
        assert any("the server asks to wait" in detail and "too many hellos" in detail for _state, detail in states)
        await late.close()
        for client in crowd:
            await client.close()
