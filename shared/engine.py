"""The Plot's rules (docs/rules.md (Piles, The rules, Undo)): a pure game engine, no I/O.

A game's state is a function of its deal number and its list of entries (moves in
text form ``SRC>DST``, ``undo``, ``resign``), so a game can be stored as a log and
replayed anywhere. Piles are small integers internally; only :data:`PILE_NAMES`
and the move text cross the API.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from shared.cards import CARD_COUNT, card_name, next_rank, rank
from shared.deal import FOUNDATION_COUNT, TABLEAU_SIZE, check_deal_number, deal_layout
from shared.structs import IllegalEntry as IllegalEntry
from shared.structs import ReplayResult as ReplayResult
from shared.structs import View as View

STOCK: Final = 0
WASTE: Final = 1
RESERVE: Final = 2
F0: Final = 3  # foundations f0..f7 are 3..10
T0: Final = F0 + FOUNDATION_COUNT  # tableau t0..t11 are 11..22
PILE_COUNT: Final = T0 + TABLEAU_SIZE

PILE_NAMES: Final[tuple[str, ...]] = (
    ("stock", "waste", "reserve")
    + tuple(f"f{i}" for i in range(FOUNDATION_COUNT))
    + tuple(f"t{i}" for i in range(TABLEAU_SIZE))
)
PILE_INDEX: Final[dict[str, int]] = {name: i for i, name in enumerate(PILE_NAMES)}
MOVE_TEXT: Final[tuple[tuple[str, ...], ...]] = tuple(tuple(f"{src}>{dst}" for dst in PILE_NAMES) for src in PILE_NAMES)

UNDO: Final = "undo"
RESIGN: Final = "resign"

PLAYING: Final = "playing"
WON: Final = "won"
BLOCKED: Final = "blocked"
RESIGNED: Final = "resigned"
STATUSES: Final = (PLAYING, WON, BLOCKED, RESIGNED)

# How much search a live game's blocked check may spend after a move (Game.play, settle_status),
# in states (a state is one node of the dig search or one relaxation bound evaluated): about 5 ms
# of CPU at worst on the machine of docs/benchmarks.md, and far more than any position met in play
# needs. Beyond it the answer is "undecided" (``Game.blocked_pending``); the server then runs the
# exact check in a worker process. None means no budget (the exact check, however long).
BLOCKED_BUDGET: Final = 150
# Game(_BLANK): a game with no field set, which copy() and from_view() fill in themselves (a
# compiled build of the engine, docs/engine.md "The compiled build", has no Game.__new__ to call).
_BLANK: Final = -1

_FOUNDATION_RANGE: Final = range(F0, F0 + FOUNDATION_COUNT)
_TABLEAU_RANGE: Final = range(T0, T0 + TABLEAU_SIZE)


def rank_word(r: int) -> str:
    """How a reason names a rank: 'an Ace', 'a 9', 'a Queen'."""
    word = {1: "Ace", 11: "Jack", 12: "Queen", 13: "King"}.get(r, str(r))
    return ("an " if r in (1, 8) else "a ") + word


def rank_label(r: int) -> str:
    return {1: "Ace", 11: "Jack", 12: "Queen", 13: "King"}.get(r, str(r))


class IllegalMove(ValueError):
    """An entry the rules do not allow here; ``reason`` is a sentence a player can act on."""

    def __init__(self, entry: str, reason: str) -> None:
        super().__init__(f"{entry}: {reason}")
        self.entry = entry
        self.reason = reason


def view_hash(view: View) -> str:
    """SHA-256 (hex) of the view's canonical encoding (docs/engine.md, "View hash").

    Bytes: ``b"plot-view-1"``; stock count; reserve count; reserve top (255 when
    empty); waste length then ids bottom..top; for f0..f7 and t0..t11 in order, the
    length then ids bottom..top. Every number is one byte. Status is not hashed.
    """
    out = bytearray(b"plot-view-1")
    out += bytes((view.stock, view.reserve_count, 255 if view.reserve_top is None else view.reserve_top))
    for pile in (view.waste, *view.foundations, *view.tableau):
        out.append(len(pile))
        out += bytes(pile)
    return hashlib.sha256(out).hexdigest()


CHECK_MASK: Final = 0xFFFFFFFF
NO_CARD: Final = 255  # the reserve's top in a check term when the reserve is empty


def fmix32(x: int) -> int:
    """MurmurHash3's 32-bit finalizer: a bijection on 32-bit ints that mixes every input bit."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & CHECK_MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & CHECK_MASK
    x ^= x >> 16
    return x


def check_term(pile: int, pos: int, value: int) -> int:
    """One term of the check value (docs/protocol.md, "The check value"): ``fmix32(pile<<16 | pos<<8 | value)``."""
    return fmix32((pile << 16) | (pos << 8) | value)


def view_check(view: View) -> int:
    """The check value of a board (docs/protocol.md, "The check value"): the sum, modulo 2^32, of
    one term per visible card ``(pile, position from the bottom, card)`` of the waste, the
    foundations and the tableau, plus ``(stock, 0, count)``, ``(reserve, 0, count)`` and
    ``(reserve, 1, top or 255)``. A sum, so a move changes it by the terms of the cards it moves."""
    total = check_term(STOCK, 0, view.stock) + check_term(RESERVE, 0, view.reserve_count)
    total += check_term(RESERVE, 1, NO_CARD if view.reserve_top is None else view.reserve_top)
    for pos, card in enumerate(view.waste):
        total += check_term(WASTE, pos, card)
    for f, pile in enumerate(view.foundations):
        for pos, card in enumerate(pile):
            total += check_term(F0 + f, pos, card)
    for t, pile in enumerate(view.tableau):
        for pos, card in enumerate(pile):
            total += check_term(T0 + t, pos, card)
    return total & CHECK_MASK


