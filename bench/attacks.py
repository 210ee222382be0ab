"""Attacks on a real plot-server on loopback, and what they cost it (docs/reliability.md, Limits).

Each attack starts its own ``plot-server`` process (embedded store, default limits unless said),
attacks it from one loopback address (127.0.0.2; Linux routes all of 127/8) and measures, from
an honest client on 127.0.0.1 where it applies:

- ``ping``: WebSocket pings as fast as the socket takes them, from clients that never read
  (a small receive buffer): the server's RSS, its peak over the run;
- ``conns``: 2,000 connections that never say hello: how the honest client fares (HTTP status)
  and its time from connecting to ``race_start`` (hello, create a room, start);
- ``rooms``: throwaway identities creating rooms as fast as they can: rooms made, and whether
  the honest client can still create one;
- ``guess``: joins of random room codes over many connections: wrong guesses answered per
  second (the private-code search rate);
- ``amplify``: a room of 16 racers with live boards; spectators joining and leaving it (and
  racers asking ``sync``) as fast as the message rate lets them, over 40 connections: the bytes
  the server sent them in the flood, and the ack latency of an honest racer moving meanwhile
  (against the same racer's without the flood);
- ``web``: idle connections to the spectator page's port that never send a request, each
  reopened as soon as the server closes it, from one address and from 20: how many of an
  honest client's ``GET /`` (one a second) are served, and how fast.

``--server-root DIR`` runs the server from another checkout (for a before/after comparison, run
once against a checkout of the commit before the limits). Usage::

    python bench/attacks.py [--only ping,conns,rooms,guess,amplify,web] [--seconds 20] [--server-root DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the hand-made upgrade lives with the tests' helpers

from support import raw_upgrade, server_environment, stop_processes, toggling_moves  # noqa: E402

from server.testing.shell import DEAL  # noqa: E402
from shared import protocol as p  # noqa: E402

ATTACKER = "127.0.0.2"
HONEST = "127.0.0.1"


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def plot_server(root: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = server_environment(PYTHONPATH=str(root))
    cmd = [sys.executable, "-m", "server.cli", "--port", str(port), "--log-level", "error", "--countdown", "0.1"]
    proc = subprocess.Popen(
        [*cmd, *flags], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=raise_fd_limit,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("plot-server did not start") from None
                time.sleep(0.05)
        yield proc, port
    finally:
        stop_processes(proc)


def ping_frame(payload: bytes) -> bytes:
    mask = os.urandom(4)
    return bytes([0x89, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@asynccontextmanager
async def client(port: int, source: str = HONEST) -> AsyncIterator[ClientConnection]:
    async with connect(f"ws://127.0.0.1:{port}", compression=None, local_addr=(source, 0), open_timeout=10) as ws:
        yield ws


async def expect(ws: ClientConnection, kind: type[Any], timeout: float = 10.0) -> Any:
    async def wait() -> Any:
        while True:
            msg = p.decode_server(await ws.recv(decode=False))
            if isinstance(msg, (kind, p.Error)):
                return msg

    return await asyncio.wait_for(wait(), timeout)


async def honest_race(port: int, timeout: float = 30.0) -> dict[str, Any]:
    """An honest client's time from its first connection attempt to race_start (retrying a refusal)."""
    started = time.monotonic()
    refusals: dict[str, int] = {}
    while time.monotonic() - started < timeout:
        try:
            async with client(port) as ws:
                await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Honest")))
                welcome = await expect(ws, p.Welcome)
                if isinstance(welcome, p.Error):
                    return {"ok": False, "error": welcome.code}
                await ws.send(p.encode(p.CreateRoom()))
                room = await expect(ws, p.Room)
                if isinstance(room, p.Error):
                    return {"ok": False, "error": room.code, "seconds": round(time.monotonic() - started, 3)}
                await ws.send(p.encode(p.Start()))
                start = await expect(ws, p.RaceStart)
                if isinstance(start, p.Error):
                    return {"ok": False, "error": start.code}
                return {"ok": True, "seconds": round(time.monotonic() - started, 3), "refusals": refusals}
        except InvalidStatus as exc:
            key = f"HTTP {exc.response.status_code}"
            refusals[key] = refusals.get(key, 0) + 1
            await asyncio.sleep(0.2)
        except (OSError, TimeoutError, ConnectionClosed) as exc:
            key = type(exc).__name__
            refusals[key] = refusals.get(key, 0) + 1
            await asyncio.sleep(0.2)
    return {"ok": False, "seconds": timeout, "refusals": refusals}


