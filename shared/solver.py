"""A solver for The Plot with full knowledge of a position: winnable (with a winning move
list), unwinnable (proved: the search was exhaustive) or unknown (the budget ran out).

Pure: no I/O, no clocks. A time budget works through an injected ``clock`` callable.

How the search stays small (docs/solver.md has the proofs in full):

* Ranks only, relative to the base rank: ``rel = (rank - base) % 13``. Suits never matter;
  f0 holding ``k`` cards needs ``rel == k``, and so does every other foundation.
* A tableau pile is a run down by one from its bottom card that never passes the base rank
  (nothing is built on it, it is built on nothing), so in relative ranks a pile is an interval
  ``(top, bottom)`` with ``1 <= top <= bottom <= 12``, or a lone base-rank card ``(0, 0)``.
* A tableau-to-tableau move that does not empty its pile keeps the multiset of tops and of
  bottoms: it only re-pairs them. Between piles whose tops are consecutive ("a run of tops")
  every valid pairing can be reached from every other (an adjacent inversion can always be
  swapped legally), and those moves can be undone, so positions differing only there are one
  position. The key holds the canonical pairing (sorted bottoms on sorted tops, per run), and
  every other move is generated from every pairing of the run it touches. This is exact: no
  position reachable by the full rules is lost.
* Safe automatic moves once f0 is complete: a card whose relative rank equals the lowest
  foundation count (then every copy of the rank below it is on a foundation, so nothing can
  ever be built on it); with a base-rank card this is "to an empty foundation".
* Everything else is searched depth-first with a transposition table; foundation moves first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Final

from shared.cards import rank
from shared.deal import TABLEAU_SIZE, check_deal_number
from shared.engine import BLOCKED, PLAYING, RESIGNED, WON, Game

WINNABLE: Final = "winnable"
UNWINNABLE: Final = "unwinnable"
UNKNOWN: Final = "unknown"
VERDICTS: Final = (WINNABLE, UNWINNABLE, UNKNOWN)

DEFAULT_MAX_POSITIONS: Final = 200_000
# How often (in positions) an injected clock is read: often enough for a deadline to hold to a
# few milliseconds, rarely enough to cost nothing.
CLOCK_EVERY: Final = 256

_FULL: Final = 13
# The reserve dead-end test (tests switch it off to check the search alone against a plain one).
RESERVE_CHECK = True
# The dead-end test of f0's last cards under unplayable waste cards (likewise).
WALL_CHECK = True
# Positions per unit of the restart schedule: a clean run to a win takes about 250.
RESTART_UNIT: Final = 1000

Pair = tuple[int, int]
Pairs = tuple[Pair, ...]


@dataclass(slots=True)
class SolveResult:
    """What :func:`solve` found.

    ``moves`` is non-empty only for ``winnable`` (empty also when the game is already won):
    engine move texts that, played in order from the position given, win. ``positions`` is how
    many distinct positions were expanded (never more than ``max_positions``). ``seconds`` is
    measured with the injected clock, 0.0 without one.
    """

    verdict: str
    moves: list[str] = field(default_factory=list)
    positions: int = 0
    seconds: float = 0.0

    def to_json(self, deal: int | None = None) -> dict[str, object]:
        out: dict[str, object] = {} if deal is None else {"deal": deal}
        out.update(verdict=self.verdict, moves=list(self.moves), positions=self.positions, seconds=self.seconds)
        return out


# --------------------------------------------------------------------------- tableau algebra


def _canon(pairs: Iterable[Pair]) -> Pairs:
    """The canonical pairing: piles sorted, and within each run of consecutive tops the
    sorted bottoms laid on the sorted tops (valid whenever any pairing of the run is)."""
    ps = sorted(pairs)
    out: list[Pair] = []
    n = len(ps)
    i = 0
    while i < n:
        j = i + 1
        while j < n:
            prev = ps[j - 1][0]
            cur = ps[j][0]
            if cur == prev or (cur == prev + 1 and prev != 0):
                j += 1
            else:
                break
        if j - i == 1:
            out.append(ps[i])
        else:
            bottoms = sorted(p[1] for p in ps[i:j])
            out.extend((ps[k][0], bottoms[k - i]) for k in range(i, j))
        i = j
    return tuple(out)


def _split_run(pairs: Pairs, top: int) -> tuple[list[Pair], list[Pair]]:
    """(the piles of the run of tops containing ``top``, all other piles)."""
    tops = {p[0] for p in pairs}
    lo = hi = top
    if top != 0:
        while lo - 1 >= 1 and lo - 1 in tops:
            lo -= 1
        while hi + 1 in tops:
            hi += 1
    run = [p for p in pairs if lo <= p[0] <= hi]
    others = [p for p in pairs if not lo <= p[0] <= hi]
    return run, others


def _valid(tops: list[int], bottoms: list[int]) -> bool:
    """Can these tops and bottoms be paired with every bottom >= its top? (Hall, sorted.)"""
    return all(b >= t for t, b in zip(sorted(tops), sorted(bottoms), strict=True))


def _distributions(groups: list[list[int]], bottoms: list[int]) -> list[list[Pair]]:
    """Every way to share ``bottoms`` among the groups of tops (each group validly pairable),
    as concrete pairs (sorted bottoms on sorted tops within each group)."""
    if not groups:
        return [[]]
    tops = sorted(groups[0])
    if len(groups) == 1:
        return [list(zip(tops, bottoms, strict=True))] if _valid(tops, bottoms) else []
    out: list[list[Pair]] = []
    seen: set[tuple[int, ...]] = set()
    for chosen in combinations(range(len(bottoms)), len(tops)):
        mine = tuple(bottoms[i] for i in chosen)
        if mine in seen:
            continue
        seen.add(mine)
        if not _valid(tops, list(mine)):
            continue
        rest = [b for i, b in enumerate(bottoms) if i not in chosen]
        for tail in _distributions(groups[1:], rest):
            out.append(list(zip(tops, mine, strict=True)) + tail)
    return out


class _Tab:
    """An interned canonical tableau with the outcomes of each operation memoised.

    The table is shared by the solves of a process (tableaux recur across deals): a solve
    starts by clearing it if it holds more than ``_TAB_KEEP`` (memory stays about 100 MB in a
    long-lived worker), and a huge search clears it when it reaches ``_TAB_LIMIT``.
    """

    __slots__ = ("cards", "ident", "memo", "no_bottom_12", "pairs", "spaces", "tops")

    def __init__(self, pairs: Pairs, ident: int) -> None:
        self.pairs = pairs
        self.ident = ident
        counts = [0] * 14
        for top, _ in pairs:
            counts[top] += 1
        self.tops: tuple[int, ...] = tuple(counts)
        self.spaces = TABLEAU_SIZE - len(pairs)
        self.memo: dict[int, tuple[_Tab, ...]] = {}
        # How many cards of each relative rank the tableau holds, and whether no pile ends in a
        # 12 (then no top 12 can appear while f0 is incomplete: see _Search.walls_feasible).
        cards = [0] * 13
        for top, bottom in pairs:
            for x in range(top, bottom + 1):
                cards[x] += 1
        self.cards: tuple[int, ...] = tuple(cards)
        self.no_bottom_12 = all(bottom != 12 for _, bottom in pairs)

    def outcomes(self, op: int, arg: int) -> tuple[_Tab, ...]:
        code = op * 16 + arg
        got = self.memo.get(code)
        if got is None:
            got = tuple(_tab(p) for p in _op_outcomes(self.pairs, op, arg))
            self.memo[code] = got
        return got


_TAB_KEEP: Final = 50_000
_TAB_LIMIT: Final = 1_000_000
_TABS: dict[Pairs, _Tab] = {}


def _tab(pairs: Pairs) -> _Tab:
    tab = _TABS.get(pairs)
    if tab is None:
        if len(_TABS) >= _TAB_LIMIT:
            _TABS.clear()
        # Identities never repeat, even across a clear, so a key never means two tableaux.
        _TAB_COUNTER[0] += 1
        tab = _Tab(pairs, _TAB_COUNTER[0])
        _TABS[pairs] = tab
    return tab


_TAB_COUNTER = [0]


# Tableau operations. Each names the top rank it works on.
OP_TAKE: Final = 0  # a top of rank a leaves (to a foundation)
OP_PUT: Final = 1  # a waste card of rank a goes onto a top of rank a + 1
OP_FILL: Final = 2  # a waste card of rank a fills a space
OP_EMPTY: Final = 3  # a lone card of rank a goes onto a top of rank a + 1, emptying its pile
OP_TAKE_ALL: Final = 4  # every top of rank a leaves (automatic moves: a is the lowest rank left)


def _op_outcomes(pairs: Pairs, op: int, a: int) -> list[Pairs]:
    """Every canonical tableau the operation can give, from any pairing of its run."""
    if op == OP_FILL:
        return [_canon((*pairs, (a, a)))]
    if op == OP_TAKE_ALL:
        # Valid only when no top is below a (the caller's auto-move condition): then bottoms
        # equal to a lie under tops equal to a in every pairing, so the result is unique.
        moved: list[Pair] = []
        for top, bottom in pairs:
            if top != a:
                moved.append((top, bottom))
            elif bottom > a:
                moved.append((a + 1, bottom))
        return [_canon(moved)]
    anchor = a + 1 if op == OP_PUT else a
    run, others = _split_run(pairs, anchor)
    run_tops = sorted(t for t, _ in run)
    run_bottoms = sorted(b for _, b in run)
    values = sorted(set(run_bottoms))
    # (tops removed from the run, bottoms removed, piles the operation leaves)
    choices: list[tuple[list[int], list[int], list[Pair]]] = []
    if op == OP_TAKE:
        for b in values:
            if b == a:
                choices.append(([a], [b], []))
            elif b > a:
                choices.append(([a], [b], [(a + 1, b)]))
    elif op == OP_PUT:
        choices.extend(([a + 1], [b], [(a, b)]) for b in values if b > a)
    elif op == OP_EMPTY and a in run_bottoms and a + 1 in run_tops:
        choices.extend(([a, a + 1], [a, y], [(a, y)]) for y in values if y > a)
    results: set[Pairs] = set()
    for removed_tops, removed_bottoms, new_piles in choices:
        free_tops = list(run_tops)
        free_bottoms = list(run_bottoms)
        try:
            for t in removed_tops:
                free_tops.remove(t)
            for b in removed_bottoms:
                free_bottoms.remove(b)
        except ValueError:
            continue
        # The run's other piles keep their tops; group them by the runs they fall in afterwards:
        # bottoms move freely within a group, but not between groups.
        post_tops = {t for t, _ in others} | {t for t, _ in new_piles} | set(free_tops)
        groups: dict[int, list[int]] = {}
        for t in free_tops:
            start_value = t
            while start_value > 1 and start_value - 1 in post_tops:
                start_value -= 1
            groups.setdefault(start_value, []).append(t)
        for shared in _distributions(list(groups.values()), free_bottoms):
            results.add(_canon((*others, *new_piles, *shared)))
    # More spaces first: the search tries the emptier tableau before the fuller one.
    return sorted(results, key=lambda p: (len(p), p))


# --------------------------------------------------------------------------- foundations

_FND_CODE: dict[tuple[int, ...], int] = {}
_FND_STEP: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}


def _fnd_code(fnd: tuple[int, ...]) -> int:
    code = _FND_CODE.get(fnd)
    if code is None:
        code = 0
        for c in fnd:
            code = code * 14 + c
        _FND_CODE[fnd] = code
    return code


def _fnd_add(fnd: tuple[int, ...], count: int) -> tuple[int, ...]:
    """f1..f7 counts (sorted) after a card goes onto a foundation holding ``count``."""
    step = _FND_STEP.get((fnd, count))
    if step is None:
        i = len(fnd) - 1
        while fnd[i] != count:
            i -= 1
        step = fnd[:i] + (count + 1,) + fnd[i + 1 :]
        _FND_STEP[(fnd, count)] = step
    return step


# --------------------------------------------------------------------------- search

# Abstract steps of a solution (turned into engine moves by _Concrete afterwards).
S_TURN: Final = 0
S_WASTE_F: Final = 1  # waste top to a foundation holding `arg` cards
S_RESERVE_F: Final = 2
S_TAB_F: Final = 3  # a tableau top of rank `arg` to a foundation
S_WASTE_T: Final = 4  # waste top (rank arg) onto a tableau top of rank arg + 1
S_WASTE_SPACE: Final = 5
S_EMPTY: Final = 6  # lone tableau card of rank arg onto a top of rank arg + 1
S_TAB_F_ALL: Final = 7  # every tableau top of rank arg to foundations (automatic)

Step = tuple[int, int, "_Tab | None"]

# The waste's walls (see _Search.walls_feasible), kept up to date as cards are turned: the
# counts by rank of the cards above the top wall, and a linked stack of (wall rank, counts of
# the cards between it and the next wall down). One summary counts only 12s as walls, the other
# 11s too.
WallStack = tuple[tuple[int, tuple[int, ...]], "WallStack"] | None
Summary = tuple[tuple[int, ...], WallStack]
_NO_CARDS: Final = (0,) * 13
_EMPTY_SUMMARY: Final[Summary] = (_NO_CARDS, None)

# A position: (stock index, waste, waste mask, reserve count, f0 count, f1..f7 counts, tableau).
# The waste is a linked list (sequence index, rest, wall summaries) so pushing and popping copy
# nothing.
Waste = tuple[int, "Waste", Summary, Summary] | None
State = tuple[int, Waste, int, int, int, tuple[int, ...], _Tab]


def _summary_push(summary: Summary, x: int, wall: bool) -> Summary:
    top, stack = summary
    if wall:
        return (_NO_CARDS, ((x, top), stack))
    return (top[:x] + (top[x] + 1,) + top[x + 1 :], stack)


def _push(seq: list[int], waste: Waste, index: int) -> Waste:
    """The waste with card ``index`` of the sequence turned onto it."""
    x = seq[index]
    if waste is None:
        only_12, with_11 = _EMPTY_SUMMARY, _EMPTY_SUMMARY
    else:
        only_12, with_11 = waste[2], waste[3]
    return (index, waste, _summary_push(only_12, x, x == 12), _summary_push(with_11, x, x >= 11))


class _Budget(Exception):
    """The position or time budget ran out."""


class _Search:
    __slots__ = (
        "clock",
        "deadline",
        "max_positions",
        "positions",
        "reserve",
        "seq",
        "seq_len",
        "limit",
        "out_of_time",
        "reopened",
        "reserve_ok",
        "rng",
        "visited",
    )

    def __init__(
        self,
        seq: list[int],
        reserve: list[int],
        max_positions: int,
        clock: Callable[[], float] | None,
        deadline: float | None,
    ) -> None:
        self.seq = seq  # waste (bottom..top) then stock (next first), relative ranks
        self.seq_len = len(seq)
        self.reserve = reserve  # bottom..top, relative ranks
        self.max_positions = max_positions
        self.clock = clock
        self.deadline = deadline
        self.positions = 0
        self.visited: set[int] = set()
        self.reserve_ok: dict[tuple[int, int, tuple[int, ...]], bool] = {}
        self.rng: list[int] | None = None
        self.limit = max_positions
        self.out_of_time = False
        self.reopened: set[int] = set()

    # -- helpers

    def reserve_feasible(self, r: int, f0: int, fnd: tuple[int, ...]) -> bool:
        """Can the reserve still be played out, even if every other card were free to take?

        A relaxation (so False proves a dead end): the reserve's cards go to foundations top
        first; any card not on a foundation and not in the reserve counts as available at any
        time. Greedily, each reserve card goes on f0 while it is incomplete and the card is not
        below what f0 needs (else f0 is completed first), otherwise on the foundation with the
        highest count not above the card's rank, raised with available cards. Greedy is optimal
        in the relaxation: a lower foundation can do whatever a higher one can.
        """
        memo_key = (r, f0, fnd)
        got = self.reserve_ok.get(memo_key)
        if got is not None:
            return got
        pool = [8] * 13
        for y in range(13):
            if y < f0:
                pool[y] -= 1
            for c in fnd:
                if c > y:
                    pool[y] -= 1
        reserve = self.reserve
        for i in range(r):
            pool[reserve[i]] -= 1
        counts = list(fnd)
        ok = True
        for i in range(r - 1, -1, -1):
            x = reserve[i]
            if f0 < _FULL and x >= f0:
                for y in range(f0, x):
                    if pool[y] == 0:
                        ok = False
                        break
                    pool[y] -= 1
                if not ok:
                    break
                f0 = x + 1
                continue
            if f0 < _FULL:
                for y in range(f0, _FULL):
                    if pool[y] == 0:
                        ok = False
                        break
                    pool[y] -= 1
                if not ok:
                    break
                f0 = _FULL
            best = -1
            for j, c in enumerate(counts):
                if c <= x and (best < 0 or c > counts[best]):
                    best = j
            if best < 0:
                ok = False
                break
            for y in range(counts[best], x):
                if pool[y] == 0:
                    ok = False
                    break
                pool[y] -= 1
            if not ok:
                break
            counts[best] = x + 1
        self.reserve_ok[memo_key] = ok
        return ok

    def walls_feasible(self, st: State) -> bool:
        """While f0 is incomplete, can it still be completed, even with unlimited room to park
        cards? A relaxation (so False proves a dead end).

        While f0 is incomplete, a waste card of relative rank 12 can leave the waste only for
        f0 (nothing is built on the base rank and spaces take only base-rank cards), and so can
        an 11 when no tableau pile ends in a 12 (a top 12 could only come from such a pile). Call
        these walls: what lies under a wall stays there until f0 takes the wall. Relaxed: every
        other card is parked for free the moment it is above every wall (turned from the stock,
        or uncovered), and every tableau card is free. Then f0 takes the cards it needs in order:
        the reserve's top or the top wall when it has the rank (both uncover something, so they
        beat a free copy; when both fit, both are tried), else a free copy, else the stock is
        turned to the next card of that rank (turning no further never hurts: it only buries
        walls under new walls).
        """
        _, waste, _, _, f0, _, tab = st
        wall_11 = tab.no_bottom_12
        if waste is None:
            top, stack = _EMPTY_SUMMARY
        else:
            top, stack = waste[3] if wall_11 else waste[2]
        free = [a + b for a, b in zip(tab.cards, top, strict=True)]
        return self._walls_relaxed(f0, st[0], st[3], stack, free, wall_11)

    def _walls_relaxed(self, need: int, s: int, r: int, stack: WallStack, free: list[int], wall_11: bool) -> bool:
        seq = self.seq
        reserve = self.reserve
        while need < _FULL:
            from_reserve = r > 0 and reserve[r - 1] == need
            from_wall = stack is not None and stack[0][0] == need
            if from_reserve and from_wall:
                assert stack is not None
                uncovered = [a + b for a, b in zip(free, stack[0][1], strict=True)]
                if self._walls_relaxed(need + 1, s, r, stack[1], uncovered, wall_11):
                    return True
                r -= 1
            elif from_reserve:
                r -= 1
            elif from_wall:
                assert stack is not None
                for x, n in enumerate(stack[0][1]):
                    free[x] += n
                stack = stack[1]
            elif free[need]:
                free[need] -= 1
            else:
                while True:
                    if s >= self.seq_len:
                        return False
                    x = seq[s]
                    s += 1
                    if x == need:
                        break
                    if x == 12 or (x == 11 and wall_11):
                        stack = ((x, _NO_CARDS), stack)
                    else:
                        free[x] += 1
            need += 1
        return True

    def key(self, st: State) -> int:
        s, _, mask, r, f0, fnd, tab = st
        return (((((tab.ident << 27 | _fnd_code(fnd)) << 4 | f0) << 4 | r) << 7 | s) << 80) | mask

    def auto(self, st: State, steps: list[Step]) -> State:
        """Play the safe automatic moves (only once f0 is complete)."""
        s, waste, mask, r, f0, fnd, tab = st
        if f0 < _FULL:
            return st
        seq = self.seq
        reserve = self.reserve
        while True:
            m = fnd[0]
            if m == _FULL:
                break
            if r and reserve[r - 1] == m:
                r -= 1
                fnd = _fnd_add(fnd, m)
                steps.append((S_RESERVE_F, m, None))
            elif waste is not None and seq[waste[0]] == m:
                mask ^= 1 << waste[0]
                waste = waste[1]
                fnd = _fnd_add(fnd, m)
                steps.append((S_WASTE_F, m, None))
            elif tab.tops[m]:
                for _ in range(tab.tops[m]):
                    fnd = _fnd_add(fnd, m)
                tab = tab.outcomes(OP_TAKE_ALL, m)[0]
                steps.append((S_TAB_F_ALL, m, tab))
            else:
                break
        return (s, waste, mask, r, f0, fnd, tab)

    def children(self, st: State) -> list[tuple[State, list[Step]]]:
        """Every move from ``st`` (one per distinct outcome), best first, autos applied."""
        s, waste, mask, r, f0, fnd, tab = st
        seq = self.seq
        restricted = f0 < _FULL
        out: list[tuple[State, list[Step]]] = []
        wtop = seq[waste[0]] if waste is not None else -1
        rtop = self.reserve[r - 1] if r else -1
        tops = tab.tops

        # Foundation moves. `needs` lists the counts (= ranks) foundations need now.
        needs: Sequence[int] = (f0,) if restricted else sorted(set(c for c in fnd if c < _FULL))
        for need in needs:
            if rtop == need:
                if restricted:
                    nf0, nfnd = f0 + 1, fnd
                else:
                    nf0, nfnd = f0, _fnd_add(fnd, need)
                steps: list[Step] = [(S_RESERVE_F, need, None)]
                out.append((self.auto((s, waste, mask, r - 1, nf0, nfnd, tab), steps), steps))
            if tops[need]:
                nf0, nfnd = (f0 + 1, fnd) if restricted else (f0, _fnd_add(fnd, need))
                for ntab in tab.outcomes(OP_TAKE, need):
                    steps = [(S_TAB_F, need, ntab)]
                    out.append((self.auto((s, waste, mask, r, nf0, nfnd, ntab), steps), steps))
            if wtop == need and waste is not None:
                nf0, nfnd = (f0 + 1, fnd) if restricted else (f0, _fnd_add(fnd, need))
                steps = [(S_WASTE_F, need, None)]
                nst = (s, waste[1], mask ^ (1 << waste[0]), r, nf0, nfnd, tab)
                out.append((self.auto(nst, steps), steps))

        nf = len(out)
        # Emptying a pile onto another (the only tableau-to-tableau moves that change anything).
        for a in range(1, 12):
            if tops[a] and tops[a + 1]:
                for ntab in tab.outcomes(OP_EMPTY, a):
                    steps = [(S_EMPTY, a, ntab)]
                    out.append(((s, waste, mask, r, f0, fnd, ntab), steps))

        if waste is not None:
            rest = waste[1]
            nmask = mask ^ (1 << waste[0])
            if tab.spaces and (wtop == 0 or not restricted):
                ntab = tab.outcomes(OP_FILL, wtop)[0]
                steps = [(S_WASTE_SPACE, wtop, ntab)]
                out.append(((s, rest, nmask, r, f0, fnd, ntab), steps))
            if 1 <= wtop <= 11 and tops[wtop + 1]:
                for ntab in tab.outcomes(OP_PUT, wtop):
                    steps = [(S_WASTE_T, wtop, ntab)]
                    out.append(((s, rest, nmask, r, f0, fnd, ntab), steps))

        if s < self.seq_len:
            steps = [(S_TURN, 0, None)]
            turn = ((s + 1, _push(seq, waste, s), mask | (1 << s), r, f0, fnd, tab), steps)
            out.append(turn)
        if self.rng is not None:
            rng = self.rng
            # Keep foundation moves first; shuffle the rest.
            rest_moves = out[nf:]
            for i in range(len(rest_moves) - 1, 0, -1):
                rng[0] = (rng[0] * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
                j = (rng[0] >> 33) % (i + 1)
                rest_moves[i], rest_moves[j] = rest_moves[j], rest_moves[i]
            out[nf:] = rest_moves
        return out

    def run(self, start: State) -> list[Step] | None:
        """The winning steps, or None if none exists (proved: exhaustive). Raises _Budget.

        Depth-first search restarted with shuffled move orders (runs that go astray early are
        long, and a fresh order usually finds a short way) under a Luby schedule of position
        budgets. The move graph has no cycles (every move turns a card, fills a foundation,
        takes a card off the waste or removes a pile), so a visited position is either dead
        (its whole subtree failed) or on the current path: on a restart the path is reopened
        and the dead ones stay dead, so the restarts add up to one exhaustive search.
        """
        first: list[Step] = []
        start = self.auto(start, first)
        if self.won(start):
            return first
        attempt = 0
        while True:
            attempt += 1
            self.rng = None if attempt == 1 else [attempt * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF]
            self.limit = min(self.max_positions, self.positions + RESTART_UNIT * _luby(attempt))
            path_keys: list[int] = []
            try:
                return self.dfs(start, first, path_keys)
            except _Budget:
                if self.positions >= self.max_positions or self.out_of_time:
                    raise
                self.reopened.update(path_keys)

    def dfs(self, start: State, first: list[Step], path_keys: list[int]) -> list[Step] | None:
        if not self.enter(start, path_keys):
            return None
        # Frames: (children, next index); path[i] holds the steps that led to frame i.
        stack: list[tuple[list[tuple[State, list[Step]]], list[int]]] = [(self.children(start), [0])]
        path: list[list[Step]] = [first]
        while stack:
            kids, cursor = stack[-1]
            if cursor[0] >= len(kids):
                stack.pop()
                path.pop()
                path_keys.pop()
                continue
            child, steps = kids[cursor[0]]
            cursor[0] += 1
            if self.won(child):
                path.append(steps)
                return [step for chunk in path for step in chunk]
            if not self.enter(child, path_keys):
                continue
            path.append(steps)
            stack.append((self.children(child), [0]))
        return None

    def won(self, st: State) -> bool:
        return st[4] == _FULL and st[5][0] == _FULL

    def enter(self, st: State, path_keys: list[int]) -> bool:
        """Mark ``st`` visited and push it on the path; False if it is known dead.
        Raises _Budget when this run's share of the budget (or the time) is spent."""
        k = self.key(st)
        if k in self.visited:
            if k not in self.reopened:
                return False
            self.reopened.discard(k)
            path_keys.append(k)
            return True
        if RESERVE_CHECK and not self.reserve_feasible(st[3], st[4], st[5]):
            return False
        if WALL_CHECK and st[4] < _FULL and not self.walls_feasible(st):
            return False
        if self.positions >= self.limit:
            raise _Budget
        clock = self.clock
        if (
            clock is not None
            and self.deadline is not None
            and self.positions % CLOCK_EVERY == 0
            and clock() >= self.deadline
        ):
            self.out_of_time = True
            raise _Budget
        self.visited.add(k)
        self.positions += 1
        path_keys.append(k)
        return True


