"""Determinised search: a bot's move chosen from its own View, never from the deal.

The View hides the stock's order and the reserve's buried cards, but not which cards those
are: every card of the two decks not shown is one of them. A *sample* deals those unseen cards
at random into the stock and under the reserve's top, which gives a complete position
consistent with everything the bot has seen; the solver (``shared.solver.solve``) then finds
a winning line for it, or none. Each sample whose line wins votes for that line's first move,
and the move with most votes is played (ties broken by the bot's own random generator, so two
bots with different seeds part ways).

Samples are kept from move to move (:class:`SearchMemory`), which is what makes the search
cheap enough to run at every move:

* a sample's line is kept while it still wins from the position the View shows (checked by
  replaying it through the engine: well under a millisecond), so it is solved again only when
  the bot left it;
* when a card is revealed (the stock turned, the reserve played), every sample is repaired
  by swapping that card into the place it was just seen in, which leaves the sample a uniform
  draw of the orders still possible;
* a sample with no win stays unsolved until the next revealed card (no move can make a lost
  position winnable, and one that used up its budget would use it up again).

Everything here reads the View and a clock only; it runs in a worker process
(``client.bot_levels.search_pool``), never on a bot's event loop.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from client.viewmodel import HIDDEN
from shared.cards import CARD_COUNT
from shared.engine import PLAYING, Game, View
from shared.solver import WINNABLE, replays_to_win, solve


@dataclass(frozen=True, slots=True)
class SearchBudget:
    """How much a search level spends on one move."""

    samples: int  # samples kept (each solved at most once per revealed card)
    positions: int  # the solver's budget per sample, in positions (deterministic)
    seconds: float  # wall-clock limit per move: solving stops there, and the votes so far decide
    compare: int = 0  # where lines part ways, the most-voted moves tried in every sample (0: votes only)


@dataclass(slots=True)
class Sample:
    """One guess at the hidden cards, consistent with the View it was last repaired to."""

    stock: list[int]  # engine order: the next card to turn is the last
    buried: list[int]  # the reserve below its top, bottom first
    line: list[str] | None = None  # a winning line from the current position; None: not known
    settled: bool = False  # solved without a win: not solved again until a card is revealed


@dataclass(slots=True)
class SearchMemory:
    """A bot's samples between moves, with the View counts they fit and the bot's generator."""

    rng: random.Random
    stock: int = -1
    buried: int = -1
    samples: list[Sample] = field(default_factory=list)
    last_move: str | None = None  # the move this search chose last (a kept line starts with it)
    solves: int = 0  # how many solver runs this memory has cost (for the bench)


def unseen_cards(view: View) -> list[int]:
    """The cards the View does not show: the stock and the reserve below its top, in some order."""
    shown = [0] * CARD_COUNT
    for card in view.cards():
        shown[card] += 1
    return [card for card in range(CARD_COUNT) if not shown[card]]


def buried_count(view: View) -> int:
    return max(view.reserve_count - 1, 0)


def draw_sample(view: View, rng: random.Random) -> Sample:
    """A uniform random placement of the unseen cards into the stock and under the reserve's top."""
    hidden = unseen_cards(view)
    rng.shuffle(hidden)
    return Sample(stock=hidden[: view.stock], buried=hidden[view.stock :])


def sample_game(view: View, sample: Sample) -> Game:
    """The complete position: the View's piles, with the sample's cards where the View hides them."""
    game = Game.from_view(view, hidden=HIDDEN)
    game.stock = list(sample.stock)
    game.reserve = list(sample.buried)
    if view.reserve_top is not None:
        game.reserve.append(view.reserve_top)
    return game


def _reveal(cards: list[int], others: list[int], card: int) -> bool:
    """Move ``card`` to the end of ``cards`` (swapping with the card there, wherever ``card`` was in
    ``cards`` or ``others``) and take it off: the sample now agrees that ``card`` came out next.
    False if the sample did not hold ``card`` at all."""
    for pile in (cards, others):
        if card in pile:
            i = pile.index(card)
            pile[i], cards[-1] = cards[-1], pile[i]
            cards.pop()
            return True
    return False


def _repair(memory: SearchMemory, view: View) -> None:
    """Bring every sample to the View: one card revealed since the last move is swapped into
    place. A sample that still does not hold exactly the cards the View hides (a new race, a
    resumed connection) is dropped, and a fresh one is drawn in its place."""
    stock, buried = view.stock, buried_count(view)
    revealed: int | None = None
    from_stock = False
    if stock == memory.stock - 1 and buried == memory.buried and view.waste:
        revealed, from_stock = view.waste[-1], True
    elif buried == memory.buried - 1 and stock == memory.stock and view.reserve_top is not None:
        revealed = view.reserve_top
    if revealed is not None:
        for sample in memory.samples:
            cards, others = (sample.stock, sample.buried) if from_stock else (sample.buried, sample.stock)
            if cards and _reveal(cards, others, revealed):
                sample.settled = False
    unseen = unseen_cards(view)
    memory.samples = [
        s
        for s in memory.samples
        if len(s.stock) == stock and len(s.buried) == buried and sorted(s.stock + s.buried) == unseen
    ]
    memory.stock, memory.buried = stock, buried