# ---------------------------------------------------------------- the attacks


async def attack_ping(root: Path, seconds: float, flooders: int) -> dict[str, Any]:
    with plot_server(root) as (proc, port):
        before = rss_mib(proc.pid)
        peak = before
        closed = 0
        sent = 0

        async def flood() -> None:
            nonlocal closed, sent
            try:
                _reader, writer = await raw_upgrade(port, ATTACKER, rcvbuf=4096, timeout=10)
            except (OSError, ConnectionError):
                closed += 1
                return
            frame = ping_frame(b"x" * 125)
            end = time.monotonic() + seconds
            try:
                while time.monotonic() < end:
                    writer.write(frame * 64)
                    await writer.drain()
                    sent += 64
            except (ConnectionError, OSError):
                closed += 1
            finally:
                writer.transport.abort()

        tasks = [asyncio.ensure_future(flood()) for _ in range(flooders)]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, rss_mib(proc.pid))
            await asyncio.sleep(0.25)
        await asyncio.gather(*tasks)
        peak = max(peak, rss_mib(proc.pid))
        return {
            "attack": f"ping flood, {flooders} connection(s) that never read, {seconds:g} s",
            "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(peak, 1),
            "pings_sent": sent,
            "flooders_cut": closed,
        }


async def attack_conns(root: Path, count: int, addresses: int = 1) -> dict[str, Any]:
    """``count`` connections that never say hello, from ``addresses`` loopback addresses."""
    sources = [ATTACKER] if addresses == 1 else [f"127.0.1.{i + 1}" for i in range(addresses)]
    with plot_server(root) as (_proc, port):
        held: list[asyncio.StreamWriter] = []
        refused: dict[str, int] = {}

        async def one(n: int) -> None:
            try:
                _reader, writer = await raw_upgrade(port, sources[n % len(sources)], timeout=10)
                held.append(writer)
            except ConnectionError as exc:
                refused[str(exc)] = refused.get(str(exc), 0) + 1
            except OSError as exc:
                refused[type(exc).__name__] = refused.get(type(exc).__name__, 0) + 1

        started = time.monotonic()
        for i in range(0, count, 200):
            await asyncio.gather(*(one(i + j) for j in range(min(200, count - i))))
        opened = time.monotonic() - started
        race = await honest_race(port)
        for writer in held:
            writer.transport.abort()
        return {
            "attack": f"{count} connections that never say hello, from {addresses} address(es)",
            "attacker_accepted": len(held),
            "attacker_refused": refused,
            "open_seconds": round(opened, 2),
            "honest_time_to_race_s": race.get("seconds"),
            "honest": race,
        }


async def attack_rooms(root: Path, seconds: float, target: int) -> dict[str, Any]:
    with plot_server(root) as (_proc, port):
        created = 0
        refused: dict[str, int] = {}

        async def identity() -> None:
            nonlocal created
            try:
                async with client(port, ATTACKER) as ws:
                    await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Spam")))
                    welcome = await expect(ws, p.Welcome)
                    if isinstance(welcome, p.Error):
                        refused[welcome.code] = refused.get(welcome.code, 0) + 1
                        return
                    await ws.send(p.encode(p.CreateRoom(options=p.RoomOptions(private=True))))
                    room = await expect(ws, p.Room)
                    if isinstance(room, p.Error):
                        refused[room.code] = refused.get(room.code, 0) + 1
                    else:
                        created += 1
            except InvalidStatus as exc:
                key = f"HTTP {exc.response.status_code}"
                refused[key] = refused.get(key, 0) + 1
            except (OSError, TimeoutError, ConnectionClosed) as exc:
                refused[type(exc).__name__] = refused.get(type(exc).__name__, 0) + 1

        started = time.monotonic()
        while time.monotonic() - started < seconds and created < target:
            await asyncio.gather(*(identity() for _ in range(50)))
        took = time.monotonic() - started
        race = await honest_race(port, timeout=10)
        return {
            "attack": f"room flood from throwaway identities (up to {target} rooms or {seconds:g} s)",
            "rooms_created": created,
            "seconds": round(took, 2),
            "attacker_refused": refused,
            "honest": race,
        }


