"""Room snapshots scale with spectators: they list the racers, the host and the recipient, plus a
spectator count; a spectator coming or going reaches the others coalesced by the room's tick,
while racers' changes go out at once. Plain calls on the room core (the Shell of test_room_core).
"""

from __future__ import annotations

import asyncio

import msgspec
from support import Client, Shell, eventually, latest, lobby, make_room, pid, record_of, running_server

from server.core.events import Disconnected, SaveRoom
from shared import protocol as p


def rooms(shell: Shell, conn: int) -> list[p.Room]:
    """The room snapshots this connection got since its inbox was last taken (and takes them)."""
    return [m for m in shell.take(conn) if isinstance(m, p.Room)]


def watch(shell: Shell, code: str, name: str) -> int:
    conn = shell.hello(name)
    shell.send(conn, p.Join(code=code, role=p.SPECTATOR))
    return conn


def test_a_spectator_join_sends_a_snapshot_to_the_joiner_only() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    for conn in conns:
        shell.take(conn)
    sue = watch(shell, code, "Sue")
    own = rooms(shell, sue)
    assert len(own) == 1
    assert [(m.name, m.role) for m in own[0].members] == [("Ann", p.RACER), ("Bob", p.RACER), ("Sue", p.SPECTATOR)]
    assert own[0].spectators == 1
    assert all(rooms(shell, conn) == [] for conn in conns)  # nothing yet for the racers
    shell.advance(shell.config.spectators_interval_ms)
    for conn in conns:
        got = rooms(shell, conn)
        assert len(got) == 1
        assert got[0].spectators == 1 and [m.name for m in got[0].members] == ["Ann", "Bob"]
        assert got[0].version == own[0].version  # the same room state, now with the count


def test_the_count_reaches_the_others_once_per_tick() -> None:
    shell = Shell()
    interval = shell.config.spectators_interval_ms
    conns, code = lobby(shell, ("Ann", "Bob"))
    shell.take(conns[0])
    first = [watch(shell, code, f"S{i}") for i in range(40)]  # all at the same instant
    assert rooms(shell, conns[0]) == []
    shell.advance(interval)
    got = rooms(shell, conns[0])
    assert [r.spectators for r in got] == [40]
    small = len(p.encode(got[0]))
    # Every spectator got its own join snapshot and then one coalesced one, naming only itself.
    for i, conn in enumerate(first):
        seen = rooms(shell, conn)
        assert len(seen) == 2 and seen[-1].spectators == 40
        assert [m.name for m in seen[-1].members] == ["Ann", "Bob", f"S{i}"]
    # Joins spread over 500 ms: at most one snapshot per interval, the latest count winning.
    for i in range(50):
        watch(shell, code, f"T{i}")
        shell.advance(10)
    shell.advance(interval)
    got = rooms(shell, conns[0])
    assert 4 <= len(got) <= 500 // interval + 2
    assert got[-1].spectators == 90 and [m.name for m in got[-1].members] == ["Ann", "Bob"]
    assert [r.version for r in got] == sorted(r.version for r in got)
    # The snapshot did not grow with the audience (a digit or two of the count and version aside).
    assert len(p.encode(got[-1])) <= small + 4
    shell.advance(10 * interval)
    assert rooms(shell, conns[0]) == []  # nothing changed: no more snapshots


def test_a_racer_ready_still_goes_out_at_once_with_the_latest_count() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    shell.send(conns[1], p.Ready(ready=False))
    sue = watch(shell, code, "Sue")
    for conn in (*conns, sue):
        shell.take(conn)
    shell.send(conns[1], p.Ready(ready=True))  # no time passes
    for conn, names in ((conns[0], ["Ann", "Bob"]), (conns[1], ["Ann", "Bob"]), (sue, ["Ann", "Bob", "Sue"])):
        got = rooms(shell, conn)
        assert len(got) == 1 and got[0].spectators == 1 and [m.name for m in got[0].members] == names
        assert next(m for m in got[0].members if m.name == "Bob").ready
    shell.advance(10 * shell.config.spectators_interval_ms)
    assert rooms(shell, conns[0]) == []  # the prompt snapshot carried the count: no second one


def test_a_spectator_leaving_is_coalesced_and_its_connection_is_nobody_elses_business() -> None:
    shell = Shell()
    interval = shell.config.spectators_interval_ms
    conns, code = lobby(shell, ("Ann", "Bob"))
    sue, tom = watch(shell, code, "Sue"), watch(shell, code, "Tom")
    shell.advance(interval)
    for conn in (*conns, sue, tom):
        shell.take(conn)
    # A spectator's connection drops: its seat goes at once (it holds nothing to keep: a page never
    # resumes it), and the others learn only the count, at the next tick.
    version = record_of(shell.core, code).version
    effects = shell.run(Disconnected(sue, shell.now))
    assert any(isinstance(e, SaveRoom) and e.record.version > version for e in effects)
    assert rooms(shell, conns[0]) == [] and rooms(shell, tom) == []
    shell.advance(interval)
    assert [r.spectators for r in rooms(shell, conns[0])] == [1]
    assert [r.spectators for r in rooms(shell, tom)] == [1]
    # Tom leaves: the count drops for the others at the next tick, not at once.
    shell.send(tom, p.Leave())
    assert rooms(shell, conns[0]) == []
    shell.advance(interval)
    assert [r.spectators for r in rooms(shell, conns[0])] == [0]


