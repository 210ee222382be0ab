"""Load generator for plot-server, and the same load against the bare echo baseline.

Runs in its own process. ``server`` mode opens N racer connections in rooms of
``--room-size`` (the first of each room hosts), plus M spectators, races real games
(each racer plays legal moves computed from its own view, at ``--pace`` moves per
second, or as fast as acknowledgements come back with ``--pace 0``; finished rooms
rematch so the load never stops), and reports accepted moves/s, acknowledgement
latency and the leaderboard fan-out latency to spectators. ``echo`` mode sends frames of
the same size at the same pace to ``bench/echo_server.py`` and reports the same figures.

Prints one JSON object on stdout. Only loopback addresses are accepted.

    python bench/loadgen.py server --url ws://127.0.0.1:8765 --racers 100 --spectators 10 --duration 20
    python bench/loadgen.py echo --url ws://127.0.0.1:8799 --racers 100 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import ClientConnection, connect

from client.viewmodel import legal_moves
from shared import protocol as p
from shared.engine import View

LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(values: list[float]) -> dict[str, float | int | None]:
    def ms(x: float | None) -> float | None:
        return None if x is None else round(x * 1000, 3)

    return {
        "count": len(values),
        "p50": ms(percentile(values, 50)),
        "p99": ms(percentile(values, 99)),
        "p99.9": ms(percentile(values, 99.9)),
        "max": ms(max(values) if values else None),
    }


@dataclass
class Stats:
    measuring: bool = False
    acks: int = 0
    rejected: int = 0
    errors: int = 0
    error_codes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ack_latency: list[float] = field(default_factory=list)
    # (player_id, seq) -> (sent, acked): to time a move's arrival on spectators' leaderboards.
    move_times: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    fanout_from_send: list[float] = field(default_factory=list)
    fanout_from_ack: list[float] = field(default_factory=list)
    # (room, version) -> first arrival at any spectator: splits coalescing from delivery.
    first_arrival: dict[tuple[str, int], float] = field(default_factory=dict)
    delivery_spread: list[float] = field(default_factory=list)
    leaderboards: int = 0


def choose_move(view: View, rng: random.Random) -> str | None:
    """A plausible racer: foundation moves first, then building, then turning the stock."""
    moves = legal_moves(view)
    if not moves:
        return None
    to_foundation = [m for m in moves if ">f" in m]
    if to_foundation:
        return to_foundation[0]
    building = [m for m in moves if m != "stock>waste" and not m.startswith("t")]
    if building and rng.random() < 0.7:
        return rng.choice(building)
    if "stock>waste" in moves:
        return "stock>waste"
    return rng.choice(moves)


class Racer:
    def __init__(self, index: int, args: argparse.Namespace, stats: Stats, rng: random.Random) -> None:
        self.index = index
        self.args = args
        self.stats = stats
        self.rng = rng
        self.ws: ClientConnection | None = None
        self.player_id = ""
        self.room_code = ""
        self.view: View | None = None
        self.move_id = 0
        self.racing = asyncio.Event()

    async def send(self, message: p.ClientMessage) -> None:
        assert self.ws is not None
        await self.ws.send(p.encode(message))

    async def recv(self) -> p.ServerMessage:
        assert self.ws is not None
        frame = await self.ws.recv()
        assert isinstance(frame, bytes)
        return p.decode_server(frame)

    async def hello(self, name: str) -> None:
        self.ws = await connect(self.args.url, compression=None, max_size=2**20, open_timeout=30)
        await self.send(p.Hello(v=p.PROTOCOL_VERSION, name=name, bot=True))
        while True:
            msg = await self.recv()
            if isinstance(msg, p.Welcome):
                self.player_id = msg.player_id
                return
            if isinstance(msg, p.Error):
                raise RuntimeError(f"hello refused: {msg.code}: {msg.message}")


async def wait_for(racer: Racer, kind: type[Any]) -> Any:
    while True:
        msg = await racer.recv()
        if isinstance(msg, kind):
            return msg
        if isinstance(msg, p.Error):
            raise RuntimeError(f"{msg.code}: {msg.message}")


async def run_room(room_index: int, racers: list[Racer], spectators: list[Racer], args: argparse.Namespace,
                   stats: Stats, deadline_box: list[float], ready_barrier: asyncio.Event,
                   setup_slots: asyncio.Semaphore) -> None:
    async with setup_slots:  # a few rooms at a time: handshakes are not what is measured
        await set_up_room(room_index, racers, spectators)
    host = racers[0]
    code = host.room_code
    await ready_barrier.wait()
    deadline = deadline_box[0]
    tasks = [asyncio.create_task(spectate(s, code, stats, deadline)) for s in spectators]
    try:
        while time.perf_counter() < deadline:
            await race_once(host, racers, args, stats, deadline)
    finally:
        for t in tasks:
            t.cancel()
        for r in racers + spectators:
            if r.ws is not None:
                await r.ws.close()


async def set_up_room(room_index: int, racers: list[Racer], spectators: list[Racer]) -> None:
    host = racers[0]
    for r in racers:
        await r.hello(f"load-{room_index}-{r.index}")
    await host.send(p.CreateRoom(options=p.RoomOptions(max_racers=len(racers), private=True)))
    room = await wait_for(host, p.Room)
    code = room.code
    for r in racers[1:]:
        await r.send(p.Join(code=code, role=p.RACER))
        await wait_for(r, p.Room)
    for s in spectators:
        await s.hello(f"watch-{room_index}-{s.index}")
        await s.send(p.Join(code=code, role=p.SPECTATOR))
        await wait_for(s, p.Room)
    for r in racers:
        r.room_code = code


async def race_once(host: Racer, racers: list[Racer], args: argparse.Namespace, stats: Stats,
                    deadline: float) -> None:
    for r in racers:
        await r.send(p.Ready(ready=True))
    # The host starts once the server's room snapshot shows everyone ready.
    while True:
        room = await wait_for(host, p.Room)
        racing = [m for m in room.members if m.role == p.RACER]
        if len(racing) == len(racers) and all(m.ready for m in racing):
            break
    await host.send(p.Start())
    await asyncio.gather(*(play(r, args, stats, deadline) for r in racers))
    if time.perf_counter() < deadline:
        await host.send(p.Rematch())


async def play(racer: Racer, args: argparse.Namespace, stats: Stats, deadline: float) -> None:
    start = await wait_for(racer, p.RaceStart)
    racer.view = start.view
    interval = 1.0 / args.pace if args.pace > 0 else 0.0
    next_send = time.perf_counter() + racer.rng.random() * interval
    while racer.view is not None and racer.view.status == "playing":
        now = time.perf_counter()
        if now >= deadline:
            await racer.send(p.Move(id=racer.move_id + 1, move="resign"))
            racer.move_id += 1
            break
        if interval:
            if next_send > now:
                await asyncio.sleep(next_send - now)
            next_send = max(next_send + interval, time.perf_counter() - interval)
        move = choose_move(racer.view, racer.rng) or "resign"
        racer.move_id += 1
        sent = time.perf_counter()
        await racer.send(p.Move(id=racer.move_id, move=move))
        while True:
            msg = await racer.recv()
            if isinstance(msg, p.MoveOk) and msg.id == racer.move_id:
                acked = time.perf_counter()
                racer.view = msg.view
                if stats.measuring:
                    stats.acks += 1
                    stats.ack_latency.append(acked - sent)
                    stats.move_times[(racer.player_id, msg.seq)] = (sent, acked)
                break
            if isinstance(msg, p.MoveRejected) and msg.id == racer.move_id:
                stats.rejected += 1
                stats.error_codes[msg.code] += 1
                break
            if isinstance(msg, p.Error):
                stats.errors += 1
                stats.error_codes[msg.code] += 1
    # Drain until the race's results, so the next race starts cleanly.
    await wait_for(racer, p.Results)


async def spectate(spectator: Racer, code: str, stats: Stats, deadline: float) -> None:
    seen: dict[str, int] = {}
    try:
        while True:
            msg = await spectator.recv()
            if not isinstance(msg, p.Leaderboard):
                continue
            now = time.perf_counter()
            stats.leaderboards += 1
            key = (code, msg.version)
            first = stats.first_arrival.setdefault(key, now)
            if stats.measuring:
                stats.delivery_spread.append(now - first)
            for row in msg.racers:
                last = seen.get(row.player_id, 0)
                if row.moves > last:
                    seen[row.player_id] = row.moves
                    if not stats.measuring:
                        continue
                    for seq in range(last + 1, row.moves + 1):
                        times = stats.move_times.get((row.player_id, seq))
                        if times is not None:
                            stats.fanout_from_send.append(now - times[0])
                            stats.fanout_from_ack.append(now - times[1])
                elif row.moves < last:  # a new race: counts start again
                    seen[row.player_id] = row.moves
    except Exception:  # the connection closes at the end of the run
        return


async def run_server_load(args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats()
    rng = random.Random(args.seed)
    rooms: list[tuple[list[Racer], list[Racer]]] = []
    index = 0
    for room_index in range((args.racers + args.room_size - 1) // args.room_size):
        size = min(args.room_size, args.racers - room_index * args.room_size)
        members = []
        for _ in range(size):
            index += 1
            members.append(Racer(index, args, stats, random.Random(rng.random())))
        rooms.append((members, []))
    for s in range(args.spectators):
        index += 1
        rooms[s % max(1, min(args.spectator_rooms, len(rooms)))][1].append(
            Racer(index, args, stats, random.Random(rng.random()))
        )
    ready = asyncio.Event()
    setup_started = time.perf_counter()
    deadline_box = [setup_started + 3600.0]  # set for real once every room is set up
    setup_slots = asyncio.Semaphore(16)
    room_tasks = [
        asyncio.create_task(run_room(i, racers, spectators, args, stats, deadline_box, ready, setup_slots))
        for i, (racers, spectators) in enumerate(rooms)
    ]
    # Wait for every connection to be in its room, then run: warm-up, then the measured window.
    while not all(r.room_code for racers, _ in rooms for r in racers):
        await asyncio.sleep(0.05)
        failed = [t for t in room_tasks if t.done() and t.exception()]
        if failed:
            raise RuntimeError(f"room set-up failed: {failed[0].exception()!r}")
    setup_seconds = time.perf_counter() - setup_started
    started = time.perf_counter()
    deadline_box[0] = started + args.warmup + args.duration
    ready.set()
    await asyncio.sleep(args.warmup)
    stats.measuring = True
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(args.duration)
    window = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    stats.measuring = False
    for t in room_tasks:
        t.cancel()
    await asyncio.gather(*room_tasks, return_exceptions=True)
    return {
        "mode": "server",
        "racers": args.racers,
        "spectators": args.spectators,
        "room_size": args.room_size,
        "pace": args.pace,
        "setup_seconds": round(setup_seconds, 2),
        "window_seconds": round(window, 2),
        "moves_per_second": round(stats.acks / window, 1),
        "rejected": stats.rejected,
        "errors": stats.errors,
        "error_codes": dict(stats.error_codes),
        "ack_latency_ms": summary_ms(stats.ack_latency),
        "fanout_from_send_ms": summary_ms(stats.fanout_from_send),
        "fanout_from_ack_ms": summary_ms(stats.fanout_from_ack),
        "fanout_delivery_spread_ms": summary_ms(stats.delivery_spread),
        "leaderboards_received": stats.leaderboards,
        "generator_cpu_share": round(cpu / window, 3),
        "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def run_echo_load(args: argparse.Namespace) -> dict[str, Any]:
    # The same frame a racer sends: a move message.
    frame = p.encode(p.Move(id=123456, move="waste>t10"))
    latencies: list[float] = []
    counts = [0]
    measuring = [False]
    stop_at = [time.perf_counter() + 3600.0]

    async def one(i: int, rng: random.Random) -> None:
        async with connect(args.url, compression=None, max_size=2**20, open_timeout=30) as ws:
            await ready.wait()
            interval = 1.0 / args.pace if args.pace > 0 else 0.0
            next_send = time.perf_counter() + rng.random() * interval
            while time.perf_counter() < stop_at[0]:
                if interval:
                    now = time.perf_counter()
                    if next_send > now:
                        await asyncio.sleep(next_send - now)
                    next_send = max(next_send + interval, time.perf_counter() - interval)
                sent = time.perf_counter()
                await ws.send(frame)
                await ws.recv()
                if measuring[0]:
                    counts[0] += 1
                    latencies.append(time.perf_counter() - sent)

    ready = asyncio.Event()
    rng = random.Random(args.seed)
    tasks = [asyncio.create_task(one(i, random.Random(rng.random()))) for i in range(args.racers)]
    await asyncio.sleep(0.5 + args.racers / 2000)
    stop_at[0] = time.perf_counter() + args.warmup + args.duration
    ready.set()
    await asyncio.sleep(args.warmup)
    measuring[0] = True
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(args.duration)
    window = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    measuring[0] = False
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "mode": "echo",
        "racers": args.racers,
        "pace": args.pace,
        "frame_bytes": len(frame),
        "window_seconds": round(window, 2),
        "moves_per_second": round(counts[0] / window, 1),
        "ack_latency_ms": summary_ms(latencies),
        "generator_cpu_share": round(cpu / window, 3),
        "generator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Load generator for plot-server and the echo baseline.")
    parser.add_argument("mode", choices=["server", "echo"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--racers", type=int, default=100)
    parser.add_argument("--room-size", type=int, default=8)
    parser.add_argument("--pace", type=float, default=2.0, help="moves per second per racer; 0 = saturate")
    parser.add_argument("--spectators", type=int, default=0)
    parser.add_argument("--spectator-rooms", type=int, default=1, help="spread spectators over this many rooms")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    host = urlparse(args.url).hostname or ""
    if host not in LOOPBACK and not host.startswith("127."):
        parser.error("the load generator only targets loopback addresses")
    runner = run_server_load if args.mode == "server" else run_echo_load
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(runner(args))
    else:
        result = uvloop.run(runner(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

