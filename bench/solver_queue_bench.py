"""An honest winnable-only room's time to start while other rooms spam start/end.

    .venv/bin/python bench/solver_queue_bench.py [--spammers 16] [--spam-seconds 15] [--json FILE]

Runs the real server in this process (memory store, default limits: 30 messages/s per
connection, the default winnable-deal settings), with real WebSocket clients on 127.0.0.1:

1. quiet: the honest room (one racer, its host) starts with nothing else going on; its time to
   start is from sending ``start`` to receiving ``countdown`` (the deal found), the worker
   process already up (a first start warms it). Then it ends the countdown.
2. spam: ``--spammers`` other winnable-only rooms each send start, end, start, end ... at just
   under the rate limit (28 messages/s). After ``--spam-seconds`` the honest room starts again,
   the spam going on, and its time to start is measured the same way.

It uses only what every version of the server has (``RaceServer``, ``ServerConfig``, the
protocol), so the same script measures the code before the solver queue: run it with
``PYTHONPATH`` pointing at a checkout of the old commit (docs/solver.md, "The solver queue").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine_info import cpu_name
from websockets.asyncio.client import ClientConnection, connect

import server.shell as server_module
from server.shell import RaceServer, ServerConfig
from server.store.memory import MemoryStore
from shared import protocol as p

SPAM_RATE = 28.0  # messages per second per spamming connection: just under the server's default 30


class BenchClient:
    """One connection: frames in are decoded into a queue; the spammers' are only drained."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.inbox: asyncio.Queue[p.ServerMessage] = asyncio.Queue()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for frame in self.ws:
                assert isinstance(frame, bytes)
                await self.inbox.put(p.decode_server(frame))

    async def send(self, msg: p.ClientMessage) -> None:
        await self.ws.send(p.encode(msg))

    async def expect(self, kind: type[Any], timeout: float = 600.0) -> Any:
        async def wait() -> Any:
            while True:
                msg = await self.inbox.get()
                if isinstance(msg, kind):
                    return msg

        return await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


async def host_room(address: str, name: str) -> BenchClient:
    client = BenchClient(await connect(address, compression=None))
    await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=name))
    await client.expect(p.Welcome)
    await client.send(p.CreateRoom(options=p.RoomOptions(winnable_only=True)))
    await client.expect(p.Room)
    return client


async def time_to_start(host: BenchClient) -> float:
    """Seconds from ``start`` to the countdown, then back to the lobby."""
    started = time.monotonic()
    await host.send(p.Start())
    await host.expect(p.Countdown)
    seconds = time.monotonic() - started
    await host.send(p.EndRace())
    while (await host.expect(p.Room)).phase != p.LOBBY:
        pass
    return seconds


async def spam(host: BenchClient, stop: asyncio.Event, counter: list[int]) -> None:
    pause = 1.0 / SPAM_RATE
    while not stop.is_set():
        await host.send(p.Start())
        counter[0] += 1
        await asyncio.sleep(pause)
        await host.send(p.EndRace())
        await asyncio.sleep(pause)
    while not host.inbox.empty():
        host.inbox.get_nowait()


async def run(spammers: int, spam_seconds: float) -> dict[str, object]:
    server = RaceServer(MemoryStore(), ServerConfig(host="127.0.0.1", port=0))
    await server.start()
    address = f"ws://127.0.0.1:{server.port}"
    try:
        honest = await host_room(address, "Honest")
        warm = await time_to_start(honest)  # starts the worker process
        quiet = await time_to_start(honest)
        rooms = [await host_room(address, f"Spam{i}") for i in range(spammers)]
        stop = asyncio.Event()
        counters = [[0] for _ in rooms]
        tasks = [asyncio.ensure_future(spam(room, stop, c)) for room, c in zip(rooms, counters, strict=True)]
        await asyncio.sleep(spam_seconds)
        starts_before = sum(c[0] for c in counters)
        under_spam = await time_to_start(honest)
        stop.set()
        await asyncio.gather(*tasks)
        finder = server.deal_finder
        result: dict[str, object] = {
            "spammers": spammers,
            "spam_seconds": spam_seconds,
            "spam_starts_before_honest_start": starts_before,
            "spam_starts_total": sum(c[0] for c in counters),
            "first_start_s": round(warm, 3),
            "quiet_start_s": round(quiet, 3),
            "start_under_spam_s": round(under_spam, 3),
            "searches_asked": finder.searches,
            "searches_run": getattr(finder, "searches_run", None),  # None: the code before the solver queue
            "searches_dropped": getattr(finder, "searches_dropped", None),
            "searches_refused": getattr(finder, "searches_refused", None),
            "server_code": str(Path(server_module.__file__ or "").resolve().parent.parent.parent),
            "cpu": cpu_name(),
            "python": platform.python_version(),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        }
        for client in (honest, *rooms):
            await client.close()
        return result
    finally:
        await server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spammers", type=int, default=16, help="rooms spamming start/end (default 16)")
    parser.add_argument("--spam-seconds", type=float, default=15.0, help="spam before the honest start (default 15)")
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    args = parser.parse_args()
    result = asyncio.run(run(args.spammers, args.spam_seconds))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
