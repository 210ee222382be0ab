"""The room around a race: the lobby (rules, racers, ready marks, countdown) and the results
(ranking, the revealed deal and salt, the client's own check of the commitment, saved records)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.widget import Widget

from client.state import safe_name
from client.viewmodel import RaceModel, ReplayedRecord, replay_results
from client.widgets.cards import span
from client.widgets.leaderboard import clock
from client.widgets.plain import clean, plain
from client.words import plural
from shared.protocol import DEALING, NAME_MAX, RACER, SPECTATOR, Results, Room
from shared.textwidth import fit_cells


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


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

    def __init__(self, model: RaceModel, watch_url: str | None = None) -> None:
        super().__init__(id="lobby")
        self.model = model
        self.watch_url = watch_url  # the spectator page's base URL, when this client knows it (plot host)
        self.deal_note: str | None = None  # practice: what the chosen deal is (see rules_text)

    def render(self) -> Text:
        model = self.model
        room = model.room
        if room is None:
            note = model.left_reason or "joining…"
            return span(f"Not in a room ({note})", "dim")
        out = span("Room ", "bold")
        code = clean(room.code)
        out.append(code, style="bold reverse")
        out.append(f"   friends join with: plot join {code}   watch: plot watch {code}\n", style="dim")
        if self.watch_url:
            out.append(f"   watch in a browser: {clean(self.watch_url)}/watch/{code}\n", style="dim")
        out.append_text(rules_text(room, self.deal_note))
        racers = [m for m in room.members if m.role == RACER]
        out.append(f"\n\nRacers {len(racers)}/{room.rules.max_racers}\n", style="bold")
        for member in racers:
            out.append(" ★ " if member.player_id == room.host else "   ", style="yellow")
            out.append_text(plain(member.name, style="bold reverse" if member.player_id == model.player_id else "bold"))
            if member.bot:
                out.append(" ⚙ bot", style="dim")
            out.append("  ready ✓" if member.ready else "  not ready", style="green" if member.ready else "dim")
            if not member.connected:
                out.append("  (away)", style="red")
            out.append("\n")
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
        out = span(f"Results of race {results.race}\n", "bold underline")
        for place, row in enumerate(results.racers, start=1):
            out.append(f"{place:>2} ", style="bold")
            style = "bold reverse" if row.player_id == model.player_id else "bold"
            out.append_text(plain(fit_cells(clean(row.name), NAME_MAX), style=style))  # by terminal cells
            out.append(" ⚙" if row.bot else "  ", style="dim")
            moves = "move " if row.moves == 1 else "moves"
            out.append(f" {clean(row.status):<9} {row.cards:>3}/104 {row.moves:>4} {moves}  {clock(row.elapsed_ms)}\n")
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
        keys += "n: new race (same room) · " if model.is_host else ""
        out.append(keys + "Ctrl+Q: quit", style="dim")
        return out

    def _verdict(self, short: bool = False) -> Text:
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
        out.append_text(self._verdict(short=True))
        if model.saved_records:
            folder = next(iter(model.saved_records.values())).parent
            out.append(f"\nRecords saved in {folder}{'/'}", style="bold")
        out.append("\n[ ]: the previous / next board (past the last: the results) · Ctrl+Q: quit", style="dim")
        return out


def verify_command(path: Path, results: Results) -> str:
    """The ``plot verify`` line that replays ``path`` and checks the race's commitment to its deal."""
    return f"plot verify {path} --commitment {clean(results.commitment)} --salt {clean(results.salt)}"


def save_records(model: RaceModel, folder: Path) -> dict[str, Path]:
    """Write every revealed record (and the reveal) under ``folder``; returns player id -> path."""
    results = model.results
    if results is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    names = {row.player_id: row.name for row in results.racers}
    for seat, (player_id, record) in enumerate(results.records.items(), start=1):
        path = folder / f"{seat:02d}-{safe_name(names.get(player_id, player_id))}.json"
        data: dict[str, object] = {"deal": record.deal, "moves": list(record.moves)}
        if not record.undo:
            data["undo"] = False
        path.write_text(json.dumps(data) + "\n", encoding="utf-8")
        paths[player_id] = path
    reveal = {
        "race": results.race,
        "deal": results.deal,
        "salt": results.salt,
        "commitment_at_start": model.commitment,
        "commitment_revealed": results.commitment,
        "verified": model.commitment_verified(),
        "ranking": [names.get(p, p) for p in results.ranking],
    }
    (folder / "reveal.json").write_text(json.dumps(reveal, indent=1) + "\n", encoding="utf-8")
    return paths