def _luby(i: int) -> int:
    """The Luby sequence 1 1 2 1 1 2 4 1 1 2 ... (i >= 1): restart lengths within a log factor
    of the best fixed length, whatever the distribution of run lengths."""
    k = 1
    while (1 << k) - 1 < i:
        k += 1
    while i != (1 << k) - 1:
        i -= (1 << (k - 1)) - 1
        k = 1
        while (1 << k) - 1 < i:
            k += 1
    return 1 << (k - 1)


# --------------------------------------------------------------------------- concrete moves


class _Concrete:
    """Turns abstract steps into engine move texts on concrete, named piles."""

    def __init__(self, f0: int, fnd: list[int], tableau: list[Pair | None]) -> None:
        self.f0 = f0
        self.fnd = fnd  # counts of f1..f7, by pile
        self.tab = tableau  # t0..t11: (top, bottom) or None

    def foundation_for(self, count: int) -> str:
        if self.f0 < _FULL:
            self.f0 += 1
            return "f0"
        for i, c in enumerate(self.fnd):
            if c == count:
                self.fnd[i] += 1
                return f"f{i + 1}"
        raise AssertionError(f"no foundation holds {count} cards")

    def canon(self, tab: list[Pair | None]) -> Pairs:
        return _canon(p for p in tab if p is not None)

    def swaps_then(self, step: int, a: int, target: Pairs) -> tuple[list[str], list[Pair | None], int, int]:
        """Breadth-first over tableau moves that only re-pair piles until ``step`` on a named
        pile gives ``target``. Returns (swap moves, tableau before the step, pile, other pile)."""
        start = list(self.tab)
        frontier: list[tuple[list[Pair | None], list[str]]] = [(start, [])]
        seen = {tuple(start)}
        while frontier:
            nxt: list[tuple[list[Pair | None], list[str]]] = []
            for tab, moves in frontier:
                hit = self._apply(step, a, tab, target)
                if hit is not None:
                    return moves, tab, hit[0], hit[1]
                for i, p in enumerate(tab):
                    if p is None or p[0] == 0 or p[1] == p[0] or p[0] >= 12:
                        continue
                    for j, q in enumerate(tab):
                        if q is not None and q[0] == p[0] + 1:
                            new = list(tab)
                            new[i] = (p[0] + 1, p[1])
                            new[j] = (p[0], q[1])
                            t = tuple(new)
                            if t not in seen:
                                seen.add(t)
                                nxt.append((new, [*moves, f"t{i}>t{j}"]))
            frontier = nxt
        raise AssertionError("the search's tableau step cannot be realised")

    def _apply(self, step: int, a: int, tab: list[Pair | None], target: Pairs) -> tuple[int, int] | None:
        for i, p in enumerate(tab):
            if p is None:
                continue
            if step == S_TAB_F and p[0] == a:
                new = list(tab)
                new[i] = (a + 1, p[1]) if p[1] > a else None
                if self.canon(new) == target:
                    return i, -1
            elif step == S_WASTE_T and p[0] == a + 1:
                new = list(tab)
                new[i] = (a, p[1])
                if self.canon(new) == target:
                    return i, -1
            elif step == S_EMPTY and p == (a, a):
                for j, q in enumerate(tab):
                    if q is not None and q[0] == a + 1:
                        new = list(tab)
                        new[i] = None
                        new[j] = (a, q[1])
                        if self.canon(new) == target:
                            return i, j
        return None

    def moves(self, steps: list[Step]) -> list[str]:
        out: list[str] = []
        for step, a, target in steps:
            if step == S_TURN:
                out.append("stock>waste")
            elif step == S_WASTE_F:
                out.append("waste>" + self.foundation_for(a))
            elif step == S_RESERVE_F:
                out.append("reserve>" + self.foundation_for(a))
            elif step == S_WASTE_SPACE:
                i = self.tab.index(None)
                self.tab[i] = (a, a)
                out.append(f"waste>t{i}")
            elif step == S_TAB_F_ALL:
                for i, p in enumerate(self.tab):
                    if p is not None and p[0] == a:
                        out.append(f"t{i}>" + self.foundation_for(a))
                        self.tab[i] = (a + 1, p[1]) if p[1] > a else None
            else:
                assert target is not None
                swaps, tab, i, j = self.swaps_then(step, a, target.pairs)
                out.extend(swaps)
                self.tab = tab
                p = tab[i]
                assert p is not None
                if step == S_TAB_F:
                    out.append(f"t{i}>" + self.foundation_for(a))
                    self.tab[i] = (a + 1, p[1]) if p[1] > a else None
                elif step == S_WASTE_T:
                    out.append(f"waste>t{i}")
                    self.tab[i] = (a, p[1])
                else:
                    q = tab[j]
                    assert q is not None
                    out.append(f"t{i}>t{j}")
                    self.tab[i] = None
                    self.tab[j] = (a, q[1])
            if step != S_TURN and step != S_RESERVE_F and step != S_WASTE_F and step != S_TAB_F_ALL:
                assert self.canon(self.tab) == (target.pairs if target is not None else self.canon(self.tab))
        return out


