"""The ghosts' messages (docs/ghosts.md, docs/protocol.md §3.5): a recorded game of the room's
deal racing beside the live racers on its move times. Joined into shared/protocol.py's unions
(and importable from there); a ghost's row is a ``LeaderboardRow`` with ``ghost`` set.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

BAD_GHOST: Final = "bad_ghost"  # add_ghost: not a legal game, times that do not fit, a part out of step
GHOST_WRONG_DEAL: Final = "ghost_wrong_deal"  # add_ghost: the record is of another deal than the room's

GHOST_PREFIX: Final = "ghost:"  # every ghost's player id starts with this
MAX_GHOSTS: Final = 8  # ghosts a room races at once
GHOST_ENTRIES_MAX: Final = 4000  # entries of one ghost's record
GHOST_CHUNK_MAX: Final = 1000  # entries one add_ghost frame carries (a longer record comes in several)
# A record without move times is paced evenly: one entry every GHOST_PACE_MS from the start signal
# (the medium bot's pace, 1.5 moves a second).
GHOST_PACE_MS: Final = 667
GHOST_TIME_MAX_MS: Final = 24 * 3600 * 1000  # a race's longest time limit

GhostMove = Annotated[str, msgspec.Meta(max_length=32)]
GhostTime = Annotated[int, msgspec.Meta(ge=0, le=GHOST_TIME_MAX_MS)]


class GhostEntry(msgspec.Struct, kw_only=True):
    """A ghost in a room's snapshot: who, never its record (that is the deal's stock order)."""

    player_id: str  # starts with "ghost:"
    name: str
    timed: bool  # raced on its recorded times (false: paced evenly, GHOST_PACE_MS an entry)


class AddGhost(msgspec.Struct, tag="add_ghost", tag_field="type", kw_only=True):
    """Host only, in the lobby: a recorded game to race as a ghost (docs/ghosts.md). A record
    longer than GHOST_CHUNK_MAX entries comes in several frames: each ``offset`` the entries sent
    before it, ``more`` true on all but the last; the ghost is checked and added with the last."""

    name: Annotated[str, msgspec.Meta(max_length=128)]
    deal: Annotated[int, msgspec.Meta(ge=0)]  # must be the room's deal (ghost_wrong_deal otherwise)
    undo: bool = True
    moves: Annotated[list[GhostMove], msgspec.Meta(max_length=GHOST_CHUNK_MAX)]
    # The race time (ms from the start signal) of each entry, as Results.times has them; None:
    # paced evenly (GHOST_PACE_MS an entry). All the frames of one record have them, or none.
    times: Annotated[list[GhostTime], msgspec.Meta(max_length=GHOST_CHUNK_MAX)] | None = None
    offset: Annotated[int, msgspec.Meta(ge=0, le=GHOST_ENTRIES_MAX)] = 0
    more: bool = False


class RemoveGhost(msgspec.Struct, tag="remove_ghost", tag_field="type", kw_only=True):
    """Host only, in the lobby: take a ghost out of the room."""

    player_id: Annotated[str, msgspec.Meta(max_length=64)]