def _keep_lines(memory: SearchMemory, view: View) -> None:
    """Keep each sample's line only while it still wins from here (after the move just made)."""
    for sample in memory.samples:
        line = sample.line
        if line is None:
            continue
        if line and line[0] == memory.last_move:
            line = line[1:]
        sample.line = line if replays_to_win(sample_game(view, sample), line) else None


def search_move(
    view: View,
    memory: SearchMemory,
    budget: SearchBudget,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str | None, SearchMemory]:
    """The move most samples' winning lines start with, and the memory to pass next time.

    None when no sample found a win within the budget (the caller then plays its fallback).
    """
    if view.status != PLAYING:
        memory.last_move = None
        return None, memory
    started = clock()
    _repair(memory, view)
    _keep_lines(memory, view)
    while len(memory.samples) < budget.samples:
        memory.samples.append(draw_sample(view, memory.rng))
    for index, sample in enumerate(memory.samples):
        left = budget.seconds - (clock() - started)
        if left <= 0 or _decided(memory.samples, index):
            break
        if sample.line is not None or sample.settled:
            continue
        result = solve(sample_game(view, sample), max_positions=budget.positions, max_seconds=left, clock=clock)
        memory.solves += 1
        if result.verdict == WINNABLE:
            sample.line = result.moves
        elif clock() - started < budget.seconds:
            sample.settled = True  # a search cut by the clock, not by its budget, may be tried again
    votes = Counter(s.line[0] for s in memory.samples if s.line)
    if not votes:
        memory.last_move = None
        return None, memory
    if len(votes) > 1 and budget.compare:
        votes = _compare(view, memory, budget, votes, lambda: budget.seconds - (clock() - started), clock)
    best = max(votes.values())
    move = memory.rng.choice(sorted(m for m, n in votes.items() if n == best))
    if memory.rng.random() < 0.5:
        move = _commute(view, memory, move)
    memory.last_move = move
    return move, memory


REVEALING = ("stock>", "reserve>")


def _commute(view: View, memory: SearchMemory, move: str) -> str:
    """The move after ``move`` in the lines that start with it, played first instead, when the two
    commute (neither reveals a card, and either order leaves the same position, as the View
    shows it): the bot's own order of things that can be done in any order. The lines that
    start with the pair are swapped to match, so they still win."""
    seconds = {s.line[1] for s in memory.samples if s.line and len(s.line) > 1 and s.line[0] == move}
    if len(seconds) != 1 or move.startswith(REVEALING):
        return move
    after = seconds.pop()
    if after.startswith(REVEALING):
        return move
    orders = []
    for first, second in ((move, after), (after, move)):
        game = Game.from_view(view, hidden=HIDDEN)
        if game.reason_illegal(first) is not None:
            return move
        game.play(first, check_blocked=False)
        if game.reason_illegal(second) is not None:
            return move
        game.play(second, check_blocked=False)
        orders.append(game.view())
    if orders[0] != orders[1]:
        return move
    for sample in memory.samples:
        if sample.line and len(sample.line) > 1 and sample.line[:2] == [move, after]:
            sample.line[:2] = [after, move]
    return after


def _compare(
    view: View,
    memory: SearchMemory,
    budget: SearchBudget,
    votes: Counter[str],
    left: Callable[[], float],
    clock: Callable[[], float],
) -> Counter[str]:
    """Where the samples' lines part ways: for each move voted for, in how many samples it still
    wins (a sample whose line starts elsewhere is solved from the position after the move)."""
    winning = [s for s in memory.samples if s.line]
    scores: Counter[str] = Counter()
    alternatives: dict[str, list[tuple[Sample, list[str]]]] = {}
    for move, _ in votes.most_common(budget.compare):
        scores[move] = votes[move]
        found: list[tuple[Sample, list[str]]] = []
        for sample in winning:
            assert sample.line is not None
            if sample.line[0] == move:
                continue
            if left() <= 0:
                return votes
            game = sample_game(view, sample)
            game.play(move, check_blocked=False)
            result = solve(game, max_positions=budget.positions, max_seconds=left(), clock=clock)
            memory.solves += 1
            if result.verdict == WINNABLE:
                scores[move] += 1
                found.append((sample, [move, *result.moves]))
        alternatives[move] = found
    best = max(scores.values())
    leaders = [m for m, n in scores.items() if n == best]
    for move in leaders[:1]:
        for sample, line in alternatives[move]:
            sample.line = line
    return Counter({m: scores[m] for m in leaders})


def _decided(samples: list[Sample], index: int) -> bool:
    """Can the samples from ``index`` on no longer change which move leads the vote? (Then they
    wait, unsolved, for a move where they may matter.)"""
    votes = Counter(s.line[0] for s in samples[:index] if s.line).most_common(2)
    if not votes:
        return False
    lead = votes[0][1] - (votes[1][1] if len(votes) > 1 else 0)
    undecided = sum(1 for s in samples[index:] if not s.settled)
    return lead > undecided
