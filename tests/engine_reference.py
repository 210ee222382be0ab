"""A second, deliberately simple and slow implementation of The Plot's move rules (docs/rules.md, "The rules").

Written from the rules text (docs/rules.md), not from ``shared/engine.py``, and with its own representation:
a position is a dict from pile name to a list of card ids, bottom first (the stock too: its
*first* element is the next card to turn). Every (source, destination) pair of pile names is
tested against the rules one by one; nothing is clever or fast. The tests compare the engine
against it (legal-move sets, move application, the blocked check), and build positions with
the helpers at the end of the file.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from shared.engine import PLAYING, Game, IllegalMove

Position = dict[str, list[int]]

FOUNDATIONS = [f"f{i}" for i in range(8)]
TABLEAU = [f"t{i}" for i in range(12)]
ALL_PILES = ["stock", "waste", "reserve", *FOUNDATIONS, *TABLEAU]


def card_rank(card: int) -> int:
    return card % 13 + 1


def rank_after(r: int) -> int:
    """Up by one, round the corner: King is followed by Ace."""
    return 1 if r == 13 else r + 1


def base_rank(pos: Position) -> int:
    """The rank of the first card on f0."""
    return card_rank(pos["f0"][0])


def foundation_needs(pos: Position, name: str) -> int:
    """A foundation holding k cards needs next the rank (B - 1 + k) % 13 + 1."""
    return (base_rank(pos) - 1 + len(pos[name])) % 13 + 1


def is_restricted(pos: Position) -> bool:
    return len(pos["f0"]) < 13


def move_is_legal(pos: Position, src: str, dst: str) -> bool:
    """May the top card of ``src`` go to ``dst`` now? Straight from docs/rules.md (Piles, The rules)."""
    if src == "stock":
        # stock>waste turns the next card; there is no redeal.
        return dst == "waste" and len(pos["stock"]) > 0
    if src not in ("waste", "reserve") and src not in TABLEAU:
        return False  # cards never leave a foundation
    if src == dst or not pos[src]:
        return False
    card = pos[src][-1]
    base = base_rank(pos)
    if dst in FOUNDATIONS:
        if is_restricted(pos):
            return dst == "f0" and card_rank(card) == foundation_needs(pos, "f0")
        if dst == "f0" or len(pos[dst]) == 13:
            return False
        return card_rank(card) == foundation_needs(pos, dst)
    if dst in TABLEAU:
        if src == "reserve":
            return False  # the reserve plays only to a foundation
        if not pos[dst]:
            # A space: only the waste fills it; while restricted only with a base-rank card.
            if src != "waste":
                return False
            return not is_restricted(pos) or card_rank(card) == base
        top = pos[dst][-1]
        if card_rank(top) == base or card_rank(card) == base:
            return False  # nothing on a base-rank card, and a base-rank card onto nothing
        return card_rank(top) == rank_after(card_rank(card))
    return False  # nothing is ever played to the stock, the waste or the reserve


def legal_moves(pos: Position) -> set[str]:
    return {f"{src}>{dst}" for src in ALL_PILES for dst in ALL_PILES if move_is_legal(pos, src, dst)}


def apply_move(pos: Position, move: str) -> Position:
    """A new position with ``move`` (assumed legal) played."""
    src, dst = move.split(">")
    new = {name: list(cards) for name, cards in pos.items()}
    card = new[src].pop(0) if src == "stock" else new[src].pop()
    new[dst].append(card)
    return new


def foundation_move_exists(pos: Position) -> bool:
    return any(move.split(">")[1] in FOUNDATIONS for move in legal_moves(pos))


def is_blocked(pos: Position, max_states: int = 2_000_000) -> bool:
    """The stock is empty and no sequence of legal moves puts another card on a foundation.

    Exhaustive depth-first search over every legal non-foundation move of the whole position,
    looking for a position with a foundation move. Suits and decks never matter to the rules
    and tableau piles are interchangeable, so visited positions are keyed by the ranks of the
    waste and of the tableau piles (sorted); nothing else is abstracted.
    """
    if pos["stock"]:
        return False
    if sum(len(pos[f]) for f in FOUNDATIONS) == 104:
        return False

    def key(p: Position) -> tuple[object, ...]:
        ranks = tuple(sorted(tuple(card_rank(c) for c in p[t]) for t in TABLEAU))
        return (tuple(card_rank(c) for c in p["waste"]), ranks)

    # With the stock empty, the only moves there can be: to a foundation (from the waste, the
    # reserve or a tableau pile), and from the waste or a tableau pile to a tableau pile.
    sources = ["waste", "reserve", *TABLEAU]
    seen = {key(pos)}
    stack = [pos]
    while stack:
        current = stack.pop()
        if any(move_is_legal(current, src, dst) for src in sources for dst in FOUNDATIONS):
            return False
        for src in sources:
            for dst in TABLEAU:
                if not move_is_legal(current, src, dst):
                    continue
                nxt = apply_move(current, f"{src}>{dst}")
                k = key(nxt)
                if k not in seen:
                    if len(seen) >= max_states:
                        raise RuntimeError("reference search too large")
                    seen.add(k)
                    stack.append(nxt)
    return True


# ------------------------------------------------------------------ conversions and positions


def position_of(game: Game) -> Position:
    """The full position of a live game (hidden cards included) in the reference representation."""
    pos: Position = {"stock": list(reversed(game.stock)), "waste": list(game.waste), "reserve": list(game.reserve)}
    for i, pile in enumerate(game.foundations):
        pos[f"f{i}"] = list(pile)
    for i, pile in enumerate(game.tableau):
        pos[f"t{i}"] = list(pile)
    return pos


def game_at(pos: Position, deal: int = 0) -> Game:
    """A live Game whose state is set directly to ``pos`` (no undo history, status playing)."""
    game = Game(deal)
    game.stock = list(reversed(pos["stock"]))
    game.waste = list(pos["waste"])
    game.reserve = list(pos["reserve"])
    game.foundations = [list(pos[f]) for f in FOUNDATIONS]
    game.tableau = [list(pos[t]) for t in TABLEAU]
    game.base = base_rank(pos)
    game.foundation_cards = sum(len(pos[f]) for f in FOUNDATIONS)
    game.status = PLAYING
    return game


def cards_of(pos: Position) -> list[int]:
    return [card for name in ALL_PILES for card in pos[name]]


def needed_ranks(pos: Position) -> set[int]:
    """The ranks some foundation takes now."""
    if is_restricted(pos):
        return {foundation_needs(pos, "f0")}
    return {foundation_needs(pos, f) for f in FOUNDATIONS[1:] if len(pos[f]) < 13}


def random_position(
    rng: random.Random,
    *,
    unrestricted: bool | None = None,
    stock_empty: bool | None = None,
    nothing_playable: bool = False,
) -> Position:
    """A random position that play could reach: foundations built up from the base rank, tableau
    piles runs down by one (round the corner) with a base-rank card only ever alone, and the rest
    of the 104 cards shared among reserve, waste and stock. ``nothing_playable``: no top card of
    the tableau, reserve or waste can go to a foundation right away (the hard case for the
    blocked check: progress needs digging)."""
    pool: dict[int, list[int]] = {r: [] for r in range(1, 14)}
    for card in rng.sample(range(104), 104):
        pool[card_rank(card)].append(card)
    base = rng.randint(1, 13)
    if unrestricted is None:
        unrestricted = rng.random() < 0.5
    pos: Position = {name: [] for name in ALL_PILES}

    def build_foundation(name: str, length: int) -> None:
        r = base
        for _ in range(length):
            if not pool[r]:
                break
            pos[name].append(pool[r].pop())
            r = rank_after(r)

    build_foundation("f0", 13 if unrestricted else rng.randint(1, 12))
    if unrestricted:
        for name in FOUNDATIONS[1:]:
            build_foundation(name, rng.choice((0, 0, rng.randint(0, 13), 13)))
    space_chance = rng.choice((0.0, 0.15, 0.5, 0.9))
    for name in TABLEAU:
        if rng.random() < space_chance:
            continue
        length = rng.choice((1, 1, 2, 3, rng.randint(1, 12)))
        r = rng.randint(1, 13)
        for depth in range(length):
            if not pool[r] or (r == base and depth > 0):
                break
            pos[name].append(pool[r].pop())
            if r == base:
                break  # nothing is built on a base-rank card
            r = 13 if r == 1 else r - 1
            if r == base:
                break  # and a base-rank card is never built onto a tableau card
    needed = needed_ranks(pos)
    if nothing_playable:
        for name in TABLEAU:
            while pos[name] and card_rank(pos[name][-1]) in needed:
                card = pos[name].pop()
                pool[card_rank(card)].append(card)
    rest = [card for cards in pool.values() for card in cards]
    rng.shuffle(rest)
    reserve_count = min(len(rest), rng.choice((0, rng.randint(0, 13), 13)))
    pos["reserve"] = rest[:reserve_count]
    rest = rest[reserve_count:]
    if stock_empty is None:
        stock_empty = rng.random() < 0.5
    stock_count = 0 if stock_empty else rng.randint(0, len(rest))
    pos["stock"] = rest[:stock_count]
    pos["waste"] = rest[stock_count:]
    if nothing_playable:
        for name in ("reserve", "waste"):
            pile = pos[name]
            for i in range(len(pile) - 1, -1, -1):
                if card_rank(pile[i]) not in needed:
                    pile[i], pile[-1] = pile[-1], pile[i]
                    break
    return pos


def random_playout(
    rng: random.Random, deal: int, steps: int, *, undo_chance: float = 0.0, check_blocked: bool = True
) -> Iterator[tuple[Game, str]]:
    """Play ``steps`` random legal moves of ``deal`` (foundation moves and stock turns favoured so
    games get somewhere), yielding the game and the entry after each one. Stops when the game ends."""
    game = Game(deal)
    for _ in range(steps):
        if game.status != PLAYING:
            return
        if undo_chance and rng.random() < undo_chance:
            try:
                game.play("undo", check_blocked=check_blocked)
            except IllegalMove:
                pass  # nothing to undo here: play a move instead
            else:
                yield game, "undo"
                continue
        moves = game.legal_moves()
        if not moves:
            return
        else:
            to_foundation = [m for m in moves if ">f" in m]
            if to_foundation and rng.random() < 0.7:
                entry = rng.choice(to_foundation)
            elif "stock>waste" in moves and rng.random() < 0.35:
                entry = "stock>waste"
            else:
                entry = rng.choice(moves)
        game.play(entry, check_blocked=check_blocked)
        yield game, entry


def dig_position(rng: random.Random, *, spaces: int, dig: int, unrestricted: bool = True) -> Position:
    """A hard empty-stock position for the blocked check: no top plays to a foundation, ``spaces``
    empty tableau piles, and a needed card in the waste under ``dig`` cards that are not needed
    (fewer if the deal runs short), the rest of the waste below it."""
    pos = random_position(rng, unrestricted=unrestricted, stock_empty=True, nothing_playable=True)
    emptied: list[int] = []
    for name in rng.sample(TABLEAU, spaces):
        emptied += pos[name]
        pos[name] = []
    needed = needed_ranks(pos)
    loose = pos["waste"] + emptied + pos["reserve"][:-1]
    pos["reserve"] = pos["reserve"][-1:]
    wanted = [card for card in loose if card_rank(card) in needed]
    others = [card for card in loose if card_rank(card) not in needed]
    rng.shuffle(others)
    above = others[:dig]
    below = others[dig:] + wanted[1:]
    pos["waste"] = below + wanted[:1] + above
    return pos
