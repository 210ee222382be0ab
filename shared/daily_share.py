"""The spoiler-free text a player shares after a daily attempt (docs/daily.md, "Sharing").

    The Plot daily 2026-12-02 · won 6:12 · 213 moves · 3rd of 41
    ▁▁▂▃▃▄▅▆▇█
    https://plot.example.org/daily/2026-12-02

Figures only (result, time, moves, place) and the cards-home curve over the attempt's time, in
block characters: nothing of the deal, so it may be pasted before the day ends. Pure: no I/O,
no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
TOTAL_CARDS = 104
CURVE_WIDTH = 12


def ordinal(n: int) -> str:
    """1 -> 1st, 2 -> 2nd, 3 -> 3rd, 11 -> 11th, 22 -> 22nd."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def clock(ms: int) -> str:
    """6:12 (minutes:seconds), 1:02:03 past an hour."""
    seconds = max(0, ms) // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def cards_curve(times_ms: Sequence[int], cards: Sequence[int], elapsed_ms: int, width: int = CURVE_WIDTH) -> str:
    """The cards home over the attempt, ``width`` block characters, each the count at the end of
    its slice of ``elapsed_ms``: ``times_ms[i]`` is when the count became ``cards[i]`` (both in
    the order they happened). An empty attempt is a flat line."""
    if width <= 0:
        return ""
    span = max(elapsed_ms, times_ms[-1] if times_ms else 0, 1)
    out: list[str] = []
    i, count = 0, 0
    for k in range(1, width + 1):
        edge = span * k / width
        while i < len(times_ms) and times_ms[i] <= edge:
            count = cards[i]
            i += 1
        level = min(len(BLOCKS) - 1, count * len(BLOCKS) // (TOTAL_CARDS + 1))
        out.append(BLOCKS[level])
    return "".join(out)


def share_text(
    *,
    date: str,
    status: str,
    cards: int,
    moves: int,
    elapsed_ms: int,
    rank: int | None,
    players: int | None,
    curve: str = "",
    url: str | None = None,
) -> str:
    """The text to share. ``rank``/``players`` None (or 0): the place is left out (not known yet).
    ``curve``: from :func:`cards_curve`; ``url``: the day's page."""
    result = f"won {clock(elapsed_ms)}" if status == "won" else f"{status} · {cards} cards · {clock(elapsed_ms)}"
    parts = [f"The Plot daily {date}", result, f"{moves} move" + ("" if moves == 1 else "s")]
    if rank and players:
        parts.append(f"{ordinal(rank)} of {players}")
    lines = [" · ".join(parts)]
    if curve:
        lines.append(curve)
    if url:
        lines.append(url)
    return "\n".join(lines)
