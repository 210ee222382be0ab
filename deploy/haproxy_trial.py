"""A race through HAProxy with deploy/haproxy.cfg, on this machine, without Docker.

docker-compose.yml cannot run here (no container engine), so this runs what it would: one real
Redis, two real ``plot-server --multi-node`` processes and HAProxy with deploy/haproxy.cfg, the
compose names mapped to loopback ports (and the Docker DNS resolver left out). Four clients race
through the balancer's game port; the script prints what each node's /metrics says, checks
/healthz, /metrics (refused) and the spectator page through the balancer, then kills node B and
opens a new connection. Needs the ``haproxy`` binary and redis-server (as the tests find it).

    .venv/bin/python deploy/haproxy_trial.py

docs/scaling.md ("Deployment") shows its output.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_fixture import RedisServer, free_port  # noqa: E402
from support import Client, eventually, latest, metric, metrics, play, server_process, start_race, wait_healthy  # noqa: E402

from shared import protocol as p  # noqa: E402


def loopback_config(game: dict[str, int], web: dict[str, int], listen: tuple[int, int]) -> str:
    """deploy/haproxy.cfg with each compose name on a loopback port, checks every 500 ms."""
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    text = re.sub(r"\nresolvers docker\n(    .*\n)+", "\n", text).replace(" resolvers docker", "")
    for label, host in (("server-a", "server"), ("server-b", "server-b")):
        text = text.replace(f"server {label} {host}:8765", f"server {label} 127.0.0.1:{game[label]}")
        text = text.replace(f"server {label} {host}:8766", f"server {label} 127.0.0.1:{web[label]}")
    text = text.replace("bind :8765", f"bind 127.0.0.1:{listen[0]}")
    text = text.replace("bind :8766", f"bind 127.0.0.1:{listen[1]}")
    return text.replace("inter 5s", "inter 500ms")


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def race(url: str) -> list[Client]:
    names = ["host", "ann", "bob", "cy"]
    clients = [await Client.open(url, name) for name in names]
    for client, name in zip(clients, names, strict=True):
        await client.hello(name)
    await clients[0].send(p.CreateRoom(options=p.RoomOptions()))
    code = (await clients[0].expect(p.Room)).code
    for client in clients[1:]:
        await client.send(p.Join(code=code))
        await client.expect(p.Room)
        await client.send(p.Ready(ready=True))

    def all_ready() -> bool:
        members = latest(clients[0], p.Room).members
        return len(members) == len(names) and all(m.ready for m in members if m.player_id != clients[0].pid)

    await eventually(all_ready, 10, what="every racer ready, seen by the host")
    rng = random.Random(1)
    for client, start in zip(clients, await start_race(clients), strict=True):
        assert start.view is not None
        await play(client, start.view, 5, rng)
    return clients


async def main() -> int:
    binary = shutil.which("haproxy")
    if binary is None:
        print("haproxy is not installed", file=sys.stderr)
        return 2
    game = {"server-a": free_port(), "server-b": free_port()}
    web = {"server-a": free_port(), "server-b": free_port()}
    listen = (free_port(), free_port())
    with RedisServer() as redis, tempfile.NamedTemporaryFile("w", suffix=".cfg") as config:
        config.write(loopback_config(game, web, listen))
        config.flush()
        common = ["--redis", redis.url, "--multi-node", "--countdown", "0.2"]
        with (
            server_process("--port", str(game["server-a"]), "--web-port", str(web["server-a"]), *common) as a,
            server_process("--port", str(game["server-b"]), "--web-port", str(web["server-b"]), *common) as b,
        ):
            await asyncio.to_thread(wait_healthy, a, game["server-a"])
            await asyncio.to_thread(wait_healthy, b, game["server-b"])
            command = [binary, "-f", config.name, "-db"]
            lb = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                time.sleep(2.0)  # two passing checks (rise 2) at 500 ms
                base = f"http://127.0.0.1:{listen[0]}"
                print("GET /healthz through HAProxy:", get(f"{base}/healthz")[0])
                print("GET /metrics through HAProxy:", get(f"{base}/metrics")[0])
                print("GET / (spectator page) through HAProxy:", get(f"http://127.0.0.1:{listen[1]}/")[0])
                clients = await race(f"ws://127.0.0.1:{listen[0]}")
                for label, port in game.items():
                    samples = metrics(port)
                    print(
                        f"{label}: racers {metric(samples, 'plot_connections', kind='racer'):g}, "
                        f"moves accepted {metric(samples, 'plot_moves_accepted_total'):g}, pub/sub published "
                        f"{metric(samples, 'plot_pubsub_messages_total', direction='published'):g}, received "
                        f"{metric(samples, 'plot_pubsub_messages_total', direction='received'):g}"
                    )
                b.kill()
                b.wait()
                # Before HAProxy's checks see B down: leastconn picks B (no connections left), the
                # connection is refused, and `option redispatch` retries it on A.
                early = [await Client.open(f"ws://127.0.0.1:{listen[0]}", f"early{i}") for i in range(4)]
                for i, client in enumerate(early):
                    await client.hello(f"early{i}")
                print(f"node B killed, before its checks failed: {len(early)} new connections said hello")
                time.sleep(1.5)  # two failed checks (fall 2) at 500 ms
                late = await Client.open(f"ws://127.0.0.1:{listen[0]}", "late")
                await late.hello("late")
                held = metric(metrics(game["server-a"]), "plot_connections", kind="lobby")
                print(f"node B killed: a new connection said hello; connections in no room on node A: {held:g}")
                for client in (*clients, *early, late):
                    await client.close()
            finally:
                lb.terminate()
                out = lb.communicate(timeout=5)[0]
            for line in out.splitlines():
                if line.startswith("[") and ("is DOWN" in line or "ALERT" in line):
                    print("haproxy:", line)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
