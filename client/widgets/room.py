"""The room around a race: the lobby (rules, racers, ready marks, countdown) and the results
(ranking, the revealed deal and salt, the client's own check of the commitment, saved records)."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.widget import Widget

from client.ghosts import record_data
from client.invite import invite
from client.state import safe_name
from client.viewmodel import RaceModel, ReplayedRecord, replay_results
from client.widgets.cards import span
from client.widgets.chat import podium
from client.widgets.ghosts import ghost_progress, lobby_ghosts, results_ghosts
from client.widgets.leaderboard import CLAIMED_MARK, clock, mark_cells, pace_text
from client.widgets.plain import clean, plain
from client.words import ordinal, plot_command, plural, typed_path
from shared.cards import CARD_COUNT
from shared.protocol import DEALING, RACER, SPECTATOR, RatingChange, Results, Room
from shared.textwidth import fit_cells


def rules_text(room: Room, deal_note: str | None = None) -> Text:
    """The room's rules in one line, and its warnings. ``deal_note`` (practice) replaces the
    chosen-deal warning with what the chosen deal means there."""
    rules = room.rules
    parts = [
        f"up to {rules.max_racers} racers",
        "undo on" if rules.undo else "undo off",
        "private (code only)" if rules.private else "listed",
        f"time limit {clock(rules.time_limit * 1000)}" if rules.time_limit else "no time limit",
        "bots welcome" if rules.bots_allowed else "no bots",
    ]
    if rules.winnable_only:
        parts.append("winnable deals only")
    if rules.spectator_boards == "after":
        parts.append("spectators see boards after the race")
    else:
        parts.append(f"spectators see boards {rules.spectator_boards}s behind")
    if rules.spectator_chat == "always":
        parts.append("racers read the spectators' chat during the race")
    out = span(" · ".join(parts), "dim")
    if room.chosen_deal and deal_note is not None:
        out.append(f"\npractice deal: {deal_note} (this client knows it: that is what lets h give hints)", style="dim")
    elif room.chosen_deal:
        out.append("\n⚠ chosen deal: the host (and anyone who knows it) knows the stock", style="yellow")
    if not room.leak_proof:
        out.append("\n⚠ not leak-proof: spectators see live boards", style="yellow")
    return out


class LobbyPanel(Widget):
    """Who is in the room, who is ready, the rules; the countdown once it runs."""

    DEFAULT_CSS = "LobbyPanel { height: auto; padding: 0 1; }"

    def __init__(self, model: RaceModel, watch_url: str | None = None, server: str | None = None) -> None:
        super().__init__(id="lobby")
        self.model = model
        self.watch_url = watch_url  # the spectator page's base URL, when this client knows it (plot host)
        self.server = server  # the server others reach the room on; None: nobody else can (practice)
        self.deal_note: str | None = None  # practice: what the chosen deal is (see rules_text)

    def watch_link(self) -> str | None:
        """The room's page on the spectator site, when this client knows the site."""
        room = self.model.room
        if room is None or not self.watch_url or self.server is None:
            return None
        return f"{clean(self.watch_url)}/watch/{clean(room.code)}"

    def render(self) -> Text:
        model = self.model
        room = model.room
        if room is None:
            note = model.left_reason or "joining…"
            return span(f"Not in a room ({note})", "dim")
        out = span("Room ", "bold")
        code = clean(room.code)
        out.append(code, style="bold reverse")
        if self.server is None:
            out.append("   practice: a private room on a server inside this program\n", style="dim")
        else:
            # One invite a line, so each fits 80 columns and pastes whole.
            plot = plot_command()
            link = invite(self.server, code)
            out.append("   friends join with:\n", style="dim")
            out.append(f" {plot} join {link}\n")
            out.append(f" {plot} watch {link}", style="dim")
            browser = self.watch_link()
            if browser is not None:
                out.append(f"\n in a browser: {browser}", style="dim")
                out.append("   g: as a QR code", style="bold")
            out.append("\n")
        out.append_text(rules_text(room, self.deal_note))
        racers = [m for m in room.members if m.role == RACER]
        out.append(f"\n\nRacers {len(racers)}/{room.rules.max_racers}\n", style="bold")
        for member in racers:
            out.append(" ★ " if member.player_id == room.host else "   ", style="yellow")
            out.append_text(plain(member.name, style="bold reverse" if member.player_id == model.player_id else "bold"))
            if member.claimed:
                out.append(CLAIMED_MARK, style="green")  # a claimed name: this is that player (docs/players.md)
            if member.bot:
                out.append(" ⚙ bot", style="dim")
            out.append("  ready ✓" if member.ready else "  not ready", style="green" if member.ready else "dim")
            if not member.connected:
                out.append("  (away)", style="red")
            out.append("\n")
        out.append_text(lobby_ghosts(room, model.is_host and room.phase == "lobby"))
        if room.spectators:  # a count: a snapshot names no spectator but this client (and a watching host)
            out.append(f"Spectators: {room.spectators}\n", style="dim")
        left = model.countdown_left_ms()
        if left is not None:
            out.append(f"\nStarting in {max(left + 999, 0) // 1000}…\n", style="bold magenta")
        elif room.phase == DEALING:
            out.append("\nFinding a deal the solver proves winnable… the countdown follows\n", style="bold magenta")
        elif room.phase == "lobby":
            keys = "Enter: ready / not ready"
            if model.is_host:
                keys += " · s: start the race (when every racer is ready)"
            if model.role == SPECTATOR:
                keys = "watching: the leaderboard appears when the race starts"
            out.append("\n" + keys, style="bold")
        return out


