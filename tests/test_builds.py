"""The engine's two builds (docs/engine.md, "The compiled build"): the compiled one is used exactly
when it matches the sources, and the engine's and the core's tests pass on the pure-Python one too
(this run covers whichever build is in use; the pure run below covers the other)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shared.engine
from shared._build import PURE_SWITCH, compiled_folder

ROOT = Path(__file__).resolve().parent.parent

# The tests of the engine and of the room core (the core on the test shell: tests/support.py not needed).
ENGINE_AND_CORE_TESTS = [
    "tests/test_engine_rules.py",
    "tests/test_engine_properties.py",
    "tests/test_engine_differential.py",
    "tests/test_vectors.py",
    "tests/test_blocked_pending.py",
    "tests/test_room_core.py",
    "tests/test_core_failures.py",
    "tests/test_move_path.py",
]


def engine_file(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import shared.engine; print(shared.engine.__file__)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_the_compiled_build_is_in_use_exactly_when_it_matches_the_sources() -> None:
    compiled = compiled_folder() is not None
    assert shared.engine.__file__ is not None
    assert shared.engine.__file__.endswith(".py") is not compiled
    if compiled:
        assert Path(shared.engine.__file__).is_relative_to(ROOT / "build" / "compiled")


def test_the_pure_switch_imports_the_source_modules() -> None:
    env = {**os.environ, PURE_SWITCH: "1"}
    assert engine_file(env) == str(ROOT / "shared" / "engine.py")


def test_engine_and_core_tests_pass_on_the_pure_build() -> None:
    if compiled_folder() is None:
        pytest.skip("no compiled build in use (scripts/compile_engine.py): this run is the pure-Python one")
    env = {**os.environ, PURE_SWITCH: "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *ENGINE_AND_CORE_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
