"""Smoke test of the load benchmark tooling (bench/), so it cannot rot silently.

A few seconds: bench/run_load.py starts a real plot-server (memory store) and the bare echo
server on free loopback ports, exactly as the benchmark does, and runs bench/loadgen.py
against each for about a second. The checks are about the tooling working (accepted moves,
no errors, spectators reached, the window marks read), never about timings.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str) -> ModuleType:
    # A bench script runs with its own folder on sys.path (it imports machine_info from there).
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_load() -> ModuleType:
    return load("run_load")


def run(run_load: ModuleType, kind: str, mode: str, args: list[str], reply_size: int = 290) -> dict[str, Any]:
    with run_load.target_server(kind, reply_size) as target:
        assert target.url.startswith("ws://127.0.0.1:")
        # Generous: a few seconds on a quiet machine, a minute with busy neighbours on the cores.
        result: dict[str, Any] = run_load.run_loadgen(mode, target, args, timeout=180)
    return result


def test_loadgen_races_real_games_against_plot_server(run_load: ModuleType) -> None:
    result = run(
        run_load,
        "memory",
        "server",
        ["--racers", "8", "--spectators", "3", "--pace", "20", "--duration", "3", "--warmup", "0.3", "--deal", "1"],
    )
    assert result["mode"] == "server"
    assert result["accepted_moves"] > 0
    assert result["moves_per_second"] > 0
    assert result["errors"] == 0 and result["rejected"] == 0, result["error_codes"]
    assert result["failures"] == []
    assert result["ack_latency_ms"]["count"] == result["accepted_moves"]
    # Spectators saw leaderboards carrying the racers' moves (timed by the cards they sent home: a
    # 1-s window saw none in half the runs, so 3 s, and deal 1, where cards go home from the first
    # moves, not a random deal; 20 moves/s, since a race played flat out can end before the
    # spectators' second leaderboard), and every audience's frames were counted apart.
    assert result["leaderboards_received"] > 0
    assert result["fanout_from_send_ms"]["count"] > 0
    assert result["racer_frames_per_move"] >= 1  # each move's own move_ok at least
    assert 0 < result["spectator_frames_per_move"] < result["racer_frames_per_move"] * 8
    assert result["spectator_leaderboards_per_s"] > 0
    # The runner read the window marks and sampled the server process there.
    assert "server_cpu_share" in result and "server_cpu_us_per_move" in result
    assert result["server_peak_rss_mib"] > 0


def test_home_undo_workload_sends_cards_home_and_undoes_them(
    run_load: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_load --workload home-undo: each racer sends a card home and undoes it, move after move,
    every move legal from its own view (none refused), so about half the accepted moves are undos."""
    monkeypatch.setattr(run_load, "WORKLOAD", "home-undo")
    args = ["--racers", "8", "--pace", "0", "--duration", "2", "--warmup", "0.5", "--deal", "1"]
    result = run(run_load, "memory", "server", args)
    assert result["workload"] == "home-undo"
    assert result["accepted_moves"] > 20
    assert result["errors"] == 0 and result["rejected"] == 0, result["error_codes"]
    assert result["failures"] == []
    # A card home, then its undo: the undos are half of the moves, give or take the moves that
    # find the racer's first card to send home and the pairs the window's edges cut (one undo a
    # racer at most; deal 1: cards go home from the first moves, a random deal may need many).
    assert 0.3 * result["accepted_moves"] < result["accepted_undos"] <= 0.5 * result["accepted_moves"] + 8
    assert "server_cpu_us_per_move" in result


def test_a_kind_at_another_tree_runs_that_trees_server(run_load: ModuleType, tmp_path: Path) -> None:
    """run_load --tree NAME=PATH: KIND@NAME starts the plot-server of PATH (before/after side by side)."""
    for package in ("server", "shared"):
        (tmp_path / package).symlink_to(BENCH.parent / package)
    run_load.TREES["other"] = tmp_path
    try:
        with run_load.target_server("memory@other", 290) as target:
            assert Path(f"/proc/{target.server.pid}/cwd").resolve() == tmp_path.resolve()
            assert (Path(f"/proc/{target.server.pid}/environ").read_bytes().split(b"\0")).count(
                b"PYTHONPATH=" + str(tmp_path).encode()
            ) == 1
    finally:
        del run_load.TREES["other"]


