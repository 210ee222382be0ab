"""Smoke test of the load benchmark tooling (bench/), so it cannot rot silently.

A few seconds: bench/run_load.py starts a real plot-server (memory store) and the bare echo
server on free loopback ports, exactly as the benchmark does, and runs bench/loadgen.py
against each for about a second. The checks are about the tooling working (accepted moves,
no errors, spectators reached, the window marks read), never about timings.
"""

from __future__ import annotations

import importlib.util
import sys
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
        result: dict[str, Any] = run_load.run_loadgen(mode, target, args, timeout=60)
    return result


def test_loadgen_races_real_games_against_plot_server(run_load: ModuleType) -> None:
    result = run(
        run_load,
        "memory",
        "server",
        ["--racers", "8", "--spectators", "3", "--pace", "0", "--duration", "1", "--warmup", "0.3"],
    )
    assert result["mode"] == "server"
    assert result["accepted_moves"] > 0
    assert result["moves_per_second"] > 0
    assert result["errors"] == 0 and result["rejected"] == 0, result["error_codes"]
    assert result["failures"] == []
    assert result["ack_latency_ms"]["count"] == result["accepted_moves"]
    # Spectators saw leaderboards carrying the racers' moves.
    assert result["leaderboards_received"] > 0
    assert result["fanout_from_send_ms"]["count"] > 0
    # The runner read the window marks and sampled the server process there.
    assert "server_cpu_share" in result and "server_cpu_us_per_move" in result
    assert result["server_peak_rss_mib"] > 0


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
    assert sizes["move_ok_bytes"] > 150  # a whole board rides on every acknowledgement
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
