"""Fixtures of the terminal client's tests. A test file registers one by importing its function;
the tests name it by its fixture name (``state_dir``, ``server``)."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support import running_server

from server.shell import RaceServer


@pytest.fixture(autouse=True, name="state_dir")
def fresh_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The client's state directory (its saved seats and settings), a fresh one for each test."""
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture(name="server")
async def race_server() -> AsyncIterator[RaceServer]:
    """A race server on a free loopback port, with the in-memory store."""
    async with running_server() as running:
        yield running
