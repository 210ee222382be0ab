"""scripts/setup.sh: the set-up the README's test command and .ci/run run on a fresh machine.

Nothing is uninstalled here: a machine without HAProxy and Chromium is made by hiding their
programs in a private mount namespace (``unshare``), where the script's check phase runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup.sh"
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def installed_programs(*names: str) -> list[str]:
    """Every executable file of these names the script could find (the PATH and the sbin folders)."""
    dirs = [*os.environ.get("PATH", "").split(os.pathsep), *SYSTEM_DIRS]
    found: list[str] = []
    for name in names:
        for folder in dirs:
            path = os.path.realpath(os.path.join(folder, name)) if folder else ""
            if path and os.path.isfile(path) and os.access(path, os.X_OK) and path not in found:
                found.append(path)
    return found


def run_without_programs(tmp_path: Path, names: tuple[str, ...], script: str) -> subprocess.CompletedProcess[str]:
    """Run the bash script in a mount namespace where each installed program of these names is an
    empty, non-executable file, so the machine looks as if they were never installed."""
    hidden = installed_programs(*names)
    assert hidden, "the set-up left none of the programs on this machine"
    empty = tmp_path / "not-a-program"
    empty.write_text("")
    empty.chmod(0o644)
    mounts = "".join(f"mount --bind {empty} {path} && " for path in hidden)
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) makes the machine without the programs"
    as_root = [] if os.geteuid() == 0 else ["-r"]  # a user namespace maps a non-root user to root
    return subprocess.run(
        [unshare, "-m", *as_root, "bash", "-c", mounts + script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def readme_commands() -> list[str]:
    """The README's shell blocks, each as one string."""
    return re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_test_command_and_ci_run_the_setup_script() -> None:
    commands = readme_commands()
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest" in commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nbash scripts/setup.sh && .venv/bin/python -m pytest\n" in ci
    assert "apt-get" not in ci  # one place installs system packages: the script


def test_after_the_setup_nothing_is_missing() -> None:
    """The suite runs after the script: every system package it needs is there."""
    done = subprocess.run(["bash", str(SETUP), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "system packages: all present"


def test_on_a_machine_without_haproxy_and_chromium_the_setup_would_install_them(tmp_path: Path) -> None:
    done = run_without_programs(tmp_path, ("chromium", "haproxy"), f"exec bash {SETUP} --check")
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stdout.strip()
    assert line.startswith("would install: "), line
    assert {"chromium", "haproxy"} <= set(line.removeprefix("would install: ").split())
    # The rest is present here, so it is not installed again.
    assert not {"pkg-config", "libicu-dev", "g++", "python3-venv"} & set(line.split())


def test_an_unknown_option_is_refused_with_the_usage() -> None:
    done = subprocess.run(["bash", str(SETUP), "--bogus"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "usage: scripts/setup.sh [--race] [--check]" in done.stderr


def test_the_readme_race_command_runs_the_race_set_up() -> None:
    commands = readme_commands()
    assert "bash scripts/setup.sh --race && .venv/bin/plot practice" in commands


def test_the_race_set_up_needs_no_browser_and_no_balancer(tmp_path: Path) -> None:
    """Hide HAProxy and Chromium: the race's set-up finds nothing missing (the name checks' build
    tools are present here), while the test set-up would install both."""
    script = f"bash {SETUP} --race --check; echo race=$?; bash {SETUP} --check; echo tests=$?"
    done = run_without_programs(tmp_path, ("chromium", "haproxy"), script)
    lines = done.stdout.strip().splitlines()
    assert lines[:2] == ["system packages: all present", "race=0"], done.stdout + done.stderr
    assert lines[2].startswith("would install: ") and {"chromium", "haproxy"} <= set(lines[2].split()), lines
    assert lines[3] == "tests=1"
