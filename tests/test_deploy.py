"""docker-compose.yml and the Dockerfile: no container engine runs here, so check their shape."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from haproxy_fixture import find_haproxy

from server.proxy import TrustedProxies

ROOT = Path(__file__).resolve().parent.parent
SERVER_COMMAND = ["plot-server", "--host", "0.0.0.0", "--port", "8765", "--redis", "redis://redis:6379/0"]
METRICS_LISTENER = ["--metrics-host", "0.0.0.0", "--metrics-allow", "172.28.0.0/24,loopback"]
# The compose file's nodes share their rooms, and serve metrics to the compose network only.
NODE_COMMAND = [*SERVER_COMMAND, "--multi-node", *METRICS_LISTENER]


def compose() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


def test_prometheus_scrapes_every_node_s_metrics_listener_with_the_alert_rules() -> None:
    document = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    [job] = document["scrape_configs"]
    nodes = [name for name, service in compose()["services"].items() if service.get("command") == NODE_COMMAND]
    assert job["static_configs"][0]["targets"] == [f"{node}:8767" for node in nodes]  # game port + 2
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert document["rule_files"] == ["alerts.yml"] and (ROOT / "deploy" / "alerts.yml").is_file()


def test_compose_runs_redis_7_with_append_only_persistence_and_a_healthcheck() -> None:
    redis = compose()["services"]["redis"]
    assert re.fullmatch(r"redis:7(\.[0-9.]+)?(-alpine)?", redis["image"])
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])  # the AOF outlives the container
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "ports" not in redis  # only the server reaches Redis


def test_compose_builds_the_nodes_and_starts_them_after_redis_is_healthy() -> None:
    document = compose()
    for name in ("server", "server-b"):
        node = document["services"][name]
        assert node["build"]["context"] == "."
        assert (ROOT / node["build"]["dockerfile"]).is_file()
        assert node["command"] == NODE_COMMAND
        assert "ports" not in node  # only HAProxy is published
        assert node["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "/healthz" in " ".join(node["healthcheck"]["test"])
    for volume in document["services"]["redis"]["volumes"]:
        assert volume.split(":")[0] in document["volumes"]


def test_the_default_compose_up_runs_two_nodes_behind_haproxy() -> None:
    """A plain `docker compose up` starts Redis, both nodes and HAProxy: no profiles."""
    services = compose()["services"]
    assert sorted(services) == ["haproxy", "redis", "server", "server-b"]
    assert not [name for name, service in services.items() if service.get("profiles")]
    header = (ROOT / "docker-compose.yml").read_text().split("\nname:", 1)[0]
    assert "--multi-node" in header and "profile" not in header
    # HAProxy waits for one healthy node; the other comes in through HAProxy's own /healthz check.
    depends = services["haproxy"]["depends_on"]
    assert depends == {"server": {"condition": "service_healthy"}, "server-b": {"condition": "service_started"}}


def test_haproxy_is_the_only_published_service_and_mounts_its_config() -> None:
    services = compose()["services"]
    haproxy = services["haproxy"]
    assert re.fullmatch(r"haproxy:[0-9.]+(-alpine)?", haproxy["image"])
    assert haproxy["ports"] == ["8765:8765", "8766:8766"]  # the game and the spectator page
    mount = "./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"
    assert haproxy["volumes"] == [mount]
    assert (ROOT / mount.split(":")[0]).is_file()
    assert "/healthz" in " ".join(haproxy["healthcheck"]["test"])
    assert [name for name, service in services.items() if "ports" in service] == ["haproxy"]


def haproxy_sections() -> dict[str, list[str]]:
    """deploy/haproxy.cfg as {section header: its directive lines}, comments dropped."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in (ROOT / "deploy" / "haproxy.cfg").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = sections.setdefault(line.strip(), [])
        else:
            assert current is not None, raw
            current.append(" ".join(line.split()))
    return sections