@dataclass(slots=True)
class RecordCheck:
    """One revealed record replayed here: does it agree with the final leaderboard?"""

    name: str
    ok: bool
    detail: str


def check_records(results: Results, replayed: dict[str, ReplayedRecord] | None = None) -> list[RecordCheck]:
    """Compare every revealed record, replayed locally (``replayed``: already, e.g.
    ``RaceModel.replayed()``), with the server's final leaderboard."""
    if replayed is None:
        replayed = replay_results(results)
    rows = {row.player_id: row for row in results.racers}
    checks: list[RecordCheck] = []
    for player_id, record in results.records.items():
        row = rows.get(player_id)
        name = row.name if row else player_id
        game, result = replayed[player_id].game, replayed[player_id].result
        if record.deal != results.deal:
            checks.append(RecordCheck(name, False, f"record deal {record.deal} is not the revealed deal"))
        elif not result.ok:
            error = result.error
            checks.append(RecordCheck(name, False, f"illegal entry {error.index if error else '?'}"))
        elif row is not None and row.cards != game.foundation_cards:
            checks.append(
                RecordCheck(name, False, f"replays to {plural(game.foundation_cards, 'card')}, board says {row.cards}")
            )
        else:
            checks.append(RecordCheck(name, True, f"{plural(game.foundation_cards, 'card')}, {game.status}"))
    return checks


# ---------------------------------------------------------------- progress over race time

SPARK = "▁▂▃▄▅▆▇█"
SPLIT_MARKS = (13, 52, 104)  # f0 complete (the game unrestricted), half, every card home


@dataclass(frozen=True, slots=True)
class Progress:
    """A racer's foundation cards after each entry, and when each entry was accepted (ms of race
    time; None when the results carry no times: then the axis is the entry's index)."""

    cards: list[int]
    times: list[int] | None


def racer_progress(results: Results, replayed: dict[str, ReplayedRecord]) -> dict[str, Progress]:
    out: dict[str, Progress] = {}
    for player_id, record in replayed.items():
        times = results.times.get(player_id)
        if times is not None and len(times) != len(record.cards):
            times = None  # not the same entries: say nothing about time rather than something wrong
        out[player_id] = Progress(cards=record.cards, times=list(times) if times is not None else None)
    return out