def test_echo_baseline_replies_with_the_configured_frame_size(run_load: ModuleType) -> None:
    result = run(
        run_load,
        "echo",
        "echo",
        ["--racers", "8", "--pace", "0", "--duration", "0.5", "--warmup", "0.2"],
        reply_size=123,
    )
    assert result["mode"] == "echo"
    assert result["accepted_moves"] > 0
    assert result["errors"] == 0 and result["failures"] == []
    assert result["move_ok_frame_bytes"] == 123
    assert "server_cpu_share" in result


def test_idle_mode_holds_connections_that_said_hello(run_load: ModuleType) -> None:
    result = run(run_load, "memory", "idle", ["--racers", "20", "--duration", "0.3"])
    assert result["held"] == 20 and result["refused"] == 0
    assert result["server_rss_window_start_mib"] > 0


def test_typical_frame_sizes_come_from_real_games() -> None:
    sizes = load("loadgen").typical_sizes(games=2)
    assert 20 < sizes["move_bytes"] < 40  # {"type": "move", "id": n, "move": "waste>t3"}
    assert 40 < sizes["move_ok_bytes"] < 100  # protocol 2: what changed and a check value, not the board
    assert sizes["moves_per_game"] > 10


def test_loadgen_refuses_addresses_off_the_loopback() -> None:
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "loadgen.py"), "echo", "--url", "ws://10.1.2.3:80"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0
    assert "loopback" in out.stderr


# ---------------------------------------------------------------- bench/profile_move.py


def test_profile_move_accounts_for_the_moves_of_a_paced_run() -> None:
    """The real server under cProfile (no py-spy needed), eight racers for a second."""
    import argparse

    profile_move = load("profile_move")
    opts = argparse.Namespace(
        profiler="cprofile", racers=8, pace=5.0, duration=1.0, warmup=0.3, seed=1, rate=250, top=5,
        setup_timeout=60.0, workload="play", pure=True,  # a compiled engine's time counts to its callers
    )  # fmt: skip
    window = profile_move.profile_once("memory", opts)
    assert window.moves > 0 and window.server_cpu_seconds > 0
    # A move is decoded, checked by the core and the engine, stored and answered through websockets.
    for part in ("websockets framing: reading", "websockets framing: writing", "decode", "core", "engine", "store"):
        assert window.part_seconds.get(part, 0.0) > 0, (part, window.part_seconds)
    assert set(window.part_seconds) <= set(profile_move.PARTS)
    assert len(window.hottest) == 5
    lines = profile_move.table(window)
    rows = [line.split(" | ")[0].lstrip("| ") for line in lines if line.startswith("| ")]
    assert rows[1 : 1 + len(profile_move.PARTS)] == profile_move.PARTS


def test_profile_move_saturation_is_pace_zero_with_64_racers() -> None:
    profile_move = load("profile_move")
    saturated = profile_move.options(["--saturation", "--profiler", "cprofile"])
    assert (saturated.pace, saturated.racers, saturated.stores) == (0.0, 64, ["memory", "redis"])
    assert profile_move.options(["--saturation", "--racers", "8", "--profiler", "cprofile"]).racers == 8
    paced = profile_move.options(["--store", "redis", "--profiler", "cprofile"])
    assert (paced.pace, paced.racers, paced.stores) == (2.0, 1000, ["redis"])
    with pytest.raises(SystemExit):  # a saturation run has no pace
        profile_move.options(["--saturation", "--pace", "2", "--profiler", "cprofile"])


def test_profile_move_takes_the_home_undo_workload() -> None:
    profile_move = load("profile_move")
    opts = profile_move.options(["--saturation", "--workload", "home-undo", "--profiler", "cprofile"])
    assert (opts.workload, opts.pace, opts.racers) == ("home-undo", 0.0, 64)
    assert profile_move.options(["--profiler", "cprofile"]).workload == "play"