def test_haproxy_balances_websockets_over_every_node_with_health_checks() -> None:
    sections = haproxy_sections()
    defaults = sections["defaults"]
    assert "mode http" in defaults  # HTTP mode passes the WebSocket upgrade, then tunnels
    assert any(line.startswith("timeout tunnel ") for line in defaults)
    default_server = next(line for line in defaults if line.startswith("default-server "))
    assert " check" in default_server and "init-addr last,libc,none" in default_server
    # A refused connection marks its node down at once (the room hash and balance factor drop it).
    assert "observe layer4 error-limit 1 on-error mark-down" in default_server
    assert "resolvers docker" in default_server and "resolvers docker" in sections
    assert "option redispatch 1" in defaults  # a connection refused by a dead node is retried on another
    services = compose()["services"]
    nodes = [name for name, service in services.items() if service.get("command") == NODE_COMMAND]
    assert nodes == ["server", "server-b"]
    for frontend, port, backend, check in (
        ("game", 8765, "game_nodes", "http-check send meth GET uri /healthz"),
        ("web", 8766, "web_nodes", "http-check send meth GET uri / hdr Host localhost"),
    ):
        assert f"bind :{port}" in sections[f"frontend {frontend}"]
        assert f"default_backend {backend}" in sections[f"frontend {frontend}"]
        lines = sections[f"backend {backend}"]
        assert "option httpchk" in lines and check in lines and "http-check expect status 200" in lines
        servers = [line.split()[2] for line in lines if line.startswith("server ")]
        assert servers == [f"{node}:{port}" for node in nodes]  # every node of the compose file, on that port
    # Room affinity: a connection's ?room=CODE picks its node (docs/deployment.md, "Room affinity").
    game = sections["backend game_nodes"]
    assert {"balance url_param room", "hash-type consistent", "hash-balance-factor 150"} <= set(game)
    assert sections["backend web_nodes"][0] == "balance roundrobin"  # the page's own HTTP is stateless
    assert "http-request deny deny_status 404 if { path /metrics }" in sections["frontend game"]
    # /healthz from outside is HAProxy's own answer: no outsider reaches a node's probe budget.
    assert {"monitor-uri /healthz", "monitor fail if { nbsrv(game_nodes) lt 1 }"} <= set(sections["frontend game"])
    # And HAProxy's own check (tests/haproxy_fixture.py finds the binary, or fails saying how to
    # install it). The compose names do not resolve here: init-addr none lets HAProxy start with
    # those servers down, as it must while a node's container is not up yet.
    config = ROOT / "deploy" / "haproxy.cfg"
    result = subprocess.run([find_haproxy(), "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "Configuration file is valid" in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )


def test_haproxy_names_each_client_and_only_haproxy_is_trusted_to() -> None:
    """The nodes count each client behind HAProxy (docs/reliability.md, "Clients behind a balancer"):
    HAProxy sends a PROXY v2 header on every node connection, and the nodes trust exactly
    HAProxy's fixed address, which lies in the compose network's fixed subnet."""
    default_server = next(line for line in haproxy_sections()["defaults"] if line.startswith("default-server "))
    assert "send-proxy-v2" in default_server.split()
    document = compose()
    subnet = ipaddress.ip_network(document["networks"]["default"]["ipam"]["config"][0]["subnet"])
    balancer = ipaddress.ip_address(document["services"]["haproxy"]["networks"]["default"]["ipv4_address"])
    assert balancer in subnet
    for name in ("server", "server-b"):
        trusted = TrustedProxies.parse(document["services"][name]["environment"]["PLOT_TRUSTED_PROXY"])
        assert trusted.networks == (ipaddress.ip_network(f"{balancer}/32"),)


def test_dockerfile_installs_the_server_extra_on_python_3_11_slim() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert any("pip install '.[server]'" in line for line in instructions)
    cmd = [line for line in instructions if line.startswith("CMD ")]
    assert len(cmd) == 1 and json.loads(cmd[0].removeprefix("CMD ")) == SERVER_COMMAND
    assert "EXPOSE 8765" in instructions and "EXPOSE 8766" in instructions  # the game, the spectator page
    for line in instructions:  # everything copied into the image exists
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


def test_dockerignore_keeps_the_local_venv_and_git_out_of_the_image() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv"} <= set(ignored)