def sparkline(progress: Progress, end: int, width: int) -> Text:
    """Cards home over ``[0, end]`` (ms of race time, or entries without times) in ``width`` cells:
    each cell is the count at the end of its slice, from ▁ (1 card) to █ (104); past the racer's
    last entry the line goes on dim."""
    axis = progress.times if progress.times is not None else list(range(1, len(progress.cards) + 1))
    last = axis[-1] if axis else 0
    out = Text()
    end = max(end, 1)
    for cell in range(width):
        upto = (cell + 1) * end / width
        index = bisect.bisect_right(axis, upto)
        cards = progress.cards[index - 1] if index else 1
        level = min(len(SPARK) - 1, max(cards * len(SPARK) - 1, 0) // CARD_COUNT)
        out.append(SPARK[level], style="green" if (cell * end / width) < last or cell == 0 else "dim green")
    return out


def splits(progress: Progress) -> list[tuple[int, int]]:
    """(cards, when) for each of SPLIT_MARKS the racer reached: the first time (ms) or entry number."""
    found: list[tuple[int, int]] = []
    marks = list(SPLIT_MARKS)
    for index, cards in enumerate(progress.cards):
        while marks and cards >= marks[0]:
            found.append((marks.pop(0), progress.times[index] if progress.times is not None else index + 1))
    return found


def progress_end(progress: dict[str, Progress]) -> int:
    """The common axis of the results' lines: the last entry's race time (or index, without times)."""
    ends = [(p.times[-1] if p.times is not None else len(p.cards)) for p in progress.values() if p.cards]
    return max(ends, default=0)


def by_time(progress: dict[str, Progress]) -> bool:
    return all(p.times is not None for p in progress.values())


def when(value: int, timed: bool) -> str:
    return clock(value) if timed else f"move {value}"


NAME_WIDTH = 16
RATING_WIDTH = 12  # " 1138  +138" after a rated race's row (docs/players.md)


def rating_cells(change: RatingChange | None) -> Text:
    """A row's rating after a rated race and its change; blank for an unrated racer, and until
    the changes come (a second results carries them)."""
    if change is None:
        return span(" " * RATING_WIDTH, "dim")
    style = "green" if change.change > 0 else "red" if change.change < 0 else "dim"
    out = span(f" {change.after.shown:>5}", "bold")
    out.append(f" {change.change:>+5}", style=style)
    return out


RESULTS_ROW_WIDTH = 3 + NAME_WIDTH + 2 + 10 + 8 + 11 + 2 + 5 + 10  # a summary row before its line


class ResultsPanel(Widget):
    """The end of a race: ranking, the reveal and its check, where the records are.

    With a racer's final board on show (``showing``), it keeps to a few lines under the board:
    whose board it is, the commitment check and the records folder, so nothing of that is pushed
    off an 80x24 terminal. The records are replayed once per results (``RaceModel.replayed``).
    """

    DEFAULT_CSS = "ResultsPanel { height: auto; padding: 0 1; }"

    def __init__(self, model: RaceModel) -> None:
        super().__init__(id="results")
        self.model = model
        self.showing: str | None = None  # the player whose final board is on show (None: the summary)
        self.deal_note: str | None = None  # practice: what the chosen deal is, instead of "chosen by the host"
        self._checks: tuple[Results, list[RecordCheck]] | None = None

    def progress(self, results: Results) -> dict[str, Progress]:
        """Each racer's cards over the race, from the records replayed once (and the results' times)."""
        replayed = self.model.replayed() if self.model.results is results else replay_results(results)
        return racer_progress(results, replayed)

    def checks(self, results: Results) -> list[RecordCheck]:
        """The record checks of ``results``, made once."""
        if self._checks is None or self._checks[0] is not results:
            replayed = self.model.replayed() if self.model.results is results else None
            self._checks = (results, check_records(results, replayed))
        return self._checks[1]

    def render(self) -> Text:
        model = self.model
        results = model.results
        if results is None:
            return Text("")
        if self.showing is not None:
            return self._render_compact(results, self.showing)
        progress = self.progress(results)
        ghosts = {pid: Progress(cards=c, times=t) for pid, (c, t) in ghost_progress(results).items()}
        end = progress_end(progress | ghosts)
        timed = by_time(progress)
        out = span(f"Results of race {results.race}", "bold underline")
        spark_width = self.content_region.width - RESULTS_ROW_WIDTH - 2 - (RATING_WIDTH if results.rated else 0)
        if spark_width >= 8:
            axis = f"0:00–{clock(end)}" if timed else f"moves 0–{end}: no move times from the server"
            out.append(f"   the lines: cards home over the race ({axis})", style="dim")
        out.append("\n")
        out.append_text(podium(results.racers, self.content_region.width))
        out.append("\n")
        for place, row in enumerate(results.racers, start=1):
            out.append(f"{place:>2} ", style="bold")
            style = "bold reverse" if row.player_id == model.player_id else "bold"
            out.append_text(plain(fit_cells(clean(row.name), NAME_WIDTH), style=style))  # by terminal cells
            out.append_text(mark_cells(row.bot, row.claimed))
            moves = "move " if row.moves == 1 else "moves"
            out.append(f" {clean(row.status):<9} {row.cards:>3}/104 {row.moves:>4} {moves}  {clock(row.elapsed_ms):>5}")
            out.append(f" {pace_text(row.cards, row.elapsed_ms):>9}", style="cyan")
            if results.rated:
                out.append_text(rating_cells(results.ratings.get(row.player_id)))
            if spark_width >= 8 and row.player_id in progress:
                out.append("  ")
                out.append_text(sparkline(progress[row.player_id], end, spark_width))
            out.append("\n")

        def ghost_line(pid: str) -> Text | None:
            shown = ghosts.get(pid)
            return sparkline(shown, end, spark_width) if shown is not None and spark_width >= 8 and timed else None

        out.append_text(results_ghosts(results, model.player_id, ghost_line))
        out.append("\nDeal ", style="bold")
        out.append(str(results.deal))
        if results.chosen_deal and self.deal_note is not None:
            out.append(f"  (practice deal: {self.deal_note})", style="dim")
        elif results.chosen_deal:
            out.append("  (chosen by the host)", style="yellow")
        out.append("\nSalt ", style="bold")
        out.append(clean(results.salt))
        out.append("\nCommitment at the start ", style="bold")
        out.append(clean(model.commitment or "(not seen: joined after the start)"))
        out.append_text(self._verdict())
        checks = self.checks(results)
        bad = [c for c in checks if not c.ok]
        if checks and not bad:
            agree = f"all {len(checks)} records replayed here agree"
            if len(checks) == 1:
                agree = "the record replayed here agrees"
            out.append(f"\n✓ {agree} with the ranking", style="green")
        for check in bad:
            out.append("\n✗ ", style="bold red")
            out.append_text(plain(check.name))
            out.append(f": {check.detail}", style="red")
        if model.saved_records:
            folder = next(iter(model.saved_records.values())).parent
            out.append(f"\nRecords saved in {folder}{'/'}", style="bold")
            mine = model.saved_records.get(model.player_id or "") or next(iter(model.saved_records.values()))
            out.append("\nReplay one and check the commitment: ", style="bold")
            out.append(verify_command(mine, results))
        keys = "\n[ ]: each racer's final board · "
        keys += "n: new race (same room) · N: same deal, these racers as ghosts · " if model.is_host else ""
        out.append(keys + "Ctrl+Q: quit", style="dim")
        return out

    def _verdict(self, short: bool = False) -> Text:
        if self.model.commitment is None:
            # Joined after the start: the results' own commitment proves nothing about the start.
            if self.model.commitment_verified():
                return span("\n? not checked: this client did not see the start's commitment", "bold yellow")
            return span("\n✗ the revealed deal and salt do not even give the results' commitment", "bold red")
        if self.model.commitment_verified():
            if short:  # one line at 80 columns
                return span("\n✓ verified here: sha256(the-plot:<deal>:<salt>) = the start's commitment", "bold green")
            return span(
                "\n✓ verified here: sha256(the-plot:<deal>:<salt>) is the commitment made at the start", "bold green"
            )
        if short:
            return span("\n✗ NOT verified: the deal and salt do not give the start's commitment", "bold red")
        return span(
            "\n✗ NOT verified: the revealed deal and salt do not give the commitment made at the start", "bold red"
        )

    def _render_compact(self, results: Results, player_id: str) -> Text:
        """Under a racer's final board: whose it is, the commitment check, the records folder."""
        model = self.model
        out = span("Board of ", "bold")
        row = next((r for r in results.racers if r.player_id == player_id), None)
        out.append_text(plain(row.name if row else model.member_name(player_id), style="bold reverse"))
        if row is not None:
            place = results.ranking.index(player_id) + 1 if player_id in results.ranking else row.rank
            moves = f"{row.moves} move" + ("" if row.moves == 1 else "s")
            out.append(f" · {ordinal(place)} · {clean(row.status)} · {row.cards}/104 · {moves}")
            out.append(f" · {clock(row.elapsed_ms)}")
        bad = [c for c in self.checks(results) if not c.ok]
        if bad:
            out.append(
                f" · ✗ {len(bad)} {'record disagrees' if len(bad) == 1 else 'records disagree'}", style="bold red"
            )
        progress = self.progress(results)
        mine = progress.get(player_id)
        if mine is not None:
            timed = by_time(progress)
            out.append("\nCards home ", style="bold")
            out.append_text(sparkline(mine, progress_end(progress), 24))
            reached = splits(mine)
            out.append("  " + " · ".join(f"{cards} at {when(at, timed)}" for cards, at in reached) if reached else "")
        out.append_text(self._verdict(short=True))
        if model.saved_records:
            folder = next(iter(model.saved_records.values())).parent
            out.append(f"\nRecords saved in {folder}{'/'}", style="bold")
        out.append("\n[ ]: the previous / next board (past the last: the results) · Ctrl+Q: quit", style="dim")
        return out


def verify_command(path: Path, results: Results | None = None) -> str:
    """The ``plot verify`` line that replays ``path``, as it works typed in this shell; with the
    race's ``results``, it checks the commitment too (from the reveal.json saved beside it)."""
    line = f"{plot_command()} verify {typed_path(path)}"
    return line + " --reveal" if results is not None else line


def save_records(model: RaceModel, folder: Path) -> dict[str, Path]:
    """Write every revealed record (and the reveal) under ``folder``; returns player id -> path."""
    results = model.results
    if results is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    names = {row.player_id: row.name for row in results.racers}
    # Numbered by place, as the spectator page names its downloads (records of unranked racers last).
    order = [pid for pid in results.ranking if pid in results.records]
    order += [pid for pid in results.records if pid not in order]
    for place, player_id in enumerate(order, start=1):
        path = folder / f"{place:02d}-{safe_name(names.get(player_id, player_id))}.json"
        # With its move times and name: the file races as a ghost as it is (plot practice --ghost).
        data = record_data(results, player_id, names.get(player_id, player_id))
        path.write_text(json.dumps(data) + "\n", encoding="utf-8")
        paths[player_id] = path
    reveal = {
        "race": results.race,
        "deal": results.deal,
        "salt": results.salt,
        "commitment_at_start": model.commitment,
        "commitment_revealed": results.commitment,
        "verified": model.commitment_verified() if model.commitment is not None else None,  # None: start unseen
        "ranking": [names.get(p, p) for p in results.ranking],
    }
    (folder / "reveal.json").write_text(json.dumps(reveal, indent=1) + "\n", encoding="utf-8")
    return paths