def shorten(moves: list[str]) -> list[str]:
    """Drop the search's detours, each replacement leaving exactly the same position:

    * ``A>tX`` then ``tX>tY`` (one card carried twice) becomes ``A>tY`` (A the waste or a pile):
      the card lands on the same top either way, and ``tX`` is left as it was;
    * ``tX>tY`` then ``tY>tX`` (a move and its reverse) disappear.
    """
    out: list[str] = []
    for move in moves:
        if out and move[0] == "t":
            src, _, dst = move.partition(">")
            prev_src, _, prev_dst = out[-1].partition(">")
            if dst[0] == "t" and prev_dst == src and prev_src[0] in "wt":
                out.pop()
                if prev_src != dst:
                    out.append(f"{prev_src}>{dst}")
                continue
        out.append(move)
    return out


# --------------------------------------------------------------------------- public API


def _position(game: Game) -> tuple[State, list[int], list[int], _Concrete]:
    """The search's view of a game: (state, sequence, reserve, concrete piles)."""
    base = game.base

    def rel(card: int) -> int:
        return (rank(card) - base) % 13

    seq = [rel(c) for c in game.waste] + [rel(c) for c in reversed(game.stock)]
    reserve = [rel(c) for c in game.reserve]
    pairs: list[Pair] = []
    concrete: list[Pair | None] = []
    for index, pile in enumerate(game.tableau):
        if not pile:
            concrete.append(None)
            continue
        ranks = [rel(c) for c in pile]
        top = ranks[-1]
        expected = [top + len(ranks) - 1 - k for k in range(len(ranks))]
        if ranks != expected or (top == 0 and len(ranks) > 1) or expected[0] > 12:
            raise ValueError(f"t{index} is not a run down by one from its bottom card: not a position of The Plot")
        pair = (top, top + len(ranks) - 1)
        pairs.append(pair)
        concrete.append(pair)
    f0 = len(game.foundations[0])
    others = [len(f) for f in game.foundations[1:]]
    if f0 < _FULL and any(others):
        raise ValueError("f1..f7 hold cards while f0 is incomplete: not a position of The Plot")
    waste: Waste = None
    mask = 0
    for i in range(len(game.waste)):
        waste = _push(seq, waste, i)
        mask |= 1 << i
    state: State = (len(game.waste), waste, mask, len(reserve), f0, tuple(sorted(others)), _tab(_canon(pairs)))
    return state, seq, reserve, _Concrete(f0, others, concrete)


