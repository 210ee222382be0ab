"""Several nodes: the cost of a room read-back on a node when another node changes the room mid-race
(docs/scaling.md, "Several nodes", "Room changes"), full against incremental.

    .venv/bin/python bench/readback_bench.py [--entries 60 600] [--changes 40] [--runs 2] [--json FILE]

Starts a redis-server (tests/redis_fixture.py; loopback, no disk) and, for each run, two fresh
``plot-server --multi-node`` processes, both with ``--readback full`` or both with ``--readback
incremental`` (the modes alternate run by run, so a shared machine's drift hits them alike). On node
A: a room of three racers (the host one of them) racing, each racer's log grown to ``--entries``
entries (a legal move and its undo, over and over), then idle. On node B: a spectator joins and
leaves the room ``--changes`` / 2 times; each join and each leave is a room change committed on B,
which node A reads back (record and logs). The next change waits until A's host has seen the last
one (the spectator count in its room snapshot), so every change is read back once. Measured on node
A over that window: CPU (user+system, /proc) per change, and the store calls reading logs per
change (the metrics' ``load_moves`` and ``load_logs`` calls: round trips), and the frames node A writes
to its members per change. Prints JSON (``--json FILE`` too).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_fixture import RedisServer, free_port  # test helpers, found through the path above
from support import Client, board, latest, metric, metrics, stop_processes, view_game, wait_healthy

from shared import protocol as p
from shared.engine import View

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
MODES = ("full", "incremental")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def start_node(url: str, mode: str) -> tuple[subprocess.Popen[str], int, int]:
    """A node: its process, game port and metrics listener's port."""
    port, listener = free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PLOT_") and key != "REDIS_URL"}
    env["PLOT_WEB_PORT"] = "0"
    command = [sys.executable, "-m", "server.cli", "--port", str(port), "--redis", url, "--multi-node",
               "--metrics-port", str(listener),
               "--readback", mode, "--countdown", "0.1", "--rate", "1000",
               "--log-level", "warning", "--max-conns-per-address", "0", "--hellos-per-minute", "0",
               "--rooms-per-minute", "0", "--join-failures-per-minute", "0",
               "--answer-bytes-per-address", "0"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=env)
    wait_healthy(proc, port)
    return proc, port, listener


def log_reads(samples: Any) -> float:
    """Store calls reading move logs so far (one round trip each: load_moves, or load_logs' pipeline)."""
    return sum(metric(samples, "plot_store_calls_total", op=op) for op in ("load_moves", "load_logs"))


async def grow_log(client: Client, view: View, entries: int, rng: random.Random) -> int:
    """Until the racer's log holds ``entries`` entries, a legal move then its undo (a move that turns
    a card cannot be undone: played alone, when nothing else is legal): the log's length."""
    seq, move_id, undo = 0, 1, False
    plain: list[str] = []
    while seq < entries:
        if undo:
            move = "undo"
        else:
            legal = view_game(view).legal_moves()
            plain = [m for m in legal if not m.startswith(("stock>", "reserve>"))]
            move = rng.choice(plain or legal)
        await client.send(p.Move(id=move_id, move=move))
        reply = await client.expect(p.MoveOk | p.MoveRejected)  # type: ignore[arg-type]
        assert isinstance(reply, p.MoveOk), reply
        view, seq, move_id = board(reply), reply.seq, move_id + 1
        undo = not undo and move in plain
    return seq


async def one_run(url: str, mode: str, entries: int, changes: int, seed: int) -> dict[str, Any]:
    (proc_a, port_a, metrics_a), (proc_b, port_b, _) = start_node(url, mode), start_node(url, mode)
    try:
        a, b = f"ws://127.0.0.1:{port_a}", f"ws://127.0.0.1:{port_b}"
        racers = [await Client.open(a, name) for name in ("host", "ann", "cy")]
        for racer in racers:
            await racer.hello(racer.label)
        host = racers[0]
        await host.send(p.CreateRoom(options=p.RoomOptions(undo=True, private=True)))
        code = (await host.expect(p.Room)).code
        for racer in racers[1:]:
            await racer.send(p.Join(code=code))
            await racer.expect(p.Room)
            await racer.send(p.Ready(ready=True))
        while not all(m.ready for m in latest(host, p.Room).members if m.player_id != host.pid):
            await host.expect(p.Room)
        await host.send(p.Start())
        starts = [await racer.expect(p.RaceStart) for racer in racers]
        rng = random.Random(seed)
        lengths = []
        for racer, start in zip(racers, starts, strict=True):
            assert start.view is not None
            lengths.append(await grow_log(racer, start.view, entries, rng))
        watcher = await Client.open(b, "watcher")
        await watcher.hello("watcher")
        await asyncio.sleep(0.5)  # the racers' last saves and pub/sub settle before the window
        before_samples = await asyncio.to_thread(metrics, metrics_a)
        before_cpu, before_calls = cpu_seconds(proc_a.pid), log_reads(before_samples)
        before_frames = metric(before_samples, "plot_frames_sent_total")
        started = time.perf_counter()
        for n in range(changes):
            joining = n % 2 == 0
            if joining:
                await watcher.send(p.Join(code=code, role=p.SPECTATOR))
                await watcher.expect(p.Room)
            else:
                await watcher.send(p.Leave())
            want = 1 if joining else 0
            while latest(host, p.Room).spectators != want:  # node A read the change back
                await host.expect(p.Room, timeout=10)
        wall = time.perf_counter() - started
        cpu = cpu_seconds(proc_a.pid) - before_cpu
        after_samples = await asyncio.to_thread(metrics, metrics_a)
        calls, frames = log_reads(after_samples), metric(after_samples, "plot_frames_sent_total")
        for client in (*racers, watcher):
            await client.close()
        return {
            "mode": mode,
            "entries_per_racer": lengths,
            "changes": changes,
            "node_a_cpu_us_per_change": round(cpu / changes * 1e6),
            "log_reads_per_change": round((calls - before_calls) / changes, 2),
            # frames node A wrote to its members per change (its three racers: the new room each,
            # and before 2026-12-01 also a race_start and a leaderboard each)
            "node_a_frames_per_change": round((frames - before_frames) / changes, 2),
            "wall_ms_per_change": round(wall / changes * 1000, 2),
        }
    finally:
        stop_processes(proc_a, proc_b)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, nargs="+", default=[60, 600], help="entries per racer's log")
    parser.add_argument("--changes", type=int, default=40, help="room changes on node B per run (even)")
    parser.add_argument("--runs", type=int, default=2, help="runs per mode and log length")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []
    with RedisServer() as redis:
        for entries in args.entries:
            for run in range(args.runs):
                order = MODES if run % 2 == 0 else MODES[::-1]
                for mode in order:
                    result = await one_run(redis.url, mode, entries, args.changes, seed=run)
                    result["run"], result["target_entries"] = run + 1, entries
                    print(json.dumps(result), flush=True)
                    results.append(result)
    summary: dict[str, Any] = {}
    for entries in args.entries:
        medians = {}
        for mode in MODES:
            mine = [r for r in results if r["mode"] == mode and r["target_entries"] == entries]
            medians[mode] = statistics.median(r["node_a_cpu_us_per_change"] for r in mine)
        ratio = round(medians["incremental"] / medians["full"], 3) if medians["full"] else None
        summary[str(entries)] = {"median_cpu_us_per_change": medians, "ratio_incremental_to_full": ratio}
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": results,
        "summary": summary,
    }
    print(json.dumps(report["summary"], indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