# A move acknowledgement's board change (docs/protocol.md, "Small acknowledgements"): each touched
# pile of the waste, the foundations and the tableau as [name, keep, cards] (the pile is now its
# first ``keep`` cards followed by ``cards``).
PileChange = tuple[str, int, list[int]]


def apply_changes(
    view: View,
    changes: Sequence[PileChange],
    stock: int | None,
    reserve: tuple[int, int | None] | None,
    status: str | None,
) -> View:
    """The board a move acknowledgement describes: ``view`` with its changes applied (a new View;
    ``view`` is left alone). None: unchanged. ValueError for a change that names no such pile or
    keeps more cards than the pile has (the client's board has diverged: ask for a snapshot)."""
    waste = view.waste
    foundations = view.foundations
    tableau = view.tableau
    copied_f = copied_t = False
    for name, keep, cards in changes:
        index = PILE_INDEX.get(name)
        if index is None or index in (STOCK, RESERVE):
            raise ValueError(f"a change names no board pile: {name!r}")
        if index == WASTE:
            old = waste
        elif index < T0:
            old = foundations[index - F0]
        else:
            old = tableau[index - T0]
        if not 0 <= keep <= len(old):
            raise ValueError(f"a change keeps {keep} cards of {name}, which has {len(old)}")
        new = old[:keep] + list(cards)
        if index == WASTE:
            waste = new
        elif index < T0:
            if not copied_f:
                foundations, copied_f = list(foundations), True
            foundations[index - F0] = new
        else:
            if not copied_t:
                tableau, copied_t = list(tableau), True
            tableau[index - T0] = new
    reserve_count, reserve_top = (view.reserve_count, view.reserve_top) if reserve is None else reserve
    return View(
        stock=view.stock if stock is None else stock,
        waste=list(waste),
        reserve_top=reserve_top,
        reserve_count=reserve_count,
        foundations=[list(f) for f in foundations],
        tableau=[list(t) for t in tableau],
        status=view.status if status is None else status,
    )


def parse_move(entry: str) -> tuple[int, int]:
    """``'waste>t3'`` -> (src, dst) pile indices; IllegalMove with a reason if it does not parse."""
    src_name, sep, dst_name = entry.partition(">")
    if not sep:
        raise IllegalMove(
            entry,
            f"{entry!r} is not a move: write SRC>DST (e.g. waste>t3, stock>waste), undo or resign",
        )
    for name in (src_name, dst_name):
        if name not in PILE_INDEX:
            raise IllegalMove(
                entry,
                f"unknown pile {name!r}: piles are stock, waste, reserve, f0..f7 and t0..t11",
            )
    return PILE_INDEX[src_name], PILE_INDEX[dst_name]


