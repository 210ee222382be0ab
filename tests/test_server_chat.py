"""Room chat and finish events end to end: a real server on a free 127.0.0.1 port, real WebSocket
clients (the typed one of tests/support.py and a plain msgpack one), the in-memory store and a
real Redis (tests/redis_fixture.py)."""

from __future__ import annotations

import functools
from dataclasses import replace

import msgpack
from store_fixtures import memory_or_redis_store  # noqa: F401  (the fixture store)
from support import Client, eventually, fast_config, latest, make_room, running_server, start_race, url
from test_server_leaks import Recipient, scan
from websockets.asyncio.client import connect

from server.store.base import Store
from server.store.memory import MemoryStore
from shared import protocol as p


def said(client: Client) -> list[p.ChatLine]:
    return [m.line for m in client.messages if isinstance(m, p.ChatSaid)]


def texts(client: Client) -> list[str]:
    return [line.text for line in said(client)]


async def spectator(server: object, code: str, name: str = "Zed") -> Client:
    client = await Client.open(server, name)  # type: ignore[arg-type]
    await client.hello(name)
    await client.send(p.Join(code=code, role="spectator"))
    await client.expect(p.Room)
    return client


async def test_a_chat_line_reaches_the_others_and_a_joiner_sees_the_history(store: Store) -> None:
    async with running_server(store) as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        zed = await spectator(server, code)
        await bob.send(p.Chat(text="good luck 🍀"))
        for client in (ann, bob, zed):
            line = (await client.expect(p.ChatSaid)).line
            assert (line.name, line.role, line.text, line.seq, line.player_id) == (
                "Bob",
                "racer",
                "good luck 🍀",
                1,
                bob.pid,
            )
        await zed.send(p.Chat(text="hello from the stands"))
        await eventually(lambda: len(said(ann)) == 2, what="the spectator's line at Ann")
        late = await Client.open(server, "Late")
        await late.hello("Late")
        await late.send(p.Join(code=code, role="spectator"))
        history = await late.expect(p.ChatHistory)
        assert [(line.name, line.text) for line in history.lines] == [
            ("Bob", "good luck 🍀"),
            ("Zed", "hello from the stands"),
        ]
        # A resumer gets it too.
        token = bob.welcome.token if bob.welcome else None
        await bob.close()
        back = await Client.open(server, "Bob again")
        await back.hello("Bob", token=token)
        assert len((await back.expect(p.ChatHistory)).lines) == 2
        for client in (ann, zed, late, back):
            await client.close()


async def test_a_plain_msgpack_client_chats() -> None:
    """No msgspec, no shared/: maps in, maps out, as docs/protocol.md describes them."""
    async with running_server(MemoryStore()) as server:
        (ann,), code = await make_room(server, ["Ann"])
        async with connect(url(server), compression=None) as ws:
            await ws.send(msgpack.packb({"type": "hello", "v": p.PROTOCOL_VERSION, "name": "Plain"}))
            assert msgpack.unpackb(await ws.recv())["type"] == "welcome"
            await ws.send(msgpack.packb({"type": "join", "code": code, "role": "spectator"}))
            await ws.send(msgpack.packb({"type": "chat", "text": "hi from plain"}))
            line = (await ann.expect(p.ChatSaid)).line
            assert (line.name, line.text, line.role) == ("Plain", "hi from plain", "spectator")
            await ann.send(p.Chat(text="hi back"))
            while True:
                frame = msgpack.unpackb(await ws.recv())
                if frame["type"] == "chat" and frame["line"]["name"] == "Ann":
                    break
            assert frame["room"] == code and frame["line"]["text"] == "hi back"
            await ws.send(msgpack.packb({"type": "chat", "text": 42}))
            while (frame := msgpack.unpackb(await ws.recv()))["type"] != "error":
                pass
            assert frame["code"] == p.BAD_FIELD and "'text'" in frame["message"]
        await ann.close()


async def test_mute_length_and_rate_limits_are_clear_errors() -> None:
    async with running_server(MemoryStore()) as server:
        (ann, bob), _code = await make_room(server, ["Ann", "Bob"])
        await bob.send(p.Chat(text="z" * (p.CHAT_MAX + 1)))
        err = await bob.expect(p.Error)
        assert err.code == p.BAD_FIELD and f"at most {p.CHAT_MAX} characters" in err.message
        await bob.send(p.Mute(player_id=ann.pid))
        assert (await bob.expect(p.Error)).code == p.NOT_HOST
        await ann.send(p.Mute(player_id=bob.pid))
        await eventually(lambda: latest(bob, p.Room).members[1].muted, what="Bob shown muted")
        await bob.send(p.Chat(text="can you hear me"))
        err = await bob.expect(p.Error)
        assert err.code == p.MUTED and err.ref == "chat" and "muted" in err.message
        await ann.send(p.Mute(player_id=bob.pid, muted=False))
        await eventually(lambda: not latest(bob, p.Room).members[1].muted, what="Bob unmuted")
        burst = server.config.core.chat_burst
        for i in range(burst + 1):
            await bob.send(p.Chat(text=f"spam {i}"))
        err = await bob.expect(p.Error)
        assert err.code == p.CHAT_LIMITED and "wait" in err.message
        await eventually(lambda: len(said(ann)) == burst, what="the lines within the limit")
        assert "can you hear me" not in [line.text for line in said(ann)]
        await bob.send(p.Ping(t=1))
        assert (await bob.expect(p.Pong)).t == 1  # the connection stays open
        await ann.close()
        await bob.close()


