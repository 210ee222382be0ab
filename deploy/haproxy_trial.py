"""A race through HAProxy with deploy/haproxy.cfg, on this machine, without Docker.

docker-compose.yml cannot run here (no container engine), so this runs what it would: one real
Redis, two real ``plot-server --multi-node`` processes and HAProxy with deploy/haproxy.cfg, the
compose names mapped to loopback ports (tests/haproxy_fixture.py: the Docker DNS resolver left out,
checks every 500 ms). Twenty connections in no room, ten on each node; then a room's four racers
connect naming it (``?room=CODE``: the host after creating it, as ``plot host`` does) and race.
The script prints what each node's /metrics says, checks /healthz, /metrics (refused) and the
spectator page through the balancer, kills the room's node, has the racers resume through the
balancer and opens new connections. Needs the ``haproxy`` binary and redis-server (as the tests
find them).

    .venv/bin/python deploy/haproxy_trial.py

docs/deployment.md shows its output.
"""

from __future__ import annotations

import asyncio
import random
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from haproxy_fixture import LocalHAProxy, find_haproxy, idle_connections  # noqa: E402
from redis_fixture import RedisServer, free_port  # noqa: E402
from support import Client, eventually, latest, metric, metrics, play, server_process, start_race, wait_healthy  # noqa: E402

from shared import protocol as p  # noqa: E402


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def race(url: str) -> tuple[str, list[Client]]:
    """A host creates a room (its connection names none), then connects again naming it and
    resumes; three racers connect naming it; all race five moves each."""
    first = await Client.open(url, "host")
    welcome = await first.hello("host")
    await first.send(p.CreateRoom(options=p.RoomOptions()))
    code = (await first.expect(p.Room)).code
    await first.close()
    host = await Client.open(f"{url}/?room={code}", "host")
    assert (await host.hello("host", token=welcome.token)).resumed
    clients = [host]
    for name in ("ann", "bob", "cy"):
        client = await Client.open(f"{url}/?room={code}", name)
        await client.hello(name)
        await client.send(p.Join(code=code))
        await client.expect(p.Room)
        await client.send(p.Ready(ready=True))
        clients.append(client)

    def all_ready() -> bool:
        members = latest(host, p.Room).members
        return len(members) == len(clients) and all(m.ready for m in members if m.player_id != host.pid)

    await eventually(all_ready, 10, what="every racer ready, seen by the host")
    rng = random.Random(1)
    for client, start in zip(clients, await start_race(clients), strict=True):
        assert start.view is not None
        await play(client, start.view, 5, rng)
    return code, clients


def report(listeners: dict[str, int], labels: list[str]) -> None:
    for label in labels:
        samples = metrics(listeners[label])
        print(
            f"{label}: racers {metric(samples, 'plot_connections', kind='racer'):g}, "
            f"in no room {metric(samples, 'plot_connections', kind='lobby'):g}, "
            f"moves accepted {metric(samples, 'plot_moves_accepted_total'):g}, pub/sub published "
            f"{metric(samples, 'plot_pubsub_messages_total', direction='published'):g}, received "
            f"{metric(samples, 'plot_pubsub_messages_total', direction='received'):g}"
        )


async def main() -> int:
    try:
        find_haproxy()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    game = {"server-a": free_port(), "server-b": free_port()}
    web = {"server-a": free_port(), "server-b": free_port()}
    listeners = {"server-a": free_port(), "server-b": free_port()}  # each node's metrics listener
    with RedisServer() as redis:
        # HAProxy's PROXY headers (deploy/haproxy.cfg); the probes polled without a rate
        common = ["--redis", redis.url, "--multi-node", "--countdown", "0.2", "--log-level", "warning",
                  "--trusted-proxy", "127.0.0.1", "--probe-rate", "0"]  # fmt: skip

        def node(label: str) -> Any:
            ports = ("--port", str(game[label]), "--web-port", str(web[label]), "--metrics-port", str(listeners[label]))
            return server_process(*ports, *common)

        with node("server-a") as a, node("server-b") as b:
            nodes = {"server-a": a, "server-b": b}
            await asyncio.to_thread(wait_healthy, a, game["server-a"])
            await asyncio.to_thread(wait_healthy, b, game["server-b"])
            with LocalHAProxy(game, web, (free_port(), free_port())) as proxy:
                await asyncio.to_thread(proxy.wait_up)
                url = proxy.game_url
                base = f"http://127.0.0.1:{proxy.listen[0]}"
                print("GET /healthz through HAProxy:", get(f"{base}/healthz")[0])
                print("GET /metrics through HAProxy:", get(f"{base}/metrics")[0])
                print("GET / (spectator page) through HAProxy:", get(f"http://127.0.0.1:{proxy.listen[1]}/")[0])
                # Connections in no room, ten on each node: a deployment's other players. (The
                # balance factor keeps a node under 1.5x the mean, so with nothing else connected
                # a room's second connection would already spill to the other node.)
                idle = await idle_connections(url, listeners, 10)
                code, clients = await race(url)
                print(f"room {code}: a host and three racers, each connection naming the room")
                report(listeners, list(game))
                home = max(game, key=lambda label: metric(metrics(listeners[label]), "plot_connections", kind="racer"))
                other = next(label for label in game if label != home)
                nodes[home].kill()
                nodes[home].wait()
                tokens = [(client.label, client.welcome.token) for client in clients if client.welcome is not None]
                back = [await Client.open(f"{url}/?room={code}", label) for label, _token in tokens]
                for client, (label, token) in zip(back, tokens, strict=True):
                    assert (await client.hello(label, token=token)).resumed
                print(f"{home} killed; its racers reconnected at once, naming the room, and resumed")
                # New connections in no room right after the kill, before HAProxy's checks see it
                # down: round robin picks the dead node for some, and `option redispatch` retries
                # each of those on the live one.
                early = [await Client.open(url, f"early{i}") for i in range(4)]
                for i, client in enumerate(early):
                    await client.hello(f"early{i}")
                print(f"{home} killed, before its checks failed: {len(early)} new connections said hello")
                report(listeners, [other])
                for client in (*idle, *clients, *back, *early):
                    await client.close()
            for line in proxy.output.splitlines():
                if line.startswith("[") and ("is DOWN" in line or "ALERT" in line):
                    print("haproxy:", line)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