class Game:
    """One player's game of The Plot.

    ``play(entry)`` applies a move, ``undo`` or ``resign`` or raises :class:`IllegalMove`
    leaving the state unchanged. ``entries`` is the game record's move list.
    """

    __slots__ = (
        "deal",
        "base",
        "undo_enabled",
        "stock",
        "waste",
        "reserve",
        "foundations",
        "tableau",
        "status",
        "entries",
        "foundation_cards",
        "blocked_budget",
        "blocked_pending",
        "_undo_stack",
        "_undo_barrier",
        "_check_value",
    )

    def __init__(self, deal: int, *, undo: bool = True, blocked_budget: int | None = BLOCKED_BUDGET) -> None:
        if deal == _BLANK:
            return
        layout = deal_layout(check_deal_number(deal))
        self.deal = deal
        self.base = rank(layout.foundation)
        self.undo_enabled = undo
        # Stock kept reversed so the next card to turn is at the end (list.pop()).
        self.stock: list[int] = list(reversed(layout.stock))
        self.waste: list[int] = []
        self.reserve: list[int] = list(layout.reserve)
        self.foundations: list[list[int]] = [[layout.foundation]] + [[] for _ in range(FOUNDATION_COUNT - 1)]
        self.tableau: list[list[int]] = [[card] for card in layout.tableau]
        self.status: str = PLAYING
        self.entries: list[str] = []
        self.foundation_cards = 1
        # The blocked check after each entry stops after this many states (None: exact, unbounded).
        self.blocked_budget = blocked_budget
        # True: the stock is empty and the budgeted check could not decide whether this position
        # is blocked; the game stays playing until someone runs the exact check (resolve_blocked).
        self.blocked_pending = False
        self._undo_stack: list[tuple[int, int]] = []
        # The last move that uncovered a hidden card (undo stops there), for the reason text.
        self._undo_barrier: str | None = None
        # The check value of the view (docs/protocol.md), kept up to date move by move once asked for.
        self._check_value: int | None = None

    # ---------------------------------------------------------------- queries

    @property
    def restricted(self) -> bool:
        return len(self.foundations[0]) < 13

    @property
    def over(self) -> bool:
        return self.status != PLAYING

    def needed_rank(self, foundation: int) -> int:
        """The rank foundation ``foundation`` (0..7) needs next (an empty one needs the base rank)."""
        return (self.base - 1 + len(self.foundations[foundation])) % 13 + 1

    def _pile(self, index: int) -> list[int]:
        if index == WASTE:
            return self.waste
        if index == RESERVE:
            return self.reserve
        if index < T0:
            return self.foundations[index - F0]
        return self.tableau[index - T0]

    def _foundation_targets(self) -> dict[int, list[int]]:
        """Needed rank -> foundation pile indices that take it now."""
        if self.restricted:
            return {self.needed_rank(0): [F0]}
        targets: dict[int, list[int]] = {}
        for f in range(1, FOUNDATION_COUNT):
            if len(self.foundations[f]) < 13:
                targets.setdefault(self.needed_rank(f), []).append(F0 + f)
        return targets

    def legal_moves(self) -> list[str]:
        """Every legal move of the current position, in text form (undo/resign not included)."""
        if self.status != PLAYING:
            return []
        text = MOVE_TEXT
        moves: list[str] = []
        if self.stock:
            moves.append(text[STOCK][WASTE])
        base = self.base
        restricted = len(self.foundations[0]) < 13
        found = self._foundation_targets()
        tops_by_rank: dict[int, list[int]] = {}
        spaces: list[int] = []
        for i, pile in enumerate(self.tableau):
            if pile:
                tops_by_rank.setdefault(pile[-1] % 13 + 1, []).append(T0 + i)
            else:
                spaces.append(T0 + i)
        sources: list[tuple[int, int]] = []
        if self.waste:
            sources.append((WASTE, self.waste[-1]))
        if self.reserve:
            sources.append((RESERVE, self.reserve[-1]))
        for i, pile in enumerate(self.tableau):
            if pile:
                sources.append((T0 + i, pile[-1]))
        for src, card in sources:
            r = card % 13 + 1
            row = text[src]
            for dst in found.get(r, ()):
                moves.append(row[dst])
            if src == RESERVE:
                continue
            if r != base:
                target_rank = r % 13 + 1
                if target_rank != base:
                    for dst in tops_by_rank.get(target_rank, ()):
                        if dst != src:
                            moves.append(row[dst])
            if src == WASTE and (r == base or not restricted):
                for dst in spaces:
                    moves.append(row[dst])
        return moves

    def reason_illegal(self, entry: str) -> str | None:
        """None if ``entry`` (a move, ``undo`` or ``resign``) may be played now, else the reason it may not."""
        try:
            if entry == UNDO:
                self._check_undo()
            elif entry == RESIGN:
                if self.status != PLAYING:
                    raise IllegalMove(entry, f"the game is over ({self.status}): nothing more is accepted")
            else:
                self._check(entry)
        except IllegalMove as exc:
            return exc.reason
        return None

    def _check(self, entry: str) -> tuple[int, int]:
        """Validate a move entry (not undo/resign); returns (src, dst) or raises IllegalMove."""
        if self.status != PLAYING:
            raise IllegalMove(entry, f"the game is over ({self.status}): nothing more is accepted")
        src, dst = parse_move(entry)
        if src == STOCK:
            if dst != WASTE:
                raise IllegalMove(entry, "the stock only turns onto the waste: play stock>waste")
            if not self.stock:
                raise IllegalMove(entry, "the stock is empty, and there is no redeal")
            return src, dst
        if dst in (STOCK, WASTE, RESERVE):
            raise IllegalMove(entry, f"nothing may be played to the {PILE_NAMES[dst]}")
        if F0 <= src < T0:
            raise IllegalMove(entry, "cards never leave a foundation")
        if src == dst:
            raise IllegalMove(entry, f"{PILE_NAMES[src]} cannot be played onto itself")
        source = self._pile(src)
        if not source:
            what = "the waste is" if src == WASTE else "the reserve is" if src == RESERVE else f"{PILE_NAMES[src]} is"
            raise IllegalMove(entry, f"{what} empty: there is no card to move")
        card = source[-1]
        r = rank(card)
        base = self.base
        if dst < T0:  # a foundation
            f = dst - F0
            if self.restricted:
                if f != 0:
                    raise IllegalMove(
                        entry,
                        "only the first foundation takes cards until it is complete "
                        f"(it needs {rank_word(self.needed_rank(0))})",
                    )
            elif f == 0:
                raise IllegalMove(entry, "the first foundation is complete and takes nothing more")
            elif len(self.foundations[f]) == 13:
                raise IllegalMove(entry, f"{PILE_NAMES[dst]} is complete")
            need = self.needed_rank(f)
            if r != need:
                where = "the first foundation" if f == 0 else PILE_NAMES[dst]
                empty = " (an empty foundation starts with the base rank)" if not self.foundations[f] else ""
                raise IllegalMove(entry, f"{where} needs {rank_word(need)}{empty}; {card_name(card)} is {rank_word(r)}")
            return src, dst
        # A tableau target.
        target = self.tableau[dst - T0]
        if src == RESERVE and target:
            raise IllegalMove(entry, "the reserve plays only to a foundation")
        if not target:
            if src != WASTE:
                raise IllegalMove(entry, f"{PILE_NAMES[dst]} is a space: only the waste may fill a space")
            if self.restricted and r != base:
                raise IllegalMove(
                    entry,
                    "while the first foundation is incomplete only a base-rank card "
                    f"({rank_label(base)}) may fill a space",
                )
            return src, dst
        top_rank = rank(target[-1])
        if top_rank == base:
            raise IllegalMove(
                entry, f"{PILE_NAMES[dst]}'s top is the base rank {rank_label(base)}: nothing may be built on it"
            )
        if r == base:
            raise IllegalMove(
                entry,
                f"{card_name(card)} is the base rank {rank_label(base)}: it is never built on a tableau card",
            )
        if next_rank(r) != top_rank:
            raise IllegalMove(
                entry,
                f"{PILE_NAMES[dst]}'s top is {rank_word(top_rank)}: it takes only "
                f"{rank_word((top_rank - 2) % 13 + 1)}, not {rank_word(r)}",
            )
        return src, dst

    # ---------------------------------------------------------------- actions

    def play(self, entry: str, *, check_blocked: bool = True) -> None:
        """Apply one record entry (a move, ``undo`` or ``resign``) or raise IllegalMove.

        Once the stock is empty, whether the position is blocked is checked after the entry,
        within ``blocked_budget`` states: if that cannot decide, the game stays playing with
        ``blocked_pending`` set (see :meth:`resolve_blocked`). ``check_blocked=False`` skips
        the blocked search after this entry (record replay decides blocked once, at the end:
        see :func:`replay`).
        """
        if entry == UNDO:
            self._undo()
        elif entry == RESIGN:
            if self.status != PLAYING:
                raise IllegalMove(entry, f"the game is over ({self.status}): nothing more is accepted")
            self.status = RESIGNED
            self.blocked_pending = False
        else:
            src, dst = self._check(entry)
            self._move(src, dst)
        self.entries.append(entry)
        if entry != RESIGN:
            self._update_status(check_blocked)

    def check_move(self, entry: str) -> tuple[int, int]:
        """Check a move entry (not undo/resign) on this position: its (src, dst) piles, or IllegalMove.
        :meth:`play_checked` then plays it without checking again, on this same position."""
        return self._check(entry)

    def play_checked(self, entry: str, move: tuple[int, int]) -> None:
        """Play a move that :meth:`check_move` accepted on this very position (no second check)."""
        self._move(*move)
        self.entries.append(entry)
        self._update_status(True)

    def play_answered(
        self, entry: str, checked: tuple[int, int] | None
    ) -> tuple[list[PileChange], int | None, tuple[int, int | None] | None]:
        """Play an entry (``play_checked`` with the piles ``check_move`` gave, else ``play``) and
        return its :meth:`changes` (what the server's acknowledgement carries), in one call: the
        piles it touches, their lengths before, the play, the changes. IllegalMove as ``play``."""
        touched = checked if checked is not None else self.touched(entry)
        lengths = tuple([self.pile_length(index) for index in touched])
        if checked is not None:
            self.play_checked(entry, checked)
        else:
            self.play(entry)
        return self.changes(touched, lengths)

    def _move(self, src: int, dst: int) -> None:
        check = self._check_value
        if src == STOCK:
            count = len(self.stock)
            card = self.stock.pop()
            self.waste.append(card)
            self._undo_stack.clear()
            self._undo_barrier = "stock>waste turned a card"
            if check is not None:
                check += check_term(STOCK, 0, count - 1) - check_term(STOCK, 0, count)
                self._check_value = (check + check_term(WASTE, len(self.waste) - 1, card)) & CHECK_MASK
            return
        source = self._pile(src)
        card = source.pop()
        target = self._pile(dst)
        target.append(card)
        if check is not None:
            if src == RESERVE:
                count = len(source)
                check += check_term(RESERVE, 0, count) - check_term(RESERVE, 0, count + 1)
                check += check_term(RESERVE, 1, source[-1] if source else NO_CARD) - check_term(RESERVE, 1, card)
            else:
                check -= check_term(src, len(source), card)
            self._check_value = (check + check_term(dst, len(target) - 1, card)) & CHECK_MASK
        if F0 <= dst < T0:
            self.foundation_cards += 1
        if src == RESERVE:
            self._undo_stack.clear()
            self._undo_barrier = f"{MOVE_TEXT[src][dst]} uncovered a reserve card"
        else:
            self._undo_stack.append((src, dst))

    def _undo(self) -> None:
        self._check_undo()
        src, dst = self._undo_stack.pop()
        target = self._pile(dst)
        card = target.pop()
        source = self._pile(src)
        source.append(card)
        if self._check_value is not None:  # never the stock or the reserve: those moves cannot be undone
            check = self._check_value - check_term(dst, len(target), card)
            self._check_value = (check + check_term(src, len(source) - 1, card)) & CHECK_MASK
        if F0 <= dst < T0:
            self.foundation_cards -= 1

    def touched(self, entry: str) -> tuple[int, ...]:
        """The piles ``entry`` (legal here) changes, asked before playing it: a move's two piles
        (stock>waste: stock and waste), an undo's the last move's, a resign's none."""
        if entry == RESIGN:
            return ()
        if entry == UNDO:
            return self._undo_stack[-1] if self._undo_stack else ()
        return parse_move(entry)

    def pile_length(self, index: int) -> int:
        return len(self.stock) if index == STOCK else len(self._pile(index))

    def changes(
        self, touched: tuple[int, ...], before: tuple[int, ...]
    ) -> tuple[list[PileChange], int | None, tuple[int, int | None] | None]:
        """What a client needs to bring its board here from the position before the last entry,
        given the piles it touched and their lengths then: the changed piles of the waste, the
        foundations and the tableau ([name, keep, cards]), the stock count and the reserve
        (count, top), each None if untouched. Nothing hidden: only cards the view shows."""
        changes: list[PileChange] = []
        stock: int | None = None
        reserve: tuple[int, int | None] | None = None
        for index, length in zip(touched, before, strict=True):
            if index == STOCK:
                stock = len(self.stock)
            elif index == RESERVE:
                reserve = (len(self.reserve), self.reserve[-1] if self.reserve else None)
            else:
                pile = self._pile(index)
                keep = min(length, len(pile))
                changes.append((PILE_NAMES[index], keep, pile[keep:]))
        return changes, stock, reserve

    @property
    def check(self) -> int:
        """The check value of this game's view (docs/protocol.md), kept up to date as moves are played."""
        if self._check_value is None:
            self._check_value = view_check(self.view())
        return self._check_value

    def _check_undo(self) -> None:
        if self.status != PLAYING:
            raise IllegalMove(UNDO, f"the game is over ({self.status}): nothing more is accepted")
        if not self.undo_enabled:
            raise IllegalMove(UNDO, "undo is off in this game")
        if not self._undo_stack:
            if self._undo_barrier is None:
                raise IllegalMove(UNDO, "there is no move to undo")
            raise IllegalMove(UNDO, f"{self._undo_barrier}: it cannot be undone")

    def settle_status(self) -> None:
        """Decide won/blocked for the current position (after a replay without checks), within
        ``blocked_budget`` like a move: undecided leaves ``blocked_pending`` set."""
        if self.status == PLAYING:
            self._update_status(True)

    def _update_status(self, check_blocked: bool) -> None:
        self.blocked_pending = False
        if self.foundation_cards == CARD_COUNT:
            self.status = WON
        elif check_blocked and not self.stock:
            verdict = self.blocked_status(self.blocked_budget)
            if verdict is None:
                self.blocked_pending = True
            elif verdict:
                self.status = BLOCKED

    def resolve_blocked(self, blocked: bool) -> None:
        """Settle the blocked question of the current position with the answer of an exact
        check made elsewhere (the server's worker process, on this game's record): blocked ends
        the game, not blocked clears ``blocked_pending``. Only for a playing game whose stock is
        empty; the caller vouches that the answer is for exactly this position."""
        if self.status != PLAYING or self.stock:
            raise ValueError(f"no blocked question here: the game is {self.status}, stock {len(self.stock)}")
        self.blocked_pending = False
        if blocked:
            self.status = BLOCKED

    # ---------------------------------------------------------------- blocked

    def is_blocked(self) -> bool:
        """docs/rules.md, "The rules", exactly (no budget, however long it takes): see :meth:`blocked_status`."""
        return self.blocked_status(None) is True

    def blocked_status(self, max_states: int | None) -> bool | None:
        """Is the position blocked? True or False (exact), or None when the search would need
        more than ``max_states`` states (None: no limit, never None).

        docs/rules.md, "The rules": the stock is empty and no sequence of legal moves can
        put another card on a foundation.

        Why this reduces to digging the waste: a tableau pile is a run down by one, so a
        buried card of a needed rank ``n`` has ``n-1`` on it, which can leave only onto a top
        of rank ``n`` (a tableau card never fills a space): that top would already be
        playable. Moves between tableau piles never bring up a rank that was not on top
        somewhere, and the reserve's top only goes to a foundation. So the only way to
        progress is to dig the waste down to its highest card of a needed rank, placing
        every card above it on the tableau: :class:`_Dig` decides whether that can be done
        (suits never matter; a pile is its top and bottom rank).
        """
        if self.stock or self.status == WON:
            return False
        needed = self._foundation_targets()
        if not needed:
            return False
        if self.reserve and rank(self.reserve[-1]) in needed:
            return False
        piles: list[tuple[int, int]] = []
        for pile in self.tableau:
            if pile:
                top = rank(pile[-1])
                if top in needed:
                    return False
                piles.append((top, len(pile)))
        waste = self.waste
        dig_to = -1
        for i in range(len(waste) - 1, -1, -1):
            if rank(waste[i]) in needed:
                dig_to = i
                break
        if dig_to < 0:
            return True
        if dig_to == len(waste) - 1:
            return False
        base = self.base
        to_place = [
            _BASE_CARD if (r := rank(card)) == base else _level(r, base) for card in reversed(waste[dig_to + 1 :])
        ]
        movable = [(_level(top, base), _level(top, base) + length - 1) for top, length in piles if top != base]
        spaces = TABLEAU_SIZE - len(piles)
        try:
            return not _Dig(to_place, self.restricted, max_states).run(movable, spaces)
        except _OutOfStates:
            return None

    # ---------------------------------------------------------------- views

    def view(self) -> View:
        return View(
            stock=len(self.stock),
            waste=list(self.waste),
            reserve_top=self.reserve[-1] if self.reserve else None,
            reserve_count=len(self.reserve),
            foundations=[list(f) for f in self.foundations],
            tableau=[list(t) for t in self.tableau],
            status=self.status,
        )

    def view_hash(self) -> str:
        return view_hash(self.view())

    def state_key(self) -> tuple[object, ...]:
        """The whole position, hidden cards included (tests and solvers; never sent)."""
        return (
            tuple(self.stock),
            tuple(self.waste),
            tuple(self.reserve),
            tuple(tuple(f) for f in self.foundations),
            tuple(tuple(t) for t in self.tableau),
            self.status,
        )

    def all_cards(self) -> list[int]:
        cards = self.stock + self.waste + self.reserve
        for pile in (*self.foundations, *self.tableau):
            cards += pile
        return cards

    def record(self) -> dict[str, object]:
        """The game record (docs/rules.md, "Piles, what a player sees, and moves") of what was played so far."""
        rec: dict[str, object] = {"deal": self.deal, "moves": list(self.entries)}
        if not self.undo_enabled:
            rec["undo"] = False
        return rec

    def copy(self) -> Game:
        clone = Game(_BLANK)
        clone.deal = self.deal
        clone.base = self.base
        clone.undo_enabled = self.undo_enabled
        clone.stock = list(self.stock)
        clone.waste = list(self.waste)
        clone.reserve = list(self.reserve)
        clone.foundations = [list(f) for f in self.foundations]
        clone.tableau = [list(t) for t in self.tableau]
        clone.status = self.status
        clone.entries = list(self.entries)
        clone.foundation_cards = self.foundation_cards
        clone.blocked_budget = self.blocked_budget
        clone.blocked_pending = self.blocked_pending
        clone._undo_stack = list(self._undo_stack)
        clone._undo_barrier = self._undo_barrier
        clone._check_value = self._check_value
        return clone

    @classmethod
    def from_view(cls, view: View, *, undo: bool = True, hidden: int = -1) -> Game:
        """A game in the position ``view`` shows, for a player who sees only that view.

        Hidden cards (the stock, the reserve below its top) are ``hidden`` placeholders, so
        it answers ``legal_moves`` and ``reason_illegal`` exactly, and plays moves that
        uncover nothing; never ``stock>waste`` or a reserve move (that would turn a
        placeholder up), and its blocked check is left to the server (no budget spent).
        """
        game = cls(_BLANK)
        game.deal = 0  # unknown to a player, and never needed by the rules
        game.base = rank(view.foundations[0][0])
        game.undo_enabled = undo
        game.stock = [hidden] * view.stock
        game.waste = list(view.waste)
        game.reserve = [hidden] * max(view.reserve_count - 1, 0)
        if view.reserve_top is not None:
            game.reserve.append(view.reserve_top)
        game.foundations = [list(f) for f in view.foundations]
        game.tableau = [list(t) for t in view.tableau]
        game.status = view.status
        game.entries = []
        game.foundation_cards = sum(len(f) for f in view.foundations)
        game.blocked_budget = 0
        game.blocked_pending = False
        game._undo_stack = []
        game._undo_barrier = None
        game._check_value = None
        return game


