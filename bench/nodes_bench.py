"""Several nodes on one Redis (docs/scaling.md, "Several nodes"): server CPU per move with the racers
of each room spread over two ``plot-server --multi-node`` processes against all on one plain
``plot-server``; the delay from the acknowledgement of a move that changed a racer's foundation
cards, on one node, to a spectator's leaderboard on the other showing those cards (partial
leaderboards carry only rows whose cards, status or rank changed, so ``moves`` cannot time it); and
the time from a node's death to its racers playing again elsewhere.

    .venv/bin/python bench/nodes_bench.py [--rooms 10] [--racers 4] [--pace 4] [--duration 8] [--runs 2]
        [--layouts one,two,split,half,affinity] [--cluster] [--tree before=/tmp/old --layouts one,two,two@before]
        [--profile DIR]

Starts a redis-server (tests/redis_fixture.py; loopback, no disk). Each run starts fresh servers for
each layout in turn, the layouts alternating run by run (drift on a shared machine hits them alike):
rooms of ``--racers`` racers and one spectator each, every racer playing random legal moves at
``--pace`` moves/s (each at its own phase) for ``--duration`` s. Layouts: ``one`` (all on one plain
node), ``two`` (two ``--multi-node`` nodes, each room's racers alternately on A and B, its spectator
on B), ``split`` (racers on A, spectators on B: B's CPU is the cost of applying another node's moves),
``half`` (one plain node, half the rooms: the own load each node of ``two`` carries), ``affinity`` (two
``--multi-node`` nodes, each room's racers and spectator all on one node, the rooms alternating
between A and B: what HAProxy's ``balance url_param room`` does, docs/deployment.md, "Room affinity")
``double`` (as ``two`` with twice the rooms: each node carries the load ``one`` carries, so
per-process fixed costs weigh on both alike) and ``paired`` (as ``affinity`` with twice the rooms:
each node carries one node's load, every room on one node). ``affinity``, ``double`` and ``paired``
are not in the default list.
CPU is the server processes' user+system time over the measured window (/proc), divided by the moves
acknowledged in it; Redis CPU likewise, the redis-server processes' (every master's on a cluster).
``--cluster`` adds a layout, "two-cluster": the two nodes on a three-master Redis Cluster
(tests/redis_cluster_fixture.py; sharded pub/sub), so Redis CPU per move on the cluster, pub/sub
included, stands beside one Redis's. Then the
failover: a room of two racers on node A, node A killed (SIGKILL), both racers reconnect to node B
with their tokens; the time from the start of the reconnection to each racer's first acknowledged
move there. Prints JSON (``--json FILE`` writes it too).

``--tree NAME=PATH`` lets a layout written ``LAYOUT@NAME`` run the plot-server of the checkout at PATH
(an older commit, for before/after in one run, alternating with this tree's). ``--profile DIR``
samples every server process of each layout with py-spy over the measured window (collapsed stacks,
``DIR/LAYOUT-runN-nodeK.txt``; node 1 is B); ``bench/profile_nodes.py`` sorts them into the parts of a
remote move. Profiled runs cost CPU of their own: measure without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_cluster_fixture import LocalRedisCluster  # test helpers, found through the path above
from redis_fixture import RedisServer, free_port
from support import Client, board, server_environment, stop_processes, view_game, wait_healthy

from shared import protocol as p
from shared.engine import View

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


TREES: dict[str, Path] = {}  # --tree NAME=PATH: layouts written LAYOUT@NAME run that checkout's server


def start_node(url: str, multi: bool, root: Path = ROOT) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = server_environment(PYTHONPATH=str(root))  # that tree's server, not the installed one
    command = [sys.executable, "-m", "server.cli", "--port", str(port), "--redis", url, "--countdown", "0.1",
               "--rate", "1000", "--log-level", "warning", "--max-conns-per-address", "0",
               "--hellos-per-minute", "0", "--rooms-per-minute", "0", "--answer-bytes-per-address", "0",
               "--metrics", "off",
               *(["--multi-node"] if multi else [])]  # fmt: skip
    proc = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=env)
    wait_healthy(proc, port)
    return proc, port


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def choose(view: View, rng: random.Random) -> str | None:
    if view.status != "playing":
        return None
    legal = view_game(view).legal_moves()
    if not legal:
        return None
    up = [m for m in legal if ">f" in m]
    return rng.choice(up) if up else rng.choice(legal)


async def racer_loop(client: Client, view: View, pace: float, until: float, acks: dict[tuple[str, int], float],
                     counted: list[int], window: list[float], rng: random.Random) -> None:  # fmt: skip
    move_id = 1
    # Each racer at its own phase: racers started together and paced alike would send in bursts,
    # which one node's group commit batches better than two nodes' (real racers keep no step).
    await asyncio.sleep(rng.uniform(0, 1 / pace))
    while time.monotonic() < until:
        move = choose(view, rng)
        if move is None:
            return
        started = time.monotonic()
        await client.send(p.Move(id=move_id, move=move))
        reply = await client.expect(p.MoveOk | p.MoveRejected, timeout=10)  # type: ignore[arg-type]
        move_id += 1
        if isinstance(reply, p.MoveOk):
            now = time.monotonic()
            if window[0] <= now <= window[1]:
                counted[0] += 1
            cards_before = cards(view)
            view = board(reply)
            if cards(view) != cards_before:  # timed: a leaderboard row changes only with its cards (or status, rank)
                acks[(client.pid, cards(view))] = now
        await asyncio.sleep(max(0.0, 1 / pace - (time.monotonic() - started)))


def cards(view: View) -> int:
    return sum(len(pile) for pile in view.foundations)


async def spectator_delays(spectator: Client, remote: set[str], seen: dict[tuple[str, int], float]) -> None:
    """When the spectator's leaderboard first showed each (racer, foundation cards) of the racers
    in ``remote``. Partial leaderboards carry only rows whose cards, status or rank changed (and a
    whole one at most every 5 s), so a move is timed by the cards it changed, never by ``moves``;
    cards never leave a foundation (no undo here), so showing c cards shows every value up to c."""
    shown: dict[str, int] = {}
    while True:
        msg = await spectator.expect(p.Leaderboard, timeout=60)
        now = time.monotonic()
        for row in msg.racers:
            if row.player_id in remote:
                for value in range(shown.get(row.player_id, 0) + 1, row.cards + 1):
                    seen.setdefault((row.player_id, value), now)
                shown[row.player_id] = max(row.cards, shown.get(row.player_id, 0))


LAYOUT_KINDS = ("one", "two", "split", "half", "affinity", "double", "paired")


def py_spy(pid: int, seconds: float, output: Path, native: bool) -> subprocess.Popen[bytes]:
    """py-spy sampling process ``pid`` for ``seconds`` at 500 Hz (collapsed stacks): without pausing
    it, or ``native``, with the C frames (uvloop's, msgspec's, hiredis'), pausing it at each sample."""
    binary = Path(sys.executable).parent / "py-spy"
    command = [str(binary), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", "500",
               "--format", "raw", "--output", str(output),
               *(["--native"] if native else ["--nonblocking"])]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def placement(kind: str, urls: list[str]) -> tuple[Callable[[int, int], str], Callable[[int], str]]:
    """Where a layout puts racer i of room r, and room r's spectator: ``split`` every racer on A;
    ``affinity`` and ``paired`` the whole room on one node, room by room alternately; otherwise racer i on node
    i % nodes. The spectator on the last node, but for ``affinity`` (its room's node)."""
    if kind in ("affinity", "paired"):
        return (lambda room, _i: urls[room % len(urls)]), (lambda room: urls[room % len(urls)])
    racer_urls = urls[:1] if kind == "split" else urls
    return (lambda _room, i: racer_urls[i % len(racer_urls)]), (lambda _room: urls[-1])


async def load_run(racer_node: Callable[[int, int], str], spectator_node: Callable[[int], str], pids: list[int],
                   redis_pids: list[int], rooms_count: int, args: argparse.Namespace, seed: int,
                   profile: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Rooms of racers (racer i of room r on ``racer_node(r, i)``) and one spectator each (on
    ``spectator_node(r)``) racing; CPU per move of the server processes ``pids``, each and together."""
    rooms: list[tuple[list[Client], Client]] = []
    for r in range(rooms_count):
        racers = []
        for i in range(args.racers):
            client = await Client.open(racer_node(r, i), f"r{r}.{i}")
            await client.hello(f"r{r}.{i}")
            racers.append(client)
        await racers[0].send(p.CreateRoom(options=p.RoomOptions(max_racers=max(2, args.racers))))
        code = (await racers[0].expect(p.Room)).code
        for client in racers[1:]:
            await client.send(p.Join(code=code))
            await client.expect(p.Room)
            await client.send(p.Ready(ready=True))
        spectator = await Client.open(spectator_node(r), f"s{r}")
        await spectator.hello(f"s{r}")
        await spectator.send(p.Join(code=code, role=p.SPECTATOR))
        await spectator.expect(p.Room)
        rooms.append((racers, spectator))
    for racers, _spectator in rooms:
        host = racers[0]
        # Every racer in and ready: on two nodes a room's snapshot can show some members before
        # the others' joins reach the host's node (all of those ready: the start was refused).
        while True:
            members = (await host.expect(p.Room)).members
            joined = [m for m in members if m.role == p.RACER]
            if len(joined) == len(racers) and all(m.ready for m in joined if m.player_id != host.pid):
                break
    acks: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], float] = {}
    counted = [0]
    # Every race started before the clock runs: started one after another, 40 rooms' countdowns
    # could outlast the warm-up and the window on a busy machine (their CPU then went unmeasured).
    for racers, _spectator in rooms:
        await racers[0].send(p.Start())
    race_starts = [[await c.expect(p.RaceStart, timeout=30) for c in racers] for racers, _spectator in rooms]
    start = time.monotonic()
    window = [start + args.warmup, start + args.warmup + args.duration]
    until = window[1] + 0.5
    tasks: list[asyncio.Task[None]] = []
    watchers: list[asyncio.Task[None]] = []
    for room_index, ((racers, spectator), starts) in enumerate(zip(rooms, race_starts, strict=True)):
        # Timed: the racers on another node than the spectator's (on one node: all of them).
        remote = {c.pid for i, c in enumerate(racers) if racer_node(room_index, i) != spectator_node(room_index)}
        remote = remote or {c.pid for c in racers}
        watchers.append(asyncio.ensure_future(spectator_delays(spectator, remote, seen)))
        for i, (client, race_start) in enumerate(zip(racers, starts, strict=True)):
            assert race_start.view is not None
            sub = random.Random(seed * 1000 + room_index * 10 + i)
            tasks.append(asyncio.ensure_future(
                racer_loop(client, race_start.view, args.pace, until, acks, counted, window, sub)))  # fmt: skip
    late = time.monotonic() - window[0]
    assert late < 0, f"the racers were set going {late:.1f} s after the window opened: a longer --warmup"
    await asyncio.sleep(-late)
    load_1min = os.getloadavg()[0]
    spies = []
    if profile is not None:  # --profile: each node sampled over the window, named PROFILE-nodeK.txt
        spies = [py_spy(pid, args.duration, Path(f"{profile}-node{k}.txt"), args.native) for k, pid in enumerate(pids)]
    cpu_before = [cpu_seconds(pid) for pid in pids]
    redis_before = sum(cpu_seconds(pid) for pid in redis_pids)
    await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
    cpu_after = [cpu_seconds(pid) for pid in pids]
    redis_after = sum(cpu_seconds(pid) for pid in redis_pids)
    await asyncio.gather(*tasks)
    for spy in spies:
        await asyncio.to_thread(spy.wait, 30)
    await asyncio.sleep(0.5)  # the last leaderboards
    for watcher in watchers:
        watcher.cancel()
    delays = [(seen[key] - at) * 1000 for key, at in acks.items() if key in seen and window[0] <= at <= window[1]]
    for racers, spectator in rooms:
        for client in (*racers, spectator):
            await client.close()
    used = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    return {
        "moves_in_window": counted[0],
        "loadavg_1min": round(load_1min, 2),  # before the window: the shared machine's other load too
        "server_cpu_s": round(sum(used), 3),
        "cpu_us_per_move": round(sum(used) / max(1, counted[0]) * 1e6, 1),
        "cpu_us_per_move_by_node": [round(cpu / max(1, counted[0]) * 1e6, 1) for cpu in used],
        "redis_cpu_s": round(redis_after - redis_before, 3),
        "redis_cpu_us_per_move": round((redis_after - redis_before) / max(1, counted[0]) * 1e6, 1),
        "leaderboard_delay_ms": {
            "n": len(delays),
            "p50": None if not delays else round(statistics.median(delays), 1),
            "p99": None if not delays else round(percentile(delays, 0.99) or 0.0, 1),
        },
    }


async def failover(url: str) -> dict[str, Any]:
    (a, port_a), (b, port_b) = start_node(url, True), start_node(url, True)
    try:
        rng = random.Random(1)
        racers = []
        for name in ("f0", "f1"):
            client = await Client.open(f"ws://127.0.0.1:{port_a}", name)
            await client.hello(name)
            racers.append(client)
        await racers[0].send(p.CreateRoom(options=p.RoomOptions()))
        code = (await racers[0].expect(p.Room)).code
        await racers[1].send(p.Join(code=code))
        await racers[1].expect(p.Room)
        await racers[1].send(p.Ready(ready=True))
        while not all(m.ready for m in (await racers[0].expect(p.Room)).members if m.player_id != racers[0].pid):
            pass
        await racers[0].send(p.Start())
        views = [(await c.expect(p.RaceStart)).view for c in racers]
        for client, view in zip(racers, views, strict=True):
            assert view is not None
            move = choose(view, rng)
            if move is not None:
                await client.send(p.Move(id=1, move=move))
                await client.expect(p.MoveOk)
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed = time.monotonic()
        times: list[float] = []
        for client in racers:
            assert client.welcome is not None
            began = time.monotonic()
            again = await Client.open(f"ws://127.0.0.1:{port_b}", client.label)
            await again.hello(client.label, token=client.welcome.token)
            board = await again.expect(p.RaceStart)
            assert board.view is not None
            move = choose(board.view, rng)
            assert move is not None
            await again.send(p.Move(id=2, move=move))
            await again.expect(p.MoveOk)
            times.append((time.monotonic() - began) * 1000)
            await again.close()
        return {"reconnect_to_first_ack_ms": [round(t, 1) for t in times],
                "kill_to_last_ack_ms": round((time.monotonic() - killed) * 1000, 1)}  # fmt: skip
    finally:
        stop_processes(a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=10)
    parser.add_argument("--racers", type=int, default=4, help="racers per room")
    parser.add_argument("--pace", type=float, default=4.0, help="moves per second per racer")
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--layouts", default="one,two,split,half",
                        help="comma-separated, run in this order each run: "
                             "one, two, split, half, affinity, double, paired")  # fmt: skip
    parser.add_argument("--cluster", action="store_true", help="also two nodes on a three-master Redis Cluster")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds the idle cluster's own CPU is measured")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a checkout whose server the layouts written LAYOUT@NAME run")  # fmt: skip
    parser.add_argument("--profile", type=Path, help="py-spy every node over each window into this folder")
    parser.add_argument("--native", action="store_true", help="--profile with the C frames (py-spy --native)")
    args = parser.parse_args()
    for tree in args.tree:
        name, sep, where = tree.partition("=")
        if not sep or not name or not (Path(where) / "server" / "cli.py").is_file():
            parser.error(f"--tree {tree!r}: expected NAME=PATH of a checkout (with server/cli.py)")
        TREES[name] = Path(where).resolve()
    for layout in args.layouts.split(","):
        kind, _, tree = layout.partition("@")
        if kind not in LAYOUT_KINDS or (tree and tree not in TREES):
            parser.error(f"--layouts: {layout!r} is not {', '.join(LAYOUT_KINDS)} (or one @NAME of a --tree)")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    redis = RedisServer()
    redis.start()
    cluster = LocalRedisCluster() if args.cluster else None
    layouts = [*args.layouts.split(","), *(["two-cluster"] if cluster else [])]
    settings = vars(args) | {"json": str(args.json), "profile": str(args.profile)}
    settings["started_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    results: dict[str, Any] = {"args": settings} | {layout: [] for layout in layouts}
    try:
        if cluster is not None:
            cluster.start()
            # The masters' own background (cluster bus pings, cron) with no server attached, to
            # read the per-move figures against: it is charged to the moves in the window.
            pids = [node.process.pid for node in cluster.nodes if node.process is not None]
            before = sum(cpu_seconds(pid) for pid in pids)
            time.sleep(args.idle)
            idle_s = sum(cpu_seconds(pid) for pid in pids) - before
            results["cluster_idle_cpu_ms_per_s"] = round(idle_s / args.idle * 1000, 2)
        for run in range(args.runs):
            for layout in layouts:
                servers: list[RedisServer]
                if layout == "two-cluster":
                    assert cluster is not None
                    cluster.flushall()
                    url, servers = cluster.url, list(cluster.nodes)
                else:
                    redis.command("FLUSHALL")
                    url, servers = redis.url, [redis]
                redis_pids = [server.process.pid for server in servers if server.process is not None]
                kind, _, tree = layout.partition("@")
                root = TREES[tree] if tree else ROOT
                multi = kind not in ("one", "half")  # two, split, affinity, double, paired: two --multi-node nodes
                nodes = [start_node(url, multi, root) for _ in range(2 if multi else 1)]
                urls = [f"ws://127.0.0.1:{port}" for _, port in nodes]
                racer_node, spectator_node = placement(kind, urls)
                rooms = {"half": max(1, args.rooms // 2), "double": 2 * args.rooms, "paired": 2 * args.rooms}.get(
                    kind, args.rooms
                )
                pids = [proc.pid for proc, _ in nodes]
                profile = None if args.profile is None else str(args.profile / f"{layout}-run{run + 1}")
                try:
                    figures = asyncio.run(
                        load_run(racer_node, spectator_node, pids, redis_pids, rooms, args, run + 1, profile)
                    )
                finally:
                    stop_processes(*(proc for proc, _ in nodes))
                results[layout].append(figures)
                print(layout, json.dumps(figures), file=sys.stderr)
        redis.command("FLUSHALL")
        results["failover"] = asyncio.run(failover(redis.url))
    finally:
        redis.stop()
        if cluster is not None:
            cluster.close()
    results["medians"] = {
        layout: {
            key: statistics.median(r[key] for r in results[layout])
            for key in ("cpu_us_per_move", "redis_cpu_us_per_move")
        }
        for layout in layouts
    }
    for suffix in ["", *(f"@{tree}" for tree in TREES)]:  # each tree against its own "one"
        if f"one{suffix}" not in results["medians"]:
            continue
        one = results["medians"][f"one{suffix}"]["cpu_us_per_move"]
        # None when the window was too short for the clock's ticks
        for kind in LAYOUT_KINDS[1:]:
            if f"{kind}{suffix}" in results["medians"]:
                other = results["medians"][f"{kind}{suffix}"]["cpu_us_per_move"]
                ratio = round(other / one, 2) if one > 0 and other > 0 else None
                results[f"cpu_ratio_{kind}_over_one{suffix}"] = ratio
    for suffix in ["", *(f"@{tree}" for tree in TREES)]:
        if f"split{suffix}" in results:  # node B of split: what applying another node's moves costs, per move
            remote = [r["cpu_us_per_move_by_node"][1] for r in results[f"split{suffix}"]]
            results[f"remote_us_per_move_median{suffix}"] = statistics.median(remote)
    if cluster is not None:  # Redis CPU per move: the cluster's masters together against one Redis, both two nodes
        one_redis = results["medians"]["two"]["redis_cpu_us_per_move"]
        on_cluster = results["medians"]["two-cluster"]["redis_cpu_us_per_move"]
        results["redis_cpu_ratio_cluster_over_one_redis"] = (
            round(on_cluster / one_redis, 2) if one_redis > 0 and on_cluster > 0 else None
        )
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
