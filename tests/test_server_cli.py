"""``plot-server`` as a real process: defaults (embedded store), environment variables, Redis, TLS,
the health check, structured logs, and a clean shutdown on SIGTERM that tells the clients.

tests/tls/ holds a self-signed certificate for 127.0.0.1 (made once with ``openssl req -x509
-newkey rsa:2048 -nodes -days 36500 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1``),
so the test needs no openssl at run time.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
from typing import Any

from redis_fixture import free_port
from support import TLS, health, log_lines, server_process, wait_healthy
from websockets.asyncio.client import connect

from shared import protocol as p


async def hello_and_wait_for_shutdown(uri: str, proc: subprocess.Popen[str], ssl_context: Any = None) -> p.Shutdown:
    async with connect(uri, ssl=ssl_context) as ws:
        await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Ann")))
        welcome = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 5))
        assert isinstance(welcome, p.Welcome)
        await ws.send(p.encode(p.CreateRoom()))
        room = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 5))
        assert isinstance(room, p.Room)
        proc.send_signal(signal.SIGTERM)
        while True:
            msg = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 5))
            if isinstance(msg, p.Shutdown):
                return msg


async def test_defaults_embedded_store_env_port_and_clean_sigterm() -> None:
    port, listener = free_port(), free_port()
    with server_process(env={"PLOT_PORT": str(port), "PLOT_METRICS_PORT": str(listener)}) as proc:
        assert (await asyncio.to_thread(wait_healthy, proc, port))["status"] == "ok"
        assert health(listener)[1]["store"] == "memory"  # the detailed /healthz, on the metrics listener
        shutdown = await hello_and_wait_for_shutdown(f"ws://127.0.0.1:{port}", proc)
        assert "shutting down" in shutdown.reason
        assert await asyncio.to_thread(proc.wait, 10) == 0
        events = [line["event"] for line in log_lines(proc)]
    assert events[0] == "server_started" and "signal" in events and events[-1] == "server_stopped"
    assert "room_created" in events and "player_new" in events


async def test_redis_flag_and_health(redis_url: str) -> None:
    port, listener = free_port(), free_port()
    args = ("--port", str(port), "--metrics-port", str(listener), "--redis", redis_url, "--log-level", "warning")
    with server_process(*args) as proc:
        assert (await asyncio.to_thread(wait_healthy, proc, port))["store_ok"]
        assert health(listener)[1]["store"] == f"redis redis://{redis_url.split('//', 1)[1].split('/', 1)[0]}"
        proc.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(proc.wait, 10) == 0
        assert log_lines(proc) == []  # warning level: a clean run logs nothing


async def test_tls_serves_wss() -> None:
    port = free_port()
    args = ("--port", str(port), "--tls-cert", str(TLS / "localhost.pem"), "--tls-key", str(TLS / "localhost.key"))
    with server_process(*args) as proc:
        await asyncio.to_thread(wait_healthy, proc, port, "https")
        context = ssl.create_default_context(cafile=str(TLS / "localhost.pem"))
        shutdown = await hello_and_wait_for_shutdown(f"wss://127.0.0.1:{port}", proc, context)
        assert shutdown.retry_after_ms
        assert await asyncio.to_thread(proc.wait, 10) == 0


def test_half_a_tls_pair_is_refused() -> None:
    with server_process("--port", str(free_port()), "--tls-cert", str(TLS / "localhost.pem")) as proc:
        assert proc.wait(10) != 0
        assert proc.stderr is not None and "--tls-key" in proc.stderr.read()