def test_profile_move_knows_the_shell_in_one_file_and_split_into_a_package() -> None:
    profile_move = load("profile_move")
    part = profile_move.part_of_frame
    assert part("RaceServer._dispatch", "server/app.py") == "shell"
    assert part("RaceServer._deliver", "server/app.py") == "fan-out"
    assert part("Appends.write_batch", "server/shell/appends.py") == "shell"
    assert part("Gate.on_frame", "/work/x/server/shell/gate.py") == "shell"
    assert part("Delivery.deliver", "server/shell/delivery.py") == "fan-out"
    assert part("LocalFanout.publish", "server/fanout.py") == "fan-out"
    assert part("ServerCore.handle", "server/core/machine.py") == "core"
    loop = "Runner.run (asyncio/runners.py:118);run_until_complete (uvloop/loop.pyx:1)"
    raw = "\n".join(
        [
            f"{loop};Gate.on_frame (server/shell/gate.py:10);ServerCore.handle (server/core/machine.py:90) 4",
            f"{loop};Gate.on_frame (server/shell/gate.py:10) 3",
            f"{loop};RaceServer._on_frame (server/app.py:900) 2",
            f"{loop};Game.changes (shared/engine.py:544) 1",
        ]
    )
    files = profile_move.pyspy_files(raw)
    assert files == {("core", "server/core/machine.py"): 4, ("shell", "server/shell/gate.py"): 3,
                     ("shell", "server/app.py"): 2, ("engine", "shared/engine.py"): 1}  # fmt: skip


def test_profile_move_puts_each_sample_in_the_part_its_innermost_frame_names() -> None:
    profile_move = load("profile_move")
    loop = "Runner.run (asyncio/runners.py:118);run_until_complete (uvloop/loop.pyx:1)"
    handler = f"{loop};Gate.handler (server/shell/gate.py:150);Gate._on_frame (server/shell/gate.py:210)"
    raw = "\n".join(
        [
            # the engine called by the core called by the shell: the engine's
            f"{handler};RaceServer.dispatch (server/shell/server.py:240);"
            "ServerCore.handle (server/core/machine.py:200);"
            "view_hash (shared/engine.py:900) 7",
            # asyncio plumbing under redis-py: the store's
            f"{handler};RedisStore.append_move (server/store/redis.py:350);"
            "AsyncScript.__call__ (redis/commands/core.py:11011);StreamWriter.write (asyncio/streams.py:300) 5",
            # websockets writing a frame for the fan-out: websockets'
            f"{handler};Delivery.to_players (server/shell/delivery.py:120);"
            "Delivery.deliver (server/shell/delivery.py:170);"
            "broadcast (websockets/asyncio/connection.py:1200) 3",
            # the fan-out's own code
            f"{handler};Delivery.to_players (server/shell/delivery.py:120) 2",
            "Runner.run (asyncio/runners.py:118) 11",  # only the loop: left out, the remainder covers it
            f"{handler};decode_client (shared/protocol.py:494) 4",
            f"{handler};encode (shared/protocol.py:455) 1",
            f"{loop};Handle._run (asyncio/events.py:80) 6",  # the loop's own Python code
            # reading a frame: websockets' own asyncio/ folder is not asyncio's plumbing
            f"{handler};Connection.recv (websockets/asyncio/connection.py:300);"
            "Assembler.get (websockets/asyncio/messages.py:150) 2",
        ]
    )
    parts, leaves, counted, skipped = profile_move.pyspy_parts(raw)
    assert parts == {"engine": 7, "store": 5, "websockets framing: writing": 3, "fan-out": 2, "decode": 4,
                     "encode": 1, "event loop and I/O": 6, "websockets framing: reading": 2}  # fmt: skip
    assert counted == 30 and skipped == 11
    assert leaves[("view_hash", "shared/engine.py")] == 7


