"""Text from elsewhere (player names, server messages) made inert before it reaches the screen.

It becomes a ``rich.text.Text`` (never parsed as markup), and every control or invisible
character (escape sequences included) is replaced by a visible mark, so nothing another
player typed can move the cursor, clear the screen or restyle it.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

REPLACEMENT = "\N{REPLACEMENT CHARACTER}"


def clean(text: str) -> str:
    """``text`` with every non-printable character replaced (newlines included)."""
    return "".join(ch if ch.isprintable() else REPLACEMENT for ch in text)


def plain(text: str, style: str | Style = "") -> Text:
    """Inert, styled text: no markup parsed, no control character kept."""
    return Text(clean(text), style=style)
