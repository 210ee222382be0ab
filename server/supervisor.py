"""``plot-server --workers N``: the supervisor of N worker processes on one port
(docs/scaling.md, "One host, all its cores").

The supervisor serves nothing itself: it starts, restarts and replaces whole plot-server nodes.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from server.shell import log_event


def supervise(workers: int, argv: list[str]) -> int:
    """``--workers N``: N worker processes, each a whole plot-server node on the same port (SO_REUSEPORT:
    the kernel spreads new connections over them), restarted when one dies (logged: worker_died,
    worker_started; after a quick death the restart waits, 0.2 s doubling to 5 s). SIGTERM or SIGINT
    is passed on to every worker, which shuts down cleanly; exit 0 once all have. SIGHUP replaces
    the workers one at a time (a deploy: each new one runs the code on disk now): the new worker
    starts beside the old one, and once it listens the old one is stopped (its clients reconnect to
    the others and resume there); a new worker that fails to come up is dropped and the old one
    kept. Each worker serves its own metrics on a unix socket in a directory of the supervisor's,
    so that whichever worker takes a scrape of /metrics answers for the host
    (server/metrics.py, merge_workers), and marks itself ready there once it listens."""
    workers_dir = tempfile.mkdtemp(prefix="plot-workers-")
    command = [sys.executable, "-m", "server.cli", *argv, "--workers", "1", "--multi-node", "--reuse-port"]
    command += ["--worker-count", str(workers), "--workers-dir", workers_dir]
    stopping = False
    reload_wanted = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping, reload_wanted
        if signum == signal.SIGHUP:
            reload_wanted = True
        else:
            stopping = True
        log_event(logging.INFO, "signal", signal=signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}
    delays: dict[int, float] = {}

    def launch(slot: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*command, "--worker-slot", str(slot)])

    def start(slot: int) -> None:
        procs[slot] = launch(slot)
        started[slot] = time.monotonic()
        log_event(logging.INFO, "worker_started", worker=slot, pid=procs[slot].pid)

    def ready_pid(slot: int) -> int | None:
        try:
            with open(os.path.join(workers_dir, f"worker-{slot}.ready")) as file:
                return int(file.read())
        except (OSError, ValueError):
            return None

    def stop(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def replace_worker(slot: int) -> bool:
        """A new worker for ``slot`` beside the old one; once it listens, the old one stops."""
        new = launch(slot)
        deadline = time.monotonic() + 30.0
        while ready_pid(slot) != new.pid:
            why = "stopping" if stopping else None
            if why is None and new.poll() is not None:
                why = f"exited with code {new.returncode}"
            if why is None and time.monotonic() > deadline:
                why = "not listening after 30 s"
            if why is not None:
                stop(new, 5.0)
                log_event(logging.ERROR, "worker_reload_failed", worker=slot, pid=new.pid, why=why)
                return False
            time.sleep(0.05)
        old = procs[slot]
        procs[slot], started[slot] = new, time.monotonic()
        log_event(logging.INFO, "worker_started", worker=slot, pid=new.pid, replacing=old.pid)
        stop(old)
        log_event(logging.INFO, "worker_replaced", worker=slot, old_pid=old.pid, pid=new.pid)
        return True

    for slot in range(workers):
        start(slot)
    due: dict[int, float] = {}
    while not stopping:
        time.sleep(0.1)
        if stopping:
            # Ctrl+C reaches the whole process group: the workers are already stopping on their own
            # SIGINT, and their exits are the shutdown, not deaths to restart.
            break
        if reload_wanted:
            reload_wanted = False
            replaced = 0
            for slot in range(workers):
                if stopping or slot in due or not replace_worker(slot):
                    break
                replaced += 1
            log_event(logging.INFO, "workers_reloaded", replaced=replaced, workers=workers)
        for slot, proc in procs.items():
            code = proc.poll()
            if code is None or slot in due or stopping:
                continue
            quick = time.monotonic() - started[slot] < 2.0
            delays[slot] = min(5.0, delays.get(slot, 0.1) * 2) if quick else 0.0
            log_event(logging.WARNING, "worker_died", worker=slot, pid=proc.pid, code=code, restart_in_s=delays[slot])
            due[slot] = time.monotonic() + delays[slot]
        for slot, when in list(due.items()):
            if time.monotonic() >= when and not stopping:
                del due[slot]
                start(slot)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15.0
    for proc in procs.values():
        stop(proc, max(0.1, deadline - time.monotonic()))
    shutil.rmtree(workers_dir, ignore_errors=True)
    log_event(logging.INFO, "workers_stopped", workers=workers)
    return 0
