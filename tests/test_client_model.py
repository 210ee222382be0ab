"""The client's pure parts: the bot's strategy (from its View only) and the race view model."""

from __future__ import annotations

import json
from pathlib import Path

from client.bot import choose_move
from client.viewmodel import RaceModel, final_views, legal_moves
from client.widgets.leaderboard import clock, progress_bar
from client.widgets.plain import clean
from client.widgets.room import check_records, save_records
from shared.engine import Game
from shared.fairplay import commitment, new_salt
from shared.protocol import (
    GameRecord,
    Leaderboard,
    LeaderboardRow,
    Member,
    MoveOk,
    RaceStart,
    Results,
    Room,
    RoomRules,
)


def play_bot(deal: int) -> Game:
    game = Game(deal)
    for _ in range(3000):
        entry = choose_move(game.view())  # the View only: no stock order, no deal number
        if entry is None:
            return game
        assert entry == "resign" or entry in game.legal_moves(), (deal, entry)
        game.play(entry)
    raise AssertionError(f"the bot did not finish deal {deal}")


def test_bot_finishes_every_game_from_its_view_and_wins_some() -> None:
    games = [play_bot(deal) for deal in range(40)]
    assert all(g.status in ("won", "blocked", "resigned") for g in games)
    assert sum(g.status == "won" for g in games) >= 5
    assert all(g.foundation_cards >= 1 for g in games)


def test_bot_sends_a_card_home_first() -> None:
    for deal in range(50):
        game = Game(deal)
        homes = [m for m in legal_moves(game.view()) if ">f" in m]
        if homes:
            assert ">f" in (choose_move(game.view()) or "")
            return
    raise AssertionError("no deal of 0..49 opens with a foundation move")


def _rules() -> RoomRules:
    return RoomRules(
        max_racers=4, undo=True, spectator_boards="after", private=False, time_limit=None,
        bots_allowed=True, winnable_only=False,
    )  # fmt: skip


def _room(version: int, phase: str = "lobby", race: int = 1) -> Room:
    members = [Member(player_id="p1", name="ann", role="racer", ready=False, bot=False, connected=True)]
    return Room(
        code="ABCDE", version=version, host="p1", phase=phase, race=race, rules=_rules(),
        chosen_deal=False, leak_proof=True, members=members,
    )  # fmt: skip


def _row(pid: str, cards: int, rank: int) -> LeaderboardRow:
    return LeaderboardRow(
        player_id=pid, name=pid, bot=False, cards=cards, moves=cards, status="playing",
        elapsed_ms=1000 * cards, rank=rank, connected=True,
    )  # fmt: skip


def test_model_ignores_stale_room_leaderboard_and_views() -> None:
    model = RaceModel(player_id="p1")
    assert model.apply(_room(5)) == {"room"}
    assert model.apply(_room(4, phase="racing")) == set()
    assert model.phase == "lobby" and model.is_host and model.role == "racer"
    model.apply(Leaderboard(race=1, version=10, racers=[_row("p1", 9, 1)]))
    assert model.apply(Leaderboard(race=1, version=9, racers=[_row("p1", 3, 1)])) == set()
    assert model.leaderboard is not None and model.leaderboard.racers[0].cards == 9
    game = Game(7)
    start = RaceStart(
        race=1, commitment="c" * 64, chosen_deal=False, started_at=0, ends_at=None, undo=True,
        server_time=0, view=game.view(), seq=0, view_hash=game.view_hash(),
    )  # fmt: skip
    assert "view" in model.apply(start)
    game.play("stock>waste")
    model.apply(MoveOk(id=1, seq=1, t_ms=5, check=game.check, view=game.view()))
    old = Game(7)
    assert model.apply(MoveOk(id=1, seq=0, t_ms=5, check=old.check, view=old.view())) == set()
    assert model.view == game.view()
    game.play("stock>waste")
    # No board filled in (the connection found a divergence): nothing changes until the snapshot.
    assert model.apply(MoveOk(id=2, seq=2, t_ms=6, check=game.check, stock=game.view().stock)) == set()
    assert model.seq == 1


