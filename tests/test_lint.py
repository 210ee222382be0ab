"""The code standards, checked by the test run: ruff (lint and format) and mypy --strict over the whole repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_clean() -> None:
    """The layout is ruff's (`ruff format` fixes it; the version is pinned in pyproject.toml, as
    a newer formatter style may lay out the same code differently)."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "run `ruff format`:\n" + result.stdout + result.stderr


def test_mypy_strict_clean_on_the_whole_repository() -> None:
    # "." covers shared/, server/, client/, tests/ and bench/ (pyproject.toml excludes .venv/ and build/).
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