async def test_spectators_chat_is_kept_from_racers_during_a_race_and_carries_nothing_hidden() -> None:
    async with running_server(MemoryStore()) as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        zed = await spectator(server, code)
        yan = await spectator(server, code, "Yan")
        starts = await start_race([ann, bob, zed, yan])
        await zed.send(p.Chat(text="psst: stock>waste"))
        line = (await yan.expect(p.ChatSaid)).line
        assert line.text == "psst: stock>waste" and line.audience == p.TO_SPECTATORS
        await ann.send(p.Chat(text="racer talk"))
        for client in (bob, zed, yan):
            await eventually(functools.partial(lambda c: "racer talk" in texts(c), client), what="the racer's line")
        # Bob heard the racer, never the spectator.
        assert [line.text for line in said(bob)] == ["racer talk"]
        assert [line.text for line in said(ann)] == ["racer talk"]
        # Ann resigns, Bob resigns: the finish events reach everyone, and the results follow.
        await ann.send(p.Move(id=1, move="resign"))
        for client in (ann, bob, zed, yan):
            done = await client.expect(p.Finished)
            assert (done.player_id, done.status, done.race) == (ann.pid, "resigned", starts[0].race)
        await bob.send(p.Move(id=1, move="resign"))
        for client in (ann, bob, zed, yan):
            await client.expect(p.Results)
        # After the race the spectators' lines reach the racers again.
        await zed.send(p.Chat(text="well played"))
        assert (await bob.expect(p.ChatSaid)).line.text == "well played"
        # No frame to anyone held a hidden card or the deal before the results (the leak scan).
        assert starts[0].view is not None
        records = {pid: ["resign"] for pid in (ann.pid, bob.pid)}
        roles = ((ann, p.RACER), (bob, p.RACER), (zed, p.SPECTATOR), (yan, p.SPECTATOR))
        recipients = [Recipient(c.label, role, c.pid, c.frames) for c, role in roles]
        deal = latest(ann, p.Results).deal
        report = scan(recipients, deal, records)
        assert report.violations == [] and report.views >= 2
        for client in (ann, bob, zed, yan):
            await client.close()


async def test_chat_and_finish_events_cross_between_two_nodes(redis_url: str) -> None:
    """Several nodes on one Redis: a line said on one node reaches the members on the other once,
    lines said on both at once all arrive everywhere, and the spectator rule holds across."""
    from test_server_nodes import node, spread_room

    async with node(redis_url) as a, node(redis_url) as b:
        (host, ann, bob, eve), _starts = await spread_room(a, b)  # host, ann on A; bob, eve (spectator) on B
        await host.send(p.Chat(text="from A"))
        await eventually(lambda: [line.text for line in said(bob)] == ["from A"], what="A's line on B")
        await eventually(lambda: [line.text for line in said(eve)] == ["from A"], what="A's line at B's spectator")
        await bob.send(p.Chat(text="from B"))
        await ann.send(p.Chat(text="also from A"))
        everyone = (host, ann, bob, eve)
        for client in everyone:
            every = functools.partial(lambda c: sorted(texts(c)) == ["also from A", "from A", "from B"], client)
            await eventually(every, what=f"every line once at {client.label}")
        assert all(len({line.seq for line in said(c)}) == 3 for c in everyone)
        await eve.send(p.Chat(text="spectator on B"))
        await eventually(lambda: "spectator on B" in [line.text for line in said(eve)], what="echoed to eve")
        await ann.send(p.Chat(text="marker"))
        await eventually(lambda: "marker" in [line.text for line in said(host)], what="the marker on A")
        assert "spectator on B" not in [line.text for line in said(host)] + [line.text for line in said(ann)]
        await bob.send(p.Move(id=1, move="resign"))
        for client in everyone:
            done = await client.expect(p.Finished, timeout=10)
            assert (done.player_id, done.status) == (bob.pid, "resigned")
        for client in everyone:
            await client.close()


async def test_chat_has_its_own_bounds_and_spends_no_answer_budget() -> None:
    """A line goes to every reader, so in a full room it writes far more than its sender's answer
    budget (server/limits.py) allows a request; chat is bounded by its own rates instead (5 lines
    in 10 s per player, 10 a second per room: docs/protocol.md §3.4), so the sender's next lines
    still go out."""
    limits = replace(fast_config().limits, answer_bytes_per_s=400)  # bursts of 3,200 bytes
    async with running_server(MemoryStore(), fast_config(limits=limits)) as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        watchers = [await spectator(server, code, f"W{i}") for i in range(8)]
        for i in range(4):  # about 1,500 bytes written per line: twice Bob's burst in all
            await bob.send(p.Chat(text=f"line {i}: " + "good luck " * 8))
        await eventually(lambda: len(said(watchers[-1])) == 4, what="every line at the last spectator")
        assert not any(isinstance(m, p.Error) and m.ref == "chat" for m in bob.messages)
        written = sum(len(frame) for frame in watchers[-1].frames if b"good luck" in frame) * (2 + len(watchers))
        assert written > 2 * 3200
        for client in (ann, bob, *watchers):
            await client.close()
