"""Which build of the engine imports: the compiled one (scripts/compile_engine.py, docs/engine.md
"The compiled build") when one was made for exactly these sources and this interpreter, else the
pure-Python modules beside this file. ``PLOT_PURE_PYTHON=1`` forces the pure ones.

Import plumbing, read once when the package is first imported; the game's code never calls it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Final

# The modules the build compiles, in shared/ (the engine and what it imports from the package),
# and those it is checked against but leaves pure (their msgspec structs: shared/structs.py).
COMPILED: Final = ("cards", "deal", "engine")
BESIDE: Final = ("structs",)
PURE_SWITCH: Final = "PLOT_PURE_PYTHON"
HERE: Final = Path(__file__).resolve().parent
FOLDER: Final = HERE.parent / "build" / "compiled"


def source_digests() -> dict[str, str]:
    return {name: hashlib.sha256((HERE / f"{name}.py").read_bytes()).hexdigest() for name in COMPILED + BESIDE}


def compiled_folder() -> Path | None:
    """The compiled build's folder if it may be used: not switched off, made by this interpreter
    (its cache tag) from sources identical to today's. A stale build is never used."""
    if os.environ.get(PURE_SWITCH, "") not in ("", "0"):
        return None
    try:
        manifest = json.loads((FOLDER / "manifest.json").read_text())
        if not isinstance(manifest, dict) or manifest.get("cache_tag") != sys.implementation.cache_tag:
            return None
        return FOLDER if manifest.get("sources") == source_digests() else None
    except (OSError, ValueError):
        return None
