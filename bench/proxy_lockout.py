"""One client behind HAProxy keeps the failed-join budget spent; how often does another get in?
(docs/reliability.md, "Clients behind a balancer".)

A real ``plot-server`` (embedded store, default limits: 10 failed joins a minute per address)
behind a real HAProxy with deploy/haproxy.cfg on loopback (tests/haproxy_fixture.py; both node
names are the one node). A host on 127.0.0.3 opens a room. The attacker (127.0.0.2) spends the
budget with 10 joins of rooms that do not exist, then keeps it spent with one more every 5.5 s
(``--every``).
An honest client (127.0.0.1) connects, says hello and joins the room once a second, each time
on a new connection (leaving again), and counts how many joins got in.

``--mode shipped``: deploy/haproxy.cfg as shipped (``send-proxy-v2``) and the node trusting
HAProxy (``--trusted-proxy 127.0.0.1``). ``--mode no-proxy``: the same without the PROXY
protocol (HAProxy's ``send-proxy-v2`` left out, no trust): every client is HAProxy's address,
as the compose file shipped before. ``--server-root DIR`` runs the server from another checkout.
Usage::

    python bench/proxy_lockout.py [--mode shipped|no-proxy|both] [--seconds 30] [--every 5.5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the HAProxy fixture lives with the tests' helpers

from haproxy_fixture import LocalHAProxy  # noqa: E402
from redis_fixture import free_port  # noqa: E402
from support import server_process, wait_healthy  # noqa: E402

from shared import protocol as p  # noqa: E402

ATTACKER, HONEST, HOST = "127.0.0.2", "127.0.0.1", "127.0.0.3"
BUDGET = 10  # the default --join-failures-per-minute


async def answer(ws: ClientConnection, kind: type[Any]) -> Any:
    while True:
        msg = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 10))
        if isinstance(msg, kind | p.Error):
            return msg


async def hello(url: str, name: str, source: str) -> ClientConnection:
    ws = await connect(url, compression=None, local_addr=(source, 0), open_timeout=10)
    await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=name)))
    welcome = await answer(ws, p.Welcome)
    assert isinstance(welcome, p.Welcome), welcome
    return ws


async def attacker(url: str, seconds: float, every: float, spent: asyncio.Event) -> int:
    """Failed joins sent (every one answered unknown_room or rate_limited); ``spent`` is set once
    the budget is."""
    ws = await hello(url, "Guess", ATTACKER)
    sent = 0
    end = time.monotonic() + seconds
    for _ in range(BUDGET):
        await ws.send(p.encode(p.Join(code="22222")))
        await answer(ws, p.Room)
        sent += 1
    spent.set()
    while time.monotonic() < end:
        await asyncio.sleep(every)
        await ws.send(p.encode(p.Join(code="22222")))
        await answer(ws, p.Room)
        sent += 1
    await ws.close()
    return sent


async def honest(url: str, code: str, seconds: float, started: asyncio.Event) -> dict[str, int]:
    answers: dict[str, int] = {}
    await started.wait()
    end = time.monotonic() + seconds
    tries = 0
    while time.monotonic() < end:
        tick = time.monotonic()
        tries += 1
        ws = await hello(url, f"Honest{tries}", HONEST)
        await ws.send(p.encode(p.Join(code=code)))
        reply = await answer(ws, p.Room)
        key = "joined" if isinstance(reply, p.Room) else reply.code
        answers[key] = answers.get(key, 0) + 1
        if isinstance(reply, p.Room):
            await ws.send(p.encode(p.Leave()))
            await answer(ws, p.Left)
        await ws.close()
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return answers


async def measure(mode: str, seconds: float, every: float) -> dict[str, Any]:
    shipped = mode == "shipped"
    game, web = free_port(), free_port()
    flags = ["--port", str(game), "--web-port", str(web), "--log-level", "error"]
    if shipped:
        flags += ["--trusted-proxy", "127.0.0.1"]
    with server_process(*flags) as node:
        await asyncio.to_thread(wait_healthy, node, game)
        nodes, pages = {"server-a": game, "server-b": game}, {"server-a": web, "server-b": web}
        with LocalHAProxy(nodes, pages, (free_port(), free_port()), proxy_protocol=shipped) as proxy:
            await asyncio.to_thread(proxy.wait_up)
            host = await hello(proxy.game_url, "Host", HOST)
            await host.send(p.encode(p.CreateRoom()))
            room = await answer(host, p.Room)
            spent = asyncio.Event()
            sent, answers = await asyncio.gather(
                attacker(proxy.game_url, seconds, every, spent), honest(proxy.game_url, room.code, seconds, spent)
            )
            await host.close()
    tries = sum(answers.values())
    return {
        "mode": mode,
        "seconds": seconds,
        "attacker_every_s": every,
        "attacker_failed_joins": sent,
        "honest_tries": tries,
        "honest_joined": answers.get("joined", 0),
        "honest_answers": answers,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("shipped", "no-proxy", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the attack (30)")
    parser.add_argument(
        "--every", type=float, default=5.5, help="seconds between the attacker's joins once the budget is spent "
        "(5.5: the budget refills a token every 6 s)"
    )  # fmt: skip
    parser.add_argument("--server-root", default=str(ROOT), help="the checkout whose server runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.chdir(args.server_root)  # python -m server.cli runs the server of the checkout it starts in
    modes = ["no-proxy", "shipped"] if args.mode == "both" else [args.mode]
    for mode in modes:
        result = asyncio.run(measure(mode, args.seconds, args.every))
        print(json.dumps(result) if args.json else "\n".join(f"  {k}: {v}" for k, v in result.items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
