"""Pollers hammering a node's /healthz or /metrics from one address: what it costs the node.

    .venv/bin/python bench/probe_flood.py --path /metrics [--pollers 50] [--duration 5]
    .venv/bin/python bench/probe_flood.py --path /healthz --tree before=/path/to/older/checkout

Starts a redis-server (tests/redis_fixture.py, no disk) and one ``plot-server --redis`` of this
tree (or of ``--tree NAME=PATH``, an older checkout run the same way), then ``--pollers``
connections from 127.0.0.1, each sending GET PATH, reading the answer to its end (the server
closes), and sending the next at once, for ``--duration`` seconds after a one-second warm-up.
PATH goes to the game port; ``--listener`` sends it to the metrics listener instead (this tree
only: ``--metrics-port``). Meanwhile one racer of a two-racer room plays a move, waits for its
``move_ok``, plays the next (a move and its undo, in turn). Reports requests answered per second
by status, bytes per second out, the server's CPU share (user + system over the window, from
/proc), Redis PINGs per second (INFO commandstats) and the racer's acknowledgement times (p50,
p99). ``--pollers 0``: the racer alone. The pollers run in a process of their own, so that
their work does not delay the racer's reads. One JSON object per run, also written to
bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_fixture import RedisServer, free_port  # noqa: E402  (test helpers, found through the path above)
from support import make_room, server_environment, start_race, stop_processes, view_game, wait_healthy  # noqa: E402

from shared import protocol as p  # noqa: E402
from shared.engine import UNDO  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def ping_calls(redis: RedisServer) -> int:
    stats = redis.command("INFO", "commandstats")
    assert isinstance(stats, bytes)
    line = next((row for row in stats.decode().splitlines() if row.startswith("cmdstat_ping:")), "calls=0,")
    return int(line.split("calls=", 1)[1].split(",", 1)[0])


async def poller(port: int, path: str, until: float, counts: dict[str, int]) -> None:
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            answer = await reader.read()  # to EOF: the server closes after its answer
            writer.close()
        except OSError:
            counts["error"] = counts.get("error", 0) + 1
            continue
        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1 ") else "none"
        counts[status] = counts.get(status, 0) + 1
        counts["bytes"] = counts.get("bytes", 0) + len(answer)


async def flood(port: int, path: str, pollers: int, seconds: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    until = time.monotonic() + seconds
    await asyncio.gather(*(poller(port, path, until, counts) for _ in range(pollers)))
    return counts


async def racer_acks(url: str, seconds: float) -> list[float]:
    """One racer moving (a move, then its undo) for ``seconds``: each move's time to its move_ok, in ms."""
    (ann, bob), _code = await make_room(url, ["Ann", "Bob"])
    view = (await start_race([ann, bob]))[0].view
    assert view is not None
    rng, times, move_id, undo_next = random.Random(1), [], 1, False
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        legal = [move for move in view_game(view).legal_moves() if move != UNDO]
        plain = [move for move in legal if not move.startswith(("stock>", "reserve>"))]
        move = UNDO if undo_next else rng.choice(plain or legal)
        sent = time.perf_counter()
        await ann.send(p.Move(id=move_id, move=move))
        reply = await ann.expect(p.MoveOk)
        times.append((time.perf_counter() - sent) * 1000)
        assert reply.view is not None
        view, move_id, undo_next = reply.view, move_id + 1, move != UNDO and not move.startswith(("stock>", "reserve>"))
    await ann.close()
    await bob.close()
    return times


def main() -> None:
    if sys.argv[1:2] == ["--flood-only"]:  # the pollers' own process: port, path, pollers, seconds
        where, path, count, seconds = sys.argv[2:6]
        print(json.dumps(asyncio.run(flood(int(where), path, int(count), float(seconds)))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", choices=["/healthz", "/metrics"], required=True)
    parser.add_argument("--pollers", type=int, default=50)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--listener", action="store_true", help="poll the metrics listener, not the game port")
    parser.add_argument("--tree", default="", metavar="NAME=PATH", help="run an older checkout's server")
    opts = parser.parse_args()
    name, _, where = opts.tree.partition("=")
    root = Path(where).resolve() if opts.tree else ROOT
    port, listener = free_port(), free_port()
    with RedisServer() as redis:
        env = server_environment(PYTHONPATH=str(root), PLOT_METRICS_PORT=str(listener))
        command = [sys.executable, "-m", "server.cli", "--port", str(port), "--redis", redis.url]
        command += ["--log-level", "error", "--countdown", "0.1", "--rate", "1000"]  # the racer moves at will
        proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(proc, port)  # type: ignore[arg-type]
            target = listener if opts.listener else port
            asyncio.run(flood(target, opts.path, opts.pollers, 1.0))  # warm-up
            flood_proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--flood-only",
                    str(target),
                    opts.path,
                    str(opts.pollers),
                    str(opts.duration),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            cpu, pings, started = cpu_seconds(proc.pid), ping_calls(redis), time.monotonic()
            acks = asyncio.run(racer_acks(f"ws://127.0.0.1:{port}", opts.duration))
            counts: dict[str, int] = json.loads(flood_proc.communicate(timeout=60)[0])
            elapsed = time.monotonic() - started
            cpu_share = (cpu_seconds(proc.pid) - cpu) / elapsed
            pings_per_s = (ping_calls(redis) - pings) / elapsed
        finally:
            stop_processes(proc, grace=15)
    result = {
        "command": "python bench/probe_flood.py " + " ".join(sys.argv[1:]),
        "tree": name or "this",
        "path": opts.path,
        "port": "listener" if opts.listener else "game",
        "pollers": opts.pollers,
        "seconds": round(elapsed, 2),
        "answers_per_s": {k: round(v / elapsed, 1) for k, v in sorted(counts.items()) if k != "bytes"},
        "kib_out_per_s": round(counts.get("bytes", 0) / elapsed / 1024, 1),
        "server_cpu_share": round(cpu_share, 3),
        "redis_pings_per_s": round(pings_per_s, 1),
        "racer_moves": len(acks),
        "racer_ack_ms_p50": round(statistics.median(acks), 2),
        "racer_ack_ms_p99": round(statistics.quantiles(acks, n=100)[98], 2),
        "loadavg": os.getloadavg(),
    }
    print(json.dumps(result))
    out = ROOT / "bench" / "results" / f"probe-flood-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