async def attack_guess(root: Path, seconds: float, conns: int) -> dict[str, Any]:
    with plot_server(root) as (_proc, port):
        answers: dict[str, int] = {}
        rng = random.Random(7)

        async def guesser() -> None:
            """Paced under the per-connection message rate (25 a second), reconnecting if cut."""
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    async with client(port, ATTACKER) as ws:
                        await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Guess")))
                        if isinstance(await expect(ws, p.Welcome), p.Error):
                            answers["hello refused"] = answers.get("hello refused", 0) + 1
                            await asyncio.sleep(1.0)
                            continue
                        while time.monotonic() < end:
                            sent = time.monotonic()
                            code = "".join(rng.choice(p.ROOM_CODE_ALPHABET) for _ in range(p.ROOM_CODE_LENGTH))
                            await ws.send(p.encode(p.Join(code=code)))
                            answer = await expect(ws, p.Room)
                            key = answer.code if isinstance(answer, p.Error) else "joined"
                            answers[key] = answers.get(key, 0) + 1
                            await asyncio.sleep(max(0.0, 0.04 - (time.monotonic() - sent)))
                except InvalidStatus as exc:
                    key = f"HTTP {exc.response.status_code}"
                    answers[key] = answers.get(key, 0) + 1
                    await asyncio.sleep(1.0)
                except (OSError, TimeoutError, ConnectionClosed) as exc:
                    answers[type(exc).__name__] = answers.get(type(exc).__name__, 0) + 1
                    await asyncio.sleep(0.1)

        started = time.monotonic()
        await asyncio.gather(*(guesser() for _ in range(conns)))
        took = time.monotonic() - started
        wrong = answers.get(p.UNKNOWN_ROOM, 0)
        return {
            "attack": f"guessing room codes over {conns} connections, {seconds:g} s",
            "wrong_guesses": wrong,
            "guesses_per_s": round(wrong / took, 1),
            "answers": answers,
        }


