"""What the daily commands share (argparse only at the top: command modules keep a light top level):
the day a person names, the server's web pages, and this client's claimed name on a server."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os

EPOCH = dt.date(1970, 1, 1)


def day_argument(text: str) -> int:
    """argparse type: a day as a number (days since the Unix epoch) or a date YYYY-MM-DD (24-hour days)."""
    if text.isdigit():
        return int(text)
    try:
        date = dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a day: a date YYYY-MM-DD (UTC) or a day number (days since 1970-01-01)"
        ) from None
    if date < EPOCH:
        raise argparse.ArgumentTypeError(f"{text!r} is before the first day, 1970-01-01")
    return (date - EPOCH).days


def add_page_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watch-url",
        default=os.environ.get("PLOT_WATCH_URL"),
        metavar="URL",
        help="the server's web pages (the share text links URL/daily/DATE; default: $PLOT_WATCH_URL, "
        "else the server's host on the server's port + 1)",
    )


def claimed_identity(url: str) -> dict[str, str] | None:
    """This client's claimed profile on ``url`` ({"secret", "profile_id", "name"}), from the state
    directory's identities.json (``plot claim`` writes it), or None."""
    from client.state import state_dir

    try:
        data = json.loads((state_dir() / "identities.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = data.get(url) if isinstance(data, dict) else None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("secret", "profile_id", "name")):
        return None
    return {k: str(entry[k]) for k in ("secret", "profile_id", "name")}