def solve(
    game: Game,
    *,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    max_seconds: float | None = None,
    clock: Callable[[], float] | None = None,
) -> SolveResult:
    """Solve the position of ``game`` (any position, not only a fresh deal; ``game`` is not changed).

    ``max_positions`` bounds the distinct positions expanded (the result never reports more).
    ``max_seconds`` needs ``clock`` (e.g. ``time.monotonic``): shared/ reads no clock itself.
    A won game is winnable with no moves; a blocked or resigned one is unwinnable. A Game whose
    piles no play of The Plot can produce (a tableau pile that is not a run down by one, say)
    raises ValueError.
    """
    if max_positions < 0:
        raise ValueError("max_positions must be at least 0")
    if max_seconds is not None and clock is None:
        raise ValueError("max_seconds needs a clock, e.g. clock=time.monotonic (shared/ reads no clock)")
    started = clock() if clock is not None else 0.0

    def elapsed() -> float:
        return clock() - started if clock is not None else 0.0

    if game.status == WON:
        return SolveResult(WINNABLE, [], 0, elapsed())
    if game.status in (BLOCKED, RESIGNED):
        return SolveResult(UNWINNABLE, [], 0, elapsed())
    assert game.status == PLAYING
    if len(_TABS) > _TAB_KEEP:
        _TABS.clear()
    state, seq, reserve, concrete = _position(game)
    deadline = started + max_seconds if max_seconds is not None else None
    search = _Search(seq, reserve, max_positions, clock, deadline)
    try:
        steps = search.run(state)
    except _Budget:
        return SolveResult(UNKNOWN, [], search.positions, elapsed())
    if steps is None:
        return SolveResult(UNWINNABLE, [], search.positions, elapsed())
    moves = shorten(concrete.moves(steps))
    return SolveResult(WINNABLE, moves, search.positions, elapsed())


