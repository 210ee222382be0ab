"""Deal sources for the winnable-room tests, at module level so that they pickle to the server's
worker process (the server imports them there by name). Kept apart from the test module so the
worker imports only this small file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from shared.fairplay import random_deal


def gated_random_deal(gate: str) -> int:
    """A random deal, drawn only once the file ``gate`` exists (the test opens the gate).

    First writes this process's id to ``gate + ".pid"``, so a test can tell where the search ran.
    """
    Path(gate + ".pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + 30.0
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError("the test never opened the gate")
        time.sleep(0.01)
    return random_deal()


def dies_once(marker: str) -> int:
    """The first call kills its worker process (as the kernel's OOM killer would); later ones give deal 4242."""
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os._exit(3)
    return 4242