def test_store_bench_compares_the_clients_on_the_move_append() -> None:
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "store_bench.py"), "clients", "--runs", "1", "--racers", "8", "--batch", "4",
         "--client-appends", "200", "--only", "redis-py,redis-py script,RedisStore,valkey-py"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    measured = {(row[0].lstrip("| "), row[1]) for row in rows[1:]}
    # Every append landed (the script checks each reply); redis-py and the store measured both ways
    # (the store's pipelined row appears once it has append_moves).
    assert {("redis-py", "single"), ("redis-py", "pipelined"), ("RedisStore", "single")} <= measured
    for row in rows[1:]:
        assert float(row[2].replace(",", "")) > 0  # appends/s


def test_metrics_bench_times_what_metrics_add_to_a_move() -> None:
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "metrics_bench.py"), "--repeat", "1", "--number", "2000"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    for key in ("receipt_us", "acknowledgement_us", "store_call_us", "per_move_us_at_most", "render_ms"):
        assert isinstance(figures[key], float), key


def test_leaderboard_ticks_simulates_the_nodes_load_on_the_core() -> None:
    """bench/leaderboard_ticks.py, small: every racer moves, and the node's leaderboards tick on the
    shared tick alone (at most one per 100-ms slot), no room needing a wake-up of its own for them."""
    figures = load("leaderboard_ticks").simulate(rooms=3, racers=4, pace=2.0, seconds=2.0)
    assert figures["moves"] == 3 * 4 * 2 * 2
    assert figures["room_ticks_per_s"] == 0.0 and 0 < figures["shared_ticks_per_s"] <= 10.5
    assert figures["core_us_per_move"] > 0


def test_run_load_runs_a_server_with_metrics_off(run_load: ModuleType) -> None:
    import urllib.error
    import urllib.request

    with run_load.target_server("memory-nometrics", 290) as target:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{target.metrics_port}/metrics", timeout=5)
        assert refused.value.code == 404
    with run_load.target_server("memory", 290) as target:
        response = urllib.request.urlopen(f"http://127.0.0.1:{target.metrics_port}/metrics", timeout=5)
        with response:
            assert b"plot_moves_accepted_total" in response.read()


# ---------------------------------------------------------------- bench/attacks.py


def run_attacks(only: str, seconds: str, timeout: float) -> list[dict[str, Any]]:
    """bench/attacks.py's results for these attacks, from its --json lines."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "attacks.py"), "--only", only, "--seconds", seconds, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_the_attack_bench_runs_and_the_limits_hold() -> None:
    """bench/attacks.py, briefly, so it cannot rot (its figures: docs/reliability.md, Limits)."""
    rooms, guess = run_attacks("rooms,guess", "1", 120)
    assert 1 <= rooms["rooms_created"] <= 11 and rooms["honest"]["ok"]
    assert 1 <= guess["wrong_guesses"] <= 11


def test_the_attack_bench_measures_amplification_and_the_page_flood() -> None:
    """bench/attacks.py's amplify and web attacks, briefly (figures: docs/reliability.md)."""
    amplify, *web = run_attacks("amplify,web", "2", 180)
    assert amplify["attacker_errors"].get("rate_limited", 0) > 0 and amplify["honest_ack_ms_flood"]["n"] > 0
    assert amplify["sync_loop"]["bytes_out"] > 0
    for flood in web:
        assert flood["honest_served"] == flood["honest_gets"] >= 2, flood