def hint(
    game: Game,
    *,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    max_seconds: float | None = None,
    clock: Callable[[], float] | None = None,
) -> str | None:
    """The next move of a winning line from the current position, or None (no win found)."""
    result = solve(game, max_positions=max_positions, max_seconds=max_seconds, clock=clock)
    if result.verdict == WINNABLE and result.moves:
        return result.moves[0]
    return None


def solve_deal(deal: int, **budget: object) -> SolveResult:
    """Solve a deal from its start (see :func:`solve` for the budget keywords)."""
    return solve(Game(check_deal_number(deal)), **budget)  # type: ignore[arg-type]


def replays_to_win(game: Game, moves: Sequence[str]) -> bool:
    """Do ``moves``, played from ``game``'s position through the engine, win? (``game`` unchanged.)"""
    trial = game.copy()
    try:
        for move in moves:
            trial.play(move, check_blocked=False)
    except ValueError:
        return False
    return trial.status == WON


def find_winnable_deal(
    seed_source: Callable[[], int] | Sequence[int],
    *,
    tries: int,
    max_positions: int = DEFAULT_MAX_POSITIONS,
) -> tuple[int, SolveResult] | None:
    """The first candidate deal proved winnable within ``max_positions`` positions, with its
    solution, or None after ``tries`` candidates.

    ``seed_source`` is a list of deal numbers or a module-level callable returning one (e.g.
    ``shared.fairplay.random_deal``), so the call pickles for a process pool. Each solution is
    replayed through the engine before it is trusted.
    """
    if tries < 0:
        raise ValueError("tries must be at least 0")
    candidates = iter(seed_source) if not callable(seed_source) else None
    for _ in range(tries):
        if candidates is None:
            assert callable(seed_source)
            deal = seed_source()
        else:
            picked = next(candidates, None)
            if picked is None:
                return None
            deal = picked
        game = Game(check_deal_number(deal))
        result = solve(game, max_positions=max_positions)
        if result.verdict == WINNABLE and replays_to_win(game, result.moves):
            return deal, result
    return None
