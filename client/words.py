"""Words the client says to people: counts with the right plural, and server errors as sentences a
player can act on (never a validator's raw text). Pure and light: command modules import it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.protocol import Error

IRREGULAR = {"entry": "entries", "racer": "racers"}


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 card``, ``2 cards``, ``0 entries``: the count and the word, in the right number."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {many or IRREGULAR.get(word) or word + 's'}"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# What a player can do about each refusal, when the server's own sentence is not for people.
ERROR_SENTENCES: dict[str, str] = {
    "malformed": "the client sent something the server could not read: update the client (plot) and try again",
    "unknown_type": "the server does not know that request: update the client or the server",
    "bad_field": "the server refused a value this client sent: check the command's options",
    "unsupported_version": "this client and the server speak different protocol versions: update the client",
    "internal": "the server failed on that request (a server bug); nothing changed: try again",
    "rate_limited": "too many requests too fast: the server closed the connection",
    "server_full": "the server is full right now: try again later",
    "store_unavailable": "the server's store did not answer; nothing changed: try again in a moment",
}


# A card's text name in the engine's sentences (docs/rules.md: rank, suit, deck: ``8d1``, ``Th0``).
CARD_NAME = re.compile(r"\b([A2-9TJQK])([cdhs])[01]\b")
RANK_WORDS = {"T": "10"}
SUIT_SIGNS = dict(zip("cdhs", "♣♦♥♠", strict=True))


def readable_cards(text: str) -> str:
    """An engine sentence with its cards as people read them: ``8d1 is an 8`` -> ``8♦ is an 8``."""
    return CARD_NAME.sub(lambda m: RANK_WORDS.get(m[1], m[1]) + SUIT_SIGNS[m[2]], text)


def describe_error(error: Error) -> str:
    """A server error as a sentence for a player. The server's message is kept where it already is
    one (it names the room, the racer or the reason); codes whose message is technical (a field and
    a validator's words) get a sentence that says what to do."""
    sentence = ERROR_SENTENCES.get(error.code)
    if sentence is None:
        return error.message
    if error.code == "rate_limited" and error.ref is not None:
        # A budget (per address, or of what the server sends you) refused one request: the
        # connection stays open, and the message says how long to wait.
        return error.message.split("; retry_ms=", 1)[0]
    if error.code == "bad_field" and error.message.startswith("field '"):
        field = error.message.split("'", 2)[1]
        return f"{sentence} (the server refused {field})"
    return sentence


def option_problem(name: str, value: int | None, low: int, high: int, unit: str = "") -> str | None:
    """None if ``value`` (an integer option) is in ``low..high``, else a sentence naming the flag."""
    if value is None or low <= value <= high:
        return None
    suffix = f" {unit}" if unit else ""
    return f"{name} must be {low}..{high}{suffix}, not {value}"


def plot_command() -> str:
    """How to run ``plot`` from this shell, as printed for people to type: ``plot`` when that
    name on the PATH is this program, else this program's full path (a set-up without
    ``source .venv/bin/activate``), else ``python -m client.cli`` with this interpreter."""
    on_path = shutil.which("plot")
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "plot":
        running = Path(argv0).resolve()
        if on_path is not None and Path(on_path).resolve() == running:
            return "plot"
        return shlex.quote(short_path(running))
    if on_path is not None:
        return "plot"
    beside = Path(sys.executable).parent / "plot"
    if beside.exists():
        return shlex.quote(short_path(beside))
    return f"{shlex.quote(sys.executable)} -m client.cli"


def short_path(path: Path | str) -> str:
    """``path`` as people type it: under the home folder as ``~/…`` (the shell expands it)."""
    text = str(path)
    home = os.path.expanduser("~")
    if home not in ("", "/") and text.startswith(home + os.sep):
        return "~" + text[len(home) :]
    return text


def typed_path(path: Path | str) -> str:
    """A path for a printed command: short, and quoted when it has to be (``~/`` stays outside
    the quotes, or the shell would not expand it)."""
    text = short_path(path)
    if text.startswith("~/"):
        rest = text[2:]
        return "~/" + (shlex.quote(rest) if rest else "")
    return shlex.quote(text)
