"""docker-compose.yml and the Dockerfile: no container engine runs here, so check their shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVER_COMMAND = ["plot-server", "--host", "0.0.0.0", "--port", "8765", "--redis", "redis://redis:6379/0"]


def compose() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(document, dict)
    return document


def test_compose_runs_redis_7_with_append_only_persistence_and_a_healthcheck() -> None:
    redis = compose()["services"]["redis"]
    assert re.fullmatch(r"redis:7(\.[0-9.]+)?(-alpine)?", redis["image"])
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])  # the AOF outlives the container
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "ports" not in redis  # only the server reaches Redis


def test_compose_builds_the_server_and_starts_it_after_redis_is_healthy() -> None:
    document = compose()
    server = document["services"]["server"]
    assert server["build"]["context"] == "."
    assert (ROOT / server["build"]["dockerfile"]).is_file()
    assert server["command"] == SERVER_COMMAND
    assert server["ports"] == ["8765:8765"]
    assert server["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(server["healthcheck"]["test"])
    for volume in document["services"]["redis"]["volumes"]:
        assert volume.split(":")[0] in document["volumes"]


def test_dockerfile_installs_the_server_extra_on_python_3_11_slim() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert any("pip install '.[server]'" in line for line in instructions)
    cmd = [line for line in instructions if line.startswith("CMD ")]
    assert len(cmd) == 1 and json.loads(cmd[0].removeprefix("CMD ")) == SERVER_COMMAND
    assert "EXPOSE 8765" in instructions
    for line in instructions:  # everything copied into the image exists
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


def test_dockerignore_keeps_the_local_venv_and_git_out_of_the_image() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv"} <= set(ignored)
