"""Ghosts in the room's panels (docs/ghosts.md): the lobby's list, and in the results each ghost's
row and line of cards home, with the racer's splits against it (every 13 cards, and each
foundation completed: the records are revealed by then), in LiveSplit's colours."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from client.widgets.cards import span
from client.widgets.leaderboard import GHOST_MARK, clock, pace_text, split_cell
from client.widgets.plain import clean, plain
from shared.engine import Game, IllegalMove
from shared.protocol import Results, Room
from shared.splits import CARD_MILESTONES, FOUNDATION_MILESTONES, Split, best_segments, record_times, splits
from shared.textwidth import fit_cells

NAME_WIDTH = 16


def lobby_ghosts(room: Room, is_host: bool) -> Text:
    """The ghosts the next race takes, for the lobby."""
    out = Text()
    if not room.ghosts and not is_host:
        return out
    out.append(f"\nGhosts {len(room.ghosts)}\n", style="bold")
    for ghost in room.ghosts:
        out.append(f" {GHOST_MARK} ", style="dim")
        out.append_text(plain(ghost.name, style="italic"))
        out.append("  on its recorded times" if ghost.timed else "  paced evenly (no times in its record)", style="dim")
        out.append("\n")
    if is_host:
        out.append(" G: add a ghost from a record file (or type /ghost FILE in the chat)\n", style="dim")
    return out


def results_splits(results: Results, me: str | None) -> dict[str, tuple[list[Split], list[Split]]]:
    """ghost id -> the racer's splits against it: by cards home, and by foundations completed
    (from the revealed records; gold against the best segment of every ghost of the race)."""
    if me is None or me not in results.records or not results.ghosts:
        return {}
    mine_rec = results.records[me]
    my_times = results.times.get(me)
    if my_times is None or len(my_times) != len(mine_rec.moves):
        return {}
    my_cards, my_found = record_times(results.deal, mine_rec.moves, my_times, undo=mine_rec.undo)
    ghosts: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
    for pid, record in results.ghost_records.items():
        times = results.ghost_times.get(pid, [])
        ghosts[pid] = record_times(results.deal, record.moves, times, undo=record.undo)
    best_cards = best_segments([g[0] for g in ghosts.values()], CARD_MILESTONES)
    best_found = best_segments([g[1] for g in ghosts.values()], FOUNDATION_MILESTONES)
    return {
        pid: (
            splits(my_cards, cards, best=best_cards),
            splits(my_found, found, best=best_found, milestones=FOUNDATION_MILESTONES),
        )
        for pid, (cards, found) in ghosts.items()
    }


def ghost_progress(results: Results) -> dict[str, tuple[list[int], list[int]]]:
    """ghost id -> (its cards home after each entry, each entry's race time), from its revealed record."""
    out: dict[str, tuple[list[int], list[int]]] = {}
    for pid, record in results.ghost_records.items():
        game = Game(results.deal, undo=record.undo, blocked_budget=0)
        cards: list[int] = []
        for move in record.moves:
            try:
                game.play(move, check_blocked=False)
            except IllegalMove:
                break
            cards.append(game.foundation_cards)
        times = results.ghost_times.get(pid, [])[: len(cards)]
        if len(times) == len(cards):
            out[pid] = (cards, list(times))
    return out


def split_line(label: str, found: list[Split]) -> Text:
    out = span(f"   {label:<12}", "dim")
    for split in found:
        out.append(f" {split.milestone}")
        out.append_text(split_cell(split))
    return out


def results_ghosts(results: Results, me: str | None, spark: Callable[[str], Text | None]) -> Text:
    """The results' ghost rows (never ranked among the racers: each shows where it would stand),
    each with its line (``spark``) and the racer's splits against it."""
    out = Text()
    if not results.ghosts:
        return out
    out.append("\nGhosts (not ranked: where each would stand)\n", style="bold")
    against = results_splits(results, me)
    for row in results.ghosts:
        out.append(f"{row.rank:>2} ", style="dim")
        out.append_text(plain(fit_cells(clean(row.name), NAME_WIDTH), style="italic"))
        out.append(f" {GHOST_MARK}", style="dim")
        moves = "move " if row.moves == 1 else "moves"
        out.append(f" {clean(row.status):<9} {row.cards:>3}/104 {row.moves:>4} {moves}  {clock(row.elapsed_ms):>5}")
        out.append(f" {pace_text(row.cards, row.elapsed_ms):>9}", style="cyan")
        line = spark(row.player_id)
        if line is not None:
            out.append("  ")
            out.append_text(line)
        out.append("\n")
        if row.player_id in against:
            by_cards, by_foundations = against[row.player_id]
            if by_cards:
                out.append_text(split_line("splits cards", by_cards))
                out.append("\n")
            if by_foundations:
                out.append_text(split_line("foundations", by_foundations))
                out.append("\n")
    return out