def test_the_proxy_lockout_bench_runs_and_the_shipped_config_lets_the_honest_client_in() -> None:
    """bench/proxy_lockout.py, briefly (its figures: docs/reliability.md, "Clients behind a balancer")."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "proxy_lockout.py"), "--seconds", "3", "--every", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    no_proxy, shipped = (json.loads(line) for line in out.stdout.splitlines())
    assert no_proxy["honest_answers"].get("rate_limited", 0) >= 1  # locked out behind HAProxy's one address
    assert shipped["honest_joined"] == shipped["honest_tries"] >= 1


def test_the_name_bench_finds_one_alice_in_the_room() -> None:
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "name_lookalikes.py"), "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["alices_in_the_room"] == 1


def test_nodes_bench_measures_one_node_against_two_and_a_failover() -> None:
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "nodes_bench.py"), "--rooms", "1", "--racers", "2", "--duration", "1",
         "--warmup", "0.5", "--runs", "1", "--cluster", "--idle", "0.2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    for layout in ("one", "two", "split", "half", "two-cluster"):  # two-cluster: two nodes on a three-master cluster
        assert figures[layout][0]["moves_in_window"] > 0
    assert len(figures["split"][0]["cpu_us_per_move_by_node"]) == 2
    assert set(figures["medians"]) == {"one", "two", "split", "half", "two-cluster"}
    assert all(m["redis_cpu_us_per_move"] >= 0 for m in figures["medians"].values())
    ratio = figures["redis_cpu_ratio_cluster_over_one_redis"]  # None when the ticks saw no Redis CPU
    assert ratio is None or ratio > 0
    assert len(figures["failover"]["reconnect_to_first_ack_ms"]) == 2
    assert figures["cpu_ratio_two_over_one"] is None or figures["cpu_ratio_two_over_one"] > 0


def test_nodes_bench_runs_another_tree_beside_this_one_and_profiles_each_node(tmp_path: Path) -> None:
    """--tree NAME=PATH (here this checkout again) runs LAYOUT@NAME beside LAYOUT; --profile samples
    each node with py-spy over the window, and bench/profile_nodes.py sorts the samples into parts."""
    import json
    import subprocess

    root = BENCH.parent
    out = subprocess.run(
        [sys.executable, str(BENCH / "nodes_bench.py"), "--rooms", "1", "--racers", "2", "--duration", "1",
         "--warmup", "0.5", "--runs", "1", "--tree", f"again={root}",
         "--layouts", "one,split,split@again,double,affinity,paired",
         "--profile", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    assert set(figures["medians"]) == {"one", "split", "split@again", "double", "affinity", "paired"}
    # affinity: each room on one node, the rooms alternating: the one room here sits on A, B idles
    assert figures["affinity"][0]["moves_in_window"] > 0 and "cpu_ratio_affinity_over_one" in figures
    assert figures["split@again"][0]["moves_in_window"] > 0
    assert figures["double"][0]["moves_in_window"] > 0 and "cpu_ratio_double_over_one" in figures
    # paired: twice the rooms, each on one node: the two rooms here, one on A and one on B
    assert figures["paired"][0]["moves_in_window"] > 0 and "cpu_ratio_paired_over_one" in figures
    assert "remote_us_per_move_median@again" in figures and "cpu_ratio_split_over_one" in figures
    profiles = sorted(path.name for path in tmp_path.glob("*.txt"))
    assert profiles == ["affinity-run1-node0.txt", "affinity-run1-node1.txt",
                        "double-run1-node0.txt", "double-run1-node1.txt", "one-run1-node0.txt",
                        "paired-run1-node0.txt", "paired-run1-node1.txt",
                        "split-run1-node0.txt", "split-run1-node1.txt",
                        "split@again-run1-node0.txt", "split@again-run1-node1.txt"]  # fmt: skip
    report = subprocess.run(
        [sys.executable, str(BENCH / "profile_nodes.py"), str(tmp_path / "split-run1-node1.txt"), "--moves", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert report.returncode == 0 and "samples counted" in report.stdout, report.stderr[-2000:]
    bad = subprocess.run(
        [sys.executable, str(BENCH / "nodes_bench.py"), "--layouts", "two@nowhere"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "two@nowhere" in bad.stderr


def test_profile_nodes_puts_each_sample_in_one_part_of_a_remote_move() -> None:
    profile_nodes = load("profile_nodes")
    loop = "Runner.run (asyncio/runners.py:118);run_until_complete (uvloop/loop.pyx:1)"
    read = f"{loop};NodeLink._listen (server/nodes.py:380);NodeLink._read (server/nodes.py:430)"
    remote = f"{read};SharedRooms._on_messages (server/shell/several_nodes.py:130)"
    remote += ";RaceServer.dispatch (server/shell/server.py:240)"
    core = f"{remote};ServerCore.handle (server/core/machine.py:88)"
    tick = f"{loop};Timers._due (server/shell/timers.py:35);RaceServer.dispatch (server/shell/server.py:240)"
    raw = "\n".join(
        [
            f"{core};ServerCore._dispatch (server/core/machine.py:100);"
            "RacerLogMixin._remote_moves (server/core/wal.py:330);Game.play (shared/engine.py:462) 7",
            f"{core};ServerCore._dispatch (server/core/machine.py:100);"
            "RacerLogMixin._remote_moves (server/core/wal.py:330) 2",
            f"{core};CoreBase._finish (server/core/base.py:58);"
            "DeadlinesMixin._next_wake (server/core/deadlines.py:74) 3",
            f"{read};as_message (server/nodes.py:518) 4",
            f"{tick};ServerCore.handle (server/core/machine.py:88);RankingMixin._rows (server/core/ranking.py:23) 5",
            f"{tick};ShellEffects.execute (server/shell/executor.py:46);"
            "Connection.send_data (websockets/asyncio/connection.py:971) 6",
            f"{loop};NodeLink._beat (server/nodes.py:320) 1",
            "Runner.run (asyncio/runners.py:118) 11",  # the loop only: left out
            f"{loop};epoll_pwait (libc.so.6) 9",  # --native: the loop waiting, left out
            f"{loop};uv__io_poll (libuv) 2",  # --native: the loop's own C code, busy
        ]
    )
    parts, leaves, skipped = profile_nodes.parts_of(raw)
    assert parts == {
        "remote: engine replay": 7,
        "remote: core bookkeeping": 2,
        "remote: core per-event work (snapshot, deadline table)": 3,
        "pub/sub: read and parse (hiredis, messages)": 4,
        "tick: leaderboard rows (rank, build)": 5,
        "tick: frames written to connections": 6,
        "heartbeats, liveness, sweeps": 1,
        "event loop itself (uvloop, C): callbacks, timers, transports": 2,
    }
    assert skipped == 20 and leaves[("Game.play", "shared/engine.py")] == 7


@pytest.mark.parametrize("reference", ["64", "matched"])
def test_overload_mode_offers_a_multiple_of_saturation_and_times_every_answer(
    run_load: ModuleType, reference: str
) -> None:
    """bench/run_load.py overload, tiny: the memory store, a second of each phase; the
    reference either 64 racers or the overload's own racers (``--reference matched``)."""
    import argparse

    opts = argparse.Namespace(
        racers=16,
        kinds="memory",
        duration=1.0,
        warmup=0.3,
        runs=1,
        overload_factor=1.5,
        timeout=180.0,
        busy_retry="hint",
        overload_pace=10.0,
        reference=reference,
    )
    out = run_load.overload(opts, 290)
    [entry] = out["runs"]["memory"]
    assert entry["saturation_moves_per_second"] > 0 and entry["saturation_64_moves_per_second"] > 0
    assert entry["reference"] == reference
    if reference == "matched":  # the reference is its own run, on the overload's racers
        assert entry["saturation_run"]["racers"] == 16
    assert entry["offered_moves_per_second"] == pytest.approx(1.5 * entry["saturation_moves_per_second"], rel=0.01)
    assert entry["goodput_moves_per_second"] > 0 and entry["goodput_fraction"] > 0
    over = entry["overload_run"]
    # Every answer timed (accepted and rejected alike), none counted twice.
    assert over["answer_latency_ms"]["count"] == over["moves_sent"] - entry["unanswered_at_cut"]
    assert over["answer_latency_ms"]["count"] > 0 and over["accepted_moves"] > 0
    assert 0 < entry["answered_within_1s_share"] <= 1
    assert entry["errors"] == 0
    assert any(line.startswith("| memory | ") for line in run_load.report_overload(out))
    # Every slot of the racers' schedules is accounted for: sent, skipped or deferred.
    assert 0 < entry["sent_moves_per_second"] <= entry["schedule_moves_per_second"]
    assert entry["busy_without_hint"] == 0


