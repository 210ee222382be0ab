"""The peer kind of bench/run_load.py: a Colyseus server and its load generator on Node
(bench/peer/README.md), started the way the Python kinds are."""

from __future__ import annotations

import shutil
from pathlib import Path

PEER = Path(__file__).resolve().parent / "peer"
INSTALL = "npm ci --prefix bench/peer"


def node() -> str:
    binary = shutil.which("node")
    if binary is None:
        raise RuntimeError("the peer needs Node 20 (node on PATH)")
    if not (PEER / "node_modules" / "@colyseus" / "core").is_dir():
        raise RuntimeError(f"the peer's packages are not installed: run `{INSTALL}`")
    return binary


def server_command(port: int) -> list[str]:
    return [node(), str(PEER / "server.js"), "--port", str(port)]


def loadgen_command(url: str, args: list[str]) -> list[str]:
    """bench/loadgen.py's flags: the peer's generator reads --racers, --pace, --duration, --warmup."""
    return [node(), str(PEER / "loadgen.js"), "--url", url, *args]
