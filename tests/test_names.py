"""Display names: widths by terminal cells (shared/textwidth.py), the one name rule and the key
two names are compared by (shared/names.py; docs/protocol.md, "Names"), the server's answers to
a bad name and to a name another racer in the room shows already, and the client's columns."""

from __future__ import annotations

from pathlib import Path

import icu
import pytest
from rich.cells import cell_len
from support import SIZE, Client, message, running_server, until, url
from textual.app import App, ComposeResult

from client.commands._race_args import finish
from client.tui.race import JOIN, RaceApp, RaceConfig
from client.widgets.leaderboard import NAME_WIDTH, LeaderboardPanel
from client.words import plot_command
from shared import protocol as p
from shared.names import NameInvalid, check_name, display_name, name_key
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
    ["Ann", "北京太郎", "x" * 24, "北" * 12, "Zoe\u0308", "Vie\u0323\u0302t", "한국어", "ＡＢ", "Mary Ann", "⠁⠇⠊⠉⠑"],
)
def test_names_that_pass(name: str) -> None:
    assert p.check_name(name) is None


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "at least one visible character"),
        ("   ", "at least one visible character"),
        ("\u115f", "U+115F"),  # Hangul choseong filler (default-ignorable)
        ("\u3164\u3164", "U+3164"),  # Hangul filler
        ("\u115f\u1160", "U+115F"),
        ("\uffa0 \u2800", "U+FFA0"),  # half-width filler, blank Braille
        # Invisible characters inside or after a name that would show as "alice":
        ("alice\u034f", "U+034F"),  # combining grapheme joiner
        ("alice\ufe0f", "U+FE0F"),  # variation selector 16
        ("al\u3164ice", "U+3164"),  # Hangul filler inside
        ("alice\u17b4", "U+17B4"),  # Khmer inherent vowel
        ("al\u2800ice", "U+2800"),  # blank Braille inside (a blank letter, not default-ignorable)
        ("alice\u00ad", "U+00AD"),  # soft hyphen
        ("alice\U000e0041", "U+E0041"),  # a tag character
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


def test_every_default_ignorable_code_point_is_refused_wherever_it_stands() -> None:
    # Unicode's own set (as ICU has it), not a list of ours: every one, inside a name and after it.
    ignorable = list(icu.UnicodeSet("[:Default_Ignorable_Code_Point:]"))
    assert len(ignorable) > 4000  # the whole property (4,174 code points in ICU 72), not a handful
    for ch in ignorable:
        for name in (f"al{ch}ice", f"alice{ch}"):
            reason = check_name(name)
            assert reason is not None and f"U+{ord(ch):04X}" in reason, (hex(ord(ch)), reason)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [("alice ", "alice"), ("  alice", "alice"), (" Mary   Ann  ", "Mary Ann"), ("Zoe\u0308", "Zoe\u0308")],
)
def test_display_names_lose_their_outer_spaces_and_runs_of_spaces(raw: str, shown: str) -> None:
    assert display_name(raw) == shown


def test_display_name_raises_the_reason_check_name_gives() -> None:
    with pytest.raises(NameInvalid, match=r"U\+034F"):
        display_name("alice\u034f")
    assert check_name("alice\u034f") == "a name may not contain control or invisible characters (found U+034F)"


LOOK_LIKE_ALICE = [
    "alice",
    "Alice",
    "ALICE",
    "ａｌｉｃｅ",  # full-width
    "\u0430lice",  # Cyrillic а
    "al\u0131ce",  # dotless ı
    "\u0430l\u0131c\u0435",  # Cyrillic а and е, dotless ı
    "a1ice",  # the digit one
]


@pytest.mark.parametrize("name", LOOK_LIKE_ALICE)
def test_names_that_look_the_same_share_one_key(name: str) -> None:
    assert check_name(name) is None  # each passes on its own
    assert name_key(name) == name_key("alice") == "alice"