def test_capacity_mode_steps_the_paced_load_up_and_reports_the_largest_held(run_load: ModuleType) -> None:
    """bench/run_load.py capacity, tiny: 8 then 16 racers on the memory store, the echo
    at each load as the control."""
    import argparse

    opts = argparse.Namespace(
        kinds="memory,echo",
        pace=2.0,
        duration=1.0,
        warmup=0.3,
        timeout=180.0,
        capacity_start=8,
        capacity_step=8,
        capacity_resolution=4,
        capacity_max_steps=2,
    )
    out = run_load.capacity(opts, 290)
    steps = out["steps"]["memory"]
    # Up a step when 8 racers held; else halfway down (a busy machine can miss 20 ms even there).
    assert [s["racers"] for s in steps] == [8, 16 if steps[0]["held"] else 4]
    for step in steps:
        assert step["run"]["accepted_moves"] > 0 and step["echo"]["accepted_moves"] > 0
        assert step["held"] == (step["why"] == "held")
    held = [s["racers"] for s in steps if s["held"]]
    assert out["summary"]["memory"]["largest_held_racers"] == (max(held) if held else None)
    assert "not held" not in " ".join(run_load.report_capacity(out)[:2])
    assert any(line.startswith(f"| memory | {steps[1]['racers']} | ") for line in run_load.report_capacity(out))


