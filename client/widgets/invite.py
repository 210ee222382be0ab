"""The invite to a room: the lines a host shares (``plot join ws://HOST:PORT/CODE``, the watch
link) and the watch link as a QR code for phones in the room (made by segno, drawn with half
blocks: two modules a cell, dark on light whatever the terminal's colours)."""

from __future__ import annotations

import segno
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from client.widgets.overlays import OVERLAY_CSS

QR_BORDER = 2  # light modules around the code (scanners need a quiet zone; 2 is enough on a screen)
DARK, LIGHT = "black", "white"


def qr_text(data: str) -> Text:
    """``data`` as a QR code: one terminal cell holds two modules, the upper as the foreground of
    ▀ and the lower as its background."""
    rows = [list(row) for row in segno.make(data, error="m", micro=False).matrix_iter(border=QR_BORDER)]
    if len(rows) % 2:
        rows.append([0] * len(rows[0]))
    out = Text(no_wrap=True)
    for top, bottom in zip(rows[0::2], rows[1::2], strict=True):
        for upper, lower in zip(top, bottom, strict=True):
            out.append("▀", style=f"{DARK if upper else LIGHT} on {DARK if lower else LIGHT}")
        out.append("\n")
    out.rstrip()
    return out


class QrScreen(ModalScreen[None]):
    """The watch link as a QR code, with the link itself under it; any of its keys closes it."""

    DEFAULT_CSS = (
        OVERLAY_CSS.format(name="QrScreen")
        + """
    QrScreen > Vertical { width: auto; max-width: 100%; }
    QrScreen #qr { width: auto; }
    """
    )
    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("g", "dismiss", "close"), Binding("q", "dismiss")]

    def __init__(self, link: str) -> None:
        super().__init__()
        self.link = link

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("Watch on a phone: scan it   (Esc closes)", style="bold"))
            yield Static(qr_text(self.link), id="qr")
            yield Static(Text(self.link, style="dim", no_wrap=True), id="qr-link")
