"""The live leaderboard: every racer's progress (cards home of 104), moves, status, time, pace, rank.

It never shows a card (docs/rules.md, "Fair play"): progress only. Names are other people's text, so they go
through :func:`client.widgets.plain.plain`.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from client.widgets.cards import span
from client.widgets.plain import clean, plain
from shared.cards import CARD_COUNT
from shared.protocol import Leaderboard, LeaderboardRow, pace
from shared.splits import COLOURS, GOLD, Split, split_text
from shared.textwidth import fit_cells

STATUS_STYLE = {
    "playing": "",
    "won": "bold green",
    "blocked": "yellow",
    "resigned": "dim",
    "stopped": "dim",
}
NAME_WIDTH = 14


def clock(ms: int | None) -> str:
    """Race time as m:ss (h:mm:ss past an hour)."""
    if ms is None:
        return "-:--"
    seconds = max(ms, 0) // 1000
    minutes, seconds = divmod(seconds, 60)
    if minutes >= 60:
        hours, minutes = divmod(minutes, 60)
        return f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{minutes}:{seconds:02d}"


def pace_text(cards: int, elapsed_ms: int) -> str:
    """Cards home per minute of race time, one decimal: '13.6/min' ('-' before any time has passed)."""
    rate = pace(cards, elapsed_ms)
    return "-" if rate is None else f"{rate:.1f}/min"


def progress_bar(cards: int, width: int) -> Text:
    """``cards`` of 104 as a bar ``width`` cells wide (eighths of a cell, so one card shows)."""
    width = max(width, 4)
    eighths = round(min(max(cards, 0), CARD_COUNT) * width * 8 / CARD_COUNT)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    out = span(bar, "green")
    out.append("·" * (width - len(bar)), style="dim")
    return out


# Beside a claimed name (docs/players.md): the player who claimed it on this server, not a look-alike.
CLAIMED_MARK = " ✓"
GHOST_MARK = "◌"  # a ghost's row: a recorded game, never a live racer (docs/ghosts.md)
SPLIT_WIDTH = 7


def mark_cells(bot: bool, claimed: bool, ghost: bool = False) -> Text:
    """The two cells after a name in a table: the bot's gear, a ghost's mark, a claimed name's
    mark, or blank."""
    if bot:
        return span(" ⚙", "dim")
    if ghost:
        return span(f" {GHOST_MARK}", "dim")
    return span(CLAIMED_MARK, "green") if claimed else span("  ", "dim")


def split_cell(split: Split | None) -> Text:
    """A split against a ghost as LiveSplit colours it (gold for a best segment), SPLIT_WIDTH cells."""
    if split is None:
        return Text(" " * SPLIT_WIDTH)
    colour = COLOURS[GOLD] if split.gold else COLOURS[split.kind]
    return Text(f" {split_text(split):>{SPLIT_WIDTH - 1}}", style=f"bold {colour}")


def row_text(row: LeaderboardRow, width: int, *, me: bool, split: Split | None = None, splits: bool = False) -> Text:
    """One row; ``splits``: the board has a split column (its ghost rows show ``split``, the
    racer's latest split against that ghost)."""
    name = fit_cells(clean(row.name), NAME_WIDTH)  # by terminal cells: a wide character takes 2
    out = span(f"{row.rank:>2} ", "bold")
    out.append_text(plain(name, style="bold reverse" if me else "italic dim" if row.ghost else "bold"))
    out.append_text(mark_cells(row.bot, row.claimed, row.ghost))
    fixed = 3 + NAME_WIDTH + 2 + 1 + 8 + 6 + 10 + 6 + 10 + (SPLIT_WIDTH if splits else 0)
    bar_width = max(width - fixed, 6)
    out.append(" ")
    out.append_text(progress_bar(row.cards, bar_width))
    out.append(f" {row.cards:>3}/104", style="bold")
    out.append(f" {row.moves:>4}m", style="dim")
    status = clean(row.status) if row.connected or row.status != "playing" else "away"
    out.append(f" {status:<9}", style=STATUS_STYLE.get(row.status, "") if row.connected else "bold red")
    out.append(f" {clock(row.elapsed_ms):>5}", style="dim")
    out.append(f" {pace_text(row.cards, row.elapsed_ms):>9}", style="cyan")
    if splits:
        out.append_text(split_cell(split))
    return out


class LeaderboardPanel(Widget):
    """The leaderboard, redrawn whenever :meth:`show` gets a newer one."""

    DEFAULT_CSS = """
    LeaderboardPanel { height: auto; min-height: 2; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = "leaderboard") -> None:
        super().__init__(id=id)
        self.board: Leaderboard | None = None
        self.me: str | None = None
        self.title = "Leaderboard"
        self.splits: dict[str, Split | None] | None = None  # ghost id -> the racer's split against it

    def show(
        self,
        board: Leaderboard | None,
        me: str | None,
        title: str = "Leaderboard",
        splits: dict[str, Split | None] | None = None,
    ) -> None:
        self.board, self.me, self.title, self.splits = board, me, title, splits
        self.refresh(layout=True)

    def render(self) -> Text:
        out = span(self.title, "bold underline")
        width = max(self.content_region.width, 40)
        if self.board is None or not self.board.racers:
            out.append("\nno progress yet", style="dim")
            return out
        for row in self.board.racers:
            out.append("\n")
            split = self.splits.get(row.player_id) if self.splits else None
            out.append_text(row_text(row, width, me=row.player_id == self.me, split=split, splits=bool(self.splits)))
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + max(len(self.board.racers) if self.board else 1, 1)
