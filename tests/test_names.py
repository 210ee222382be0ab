"""Display names by terminal cells: shared/textwidth.py, the protocol's name rules
(docs/protocol.md, "Names"), the server's answer to a bad name, and the client's columns."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from support import Client, running_server
from textual.app import App, ComposeResult

from client.widgets.leaderboard import NAME_WIDTH, LeaderboardPanel
from shared import protocol as p
from shared.textwidth import cell_width, cut_cells, fit_cells, pad_cells

# ---------------------------------------------------------------- widths


@pytest.mark.parametrize(
    ("text", "cells"),
    [
        ("", 0),
        ("Ann", 3),
        ("北京", 4),  # wide
        ("ＡＢ", 4),  # full-width Latin
        ("Zoe\u0308", 3),  # a combining diaeresis takes no cell
        ("a\u200bb", 2),  # zero-width space
        ("한국", 4),  # Hangul syllables
        ("\u1100\u1161", 2),  # a conjoining syllable: the vowel joins the wide initial
        ("ｱｲ", 2),  # half-width katakana
    ],
)
def test_cell_width(text: str, cells: int) -> None:
    assert cell_width(text) == cells
    assert cell_width(text) == cell_len(text)  # what Rich (and so Textual) draws


def test_cut_and_pad_by_cells() -> None:
    assert cut_cells("Ann", 5) == "Ann"
    assert cut_cells("Annabelle", 5) == "Anna…"
    assert cut_cells("北京太郎", 5) == "北京…"  # 4 cells + the ellipsis
    assert cut_cells("北京太郎", 4) == "北…"  # a wide character is never split: 3 cells
    assert cut_cells("Zoe\u0308yy", 4) == "Zoe\u0308…"  # the mark stays with its letter
    assert cut_cells("abc", 0) == ""
    assert pad_cells("北京", 6) == "北京  "
    assert pad_cells("toolong", 3) == "toolong"
    for name in ("北京太郎さん", "Annabelle", "Zoe\u0308", "ＡＢＣＤＥＦＧＨ"):
        for width in range(1, 12):
            assert cell_len(fit_cells(name, width)) == width, (name, width)


# ---------------------------------------------------------------- the protocol's rules


@pytest.mark.parametrize(
    "name",
    ["Ann", "北京太郎", "x" * 24, "北" * 12, "Zoe\u0308", "Vie\u0323\u0302t", "한국어", "a\u3164b", "ＡＢ"],
)
def test_names_that_pass(name: str) -> None:
    assert p.check_name(name) is None


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "at least one visible character"),
        ("   ", "at least one visible character"),
        ("\u115f", "at least one visible character"),  # Hangul choseong filler
        ("\u3164\u3164", "at least one visible character"),  # Hangul filler
        ("\u115f\u1160", "at least one visible character"),
        ("\uffa0 \u2800", "at least one visible character"),  # half-width filler, blank Braille
        ("\u200b", "U+200B"),  # zero-width space: an invisible format character
        ("a\u2066b", "U+2066"),  # a direction isolate
        ("evil\x1b[2J", "U+001B"),
        ("tab\there", "U+0009"),
        ("a\u0301\u0302\u0303", "at most 2 combining marks"),
        ("Z" + "\u0336" * 30, "at most 2 combining marks"),
        ("\u0301abc", "may not start with a combining mark"),
        ("x" * 25, "at most 24 cells wide"),
        ("a" + "\u3164" * 80, "at most 72 characters"),  # zero-width fillers padding a name out
        ("北" * 13, "this one takes 26"),
    ],
)
def test_names_refused_with_a_reason_a_player_can_act_on(name: str, says: str) -> None:
    reason = p.check_name(name)
    assert reason is not None and says in reason, reason


async def test_the_server_answers_each_bad_name_with_its_reason() -> None:
    async with running_server() as server:
        client = await Client.open(server, "names")
        for name, says in [
            ("\u3164\u3164", "at least one visible character"),
            ("a\u0301\u0302\u0303", "at most 2 combining marks"),
            ("北" * 13, "at most 24 cells wide"),
            ("\u200b", "U+200B"),
        ]:
            await client.send(p.Hello(v=p.PROTOCOL_VERSION, name=name))
            error = await client.expect(p.Error)
            assert error.code == p.NAME_INVALID and error.ref == "hello" and says in error.message, error
        welcome = await client.hello("北" * 12)  # 24 cells: the widest name there is
        assert welcome.name == "北" * 12
        await client.close()


# ---------------------------------------------------------------- the client's columns


class BoardApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LeaderboardPanel()


def row(pid: str, name: str, cards: int, rank: int) -> p.LeaderboardRow:
    return p.LeaderboardRow(
        player_id=pid, name=name, bot=False, cards=cards, moves=cards, status="playing",
        elapsed_ms=1000 * cards, rank=rank, connected=True,
    )  # fmt: skip


async def test_full_width_names_keep_the_leaderboard_columns_aligned() -> None:
    names = ["Ann", "北京太郎さん", "Zoe\u0308", "ＡＢＣＤＥＦＧＨＩＪ", "한국어"]
    board = p.Leaderboard(race=1, version=1, racers=[row(f"p{i}", n, 10 + i, i + 1) for i, n in enumerate(names)])
    app = BoardApp()
    async with app.run_test(size=(100, 12)) as pilot:
        app.query_one(LeaderboardPanel).show(board, "p0")
        await pilot.pause()
        lines = [strip.text for strip in app.screen._compositor.render_strips()]
        rows = [line for line in lines if "/104" in line]
        assert len(rows) == len(names), lines
        # Every column starts at the same cell on every row, whatever the name's characters.
        columns = {cell_len(line[: line.index("/104")]) for line in rows}
        assert len(columns) == 1, rows
        assert "ＡＢＣＤＥＦ…" in rows[3]  # cut to the name column (NAME_WIDTH cells), ellipsis last
        assert cell_len("ＡＢＣＤＥＦ…") == NAME_WIDTH - 1  # a wide character never split: one cell left