def test_readback_bench_measures_full_against_incremental_read_backs(tmp_path: Path) -> None:
    import json
    import subprocess

    report = tmp_path / "readback.json"
    out = subprocess.run(
        [sys.executable, str(BENCH / "readback_bench.py"), "--entries", "10", "--changes", "4", "--runs", "1",
         "--json", str(report)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(report.read_text())
    assert sorted(run["mode"] for run in figures["runs"]) == ["full", "incremental"]
    for run in figures["runs"]:
        assert run["entries_per_racer"] == [10, 10, 10] and run["changes"] == 4
        assert run["log_reads_per_change"] == 1.0  # every change read back, the three logs in one round trip
    assert set(figures["summary"]["10"]["median_cpu_us_per_change"]) == {"full", "incremental"}


# ---------------------------------------------------------------- every bench's plot-server


def test_bench_servers_listen_on_their_game_port_only(run_load: ModuleType) -> None:
    """By default the spectator page takes the game port + 1 (the metrics listener + 2), which
    may be another run's free port: two benches at once (or a bench and the tests) would clash.
    The servers the benches start listen on their own game port and nothing else (run_load's on
    a free port of its own for metrics too)."""
    from support import listening_ports

    def port_of(url: str) -> int:
        return int(url.rsplit(":", 1)[1])

    with run_load.target_server("memory", 290) as target:
        # The metrics listener opens just after the game port: wait for it, then nothing else.
        expected = {port_of(target.url), target.metrics_port}
        deadline = time.monotonic() + 15
        while listening_ports(target.server.pid) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listening_ports(target.server.pid) == expected
    with load("profile_move").race_server("memory", "py-spy", "") as (url, process, _target):
        assert listening_ports(process.pid) == {port_of(url)}
    with load("attacks").plot_server(BENCH.parent) as (process, port):
        assert listening_ports(process.pid) == {port}


def test_the_daily_bench_submits_reads_and_serves_the_api() -> None:
    """bench/daily_bench.py, small (its figures at 100,000 players: docs/benchmarks.md, "The daily deal")."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, str(BENCH / "daily_bench.py"), "--players", "300", "--reads", "20", "--api-seconds", "0.5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    assert figures["submit"]["players"] == 300 and figures["memory"]["used_memory_per_player_day"] > 0
    assert figures["read"]["board_page_ms"]["p99"] > 0
    assert figures["api_cached"]["answers_per_s"] > 0 and figures["api_cached"]["store_reads_per_s"] <= 2
