"""The board on the local engine (``plot play``): keys and clicks in, rendered screen text out."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding

from client.tui.game import KEY_LABELS, GameScreen, expand_move, help_rows
from client.tui.play import PlayApp
from client.viewmodel import HIDDEN, game_from_view, legal_moves
from client.widgets.board import PILE_KEYS, Board
from client.widgets.cards import card_plain, fit_run
from shared.cards import parse_card
from shared.engine import Game, View

DEAL = 4242
PILE_LABELS = {key: label for key, label in PILE_KEYS.values()}


def screen_text(app: App[Any]) -> str:
    """What the terminal shows, as plain text (one line per row)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def pile_text(app: App[Any], pile: str) -> str:
    """The rendered text of one pile box (label line and cards line)."""
    box = app.screen.query_one(f"#pile-{pile}")
    return "\n".join(strip.text for strip in box.render_lines(box.region.reset_offset)).rstrip()


def message(app: App[Any]) -> str:
    widget = app.screen.query_one("#message")
    return str(widget.render())


def key_of(pile: str) -> str:
    return PILE_KEYS[pile][0]


def first_move(game: Game, predicate: object) -> str:
    for move in game.legal_moves():
        if predicate(move):  # type: ignore[operator]
            return move
    raise AssertionError("the deal has no such move; pick another deal for this test")


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path))
    return tmp_path


