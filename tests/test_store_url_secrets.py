"""No credential of the store URL ever leaves plot-server: not in ``GET /healthz``, not in its log,
not in its errors. Each form redis-py reads is tried on a real ``plot-server`` process: the
userinfo, the query's ``password`` and ``username``, TLS file paths and their password, and a
Redis Cluster URL naming several seeds. Only scheme, host(s) and port(s) are shown."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from redis_fixture import RedisServer, free_port
from support import eventually_sync, health, server_process, wait_healthy

SECRET = "s3cretPW"  # the password, and a part of every secret path, so that any leak shows


@pytest.fixture
def guarded_redis(own_redis_server: RedisServer) -> Iterator[RedisServer]:
    """A Redis that wants a password: for the default user, and an ACL user ``racer``."""
    own_redis_server.command("ACL", "SETUSER", "racer", "on", f">{SECRET}", "~*", "&*", "+@all")
    own_redis_server.command("CONFIG", "SET", "requirepass", SECRET)
    yield own_redis_server


def _forms(port: int, seeds: tuple[int, int]) -> dict[str, tuple[str, str, bool]]:
    """form -> (URL, what /healthz and the log show of it, whether the store answers with it)."""
    here = f"127.0.0.1:{port}"
    tls = f"ssl_keyfile=/run/{SECRET}/key.pem&ssl_certfile=/run/{SECRET}/cert.pem&ssl_ca_certs=/run/{SECRET}/ca.pem"
    one, two = (f"127.0.0.1:{seed}" for seed in seeds)
    return {
        "userinfo": (f"redis://racer:{SECRET}@{here}/0", f"redis://{here}", True),
        "password only userinfo": (f"redis://:{SECRET}@{here}/0", f"redis://{here}", True),
        "query password": (f"redis://{here}/0?password={SECRET}", f"redis://{here}", True),
        "query username and password": (f"redis://{here}/0?username=racer&password={SECRET}", f"redis://{here}", True),
        "tls key and certificate paths": (
            f"rediss://racer:{SECRET}@{here}/0?{tls}&ssl_password={SECRET}",
            f"rediss://{here}",
            False,  # the files do not exist: the store never answers, the errors are logged
        ),
        "cluster seeds": (
            f"redis+cluster://racer:{SECRET}@{one},{two}/0?password={SECRET}",
            f"redis+cluster://{one},{two}",
            False,  # no cluster there: its errors are logged
        ),
    }


FORMS = list(_forms(0, (0, 0)))


def _output(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert proc.stdout is not None and proc.stderr is not None
    return proc.stdout.read() + proc.stderr.read()


def _health_answered(proc: subprocess.Popen[str], port: int) -> dict[str, Any]:
    answer: dict[str, Any] = {}

    def answered() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"plot-server exited {proc.returncode}")
        try:
            answer.update(health(port)[1])
        except OSError:
            return False
        return answer.get("store_ok") is False

    eventually_sync(answered, 15.0, 0.05, "plot-server answered no /healthz")
    return answer


@pytest.mark.parametrize("form", FORMS)
async def test_no_credential_of_the_store_url_is_shown_or_logged(guarded_redis: RedisServer, form: str) -> None:
    assert guarded_redis.port is not None
    store_url, shown, answers = _forms(guarded_redis.port, (free_port(), free_port()))[form]
    port, listener = free_port(), free_port()
    args = ("--port", str(port), "--metrics-port", str(listener), "--redis", store_url, "--log-level", "info")
    with server_process(*args) as proc:
        if answers:
            public = await asyncio.to_thread(wait_healthy, proc, port)
            assert public["store_ok"] is True  # the credentials worked: the URL reached redis-py whole
        else:
            public = await asyncio.to_thread(_health_answered, proc, port)
        detailed = health(listener)[1]  # the metrics listener's /healthz names the store
        output = await asyncio.to_thread(_output, proc)
    assert SECRET not in json.dumps(public) + json.dumps(detailed)
    assert SECRET not in output, [line for line in output.splitlines() if SECRET in line]
    assert detailed["store"] == f"redis {shown}" and "store" not in public
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    started = next(event for event in events if event["event"] == "server_started")
    assert started["store"] == f"redis {shown}"
    if not answers:  # the store's own errors were logged, and named it by its address alone
        causes = [event["cause"] for event in events if event["event"] == "store_unreachable"]
        assert causes and all(SECRET not in cause for cause in causes)


def test_a_refused_store_url_is_named_without_its_credentials() -> None:
    with server_process("--redis", f"redis+sentinel://127.0.0.1:1/0?password={SECRET}") as proc:
        assert proc.wait(10) != 0
        assert proc.stderr is not None
        error = proc.stderr.read()
    assert "--redis" in error and SECRET not in error
