"""Display names: the one rule a name must pass, and the key under which two names look the same
(docs/protocol.md, "Names"). Pure: no I/O.

- :func:`display_name` gives the name as it is shown (spaces at either end dropped, runs of spaces
  inside made one), or raises :class:`NameInvalid` with a reason a player can act on;
  :func:`check_name` is the same rule answering the reason or None.
- :func:`name_key` gives the key two names are compared by: Unicode's NFKC with case folding,
  then the confusable skeleton of Unicode Technical Standard #39 (ICU's SpoofChecker), so
  ``Alice``, ``ＡＬＩＣＥ``, ``аlice`` (Cyrillic а) and ``alıce`` (dotless ı) all have the key ``alice``.
  A room refuses a second member whose key another member has (``name_taken``).

Invisible characters are refused by Unicode's own property, Default_Ignorable_Code_Point (as
ICU knows it, so a newer Unicode's are refused too), plus the characters that are not
printable (controls, format characters) and the one blank letter that property leaves out (the
blank Braille pattern U+2800).
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Final

import icu

from shared.textwidth import cell_width, is_joining_jamo

NAME_MAX: Final = 24  # terminal cells (shared.textwidth.cell_width): a wide character takes 2
NAME_CHARS_MAX: Final = 3 * NAME_MAX  # characters, combining marks included
MARKS_PER_LETTER_MAX: Final = 2  # combining marks on one letter (Vietnamese needs 2)
# Blank letters that Default_Ignorable_Code_Point does not cover: they draw nothing either.
BLANK_LETTERS: Final = frozenset("\u2800")

_DEFAULT_IGNORABLE: Final = icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT
_FOLD: Final = icu.Normalizer2.getNFKCCasefoldInstance()
_SPOOF: Final = icu.SpoofChecker()


class NameInvalid(ValueError):
    """A name the rule refuses; ``str()`` is the reason, in words a player can act on."""


def is_invisible(ch: str) -> bool:
    """A character that draws nothing and is not a space: a control or format character, any
    Default_Ignorable_Code_Point (joiners, variation selectors, Hangul fillers, U+034F, ...), a
    blank letter."""
    return not ch.isprintable() or ch in BLANK_LETTERS or icu.Char.hasBinaryProperty(ch, _DEFAULT_IGNORABLE)


def display_name(raw: str) -> str:
    """The name as shown: ``raw`` with spaces at either end dropped and each run of spaces inside
    made one space; NameInvalid with the reason when the rule refuses it."""
    if len(raw) > NAME_CHARS_MAX:
        raise NameInvalid(f"a name has at most {NAME_CHARS_MAX} characters, marks included (this one has {len(raw)})")
    for ch in raw:
        if is_invisible(ch):  # the space U+0020 is the only space that passes (it is printable)
            raise NameInvalid(f"a name may not contain control or invisible characters (found U+{ord(ch):04X})")
    name = " ".join(raw.split())  # only U+0020 is left to split on
    if not name:
        raise NameInvalid("a name needs at least one visible character (spaces do not show)")
    marks = 0
    for index, ch in enumerate(name):
        if unicodedata.category(ch) in ("Mn", "Me") or is_joining_jamo(ch):
            if index == 0:
                raise NameInvalid(f"a name may not start with a combining mark (found U+{ord(ch):04X})")
            marks += 1
            if marks > MARKS_PER_LETTER_MAX:
                raise NameInvalid(
                    f"a name may have at most {MARKS_PER_LETTER_MAX} combining marks on one letter "
                    f"(found more on {name[index - marks]!r}, character {index - marks + 1})"
                )
            continue
        marks = 0
    width = cell_width(name)
    if width > NAME_MAX:
        raise NameInvalid(
            f"a name is at most {NAME_MAX} cells wide, a wide character such as 北 taking 2 (this one takes {width})"
        )
    return name


def check_name(name: str) -> str | None:
    """None if ``name`` passes the rule, else the reason it does not."""
    try:
        display_name(name)
    except NameInvalid as exc:
        return str(exc)
    return None


@functools.lru_cache(maxsize=4096)
def name_key(name: str) -> str:
    """The key two display names are compared by: equal keys look the same. NFKC with case
    folding (``ＡＬＩＣＥ`` -> ``alice``), then the TR39 confusable skeleton (``аlice`` -> ``alice``)."""
    return str(_SPOOF.getSkeleton(0, _FOLD.normalize(name)))
