"""Where the client keeps things between runs: resume tokens (per server) and game records.

``$PLOT_STATE_DIR`` if set (tests point it at a temporary folder), else
``$XDG_STATE_HOME/plot``, else ``~/.local/state/plot``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path


def state_dir() -> Path:
    explicit = os.environ.get("PLOT_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "plot"


def safe_name(text: str) -> str:
    """``text`` made safe as one file name (server addresses, player names)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
    return cleaned[:80] or "_"


def write_private(path: Path, data: str) -> None:
    """Write ``data`` atomically, readable by the owner only (tokens are secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(data)
    os.replace(tmp, path)


def save_record(record: dict[str, object], stem: str, folder: Path | None = None) -> Path:
    """Save one game record as JSON (what ``plot verify`` reads); returns its path."""
    folder = folder or state_dir() / "records"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{safe_name(stem)}-{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{safe_name(stem)}-{stamp}-{n}.json"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path
