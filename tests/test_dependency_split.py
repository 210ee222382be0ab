"""The dependency split: a client-only install (no ``server`` extra) has no redis, and must not need it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Imported in a fresh interpreter: client.cli, then every module of shared/ and client/ (the plot command's
# subcommands, the terminal UI). A module that fails for another reason (work in progress elsewhere) is
# that module's own tests' business; here it is only reported.
CLIENT_SIDE_IMPORTS = """
import importlib, pkgutil, sys, json
import client.cli
import client, shared
broken = {}
for package in (shared, client):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + ".", onerror=lambda name: None):
        try:
            importlib.import_module(module.name)
        except Exception as error:
            broken[module.name] = repr(error)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("redis", "hiredis"))
print(json.dumps({"redis_modules": loaded, "modules": sorted(sys.modules), "broken": broken}))
"""

# Makes ``import redis`` fail, as on a client-only install.
BLOCK_REDIS = """
import sys
class NoRedis:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "hiredis"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoRedis())
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_client_and_shared_do_not_import_redis() -> None:
    result = run_python(CLIENT_SIDE_IMPORTS)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert {"client.cli", "shared.engine", "shared.deal"} <= set(report["modules"])  # the walk did import them
    assert report["redis_modules"] == [], report["redis_modules"]
    # -X importtime lists every module imported, with its package path, one per line
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line]
    assert "client.cli" in imported
    assert not [name for name in imported if name.split(".")[0] in ("redis", "hiredis")]


def test_the_memory_store_works_without_redis_installed() -> None:
    code = BLOCK_REDIS + textwrap.dedent("""
        import asyncio
        import server.store
        from server.store import MemoryStore, open_store
        from server.store.memory import MemoryStore as Direct
        assert MemoryStore is Direct

        async def main():
            store = open_store(None)
            assert isinstance(store, MemoryStore)
            assert await store.create_room("ROOM", b"x", open_race=0)
            assert (await store.append_move("ROOM", 0, "p1", 0, b"m")).value == "appended"
            assert await store.load_moves("ROOM", 0, "p1") == [b"m"]

        asyncio.run(main())
        try:
            open_store("redis://127.0.0.1:6379/0")
        except ImportError as error:
            print("REFUSED:", error)
        assert "redis" not in sys.modules
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "REFUSED: the Redis store needs the server extra: pip install 'the-plot-race[server]'" in result.stdout


def test_redis_is_only_in_the_server_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [dep for dep in project["dependencies"] if dep.lower().startswith(("redis", "hiredis"))]
    assert any(dep.startswith("redis[hiredis]") for dep in project["optional-dependencies"]["server"])


def test_the_server_extra_parses_redis_replies_with_hiredis() -> None:
    from redis.asyncio.connection import DefaultParser

    assert "Hiredis" in DefaultParser.__name__


def test_the_server_runs_without_prometheus_client_with_metrics_off() -> None:
    """prometheus_client comes with the server extra; ``plot practice`` on a client-only install
    starts a server all the same (no /metrics: a 404 saying why)."""
    code = textwrap.dedent("""
        import sys
        class NoPrometheus:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "prometheus_client":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, NoPrometheus())

        import asyncio, urllib.request, urllib.error
        from server.shell import RaceServer, ServerConfig
        from server.probes import ProbeConfig
        from server.store.memory import MemoryStore

        def get(port):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
            except urllib.error.HTTPError as error:
                return error.code, error.read().decode()

        async def main():
            server = RaceServer(MemoryStore(), ServerConfig(port=0, probes=ProbeConfig(metrics_port=0)))
            assert server.metrics is None
            await server.start()
            try:
                print(await asyncio.to_thread(get, server.metrics_port))
            finally:
                await server.stop()
            assert "prometheus_client" not in sys.modules

        asyncio.run(main())
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(404, 'metrics are unavailable: no prometheus_client installed\\n')" in result.stdout


def test_prometheus_client_is_only_in_the_server_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [dep for dep in project["dependencies"] if dep.lower().startswith("prometheus")]
    assert any(dep.startswith("prometheus_client") for dep in project["optional-dependencies"]["server"])
