"""The room's feed (chat lines and finish events, as they happen) and the results' podium.

Chat is other people's text: it goes through :func:`client.widgets.plain.plain`, never markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from client.widgets.cards import span
from client.widgets.leaderboard import CLAIMED_MARK, clock
from client.widgets.plain import clean, plain
from client.words import ordinal, plural
from shared.protocol import TO_SPECTATORS, ChatLine, Finished, LeaderboardRow
from shared.textwidth import cell_width, fit_cells

PODIUM_STYLES = ("bold yellow", "bold white", "bold dark_orange")  # gold, silver, bronze


def finish_text(done: Finished) -> str:
    """'bob finished 3rd at 7:39'; a game that ended without winning keeps its place only for now."""
    at = clock(done.elapsed_ms)
    if done.status == "won":
        return f"{done.name} finished {ordinal(done.place)} at {at}"
    verb = "is blocked" if done.status == "blocked" else done.status
    place = ordinal(done.place) if done.final else f"{ordinal(done.place)} for now"
    return f"{done.name} {verb} at {at} with {plural(done.cards, 'card')} ({place})"


def feed_item(item: ChatLine | Finished, me: str | None) -> Text:
    if isinstance(item, Finished):
        out = span("» ", "bold magenta")
        out.append_text(plain(finish_text(item), style="magenta"))
        return out
    out = plain(item.name, style="bold reverse" if item.player_id == me else "bold")
    if item.claimed:
        out.append(CLAIMED_MARK, style="green")  # a claimed name, beside it (docs/players.md)
    if item.role == "spectator":
        out.append(" (watching)", style="dim")
    out.append(": ")
    out.append_text(plain(item.text))
    if item.audience == TO_SPECTATORS:
        out.append("  (spectators only)", style="dim italic")
    return out


class ChatPanel(Widget):
    """The end of the room's feed: the last ``rows`` items, newest last."""

    DEFAULT_CSS = """
    ChatPanel { height: auto; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = "chat-log") -> None:
        super().__init__(id=id)
        self.items: list[ChatLine | Finished] = []
        self.me: str | None = None
        self.rows = 3

    def show(self, items: list[ChatLine | Finished], me: str | None, rows: int) -> None:
        self.items, self.me, self.rows = items, me, rows
        self.refresh(layout=True)

    def render(self) -> Text:
        shown = self.items[-self.rows :] if self.rows > 0 else []
        if not shown:
            return span("chat: c to say something", "dim")
        out = Text()
        for index, item in enumerate(shown):
            if index:
                out.append("\n")
            out.append_text(feed_item(item, self.me))
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(min(len(self.items), self.rows), 1)


PODIUM_COLUMN = 20


def podium(rows: list[LeaderboardRow], width: int) -> Text:
    """The first three of a race on a podium (2nd, 1st, 3rd), four lines: names over steps."""
    top = rows[:3]
    column = max(min(PODIUM_COLUMN, (width - 2) // 3), 10)
    order = [i for i in (1, 0, 2) if i < len(top)]
    heights = {0: 3, 1: 2, 2: 1}
    lines: list[Text] = []
    for level in range(4):  # top line first
        line = Text()
        for i in order:
            row = top[i]
            step = heights[i]
            if level == 3 - step:
                label = clock(row.elapsed_ms) if row.status == "won" else plural(row.cards, "card")
                cell = fit_cells(f"{clean(row.name)} {label}", column - 1)  # by terminal cells
                left = (column - cell_width(cell)) // 2
                line.append(" " * left + cell + " " * (column - left - cell_width(cell)), style=PODIUM_STYLES[i])
            elif level > 3 - step:
                text = f" {ordinal(i + 1)} " if level == 4 - step else ""
                block = text.center(column - 2, "█")
                line.append(" " + block + " ", style=PODIUM_STYLES[i])
            else:
                line.append(" " * column)
        lines.append(line)
    return Text("\n").join(lines)
