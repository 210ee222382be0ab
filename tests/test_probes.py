"""/healthz and /metrics (server/probes.py): metrics only on the metrics listener (loopback by
default, an allow-list otherwise), /healthz on the game port telling a probe what it needs and
no more, both under a per-address rate (429 through real sockets), and a burst of /healthz
costing at most one Redis PING a second (Redis's own INFO commandstats)."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from redis_fixture import RedisServer, free_port
from support import fast_config, listening_ports, metric, metrics, running_server, server_process, wait_healthy

from server.probes import ProbeConfig
from server.store.redis import RedisStore

PUBLIC_FIELDS = {"status", "store_ok", "store_down_s", "protocol"}


def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET on a fresh connection: status, headers, body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def free_pair() -> int:
    """A free port whose + 2 is free too (the metrics listener's default)."""
    for _ in range(50):
        port = free_port()
        if port + 2 > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 2))
            except OSError:
                continue
        return port
    raise AssertionError("no free port pair")


async def test_plot_server_serves_metrics_on_its_own_loopback_listener_not_on_the_game_port() -> None:
    port = free_pair()
    with server_process("--port", str(port), env={"PLOT_METRICS_PORT": ""}) as proc:  # every default
        public = await asyncio.to_thread(wait_healthy, proc, port)
        assert set(public) == PUBLIC_FIELDS and public["status"] == "ok"  # no store address, pid, node
        status, _, body = await asyncio.to_thread(get, port, "/metrics")
        assert status == 404 and b"metrics listener" in body
        assert port + 2 in listening_ports(proc.pid)
        samples = await asyncio.to_thread(metrics, port + 2)
        assert metric(samples, "plot_connections", kind="anonymous") == 0
        status, _, body = await asyncio.to_thread(get, port + 2, "/healthz")
        detailed = json.loads(body)
        assert status == 200 and detailed["store"] == "memory" and detailed["pid"] == proc.pid
        assert set(detailed) >= PUBLIC_FIELDS


async def test_the_metrics_listener_answers_only_the_allowed_networks() -> None:
    probes = ProbeConfig(metrics_port=0, metrics_allow=("10.0.0.0/8", "192.168.0.0/16"))
    async with running_server(config=fast_config(probes=probes)) as server:
        assert server.metrics_port is not None
        for path in ("/metrics", "/healthz"):
            status, _, body = await asyncio.to_thread(get, server.metrics_port, path)
            assert status == 403 and b"--metrics-allow" in body
    async with running_server(config=fast_config(probes=ProbeConfig(metrics_port=None))) as server:
        assert server.metrics_port is None  # no listener at all (plot-server --metrics-port 0)
        assert (await asyncio.to_thread(get, server.port, "/metrics"))[0] == 404


def burst(port: int, path: str, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _: get(port, path), range(count)))


async def test_probes_past_the_per_address_rate_are_answered_429_on_both_ports() -> None:
    probes = ProbeConfig(metrics_port=0, probe_rate=2.0)  # bursts of 4
    async with running_server(config=fast_config(probes=probes)) as server:
        assert server.metrics_port is not None
        for port, path in ((server.port, "/healthz"), (server.metrics_port, "/metrics"), (server.port, "/metrics")):
            answers = await asyncio.to_thread(burst, port, path, 20)
            statuses = [status for status, _, _ in answers]
            assert statuses.count(429) >= 20 - 4 - 2, (port, path, statuses)  # a burst of 4, ~0.5 s of refill
            refused = next(headers for status, headers, _ in answers if status == 429)
            assert 1 <= int(refused["Retry-After"]) <= 1
        # The refusals are counted, on the listener's own budget once it has refilled.
        deadline = time.monotonic() + 10
        while (answer := await asyncio.to_thread(get, server.metrics_port, "/metrics"))[0] == 429:
            assert time.monotonic() < deadline, "the listener's budget never refilled"
            await asyncio.sleep(0.1)
        text = answer[2].decode()
        limited = next(line for line in text.splitlines() if line.startswith('plot_limited_total{limit="probe_rate"}'))
        assert float(limited.split()[-1]) >= 3 * 14


def ping_calls(redis: RedisServer) -> int:
    stats = redis.command("INFO", "commandstats")
    assert isinstance(stats, bytes)
    line = next((row for row in stats.decode().splitlines() if row.startswith("cmdstat_ping:")), "calls=0,")
    return int(line.split("calls=", 1)[1].split(",", 1)[0])


async def test_a_burst_of_healthz_costs_at_most_one_store_ping_a_second(own_redis_server: RedisServer) -> None:
    store = RedisStore(own_redis_server.url)
    config = fast_config(probes=ProbeConfig(metrics_port=0, probe_rate=0))  # no rate: only the cache stands between
    try:
        async with running_server(store, config) as server:
            await asyncio.to_thread(get, server.port, "/healthz")  # the start-up's own pings are done
            before = ping_calls(own_redis_server)
            started = time.monotonic()
            answers: list[tuple[int, dict[str, str], bytes]] = []
            while time.monotonic() - started < 2.5:  # probes back to back, 8 at a time, for 2.5 s
                answers += await asyncio.to_thread(burst, server.port, "/healthz", 80)
            seconds = time.monotonic() - started
            pings = ping_calls(own_redis_server) - before
            assert all(status == 200 for status, _, _ in answers) and len(answers) >= 160
            assert 2 <= pings <= math.ceil(seconds) + 1, (pings, seconds, len(answers))
        # Without the cache (a ttl of 0) probes ping as they come (those in flight together share
        # one PING): the count above is the cache's doing.
        uncached = replace(config, probes=ProbeConfig(metrics_port=0, probe_rate=0, store_status_ttl_s=0))
        async with running_server(store, uncached) as server:
            before = ping_calls(own_redis_server)
            started = time.monotonic()
            while time.monotonic() - started < 1.0:
                await asyncio.to_thread(burst, server.port, "/healthz", 80)
            assert ping_calls(own_redis_server) - before > 3 * (math.ceil(seconds) + 1)
    finally:
        await store.close()


async def test_healthz_reports_a_store_outage_within_its_cache_second(own_redis_server: RedisServer) -> None:
    store = RedisStore(own_redis_server.url, socket_timeout=0.5, connect_timeout=0.5, retries=0)
    try:
        async with running_server(store, fast_config()) as server:
            assert (await asyncio.to_thread(get, server.port, "/healthz"))[0] == 200
            own_redis_server.stop()
            deadline = time.monotonic() + 5
            while (answer := await asyncio.to_thread(get, server.port, "/healthz"))[0] != 503:
                assert time.monotonic() < deadline, "the outage never showed"
                await asyncio.sleep(0.1)
            body = json.loads(answer[2])
            assert set(body) == PUBLIC_FIELDS and body["store_ok"] is False
    finally:
        await store.close()