# ---------------------------------------------------------------- the dig search (blocked check)
#
# Ranks become *levels*: the rank after the base rank is level 0, the rank before it level 11,
# so "r goes onto r+1" is "level p goes onto level p+1" and a run never wraps (a base-rank
# card is never built on, nor onto anything). A tableau pile is a run [top..bottom] of
# levels; a base-rank card lies alone and never moves again in the dig (it is "frozen").
#
# Moving a top card between tableau piles either *swaps* (pile A=[t..a], a>t, gives its top
# onto pile B=[t+1..b]: now [t+1..a] and [t..b]: the tops stay, the bottoms trade places) or
# *merges* (a lone card [x..x] goes onto a top x+1: one pile fewer, a new space). Swaps are
# reversible, and within a *group* (a maximal interval of levels each holding a top) every
# pairing of the group's tops with its bottoms (bottom level >= top level) is reachable by
# swaps. So up to swaps a tableau is a set of groups, each a multiset of tops and one of
# bottoms, and a bottom x can merge when its group has a top x+1. The search runs over these
# canonical states, far fewer than the piles themselves.
#
# Cuts, each proved in docs/engine.md ("The blocked check"): unrestricted, a waste card goes
# into a space when there is one (it could still go onto a top at once: nothing is lost);
# unrestricted, merges wait until a card needs room (filling a space never disables one);
# restricted, merges only while spaces are short of the base-rank cards still to come (a
# space serves nothing else then, and a merge costs a top). Before an unrestricted choice,
# the state must pass a relaxation (any bottom x may join any top x+1 once its group can
# reach that level): if even that overflows the twelve places, the state fails.

