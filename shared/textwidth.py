"""Display width of text in a terminal's cells, from the standard library's ``unicodedata`` only.

A wide or full-width character (East Asian Width W or F: CJK ideographs, kana, Hangul syllables,
full-width Latin, most emoji) takes 2 cells; a combining mark, a format character (zero-width
space, joiners, direction marks), a control character, a Hangul vowel or final consonant jamo
(which join the syllable before them) and the default-ignorable Hangul fillers U+3164 and U+FFA0
take none; everything else takes 1. This is what terminals
(and Rich, which Textual draws with) do for the characters a display name may hold
(docs/protocol.md, "Names"). Pure: no I/O.
"""

from __future__ import annotations

import unicodedata
from typing import Final

ELLIPSIS: Final = "…"

# Hangul jamo that join the syllable before them (medial vowels, final consonants): no cells.
_JOINING_JAMO: Final = ((0x1160, 0x11FF), (0xD7B0, 0xD7FF))
_IGNORABLE_FILLERS: Final = frozenset("\u3164\uffa0")


def is_joining_jamo(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _JOINING_JAMO)


def char_width(ch: str) -> int:
    """The cells one character takes: 0, 1 or 2."""
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0:
        return 0
    if code < 0x7F:
        return 1
    category = unicodedata.category(ch)
    if category in ("Mn", "Me", "Cf", "Cc", "Zl", "Zp") or is_joining_jamo(ch) or ch in _IGNORABLE_FILLERS:
        return 0
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 1


def cell_width(s: str) -> int:
    """The cells ``s`` takes on a terminal."""
    if s.isascii():
        return sum(1 for ch in s if " " <= ch < "\x7f")
    return sum(char_width(ch) for ch in s)


def cut_cells(s: str, width: int) -> str:
    """``s`` if it fits in ``width`` cells, else its longest start that fits with an ellipsis after
    it (``…``, one cell). A wide character is never split; marks stay with their base."""
    if width <= 0:
        return ""
    if cell_width(s) <= width:
        return s
    room = width - 1  # the ellipsis takes one cell
    used = 0
    end = 0
    for index, ch in enumerate(s):
        w = char_width(ch)
        if used + w > room:
            break
        used += w
        end = index + 1
    return s[:end] + ELLIPSIS


def pad_cells(s: str, width: int) -> str:
    """``s`` with spaces after it up to ``width`` cells (unchanged if it is already as wide)."""
    return s + " " * max(0, width - cell_width(s))


def fit_cells(s: str, width: int) -> str:
    """``s`` cut to ``width`` cells (with an ellipsis) and padded to exactly ``width`` cells: a column."""
    return pad_cells(cut_cells(s, width), width)
