"""What the daily commands share (argparse only at the top: command modules keep a light top level):
the day a person names, and the server's web pages."""

from __future__ import annotations

import argparse
import datetime as dt
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
