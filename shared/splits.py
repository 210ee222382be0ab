"""Splits against a ghost (docs/ghosts.md): at each milestone, how far ahead or behind.

A milestone is a number of cards home (every 13: 13, 26, ... 104), or, from a whole record
(the results), a number of foundations completed (1 ... 8). A racer reaches a milestone the
first time its count gets there; the split is the ghost's time to it minus the racer's
(positive: ahead, the racer got there that much sooner). Coloured as LiveSplit colours them: by
the sign, and whether the racer gained or lost time on the ghost since the previous milestone;
gold for a best segment (the stretch from the previous milestone, faster than the best known).

Pure: no I/O, no clock (the time of a live split, ``now_ms``, is the caller's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from shared.engine import Game, IllegalMove

CARD_MILESTONES: Final[tuple[int, ...]] = tuple(range(13, 105, 13))  # 13, 26, ... 104
FOUNDATION_MILESTONES: Final[tuple[int, ...]] = tuple(range(1, 9))  # foundations completed

AHEAD_GAINING: Final = "ahead_gaining"
AHEAD_LOSING: Final = "ahead_losing"
BEHIND_GAINING: Final = "behind_gaining"
BEHIND_LOSING: Final = "behind_losing"
GOLD: Final = "gold"

# LiveSplit's default colours, by kind (a best segment's gold over any of them).
COLOURS: Final[dict[str, str]] = {
    AHEAD_GAINING: "#00CC36",
    AHEAD_LOSING: "#52CC73",
    BEHIND_GAINING: "#CC5C52",
    BEHIND_LOSING: "#CC1200",
    GOLD: "#D8AF1F",
}


KINDS: Final[dict[tuple[bool, bool], str]] = {  # (ahead, gaining) -> kind
    (True, True): AHEAD_GAINING,
    (True, False): AHEAD_LOSING,
    (False, True): BEHIND_GAINING,
    (False, False): BEHIND_LOSING,
}


class Split(msgspec.Struct, frozen=True, kw_only=True):
    milestone: int  # cards home, or foundations completed (whichever the times given count)
    # The ghost's time to the milestone minus the racer's (positive: ahead). Live, with only one
    # of the two there yet: at least this far (as of now_ms). None: the other never got there
    # (a finished record), so ahead says which side it is on.
    ahead_ms: int | None
    ahead: bool
    kind: str  # ahead_gaining | ahead_losing | behind_gaining | behind_losing
    gold: bool  # the racer's segment to this milestone beat the best known one
    settled: bool  # both reached it: ahead_ms is final


def milestone_times(points: Iterable[tuple[int, int]], milestones: Sequence[int] = CARD_MILESTONES) -> dict[int, int]:
    """``(race ms, count)`` samples in time order (leaderboard rows as they came, or a record's
    entries) -> the first time each milestone was reached. A count that goes back (an undo) and
    up again keeps the first time."""
    reached: dict[int, int] = {}
    ordered = sorted(milestones)
    for t, count in points:
        for m in ordered:
            if m > count:
                break
            reached.setdefault(m, t)
    return reached


def record_times(
    deal: int, moves: Sequence[str], times: Sequence[int], *, undo: bool = True
) -> tuple[dict[int, int], dict[int, int]]:
    """A whole record (the results reveal them): when each card milestone and each foundation
    milestone (foundations completed) was first reached, replayed by the engine."""
    game = Game(deal, undo=undo, blocked_budget=0)
    cards: list[tuple[int, int]] = []
    done: list[tuple[int, int]] = []
    for move, t in zip(moves, times, strict=False):
        try:
            game.play(move, check_blocked=False)
        except IllegalMove:
            break
        cards.append((t, game.foundation_cards))
        done.append((t, sum(1 for pile in game.foundations if len(pile) == 13)))
    return milestone_times(cards, CARD_MILESTONES), milestone_times(done, FOUNDATION_MILESTONES)


def segments(reached: Mapping[int, int], milestones: Sequence[int]) -> dict[int, int]:
    """The time from each milestone before (the start signal for the first) to each one reached."""
    out: dict[int, int] = {}
    previous = 0
    for m in sorted(milestones):
        if m not in reached:
            break
        out[m] = reached[m] - previous
        previous = reached[m]
    return out


def best_segments(runs: Iterable[Mapping[int, int]], milestones: Sequence[int]) -> dict[int, int]:
    """The best (shortest) segment to each milestone over several runs (the ghosts raced)."""
    best: dict[int, int] = {}
    for run in runs:
        for m, segment in segments(run, milestones).items():
            best[m] = min(segment, best.get(m, segment))
    return best


def splits(
    mine: Mapping[int, int],
    ghost: Mapping[int, int],
    *,
    now_ms: int | None = None,
    best: Mapping[int, int] | None = None,
    milestones: Sequence[int] = CARD_MILESTONES,
) -> list[Split]:
    """The racer's splits against one ghost, milestone by milestone, as far as either got.

    ``mine`` and ``ghost``: first times to each milestone (:func:`milestone_times`). ``now_ms``:
    the race time now, for a live race (a milestone one side reached and the other not yet shows
    how far ahead at least); None: both runs are over (the results). ``best``: the best segments
    known (default: the ghost's own), for gold."""
    best = best if best is not None else segments(ghost, milestones)
    out: list[Split] = []
    previous_ahead = 0
    previous_me = 0
    for m in sorted(milestones):
        t_me, t_ghost = mine.get(m), ghost.get(m)
        if t_me is None and t_ghost is None:
            break
        ahead_ms: int | None
        if t_me is not None and t_ghost is not None:
            ahead_ms, settled = t_ghost - t_me, True
        elif t_me is not None:  # the ghost is not there (yet)
            ahead_ms, settled = (None if now_ms is None else max(now_ms - t_me, 0)), False
        else:
            assert t_ghost is not None
            ahead_ms, settled = (None if now_ms is None else -max(now_ms - t_ghost, 0)), False
        ahead = t_ghost is None if ahead_ms is None else ahead_ms >= 0
        # Gaining: the gap moved the racer's way over this segment (LiveSplit's segment delta).
        gaining = ahead if ahead_ms is None else ahead_ms >= previous_ahead
        kind = KINDS[(ahead, gaining)]
        gold = False
        if t_me is not None:
            segment = t_me - previous_me
            known = best.get(m)
            # A best segment: faster than the best known one; none known, and the run is over
            # (nobody else got there): the racer's is the best.
            gold = segment < known if known is not None else now_ms is None
            previous_me = t_me
        out.append(Split(milestone=m, ahead_ms=ahead_ms, ahead=ahead, kind=kind, gold=gold, settled=settled))
        if ahead_ms is not None:
            previous_ahead = ahead_ms
        if t_me is None:
            break  # past the racer's last milestone: nothing more to compare
    return out


def split_text(split: Split) -> str:
    """A split as a runner reads it: '-1.2' ahead by 1.2 s, '+3.4' behind, '-' or '+' alone when
    the other never got there."""
    sign = "-" if split.ahead else "+"
    if split.ahead_ms is None:
        return sign
    return f"{sign}{abs(split.ahead_ms) / 1000:.1f}"