async def test_board_shows_every_pile_at_80x24(records: Path) -> None:
    app = PlayApp(DEAL)
    game = Game(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "78 cards" in text
        assert "(13)" in pile_text(app, "reserve")
        assert "RESTRICTED" in text
        for name in ("stock", "waste", "reserve", *(f"f{i}" for i in range(8)), *(f"t{i}" for i in range(12))):
            assert name in text, name
        view = game.view()
        assert card_plain(view.reserve_top or 0) in pile_text(app, "reserve")
        for i, pile in enumerate(view.tableau):
            assert card_plain(pile[0]) in pile_text(app, f"t{i}")
        assert card_plain(view.foundations[0][0]) in pile_text(app, "f0")
        assert "locked" in pile_text(app, "f3")


async def test_legal_move_by_keys_moves_the_card_on_screen(records: Path) -> None:
    game = Game(DEAL)
    move = first_move(game, lambda m: m.startswith("t") and ">f" in m)
    src, dst = move.split(">")
    card = game.view().tableau[int(src[1:])][-1]
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert card_plain(card) in pile_text(app, src)
        await pilot.press(key_of(src), key_of(dst))
        await pilot.pause()
        assert app.game.entries == [move]
        assert card_plain(card) in pile_text(app, dst)
        assert card_plain(card) not in pile_text(app, src)
        assert "space" in pile_text(app, src)
        assert "★ 2" in pile_text(app, dst)
        assert f"✓ {move}" in message(app)


async def test_illegal_move_shows_the_reason_and_changes_nothing(records: Path) -> None:
    game = Game(DEAL)
    legal = set(game.legal_moves())
    illegal = next(f"t{a}>t{b}" for a in range(12) for b in range(12) if a != b and f"t{a}>t{b}" not in legal)
    reason = game.reason_illegal(illegal)
    assert reason
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        before = {pile: pile_text(app, pile) for pile in PILE_KEYS}
        src, dst = illegal.split(">")
        await pilot.press(key_of(src), key_of(dst))
        await pilot.pause()
        assert reason in screen_text(app).replace("\n", "") or reason[:40] in message(app)
        assert message(app).startswith(f"✗ {illegal}: ")
        assert app.game.entries == []
        assert {pile: pile_text(app, pile) for pile in PILE_KEYS} == before


async def test_stock_turn_undo_barrier_and_typed_move(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("space")
        await pilot.pause()
        turned = app.game.waste[-1]
        assert "77 cards" in pile_text(app, "stock")
        assert card_plain(turned) in pile_text(app, "waste")
        # A stock turn uncovered a card: undo refuses, and says why.
        await pilot.press("z")
        await pilot.pause()
        assert "cannot be undone" in message(app)
        assert app.game.entries == ["stock>waste"]
        # The typed line: short pile names are accepted, and the engine's text comes back.
        await pilot.press("t", *"s>w", "enter")
        await pilot.pause()
        assert app.game.entries == ["stock>waste", "stock>waste"]
        assert "76 cards" in pile_text(app, "stock")
        await pilot.press("colon", *"bogus", "enter")
        await pilot.pause()
        assert "is not a move" in message(app)
        assert len(app.game.entries) == 2


async def test_undo_takes_a_tableau_move_back_on_screen(records: Path) -> None:
    game = Game(DEAL)
    move = first_move(game, lambda m: m.startswith("t") and ">t" in m)
    src, dst = move.split(">")
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        before_src, before_dst = pile_text(app, src), pile_text(app, dst)
        await pilot.press(key_of(src), key_of(dst))
        await pilot.pause()
        assert pile_text(app, src) != before_src
        await pilot.press("z")
        await pilot.pause()
        assert app.game.entries == [move, "undo"]
        assert (pile_text(app, src), pile_text(app, dst)) == (before_src, before_dst)


async def test_mouse_clicks_pick_source_and_destination(records: Path) -> None:
    game = Game(DEAL)
    move = first_move(game, lambda m: m.startswith("t") and ">f" in m)
    src, dst = move.split(">")
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.click(f"#pile-{src}")
        await pilot.pause()
        assert app.screen.query_one(f"#pile-{src}").has_class("-selected")
        assert app.screen.query_one(f"#pile-{dst}").has_class("-target")
        await pilot.click(f"#pile-{dst}")
        await pilot.pause()
        assert app.game.entries == [move]


async def test_home_key_and_double_pick_send_a_card_to_its_foundation(records: Path) -> None:
    game = Game(DEAL)
    move = first_move(game, lambda m: m.startswith("t") and ">f" in m)
    src = move.split(">")[0]
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press(key_of(src), "f")
        await pilot.pause()
        assert app.game.entries == [move]
        await pilot.press("f")
        await pilot.pause()
        assert "pick a card first" in message(app)


async def test_resign_asks_then_saves_the_record(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("space", "R")
        await pilot.pause()
        assert "Resign this game?" in screen_text(app)
        await pilot.press("n")
        await pilot.pause()
        assert app.game.status == "playing"
        await pilot.press("R", "y")
        await pilot.pause()
        assert app.game.status == "resigned"
        assert app.record_path is not None and app.record_path.parent == records / "records"
        assert json.loads(app.record_path.read_text()) == {"deal": DEAL, "moves": ["stock>waste", "resign"]}
        assert "RESIGNED" in screen_text(app)
        assert str(app.record_path) in message(app)
        await pilot.press("space")
        await pilot.pause()
        assert "over" in message(app)


async def test_help_lists_every_key_and_waste_viewer_shows_all(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        text = screen_text(app)
        for label in ("u i o p", "j k l ;", "m , . /", "Space", "Shift+R", "Ctrl+Q", "Esc", "Backspace"):
            assert label in text, label
        key_column = " ".join(keys for keys, _what in help_rows()).split()
        for binding in GameScreen.BINDINGS:
            assert isinstance(binding, Binding)
            for key in binding.key.split(","):
                assert KEY_LABELS.get(key, PILE_LABELS.get(key, key)) in key_column, key
        await pilot.press("escape")
        await pilot.pause()
        assert "Keys" not in screen_text(app)
        await pilot.press("space", "space", "space", "v")
        await pilot.pause()
        text = screen_text(app)
        assert "The waste: 3 cards" in text
        assert all(card_plain(c) in text for c in app.game.waste)


async def test_board_adapts_to_a_larger_terminal(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        box = app.screen.query_one("#pile-t0")
        assert box.region.width >= 35
        assert "78 cards" in screen_text(app)


# ---------------------------------------------------------------- rendering from a bare View


class BoardOnly(App[None]):
    def __init__(self, view: View) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield Board()

    def on_mount(self) -> None:
        self.query_one(Board).show(self.view)


def long_run_view() -> View:
    run = [parse_card(name) for name in ("Kh0", "Qs0", "Jd1", "Tc0", "9h1", "8s1", "7c0", "6d0")]
    tableau: list[list[int]] = [[] for _ in range(12)]
    tableau[5] = run
    return View(
        stock=0,
        waste=[parse_card("2c0"), parse_card("5h1")],
        reserve_top=None,
        reserve_count=0,
        foundations=[[parse_card("As0")], *([] for _ in range(7))],
        tableau=tableau,
        status="playing",
    )


async def test_long_pile_is_compact_at_80_columns_and_whole_when_wide() -> None:
    view = long_run_view()
    app = BoardOnly(view)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = pile_text(app, "t5")
        assert "(8)" in text
        assert "K♥ …" in text and "6♦" in text
        assert "10♣" not in text
        assert "empty" in pile_text(app, "stock")
        assert "space" in pile_text(app, "t0")
    app = BoardOnly(view)
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        assert "K♥ Q♠ J♦ 10♣ 9♥ 8♠ 7♣ 6♦" in pile_text(app, "t5")


def test_fit_run_keeps_the_top_cards_that_fit() -> None:
    cards = [parse_card(n) for n in ("Kh0", "Qs0", "Jd1", "Tc0", "9h1")]
    assert fit_run(cards, 40).plain == "K♥ Q♠ J♦ 10♣ 9♥"
    assert fit_run(cards, 12).plain == "K♥ … 10♣ 9♥"
    assert fit_run([], 12).plain == "·"


def test_legal_moves_from_a_view_match_the_engine_without_hidden_cards() -> None:
    for deal in range(12):
        game = Game(deal)
        rng = random.Random(deal)
        while game.status == "playing":
            view = game.view()
            rebuilt = game_from_view(view)
            assert set(rebuilt.stock) <= {HIDDEN} and set(rebuilt.reserve[:-1]) <= {HIDDEN}
            assert sorted(legal_moves(view)) == sorted(game.legal_moves())
            moves = game.legal_moves()
            if not moves:
                break
            game.play(rng.choice(moves))


def test_typed_short_names_expand() -> None:
    assert expand_move("w>t3") == "waste>t3"
    assert expand_move("r>f0") == "reserve>f0"
    assert expand_move("s>w") == "stock>waste"
    assert expand_move("undo") == "undo"


async def test_messages_are_plain_text_never_markup(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GameScreen)
        screen.say("[bold red]pwned[/] \x1b[2J")
        await pilot.pause()
        assert "[bold red]pwned[/] �[2J" in message(app)
        assert "\x1b" not in screen_text(app)


async def test_hint_key_suggests_a_legal_move_from_the_solver(records: Path) -> None:
    app = PlayApp(DEAL)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("h")
        for _ in range(200):
            await pilot.pause(0.02)
            if message(app).startswith(("hint", "no hint")):
                break
        text = message(app)
        if text.startswith("hint: "):
            assert text.removeprefix("hint: ") in app.game.legal_moves()
        else:
            assert "no win" in text
        assert app.game.entries == []  # a hint plays nothing


def test_docs_list_every_key_of_the_board_and_the_race() -> None:
    import re

    from client.tui.race import RaceScreen

    doc = (Path(__file__).resolve().parent.parent / "docs" / "client.md").read_text(encoding="utf-8")
    doc = re.sub(r"```.*?```", "", doc, flags=re.DOTALL)  # inline code spans only
    tokens = {token for span in re.findall(r"`([^`]+)`", doc) for token in span.split()}
    for binding in RaceScreen.BINDINGS:
        assert isinstance(binding, Binding)
        for key in binding.key.split(","):
            label = KEY_LABELS.get(key, PILE_LABELS.get(key, key))
            assert label in tokens, f"docs/client.md does not name the key {label!r} ({binding.action})"