def test_a_watching_host_keeps_the_room_through_a_dropped_connection() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    ann, bob = pid(shell, conns[0]), pid(shell, conns[1])
    shell.send(conns[0], p.Join(code=code, role=p.SPECTATOR))  # the host watches
    sue = watch(shell, code, "Sue")
    shell.run(Disconnected(conns[0], shell.now))
    shell.run(Disconnected(sue, shell.now))
    shell.advance(shell.config.spectators_interval_ms)
    room = rooms(shell, conns[1])[-1]
    assert room.host == ann and room.spectators == 1  # Sue went at once; the host is still seated
    shell.advance(shell.config.member_grace_ms)
    assert rooms(shell, conns[1])[-1].host == bob  # gone after the lobby's grace


def test_racers_switching_role_and_a_watching_host_go_out_at_once() -> None:
    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob", "Cy"))
    bob = pid(shell, conns[1])
    sue = watch(shell, code, "Sue")
    shell.advance(shell.config.spectators_interval_ms)
    for conn in (*conns, sue):
        shell.take(conn)
    shell.send(conns[2], p.Join(code=code, role=p.SPECTATOR))  # Cy would rather watch: a racer left
    got = rooms(shell, conns[0])
    assert len(got) == 1 and got[0].spectators == 2 and [m.name for m in got[0].members] == ["Ann", "Bob"]
    assert [m.name for m in rooms(shell, sue)[-1].members] == ["Ann", "Bob", "Sue"]
    shell.send(conns[0], p.Join(code=code, role=p.SPECTATOR))  # the host watches: still listed for all
    for conn, names in ((conns[1], ["Ann", "Bob"]), (sue, ["Ann", "Bob", "Sue"])):
        room = rooms(shell, conn)[-1]
        host = next(m for m in room.members if m.player_id == room.host)
        assert host.name == "Ann" and host.role == p.SPECTATOR and [m.name for m in room.members] == names
    shell.send(conns[0], p.Leave())  # the host goes: the new host at once, to everyone
    room = rooms(shell, sue)[-1]
    assert room.host == bob and room.spectators == 2


def test_an_old_client_reads_the_new_snapshot() -> None:
    # A client built before the count (no `spectators` field) decodes the new snapshot, ignoring it.
    class OldRoom(msgspec.Struct, tag="room", tag_field="type", kw_only=True):
        code: str
        version: int
        members: list[p.Member]

    shell = Shell()
    conns, code = lobby(shell, ("Ann", "Bob"))
    sue = watch(shell, code, "Sue")
    old = msgspec.msgpack.decode(p.encode(shell.room(sue)), type=OldRoom)
    assert old.code == code and [m.name for m in old.members] == ["Ann", "Bob", "Sue"]
    # And the new client reads a snapshot without the field as no spectators.
    raw = msgspec.msgpack.decode(p.encode(shell.room(conns[0])))
    del raw["spectators"]
    room = p.decode_server(msgspec.msgpack.encode(raw))
    assert isinstance(room, p.Room) and room.spectators == 0


async def test_a_real_server_sends_racers_the_count_not_the_crowd() -> None:
    # Real server, real WebSocket clients: 60 spectators join at once. Before, each join sent every
    # member a snapshot listing everyone (60 growing frames to each racer); now the racers get the
    # count in a few coalesced snapshots that stay small.
    async with running_server() as server:
        (ann, bob), code = await make_room(server, ["Ann", "Bob"])
        crowd = [await Client.open(server, f"S{i}") for i in range(60)]
        for i, client in enumerate(crowd):
            await client.hello(f"S{i}")
        before = len(ann.messages)
        await asyncio.gather(*(c.send(p.Join(code=code, role=p.SPECTATOR)) for c in crowd))
        for client in crowd:
            await client.expect(p.Room)
        await eventually(lambda: latest(ann, p.Room).spectators == 60, what="the count reaching the host")
        got = [m for m in ann.messages[before:] if isinstance(m, p.Room)]
        assert 1 <= len(got) < 30
        assert all([m.name for m in r.members] == ["Ann", "Bob"] for r in got)
        assert max(len(p.encode(r)) for r in got) < 1000
        for i, client in enumerate(crowd):
            assert [m.name for m in latest(client, p.Room).members] == ["Ann", "Bob", f"S{i}"]
        for client in (ann, bob, *crowd):
            await client.close()
