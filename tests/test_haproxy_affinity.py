"""Room affinity through a real HAProxy with deploy/haproxy.cfg (docs/deployment.md, "Room affinity").

One real Redis, two real ``plot-server --multi-node`` nodes and HAProxy on loopback
(tests/haproxy_fixture.py maps the compose names to loopback ports). The racers, host and spectator
are this project's client connections (client/connection.py): they name their room in the URL,
and the host reconnects naming its room once it has one. Each node's /healthz says how many
connections it holds (on its metrics listener); HAProxy answers /healthz from outside itself.
HAProxy is required: where it is missing the test fails saying how to install it
(``scripts/setup.sh`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
from haproxy_fixture import LocalHAProxy, idle_connections
from redis_fixture import free_port
from support import eventually, health, server_process, wait_healthy

from client.connection import Connection
from shared import protocol as p

BACKGROUND = 20  # connections in no room, as many on each node (haproxy_fixture.idle_connections)
# label -> (plot-server process, game port, metrics listener port)
Nodes = dict[str, tuple[subprocess.Popen[str], int, int]]


def held(port: int) -> int:
    """The connections a node holds, as its detailed /healthz (on its metrics listener ``port``) says."""
    return int(health(port)[1]["connections"])


async def join(url: str, name: str, code: str, role: str = p.RACER) -> Connection:
    connection = Connection(url, name, room=code, backoff_start=0.05, backoff_max=0.5)
    await connection.start()
    reply = await connection.request(p.Join(code=code, role=role), p.Room)  # type: ignore[arg-type]
    assert isinstance(reply, p.Room) and reply.code == code, reply
    return connection


async def host(url: str, name: str) -> tuple[Connection, str]:
    """A host as plot host does it: create the room, then reconnect naming it (Connection.follow_room)."""
    connection = Connection(url, name, backoff_start=0.05, backoff_max=0.5)
    await connection.start()
    reply = await connection.request(p.CreateRoom(options=p.RoomOptions()), p.Room)
    assert isinstance(reply, p.Room), reply
    assert await connection.follow_room(reply.code), f"no resume into {reply.code}: {connection.welcome}"
    return connection, reply.code


@pytest.fixture
async def balancer(redis_url: str) -> AsyncIterator[tuple[LocalHAProxy, Nodes]]:
    """HAProxy in front of nodes A and B; yields it and {label: (process, game port, metrics port)}."""
    game = {"server-a": free_port(), "server-b": free_port()}
    web = {"server-a": free_port(), "server-b": free_port()}
    listeners = {"server-a": free_port(), "server-b": free_port()}
    common = ["--redis", redis_url, "--multi-node", "--countdown", "0.2", "--log-level", "warning",
              "--rooms-per-minute", "0", "--hellos-per-minute", "0", "--max-conns-per-address", "0",
              "--answer-bytes-per-address", "0", "--probe-rate", "0", "--trusted-proxy", "127.0.0.1"]  # fmt: skip

    def node_args(label: str) -> list[str]:
        ports = ("--port", game[label], "--web-port", web[label], "--metrics-port", listeners[label])
        return [str(arg) for arg in ports] + common

    with server_process(*node_args("server-a")) as a, server_process(*node_args("server-b")) as b:
        await asyncio.to_thread(wait_healthy, a, game["server-a"])
        await asyncio.to_thread(wait_healthy, b, game["server-b"])
        with LocalHAProxy(game, web, (free_port(), free_port())) as proxy:
            await asyncio.to_thread(proxy.wait_up)
            yield (
                proxy,
                {label: (proc, game[label], listeners[label]) for label, proc in (("server-a", a), ("server-b", b))},
            )


async def test_a_rooms_connections_land_on_one_node_and_move_together_when_it_dies(
    balancer: tuple[LocalHAProxy, Nodes],
) -> None:
    proxy, nodes = balancer
    url = proxy.game_url
    ports = {label: listener for label, (_proc, _port, listener) in nodes.items()}  # their detailed /healthz
    background = await idle_connections(url, ports, BACKGROUND // 2)  # see idle_connections
    base = {label: held(port) for label, port in ports.items()}

    def gained() -> dict[str, int]:
        return {label: held(port) - base[label] for label, port in ports.items()}

    # Room 1: the host (its first connection named no room, its second names the room), three
    # racers and a spectator, all naming the room: all on one node.
    first_host, code = await host(url, "Hana")
    members = [first_host]
    members += [await join(url, name, code) for name in ("Ann", "Bob", "Cy")]
    members.append(await join(url, "Spec", code, p.SPECTATOR))
    await eventually(
        lambda: sorted(gained().values()) == [0, 5], 10, what=f"room {code}'s five on one node: {gained()}"
    )
    home = next(label for label, count in gained().items() if count == 5)
    other = next(label for label in ports if label != home)
    # The node the host created the room on (either: its first connection went round robin) holds
    # it no more once it has read the host's resume on the room's node back.
    await eventually(lambda: int(health(ports[other])[1]["rooms"]) == 0, 10, what=f"{other} released the room")
    assert int(health(ports[home])[1]["rooms"]) == 1

    # Another room may hash to the other node: hosts open rooms until one does (each code a new
    # hash; twenty all on one node would be a 1-in-a-million chance), and its racer follows it.
    for attempt in range(20):
        before = gained()
        second_host, second = await host(url, f"Host{attempt}")
        await eventually(lambda: sum(gained().values()) == sum(before.values()) + 1, 10, what="the host settled")  # noqa: B023
        if gained()[other] == before[other] + 1:
            break
        await second_host.close()  # its room hashed to room 1's node: only room 1 is to be there
        await eventually(lambda: gained() == before, 10, what="the host gone")  # noqa: B023
    else:
        raise AssertionError(f"twenty rooms all hashed to {home}")
    before = gained()
    others = [second_host, await join(url, "Dee", second)]
    await eventually(lambda: gained()[other] == before[other] + 1, 10, what=f"room {second}'s racer on {other}")

    # Room 1 races: everyone ready, the host starts, every racer gets the board and plays a move.
    for member in members[:4]:
        assert await member.send(p.Ready(ready=True))
    starts = [asyncio.ensure_future(m.wait_for(lambda msg: isinstance(msg, p.RaceStart), 10)) for m in members[:4]]

    async def start_when_ready() -> None:
        for _ in range(100):
            reply = await first_host.request(p.Start(), p.Countdown, timeout=2)
            if isinstance(reply, p.Countdown):
                return
            await asyncio.sleep(0.05)  # not every ready was handled yet
        raise AssertionError("the race never started")

    await start_when_ready()
    await asyncio.gather(*starts)
    for member in members[:4]:
        assert isinstance(await member.move("stock>waste"), p.MoveOk)

    # Room 1's node dies: its members reconnect (naming the room) and land together on the other.
    process, _port, _listener = nodes[home]
    process.send_signal(signal.SIGKILL)
    process.wait()
    survivors = held(ports[other])
    await eventually(lambda: held(ports[other]) == survivors + 5, 20, what="room 1's five on the surviving node")
    for member in members:
        await eventually(lambda: member.connected, 10, what=f"{member.name} reconnected")  # noqa: B023
        assert member.welcome is not None and member.welcome.resumed and member.welcome.room == code
    for member in members[:4]:  # and the race goes on there
        assert isinstance(await member.move("stock>waste"), p.MoveOk)
    for connection in (*members, *others):
        await connection.close()
    for client in background:
        with contextlib.suppress(Exception):
            await client.close()


def proxy_get(proxy: LocalHAProxy, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proxy.listen[0]}{path}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def test_healthz_from_outside_is_haproxy_s_own_answer_and_never_reaches_a_node(
    balancer: tuple[LocalHAProxy, Nodes],
) -> None:
    """Outsiders' /healthz never spends a node's probe budget (HAProxy's own checks draw on it,
    from HAProxy's address) nor its Redis: HAProxy answers it, 200 while a node is up, 503 once none is."""
    proxy, nodes = balancer
    status, body = await asyncio.to_thread(proxy_get, proxy, "/healthz")
    assert status == 200 and b"Service ready" in body  # HAProxy's monitor page, not a node's JSON
    assert (await asyncio.to_thread(proxy_get, proxy, "/metrics"))[0] == 404
    for process, _port, _listener in nodes.values():
        process.send_signal(signal.SIGKILL)
        process.wait()

    async def none_up() -> bool:
        return (await asyncio.to_thread(proxy_get, proxy, "/healthz"))[0] == 503

    await eventually(none_up, 15, what="HAProxy's /healthz failing with no node up")
