"""The daily deal's panels: a day's board (rank, name, status, cards home, moves, time) and a
claimed player's profile (streaks, bests, history).

Figures only, as the server sends them: a board never holds anyone's cards (docs/daily.md).
Names are other people's text, so they go through :func:`client.widgets.plain.plain`.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from client.widgets.cards import span
from client.widgets.leaderboard import STATUS_STYLE, clock, progress_bar
from client.widgets.plain import clean, plain
from client.words import plural
from shared.protocol import DailyBoard, DailyDay, DailyRow, PlayerProfile, Standing
from shared.textwidth import fit_cells

NAME_WIDTH = 20


def row_text(row: DailyRow, width: int, *, me: bool) -> Text:
    """One row: rank, name (✓ claimed), a bar of cards home, cards, moves, status, time."""
    out = span(f"{row.rank:>4} ", "bold")
    out.append_text(plain(fit_cells(clean(row.name), NAME_WIDTH), style="bold reverse" if me else "bold"))
    out.append(" ✓" if row.claimed else "  ", style="green")
    fixed = 5 + NAME_WIDTH + 2 + 1 + 8 + 6 + 10 + 8
    out.append(" ")
    out.append_text(progress_bar(row.cards, max(width - fixed, 6)))
    out.append(f" {row.cards:>3}/104", style="bold")
    out.append(f" {row.moves:>4}m", style="dim")
    out.append(f" {clean(row.status):<9}", style=STATUS_STYLE.get(row.status, ""))
    out.append(f" {clock(row.elapsed_ms):>7}", style="dim")
    return out


def day_title(day: int, date: str) -> str:
    return f"day {day}" + (f" · {clean(date)}" if date else "")


def board_text(board: DailyBoard | None, width: int, *, me: str | None, title: str) -> Text:
    """A day's board under ``title``; ``me``: the profile id whose row stands out."""
    out = span(title, "bold underline")
    if board is None:
        out.append("\nloading…", style="dim")
        return out
    total = board.total or len(board.rows)
    state = "final" if board.final else "live, as it stands"
    out.append(f"  {plural(total, 'player')} · {state}", style="dim")
    if not board.rows:
        out.append("\nnobody on this board yet" if not board.final else "\nnobody played this day", style="dim")
        return out
    for row in board.rows:
        out.append("\n")
        out.append_text(row_text(row, width, me=row.profile_id == me))
    you = board.you
    if you is not None and all(row.profile_id != you.profile_id for row in board.rows):
        out.append("\n   …")
        out.append("\n")
        out.append_text(row_text(you, width, me=True))
    if total > board.offset + len(board.rows):
        out.append(f"\n   … {plural(total - board.offset - len(board.rows), 'more row')}", style="dim")
    return out


def reveal_text(board: DailyBoard, verdict: str | None) -> Text:
    """A revealed day's deal, salt and commitment, and the check this client made of them."""
    out = span("The reveal", "bold underline")
    out.append(f"\ndeal {board.deal} · salt {clean(board.salt or '')}")
    out.append(f"\ncommitment {clean(board.commitment)}", style="dim")
    if verdict is not None:
        out.append("\n")
        out.append(verdict, style="bold green" if verdict.startswith("✓") else "bold red")
    return out


class DailyBoardPanel(Widget):
    """A day's board, redrawn whenever :meth:`show` gets a newer one."""

    DEFAULT_CSS = """
    DailyBoardPanel { height: auto; min-height: 2; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = "daily-board") -> None:
        super().__init__(id=id)
        self.board: DailyBoard | None = None
        self.me: str | None = None
        self.title = "The day's board"

    def show(self, board: DailyBoard | None, me: str | None, title: str) -> None:
        self.board, self.me, self.title = board, me, title
        self.refresh(layout=True)

    def render(self) -> Text:
        out = board_text(self.board, max(self.content_region.width, 40), me=self.me, title=self.title)
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(board_text(self.board, max(width, 40), me=self.me, title=self.title).plain.splitlines())


def day_text(day: DailyDay, now_ms: int) -> str:
    """``day 20424 · 2026-12-02 · ends in 3:12:05``"""
    left = day.ends_at - now_ms
    return f"{day_title(day.day, day.date)} · " + (f"ends in {clock(left)}" if left > 0 else "over")


def profile_text(profile: PlayerProfile) -> Text:
    """A claimed player's page: the figures, then the days played, newest first."""
    out = plain(profile.name, style="bold underline")
    out.append(" ✓ claimed", style="green")
    best = clock(profile.best_ms) if profile.best_ms is not None else "-"
    rating = f"{profile.rating:.0f}" if profile.rating is not None else "-"
    out.append(
        f"\n{plural(profile.days_played, 'day')} played · {profile.days_won} won · streak {profile.streak}"
        f" (best {profile.best_streak}) · best time {best} · points {profile.points} · rating {rating}"
    )
    out.append("\n\nDays played", style="bold underline")
    if not profile.history:
        out.append("\nnone yet", style="dim")
    for result in profile.history:
        place = f"{result.rank}/{result.players}" if result.rank else "on today"
        out.append(f"\n{clean(result.date):<10} day {result.day:<7} {place:>9}  ")
        out.append(f"{clean(result.status):<9}", style=STATUS_STYLE.get(result.status, ""))
        out.append(f" {result.cards:>3}/104 {result.moves:>4}m {clock(result.elapsed_ms):>7}", style="dim")
    return out


class ProfilePanel(Widget):
    DEFAULT_CSS = """
    ProfilePanel { height: auto; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(id="profile")
        self.profile: PlayerProfile | None = None

    def show(self, profile: PlayerProfile | None) -> None:
        self.profile = profile
        self.refresh(layout=True)

    def render(self) -> Text:
        return profile_text(self.profile) if self.profile is not None else span("loading…", "dim")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.render().plain.splitlines())


def standing_text(standing: Standing | None) -> Text:
    """The standing board over all days: rank, name, points, days played and won, best streak."""
    out = span("The standing board, all days", "bold underline")
    if standing is None:
        out.append("\nloading…", style="dim")
        return out
    out.append(
        f"  {plural(standing.total, 'player')} · points: cards home, +100 a win, up to +100 a fast one", style="dim"
    )
    if not standing.rows:
        out.append("\nnobody has finished an attempt yet", style="dim")
    for row in standing.rows:
        out.append(f"\n{row.rank:>4} ", style="bold")
        out.append_text(plain(fit_cells(clean(row.name), NAME_WIDTH), style="bold"))
        out.append(" ✓", style="green")
        out.append(f" {row.points:>7} pts", style="bold")
        out.append(
            f"  {plural(row.days_played, 'day')} played, {row.days_won} won, best streak {row.best_streak}", style="dim"
        )
    return out


class StandingPanel(Widget):
    DEFAULT_CSS = """
    StandingPanel { height: auto; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(id="standing")
        self.standing: Standing | None = None

    def show(self, standing: Standing | None) -> None:
        self.standing = standing
        self.refresh(layout=True)

    def render(self) -> Text:
        return standing_text(self.standing)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.render().plain.splitlines())