async def honest_get(web_port: int, timeout: float = 5.0) -> tuple[int | None, float]:
    """One ``GET /`` from the honest address: its status (None: no answer) and how long it took."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", web_port, local_addr=(HONEST, 0))
            try:
                writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{web_port}\r\n\r\n".encode())
                answer = await reader.read()
            finally:
                writer.close()
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None
    except (OSError, TimeoutError, ValueError, IndexError):
        status = None
    return status, time.monotonic() - started


async def attack_web(root: Path, seconds: float, sockets: int, addresses: int) -> dict[str, Any]:
    """``sockets`` idle connections to the page's port from ``addresses`` loopback addresses,
    each reopened as soon as it is closed, while an honest client asks for the page each second."""
    sources = [ATTACKER] if addresses == 1 else [f"127.0.2.{i + 1}" for i in range(addresses)]
    web_port = free_port()
    with plot_server(root, "--web-port", str(web_port)) as (_proc, _port):
        opened = 0
        stop = asyncio.Event()

        async def hold(n: int) -> None:
            nonlocal opened
            while not stop.is_set():
                try:
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", web_port, local_addr=(sources[n % len(sources)], 0)
                    )
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                opened += 1
                try:
                    stop_wait = asyncio.ensure_future(stop.wait())
                    read = asyncio.ensure_future(reader.read())
                    await asyncio.wait([stop_wait, read], return_when=asyncio.FIRST_COMPLETED)
                    stop_wait.cancel()
                    read.cancel()
                except (OSError, ConnectionError):
                    pass
                finally:
                    writer.transport.abort()

        holders = [asyncio.ensure_future(hold(n)) for n in range(sockets)]
        await asyncio.sleep(2.0)  # the flood is up
        served: list[float] = []
        answers: dict[str, int] = {}
        started = time.monotonic()
        asked = 0
        while time.monotonic() - started < seconds:
            began = time.monotonic()
            status, took = await honest_get(web_port)
            asked += 1
            answers[str(status)] = answers.get(str(status), 0) + 1
            if status == 200:
                served.append(took)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
        flood_s = time.monotonic() - started + 2.0
        stop.set()
        await asyncio.gather(*holders)
        served.sort()
        return {
            "attack": f"{sockets} idle page connections from {addresses} address(es), reopened when closed",
            "honest_gets": asked,
            "honest_served": len(served),
            "honest_answers": answers,
            "honest_median_ms": round(served[len(served) // 2] * 1000, 1) if served else None,
            "honest_max_ms": round(served[-1] * 1000, 1) if served else None,
            "attacker_connections_per_s": round(opened / flood_s, 1),
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


async def toggle_acks(
    ws: ClientConnection, home: str, seconds: float, first_id: int, base_id: int
) -> tuple[list[float], int]:
    """A racer sending a card home and taking it back, one move at a time and 25 a second (under
    the message rate), for ``seconds``: each move's time to its answer, and the next move id.
    Move ``base_id`` sent the card home, the next took it back, and so on."""
    acks: list[float] = []
    move_id = first_id
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sent = time.monotonic()
        await ws.send(p.encode(p.Move(id=move_id, move=home if (move_id - base_id) % 2 == 0 else "undo")))
        answer = await expect(ws, p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
        if isinstance(answer, p.MoveOk):
            acks.append(time.monotonic() - sent)
        move_id += 1
        await asyncio.sleep(max(0.0, 0.04 - (time.monotonic() - sent)))
    return acks, move_id


async def spectators_joining(port: int, code: str, conns: int, seconds: float) -> dict[str, Any]:
    """``conns`` spectators from the attacker's address, each sending join and leave in turn, 24
    messages a second, for ``seconds``; what they sent and received after the first second."""
    counts: dict[str, Any] = {"bytes": 0, "sent": 0, "errors": {}}
    counting = asyncio.Event()
    stop = asyncio.Event()

    async def spectator(n: int) -> None:
        errors = counts["errors"]
        try:
            async with client(port, ATTACKER) as ws:
                await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=f"Watcher{n}")))
                await expect(ws, p.Welcome)

                async def read() -> None:
                    async for frame in ws:
                        assert isinstance(frame, bytes)
                        if counting.is_set():
                            counts["bytes"] += len(frame)
                        msg = p.decode_server(frame)
                        if isinstance(msg, p.Error):
                            errors[msg.code] = errors.get(msg.code, 0) + 1

                reader = asyncio.ensure_future(read())
                requests = [p.encode(p.Join(code=code, role=p.SPECTATOR)), p.encode(p.Leave())]
                i = 0
                while not stop.is_set():
                    await ws.send(requests[i % 2])
                    if counting.is_set():
                        counts["sent"] += len(requests[i % 2])
                    i += 1
                    await asyncio.sleep(1 / 24)
                reader.cancel()
        except (OSError, ConnectionClosed, InvalidStatus, TimeoutError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    flood = [asyncio.ensure_future(spectator(n)) for n in range(conns)]
    await asyncio.sleep(1.0)
    counting.set()
    await asyncio.sleep(seconds - 1.0)
    counting.clear()
    stop.set()
    await asyncio.gather(*flood)
    return counts


def spectator_flood(port: int, code: str, conns: int, seconds: float, results: multiprocessing.Queue[Any]) -> None:
    """``spectators_joining`` in a process of its own; its counts go to ``results``."""
    results.put(asyncio.run(spectators_joining(port, code, conns, seconds)))


async def sync_loop(ws: ClientConnection, seconds: float) -> dict[str, Any]:
    """One racer asking ``sync`` 24 times a second for ``seconds``: the bytes it sent and got."""
    counts: dict[str, Any] = {"bytes_in": 0, "bytes_out": 0, "errors": {}}

    async def read() -> None:
        async for frame in ws:
            assert isinstance(frame, bytes)
            counts["bytes_out"] += len(frame)
            msg = p.decode_server(frame)
            if isinstance(msg, p.Error):
                counts["errors"][msg.code] = counts["errors"].get(msg.code, 0) + 1

    reader = asyncio.ensure_future(read())
    request = p.encode(p.Sync())
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await ws.send(request)
        counts["bytes_in"] += len(request)
        await asyncio.sleep(1 / 24)
    await asyncio.sleep(0.2)
    reader.cancel()
    return counts


async def attack_amplify(root: Path, seconds: float, conns: int, *flags: str) -> dict[str, Any]:
    """16 racers (one of them the honest racer timed), live boards; ``conns`` spectators from the
    attacker's address joining and leaving at 24 messages a second each."""
    with plot_server(root, *flags) as (_proc, port):
        async with contextlib.AsyncExitStack() as stack:
            racers = [await stack.enter_async_context(client(port)) for _ in range(16)]
            for n, ws in enumerate(racers):
                await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name=f"Racer{n}")))
                await expect(ws, p.Welcome)
            options = p.RoomOptions(deal=DEAL, max_racers=16, spectator_boards=0)
            await racers[0].send(p.encode(p.CreateRoom(options=options)))
            code = (await expect(racers[0], p.Room)).code
            for ws in racers[1:]:
                await ws.send(p.encode(p.Join(code=code)))
                await expect(ws, p.Room)
                await ws.send(p.encode(p.Ready()))
            await asyncio.sleep(0.5)
            await racers[0].send(p.encode(p.Start()))
            for ws in racers:
                await expect(ws, p.RaceStart)
            opening, home = toggling_moves()
            for ws in racers:  # every board live: each racer turns its stock to a card it can send home
                for move_id, move in enumerate(opening, start=1):
                    await ws.send(p.encode(p.Move(id=move_id, move=move)))
                    await expect(ws, p.MoveOk)

            async def drain(ws: ClientConnection) -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for _ in ws:
                        pass

            drains = [asyncio.ensure_future(drain(ws)) for ws in racers[1:]]
            timed = racers[0]
            base = len(opening) + 1
            quiet, next_id = await toggle_acks(timed, home, seconds, base, base)

            # The flood runs in its own process: its clients' CPU is not the timed racer's loop's.
            results: multiprocessing.Queue[dict[str, Any]] = multiprocessing.get_context("spawn").Queue()
            flood = multiprocessing.get_context("spawn").Process(
                target=spectator_flood, args=(port, code, conns, seconds + 1.0, results)
            )
            flood.start()
            await asyncio.sleep(1.0)  # the flood is up (its bytes are counted from here)
            loud, _ = await toggle_acks(timed, home, seconds, next_id, base)
            counts = await asyncio.to_thread(results.get, True, 60)
            await asyncio.to_thread(flood.join, 10)
            into, out, errors = counts["sent"], counts["bytes"], counts["errors"]
            for task in drains:
                task.cancel()
            sync = await sync_loop(racers[1], seconds)
            return {
                "attack": f"{conns} spectators joining and leaving a room of 16 racers with live boards, {seconds:g} s",
                "bytes_in": into,
                "bytes_out": out,
                "out_per_in": round(out / into, 1) if into else None,
                "attacker_errors": errors,
                "honest_ack_ms_quiet": {"p50": percentile(quiet, 0.5), "p99": percentile(quiet, 0.99), "n": len(quiet)},
                "honest_ack_ms_flood": {"p50": percentile(loud, 0.5), "p99": percentile(loud, 0.99), "n": len(loud)},
                "sync_loop": sync,
            }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    root = Path(args.server_root).resolve()
    only = set(args.only.split(","))
    results: list[dict[str, Any]] = []
    if "ping" in only:
        results.append(await attack_ping(root, args.seconds, 1))
        results.append(await attack_ping(root, args.seconds, 3))
    if "conns" in only:
        results.append(await attack_conns(root, args.conns))
        results.append(await attack_conns(root, args.conns, addresses=40))
    if "rooms" in only:
        results.append(await attack_rooms(root, args.seconds, 1000))
    if "guess" in only:
        results.append(await attack_guess(root, min(args.seconds, 10.0), 100))
    if "amplify" in only:
        results.append(await attack_amplify(root, min(args.seconds, 10.0), 40, *args.server_flags.split()))
    if "web" in only:
        results.append(await attack_web(root, args.seconds, 300, 1))
        results.append(await attack_web(root, args.seconds, 300, 20))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="ping,conns,rooms,guess,amplify,web")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each flood (20)")
    parser.add_argument("--conns", type=int, default=2000, help="connections of the connection flood (2000)")
    parser.add_argument("--server-root", default=str(ROOT), help="the checkout whose server is attacked")
    parser.add_argument("--server-flags", default="", help="more plot-server flags (amplify only), e.g. a limit's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    raise_fd_limit()
    results = asyncio.run(run(args))
    for result in results:
        print(json.dumps(result) if args.json else "\n".join(f"  {k}: {v}" for k, v in result.items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