_BASE_CARD: Final = -1  # a base-rank card in the sequence to place

_Group = tuple[tuple[int, ...], tuple[int, ...]]  # (tops, bottoms), both sorted
_Groups = tuple[_Group, ...]


def _level(r: int, base: int) -> int:
    return (r - base - 1) % 13


def _pairable(tops: Sequence[int], bottoms: Sequence[int]) -> bool:
    """Can these tops and bottoms (both sorted) be paired into piles, each bottom >= its top?"""
    return all(t <= b for t, b in zip(tops, bottoms, strict=True))


def _without(values: tuple[int, ...], value: int) -> tuple[int, ...]:
    i = values.index(value)
    return values[:i] + values[i + 1 :]


def _join(groups: Iterable[_Group]) -> _Groups:
    """Canonical form: groups whose top levels touch are one group; sorted by lowest top."""
    joined: list[_Group] = []
    for tops, bottoms in sorted(groups):
        if joined and tops[0] <= joined[-1][0][-1] + 1:
            prev_tops, prev_bottoms = joined[-1]
            joined[-1] = (tuple(sorted(prev_tops + tops)), tuple(sorted(prev_bottoms + bottoms)))
        else:
            joined.append((tops, bottoms))
    return tuple(joined)


def _upper_choices(pool: tuple[int, ...], upper: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every multiset of ``len(upper)`` bottoms from ``pool`` (sorted) that pairs with ``upper``,
    smallest first."""
    counts: list[tuple[int, int]] = []
    for value in pool:
        if counts and counts[-1][0] == value:
            counts[-1] = (value, counts[-1][1] + 1)
        else:
            counts.append((value, 1))
    need = len(upper)
    chosen: list[int] = []

    def pick(i: int) -> Iterator[tuple[int, ...]]:
        if len(chosen) == need:
            yield tuple(chosen)
            return
        if i == len(counts):
            return
        value, available = counts[i]
        # chosen stays sorted, so copies of value land at the next positions: each must reach
        # upper's top there. Taking as many small ones as possible comes first.
        most = 0
        while most < available and len(chosen) + most < need and value >= upper[len(chosen) + most]:
            most += 1
        for take in range(most, -1, -1):
            chosen.extend([value] * take)
            yield from pick(i + 1)
            del chosen[len(chosen) - take :]

    yield from pick(0)


def _split(
    others: _Groups, lower: tuple[int, ...], upper: tuple[int, ...], pool: tuple[int, ...], z: int
) -> Iterator[_Groups]:
    """A group's last top on level ``z`` goes down to ``z-1`` (a card went onto it): the group
    falls apart into the tops below (``lower``, plus the new ``z-1``) and above (``upper``).
    The bottoms ``pool`` go to either side in every way a pairing before the move allows
    (the pile that had top ``z`` keeps its bottom, at least ``z``), smallest bottoms upward first."""
    lower_before = tuple(sorted((*lower, z)))
    lower_after = tuple(sorted((*lower, z - 1)))
    for upper_bottoms in _upper_choices(pool, upper):
        rest = list(pool)
        for value in upper_bottoms:
            rest.remove(value)
        if _pairable(lower_before, rest):
            yield _join((*others, (lower_after, tuple(rest)), (upper, upper_bottoms)))


def _onto_top(groups: _Groups, p: int) -> Iterator[_Groups]:
    """Every outcome of placing a level-``p`` card onto a top ``p+1``."""
    z = p + 1
    index = next((i for i, (tops, _) in enumerate(groups) if z in tops), None)
    if index is None:
        return
    tops, bottoms = groups[index]
    others = groups[:index] + groups[index + 1 :]
    rest = _without(tops, z)
    if z in rest or not rest or rest[-1] < z:
        yield _join((*others, (tuple(sorted((*rest, p))), bottoms)))
        return
    upper = tuple(t for t in rest if t > z)
    lower = tuple(t for t in rest if t < z)
    yield from _split(others, lower, upper, bottoms, z)


def _merges(groups: _Groups) -> Iterator[_Groups]:
    """Every outcome of one merge: a lone card [x..x] (after swaps) onto a top x+1 of its group."""
    for index, (tops, bottoms) in enumerate(groups):
        others = groups[:index] + groups[index + 1 :]
        for x in sorted(set(bottoms)):
            z = x + 1
            if z not in tops:
                continue
            after = _without(tops, z)
            if z in after or after[-1] < z:
                yield _join((*others, (after, _without(bottoms, x))))
                continue
            # The lone x leaves the lower tops; the pile it joins has top z and becomes [x..].
            rest = _without(after, x)
            upper = tuple(t for t in rest if t > z)
            lower = tuple(t for t in rest if t < z)
            yield from _split(others, lower, upper, _without(bottoms, x), z)


class _OutOfStates(Exception):
    """The dig search used up its budget of states without an answer."""


class _Dig:
    """Can every card of ``to_place`` (levels, in the order they come off the waste) be put on
    the tableau? ``piles`` are the (top, bottom) levels of the movable tableau piles.

    ``max_states`` bounds the work: each search node and each relaxation bound evaluated is a
    state; past the budget :class:`_OutOfStates` is raised (None: no bound)."""

    __slots__ = ("base_left", "failed", "first_arrival", "restricted", "states_left", "to_place")

    def __init__(self, to_place: list[int], restricted: bool, max_states: int | None = None) -> None:
        self.to_place = to_place
        self.restricted = restricted
        # Counted down; float("inf") when unbounded keeps the test to one comparison.
        self.states_left: float = float("inf") if max_states is None else max_states
        count = len(to_place)
        self.base_left = [0] * (count + 1)
        for k in range(count - 1, -1, -1):
            self.base_left[k] = self.base_left[k + 1] + (to_place[k] == _BASE_CARD)
        # first_arrival[k][y]: the first index >= k placing a level-y card (len if none).
        self.first_arrival = [[count] * 12 for _ in range(count + 1)]
        for k in range(count - 1, -1, -1):
            row = list(self.first_arrival[k + 1])
            if to_place[k] != _BASE_CARD:
                row[to_place[k]] = k
            self.first_arrival[k] = row
        self.failed: set[tuple[int, _Groups, int]] = set()

    def run(self, piles: Sequence[tuple[int, int]], spaces: int) -> bool:
        groups = _join(((top,), (bottom,)) for top, bottom in piles)
        if not self.restricted and self._slack(0, groups, spaces) < 0:
            return False
        return self._search(0, groups, spaces)

    def _search(self, k: int, groups: _Groups, spaces: int) -> bool:
        if k == len(self.to_place):
            return True
        key = (k, groups, spaces)
        if key in self.failed:
            return False
        self._spend()
        if self._succeeds(k, groups, spaces):
            return True
        self.failed.add(key)
        return False

    def _succeeds(self, k: int, groups: _Groups, spaces: int) -> bool:
        p = self.to_place[k]
        restricted = self.restricted
        if p == _BASE_CARD:
            if spaces:  # only a space takes it; merging first gains nothing, merges stay possible
                return self._search(k + 1, groups, spaces - 1)
        elif not restricted and spaces:  # a space is never worse than a top (see above)
            return self._search(k + 1, _join((*groups, ((p,), (p,)))), spaces - 1)
        if restricted and not self._restricted_ok(k, groups, spaces):
            return False
        options: list[tuple[int, _Groups, int]] = []  # (index, groups, spaces) to try
        if p != _BASE_CARD and p < 11:
            options.extend((k + 1, nxt, spaces) for nxt in _onto_top(groups, p))
        # Make room: one merge, then this card again. Restricted, room serves only base-rank
        # cards, and merges cost tops, so merge only while spaces are short of them.
        if not restricted or spaces < self.base_left[k]:
            options.extend((k, nxt, spaces + 1) for nxt in _merges(groups))
        if not restricted:
            # Try the options the relaxation likes best first; drop those it rules out.
            ranked = []
            for option in set(options):
                if option in self.failed:
                    continue
                slack = self._slack(*option)
                if slack >= 0:
                    ranked.append((-slack, option))
                else:
                    self.failed.add(option)
            ranked.sort()
            options = [option for _, option in ranked]
        else:
            options = list(dict.fromkeys(options))
        return any(self._search(*option) for option in options)

    def _spend(self) -> None:
        self.states_left -= 1
        if self.states_left < 0:
            raise _OutOfStates

    def _restricted_ok(self, k: int, groups: _Groups, spaces: int) -> bool:
        """A necessary condition (restricted), where every card but a base-rank one must go
        onto a top and a base-rank one needs a space, which only a merge (costing a top) makes:

        - with no merge at all, would each card find a top one level up? Merges only remove
          tops, so if not, it fails;
        - could enough merges have happened before each base-rank card? Merges on boundary
          x|x+1 are at most the bottoms of level x (no new ones come while restricted) and the
          cards that were ever a top of level x+1.
        """
        self._spend()
        tops_at = [0] * 13
        bottoms_at = [0] * 13
        for tops, bottoms in groups:
            for t in tops:
                tops_at[t] += 1
            for b in bottoms:
                bottoms_at[b] += 1
        ever_top = list(tops_at)
        merges = sum(min(bottoms_at[x], ever_top[x + 1]) for x in range(11))
        needed = 0
        for j in range(k, len(self.to_place)):
            p = self.to_place[j]
            if p == _BASE_CARD:
                needed += 1
                if needed > spaces + merges:
                    return False
                continue
            if p == 11 or not tops_at[p + 1]:
                return False
            tops_at[p + 1] -= 1
            tops_at[p] += 1
            ever_top[p] += 1
            if p and ever_top[p] <= bottoms_at[p - 1]:
                merges += 1
        return True

    def _slack(self, k: int, groups: _Groups, spaces: int) -> int:
        """A necessary condition (unrestricted): could the piles stay within the twelve places
        if any bottom x could join any top x+1, as soon as its group could reach level x+1?
        Returns the smallest margin over the cards to come (negative: no, the state fails).

        Tops only appear where cards arrive, so a bottom whose group stops below x+1 waits
        for an arrival on every empty level in between. Links on each boundary x|x+1 are then
        at most min(bottoms of level x, tops of level x+1), everything counted as it arrives.
        The margin is the free places: spaces, minus cards arrived, plus possible links.
        """
        self._spend()
        tops_at = [0] * 13
        bottoms_at = [0] * 13
        for tops, _ in groups:
            for t in tops:
                tops_at[t] += 1
        count = len(self.to_place)
        first = self.first_arrival[k]
        waiting: list[tuple[int, int]] = []  # (index from which a bottom can link, its level)
        for tops, bottoms in groups:
            reach = tops[-1]
            for x in bottoms:
                if x < reach:
                    bottoms_at[x] += 1
                elif x < 11:
                    when = k
                    for y in range(reach + 1, x + 2):
                        if not tops_at[y] and first[y] > when:
                            when = first[y]
                    if when < count:
                        waiting.append((when, x))
        waiting.sort(reverse=True)
        term = [min(bottoms_at[x], tops_at[x + 1]) for x in range(11)]  # links on boundary x|x+1
        links = sum(term)
        margin = spaces + links
        slack = margin
        to_place = self.to_place
        for j in range(k, count):
            p = to_place[j]
            if p >= 0:
                bottom = bottoms_at[p] + 1
                bottoms_at[p] = bottom
                top = tops_at[p] + 1
                tops_at[p] = top
                if p < 11:
                    above = tops_at[p + 1]
                    new = bottom if bottom < above else above
                    links += new - term[p]
                    term[p] = new
                if p:
                    below = bottoms_at[p - 1]
                    new = below if below < top else top
                    links += new - term[p - 1]
                    term[p - 1] = new
                while waiting and waiting[-1][0] <= j:
                    x = waiting.pop()[1]
                    bottoms_at[x] += 1
                    new = min(bottoms_at[x], tops_at[x + 1])
                    links += new - term[x]
                    term[x] = new
            margin = spaces - (j - k + 1) + links  # every card, base-rank or not, takes a place
            if margin < slack:
                if margin < 0:
                    return margin
                slack = margin
        return slack


class NotARecord(ValueError):
    """The input is not a game record object (docs/rules.md, "Piles, what a player sees, and moves")."""


def parse_record(data: object) -> tuple[int, list[object], bool]:
    """Check a decoded JSON value is a game record; returns (deal, entries, undo)."""
    if not isinstance(data, dict):
        raise NotARecord("a game record is a JSON object with 'deal' and 'moves'")
    if "deal" not in data or "moves" not in data:
        missing = "deal" if "deal" not in data else "moves"
        raise NotARecord(f"the game record has no {missing!r} field")
    try:
        deal = check_deal_number(data["deal"])
    except ValueError as exc:
        raise NotARecord(f"bad 'deal': {exc}") from None
    moves = data["moves"]
    if not isinstance(moves, list):
        raise NotARecord("'moves' must be a list of entries")
    undo = data.get("undo", True)
    if not isinstance(undo, bool):
        raise NotARecord("'undo' must be true or false")
    return deal, moves, undo


def replay(
    deal: int, entries: Sequence[object], *, undo: bool = True, progress: list[int] | None = None
) -> tuple[Game, ReplayResult]:
    """Replay a game record's entries; stops at the first illegal entry (later ones are not applied).

    Each entry is checked against the move rules; whether the position is blocked is decided
    once, for the final position. This is what the reference vectors require (a record may
    go on shuffling tableau cards after its position became blocked, and is still legal). A
    live game checks after every move instead (``Game.play``, within a budget: a position it
    cannot decide stays playing until the server's exact check answers, so only in that window
    can a record the server writes hold entries after a blocked position). The replayed game
    checks exactly (no budget).

    ``progress``, when given, gets the foundation cards after each applied entry (one number per
    entry, in order): a racer's cards over their game, for the client's results screen.
    """
    game = Game(deal, undo=undo, blocked_budget=None)  # a tool's answer: exact, however long
    for index, entry in enumerate(entries):
        if not isinstance(entry, str):
            reason = f"entry {entry!r} is not a move: entries are strings like 'waste>t3', 'undo', 'resign'"
            return game, _failed(game, index, repr(entry), reason)
        try:
            game.play(entry, check_blocked=False)
        except IllegalMove as exc:
            game.settle_status()
            return game, _failed(game, index, entry, exc.reason)
        if progress is not None:
            progress.append(game.foundation_cards)
    game.settle_status()
    return game, ReplayResult(ok=True, moves=len(entries), foundation_cards=game.foundation_cards, status=game.status)


def _failed(game: Game, index: int, entry: str, reason: str) -> ReplayResult:
    return ReplayResult(
        ok=False,
        moves=index,
        foundation_cards=game.foundation_cards,
        status=game.status,
        error=IllegalEntry(index=index, move=entry, reason=reason),
    )


def moves_from_texts(texts: Iterable[str]) -> list[tuple[int, int]]:
    return [parse_move(t) for t in texts]
