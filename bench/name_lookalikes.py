"""How many racers showing "alice" can sit in one room? (docs/reliability.md, "Names that mislead".)

A real ``plot-server`` (embedded store) on loopback. A host named ``alice`` opens a room; one
client per name below says hello and joins it as a racer. Printed: which names were refused at
hello (``name_invalid``), which at the join (``name_taken``, or another code), and how many of
them sat in the room. ``--server-root DIR`` runs the server from another checkout (before/after).
Usage::

    python bench/name_lookalikes.py [--server-root DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from redis_fixture import free_port  # noqa: E402
from support import server_process, wait_healthy  # noqa: E402

from shared import protocol as p  # noqa: E402

NAMES = {
    "alice": "the same name",
    "Alice": "another case",
    "ａｌｉｃｅ": "full-width letters",
    "\u0430lice": "Cyrillic а",
    "al\u0131ce": "dotless ı",
    "alice\u034f": "U+034F after it",
    "alice\ufe0f": "U+FE0F after it",
    "al\u3164ice": "U+3164 inside",
    "alice\u17b4": "U+17B4 after it",
    "al\u2800ice": "U+2800 inside",
    "alice  ": "trailing spaces",
}


async def answer(ws: ClientConnection, kind: type[Any]) -> Any:
    while True:
        msg = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 10))
        if isinstance(msg, kind | p.Error):
            return msg


async def measure() -> dict[str, Any]:
    port = free_port()
    with server_process("--port", str(port), "--log-level", "error") as node:
        await asyncio.to_thread(wait_healthy, node, port)
        url = f"ws://127.0.0.1:{port}"
        clients: list[ClientConnection] = []
        host = await connect(url, compression=None)
        clients.append(host)
        await host.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="alice")))
        await answer(host, p.Welcome)
        await host.send(p.encode(p.CreateRoom()))
        code = (await answer(host, p.Room)).code
        outcome: dict[str, str] = {}
        for name, what in NAMES.items():
            ws = await connect(url, compression=None)
            clients.append(ws)
            await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=name)))
            welcome = await answer(ws, p.Welcome)
            if isinstance(welcome, p.Error):
                outcome[what] = f"hello: {welcome.code}"
                continue
            await ws.send(p.encode(p.Join(code=code)))
            joined = await answer(ws, p.Room)
            outcome[what] = "sat in the room" if isinstance(joined, p.Room) else f"join: {joined.code}"
        for ws in clients:
            await ws.close()
    seated = sum(1 for result in outcome.values() if result == "sat in the room")
    return {"alices_in_the_room": 1 + seated, "outcome": outcome}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-root", default=str(ROOT), help="the checkout whose server runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.chdir(args.server_root)  # python -m server.cli runs the server of the checkout it starts in
    result = asyncio.run(measure())
    print(json.dumps(result, ensure_ascii=False) if args.json else "\n".join(f"  {k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