def _results(deal: int, salt: str, games: dict[str, Game]) -> Results:
    rows = [_row(pid, g.foundation_cards, i + 1) for i, (pid, g) in enumerate(games.items())]
    return Results(
        race=1, ranking=list(games), racers=rows, deal=deal, salt=salt, commitment=commitment(deal, salt),
        chosen_deal=False, records={pid: GameRecord(deal=deal, moves=list(g.entries)) for pid, g in games.items()},
    )  # fmt: skip


def test_commitment_is_checked_against_the_one_seen_at_the_start(tmp_path: Path) -> None:
    deal, salt = 99, new_salt()
    games = {"p1": play_bot(deal), "p2": Game(deal)}
    model = RaceModel(player_id="p1", commitment=commitment(deal, salt))
    model.apply(_room(1, phase="results"))
    model.apply(_results(deal, salt, games))
    assert model.commitment_verified() is True
    assert final_views(model.results)["p1"] == games["p1"].view()  # type: ignore[arg-type]
    assert all(check.ok for check in check_records(model.results))  # type: ignore[arg-type]
    paths = save_records(model, tmp_path / "race")
    # The record as plot verify reads it, with the name its row showed (a ghost file as it is:
    # docs/ghosts.md); these results carry no move times, so neither does the file.
    assert json.loads(paths["p1"].read_text()) == {"deal": deal, "moves": games["p1"].entries, "name": "p1"}
    assert json.loads((tmp_path / "race" / "reveal.json").read_text())["verified"] is True
    # A server that reveals another deal than it committed to is caught.
    cheated = RaceModel(player_id="p1", commitment=commitment(deal + 1, salt))
    cheated.apply(_results(deal, salt, games))
    assert cheated.commitment_verified() is False


def test_record_checks_catch_a_leaderboard_that_disagrees() -> None:
    deal = 5
    games = {"p1": play_bot(deal)}
    results = _results(deal, new_salt(), games)
    results.racers[0].cards += 1
    assert [check.ok for check in check_records(results)] == [False]


def test_small_formatting_helpers() -> None:
    assert clock(61_500) == "1:01" and clock(3_600_000) == "1:00:00" and clock(None) == "-:--"
    assert progress_bar(0, 10).plain == "·" * 10
    assert progress_bar(104, 10).plain == "█" * 10
    assert progress_bar(52, 10).plain.startswith("█████")
    assert clean("a\x1b[31mb\n") == "a�[31mb�"


def test_model_merges_partial_leaderboards_by_player() -> None:
    """A partial leaderboard holds only the rows whose cards, status, rank or connection changed."""
    model = RaceModel(player_id="p1")
    assert model.apply(Leaderboard(race=1, version=3, racers=[_row("p1", 5, 1), _row("p2", 4, 2), _row("p3", 1, 3)]))
    # p3 overtakes both: its row and the two it passed, in a partial one.
    passed = Leaderboard(race=1, version=7, racers=[_row("p3", 6, 1), _row("p1", 5, 2), _row("p2", 4, 3)], partial=True)
    assert model.apply(passed) == {"leaderboard"}
    assert model.leaderboard is not None and [r.player_id for r in model.leaderboard.racers] == ["p3", "p1", "p2"]
    # p2 gains a card, rank unchanged: only its row comes; the others stay.
    assert model.apply(Leaderboard(race=1, version=8, racers=[_row("p2", 5, 3)], partial=True)) == {"leaderboard"}
    assert [(r.player_id, r.cards) for r in model.leaderboard.racers] == [("p3", 6), ("p1", 5), ("p2", 5)]
    assert model.leaderboard.version == 8 and not model.leaderboard.partial
    # Older, or partial with nothing to merge into (another race): ignored.
    assert model.apply(Leaderboard(race=1, version=6, racers=[_row("p2", 1, 1)], partial=True)) == set()
    assert model.apply(Leaderboard(race=2, version=1, racers=[_row("p2", 1, 1)], partial=True)) == set()
    assert model.leaderboard.race == 1
