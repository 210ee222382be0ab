"""plot-server's configuration: every flag and environment variable is checked before anything
starts, and a bad one ends in one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from redis_fixture import RedisServer, free_port
from support import TLS, eventually, health, log_lines, server_process
from websockets.asyncio.client import connect

from server.cli import NUMBERS, ConfigError, build_parser, check_redis_url, config_from_args, main, make_web_server
from server.shell import RaceServer
from server.store.memory import MemoryStore
from shared import protocol as p


def refused(args: list[str], env: dict[str, str] | None = None) -> str:
    """Run plot-server as a process with a bad setting: the one line it prints (exit 2)."""
    with server_process(*args, env=env) as proc:
        assert proc.wait(15) == 2
        assert proc.stderr is not None
        err = proc.stderr.read()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("plot-server: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ([], {"PLOT_PORT": "abc"}, "PLOT_PORT 'abc': expected a whole number"),
        (["--port", "99999"], None, "--port '99999': must be 0 to 65535"),
        (["--port", "65536"], None, "--port '65536': must be 0 to 65535"),
        (["--port", "-1"], None, "must be 0 to 65535"),
        (["--redis", "nonsense"], None, "--redis / REDIS_URL '(not a URL: no scheme://)': expected redis://"),
        ([], {"REDIS_URL": "http://x"}, "REDIS_URL 'http://x': expected redis://"),
        (["--redis", "redis://:6379"], None, "no usable host and port"),
        (["--redis", "redis+cluster://10.0.0.5:7000,10.0.0.6:port"], None, "the port in '10.0.0.6:port' is not"),
        ([], {"REDIS_URL": "redis+cluster://10.0.0.5:7000,,10.0.0.6:7000"}, "no host in the redis+cluster:// URL"),
        ([], {"PLOT_RATE": "fast"}, "PLOT_RATE 'fast': expected a number"),
        ([], {"PLOT_LOG_LEVEL": "loud"}, "PLOT_LOG_LEVEL 'loud'"),
        (["--tls-cert", "/no/such.pem", "--tls-key", "/no/such.key"], None, "'/no/such.pem': no such file"),
        (["--web-ws-url", "http://not-a-websocket/"], None, "--web-ws-url / PLOT_WEB_WS_URL: not a WebSocket URL"),
        (["--spectator-hz", "0"], None, "--spectator-hz '0': must be 0.2 to 100"),
        ([], {"PLOT_RACER_HZ": "often"}, "PLOT_RACER_HZ 'often': expected a number"),
        (["--metrics-allow", "10.0.0.0/33"], None, "--metrics-allow / PLOT_METRICS_ALLOW: '10.0.0.0/33' is not"),
        ([], {"PLOT_METRICS_ALLOW": "loopback,,"}, "PLOT_METRICS_ALLOW: '' is not an address or a network"),
        (["--port", "65534"], {"PLOT_METRICS_PORT": ""}, "the game port + 2 is 65536: give --metrics-port"),
        (["--metrics-port", "70000"], None, "--metrics-port '70000': must be 0 to 65535"),
        (["--probe-rate", "-1"], None, "--probe-rate '-1'"),
        (["--trusted-proxy", "10.0.0.0/8,haproxy"], None, "--trusted-proxy / PLOT_TRUSTED_PROXY: not an address"),
        ([], {"PLOT_TRUSTED_PROXY": "10.0.0.300"}, "not an address or network: '10.0.0.300'"),
        (
            [
                "--trusted-proxy",
                "127.0.0.1",
                "--tls-cert",
                str(TLS / "localhost.pem"),
                "--tls-key",
                str(TLS / "localhost.key"),
            ],
            None,
            "--trusted-proxy does not go with --tls-cert: let the balancer end TLS",
        ),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(args: list[str], env: dict[str, str] | None, says: str) -> None:
    assert says in refused(args, env)


def test_every_numeric_variable_and_flag_is_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build_parser()
    assert {spec.env for spec in NUMBERS} >= {"PLOT_PORT", "PLOT_MAX_FRAME", "PLOT_RATE", "PLOT_ROOM_TTL", "PLOT_GRACE"}
    for spec in NUMBERS:
        for bad in ("abc", "1e999", "nan", "-5"):
            monkeypatch.setenv(spec.env, bad)
            assert main([]) == 2, (spec.env, bad)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"plot-server: {spec.env} '{bad}'"), err
            monkeypatch.delenv(spec.env)
            assert main([spec.flag, bad]) == 2, (spec.flag, bad)
            err = capsys.readouterr().err
            assert err.startswith(f"plot-server: {spec.flag} '{bad}'"), err


def test_flags_win_over_variables_and_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_from_args(build_parser().parse_args([]))
    assert (config.port, config.max_frame, config.rate_per_s, config.max_connections) == (8765, 4096, 30.0, 2000)
    monkeypatch.setenv("PLOT_PORT", "9000")
    monkeypatch.setenv("PLOT_GRACE", "5")
    config = config_from_args(build_parser().parse_args(["--port", "9001"]))
    assert config.port == 9001 and config.core.grace_ms == 5000
    with pytest.raises(ConfigError, match="--port '65536': must be 0 to 65535"):
        config_from_args(build_parser().parse_args(["--port", "65536"]))


def test_trusted_proxies_come_from_the_flag_or_the_variable_and_reach_both_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not config_from_args(build_parser().parse_args([])).limits.trusted_proxies  # none by default
    monkeypatch.setenv("PLOT_TRUSTED_PROXY", "172.28.0.10")
    assert str(config_from_args(build_parser().parse_args([])).limits.trusted_proxies) == "172.28.0.10/32"
    args = build_parser().parse_args(["--trusted-proxy", "10.0.0.0/8, ::1"])
    config = config_from_args(args)
    assert str(config.limits.trusted_proxies) == "10.0.0.0/8,::1/128"
    web = make_web_server(
        build_parser().parse_args(["--trusted-proxy", "10.0.0.0/8, ::1"]), config, RaceServer(MemoryStore(), config)
    )
    assert web is not None and web.config.trusted_proxies == config.limits.trusted_proxies


def test_a_cluster_url_may_name_several_seeds() -> None:
    seeds = "redis+cluster://10.0.0.5:7000,10.0.0.6:7000,[::1]:7001"
    assert check_redis_url(seeds) == seeds
    config_from_args(build_parser().parse_args(["--redis", seeds]))  # accepted: no ConfigError


def test_leaderboard_rates_become_the_cores_intervals(monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_from_args(build_parser().parse_args([]))
    assert (config.core.leaderboard_interval_ms, config.core.spectator_leaderboard_interval_ms) == (100, 100)
    monkeypatch.setenv("PLOT_SPECTATOR_HZ", "2")
    config = config_from_args(build_parser().parse_args(["--racer-hz", "20"]))
    assert (config.core.leaderboard_interval_ms, config.core.spectator_leaderboard_interval_ms) == (50, 500)
    with pytest.raises(ConfigError, match=r"--spectator-hz '101': must be 0\.2 to 100"):
        config_from_args(build_parser().parse_args(["--spectator-hz", "101"]))


def test_the_daily_deal_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLOT_DAILY", raising=False)
    assert config_from_args(build_parser().parse_args([])).core.daily is True
    assert config_from_args(build_parser().parse_args(["--daily", "off"])).core.daily is False
    monkeypatch.setenv("PLOT_DAILY", "off")
    assert config_from_args(build_parser().parse_args([])).core.daily is False
    with pytest.raises(ConfigError, match="expected on or off"):
        config_from_args(build_parser().parse_args(["--daily", "yes"]))


def test_the_queue_bound_becomes_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_from_args(build_parser().parse_args([])).core.max_queued_moves == 32
    monkeypatch.setenv("PLOT_MAX_QUEUED_MOVES", "8")
    assert config_from_args(build_parser().parse_args([])).core.max_queued_moves == 8
    assert config_from_args(build_parser().parse_args(["--max-queued-moves", "0"])).core.max_queued_moves == 0


def test_the_help_still_works() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "server.cli", "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0 and "PLOT_PORT" in result.stdout


async def test_an_unreachable_store_at_start_is_logged_retried_and_seen_coming_back(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    redis = redis_server_factory()
    redis.stop()  # its port is kept: nothing listens there now
    port = free_port()

    def status() -> int:
        try:
            return health(port)[0]
        except OSError:
            return 0  # not listening yet

    with server_process("--port", str(port), "--redis", redis.url) as proc:
        await eventually(lambda: status() == 503, 15, what="/healthz answers 503 while the store is away")
        body: dict[str, object] = {}
        await eventually(lambda: body.update(health(port)[1]) or "store_ok" in body, 5, what="a /healthz body")
        assert body["store_ok"] is False and body["store_down_s"] is not None
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Ann")))
            error = p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 10))
            assert isinstance(error, p.Error) and error.code == p.STORE_UNAVAILABLE
        redis.start()
        await eventually(lambda: status() == 200, 30, what="/healthz answers 200 once the store is back")
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            await ws.send(p.encode(p.Hello(v=p.PROTOCOL_VERSION, name="Ann")))
            assert isinstance(p.decode_server(await asyncio.wait_for(ws.recv(decode=False), 10)), p.Welcome)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 15) == 0
        lines = log_lines(proc)
    events = [line["event"] for line in lines]
    unreachable = next(line for line in lines if line["event"] == "store_unreachable")
    assert "refused" in unreachable["cause"].lower() or "connect" in unreachable["cause"].lower(), unreachable
    assert events.count("store_unreachable") == 1
    assert events.index("store_unreachable") < events.index("store_reachable")
    assert next(line for line in lines if line["event"] == "store_reachable")["down_s"] >= 0