@pytest.mark.parametrize("name", ["bob", "alicia", "al ice", "Алиса", "alice2"])
def test_names_that_look_different_have_different_keys(name: str) -> None:
    assert name_key(name) != name_key("alice")


async def test_the_server_answers_each_bad_name_with_its_reason() -> None:
    async with running_server() as server:
        client = await Client.open(server, "names")
        for name, says in [
            ("\u3164\u3164", "U+3164"),
            ("   ", "at least one visible character"),
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


# ---------------------------------------------------------------- one name per room


async def test_a_racer_whose_name_looks_like_another_members_is_refused_name_taken() -> None:
    async with running_server() as server:
        host = await Client.open(server, "host")
        await host.hello("alice")
        await host.send(p.CreateRoom())
        code = (await host.expect(p.Room)).code
        # The seven alices: the same name, case, full width, look-alike letters, trailing spaces.
        for name in [*LOOK_LIKE_ALICE[1:], "alice", "alice  "]:
            other = await Client.open(server, name)
            welcome = await other.hello(name)
            await other.send(p.Join(code=code))
            error = await other.expect(p.Error)
            assert error.code == p.NAME_TAKEN and error.ref == "join", (name, error)
            shown = welcome.name
            if shown == "alice":
                assert error.message == f"someone in room {code} is already called 'alice': choose another name"
            else:
                assert error.message == f"someone in room {code} is called 'alice', which looks like {shown!r}: " + (
                    "choose another name"
                )
            await other.close()
        # The invisible ones never get as far as a room.
        for name in ["alice\u034f", "alice\ufe0f", "al\u3164ice", "alice\u17b4", "al\u2800ice"]:
            other = await Client.open(server, name)
            await other.send(p.Hello(v=p.PROTOCOL_VERSION, name=name))
            assert (await other.expect(p.Error)).code == p.NAME_INVALID
            await other.close()
        bob = await Client.open(server, "bob")
        await bob.hello("bob")
        await bob.send(p.Join(code=code))
        room = await bob.expect(p.Room)
        assert sorted(m.name for m in room.members) == ["alice", "bob"]  # one alice in the room
        # A spectator is listed to itself only: its name may repeat, until it would race.
        watcher = await Client.open(server, "watcher")
        await watcher.hello("Bob")
        await watcher.send(p.Join(code=code, role=p.SPECTATOR))
        await watcher.expect(p.Room)
        await watcher.send(p.Join(code=code, role=p.RACER))
        assert (await watcher.expect(p.Error)).code == p.NAME_TAKEN
        # A name is free again once its holder has left the room.
        await bob.send(p.Leave())
        await bob.expect(p.Left)
        await watcher.send(p.Join(code=code, role=p.RACER))
        while [m.name for m in (await watcher.expect(p.Room)).members if m.role == p.RACER] != ["alice", "Bob"]:
            pass  # earlier snapshots (bob leaving) first; expect() fails at its deadline
        for client in (host, bob, watcher):
            await client.close()


async def test_the_client_says_the_name_is_taken_and_how_to_choose_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PLOT_STATE_DIR", str(tmp_path / "state"))
    async with running_server() as server:
        host = await Client.open(server, "host")
        await host.hello("alice")
        await host.send(p.CreateRoom())
        code = (await host.expect(p.Room)).code
        app = RaceApp(RaceConfig(url=url(server), name="\u0430lice", mode=JOIN, code=code))
        async with app.run_test(size=SIZE):
            await until(lambda: "which looks like" in message(app), "the refusal on screen")
            await until(lambda: app.return_code == 1, "the window ends by itself, exit code 1")
        assert finish(app) == 1
        out = capsys.readouterr().out
        assert out.startswith(
            f"cannot join room {code}: someone in room {code} is called 'alice', which looks like '\u0430lice': "
            f"choose another name: {plot_command()} join {code} --name ANOTHER"
        ), out
        await host.close()
