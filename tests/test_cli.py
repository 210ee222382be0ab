"""The ``plot`` command-line contract, run through the real entry point in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.cards import card_name, rank, rank_name
from shared.deal import deal_layout
from shared.engine import Game, replay
from shared.fairplay import commitment

VECTORS = Path(__file__).parent / "vectors"
RECORDS: list[dict[str, Any]] = json.loads((VECTORS / "records.json").read_text())["records"]
PLOT_SCRIPT = Path(sys.executable).parent / "plot"
PLOT = [str(PLOT_SCRIPT)] if PLOT_SCRIPT.exists() else [sys.executable, "-m", "client.cli"]


def plot(*args: str, stdin: str | bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    result = subprocess.run(
        [*PLOT, *args], input=data, capture_output=True, timeout=60, env={**os.environ, **(env or {})}
    )
    completed = subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


def case(family: str | None, status: str | None = None) -> dict[str, Any]:
    for entry in RECORDS:
        if entry.get("family") == family and (status is None or entry["expect"].get("status") == status):
            return entry
    raise LookupError(family)


# ---------------------------------------------------------------- plot deal


def test_deal_json_has_exactly_the_contract_shape() -> None:
    result = plot("deal", "4242", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert list(data) == ["deal", "reserve", "foundation", "tableau", "stock"]
    layout = deal_layout(4242)
    assert data["deal"] == 4242
    assert data["reserve"] == list(layout.reserve)  # bottom..top
    assert data["foundation"] == layout.foundation
    assert data["tableau"] == [[card] for card in layout.tableau]
    assert data["stock"] == list(layout.stock)  # next to turn first
    tableau_cards = [card for pile in data["tableau"] for card in pile]
    assert sorted(data["reserve"] + [data["foundation"], *tableau_cards] + data["stock"]) == list(range(104))


def test_deal_json_takes_the_largest_deal_number() -> None:
    result = plot("deal", str(2**64 - 1), "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["deal"] == 2**64 - 1


def test_deal_board_is_readable() -> None:
    result = plot("deal", "0")
    assert result.returncode == 0
    assert "deal 0" in result.stdout
    foundation = deal_layout(0).foundation
    assert f"base rank: {rank_name(rank(foundation))}" in result.stdout
    assert f"f0: {card_name(foundation)}" in result.stdout
    for pile in ("reserve", "t0", "t11", "stock (78"):
        assert pile in result.stdout


@pytest.mark.parametrize("bad", ["-5", "18446744073709551616", "12x", "", "1.5", "0x10"])
def test_deal_rejects_a_bad_number_with_exit_2_and_one_line(bad: str) -> None:
    result = plot("deal", bad)
    assert result.returncode == 2
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("plot deal:") and "\n" not in message
    assert "0..18446744073709551615" in message


# ---------------------------------------------------------------- plot verify


@pytest.mark.parametrize("status", ["won", "blocked", "playing"])
def test_verify_legal_record_exits_0_with_the_json_shape(tmp_path: Path, status: str) -> None:
    entry = case(None, status)
    result = plot("verify", write(tmp_path, "r.json", json.dumps(entry["record"])), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {
        "ok": True,
        "moves": entry["expect"]["moves"],
        "foundation_cards": entry["expect"]["foundation_cards"],
        "status": status,
        "error": None,
    }
    assert list(data) == ["ok", "moves", "foundation_cards", "status", "error"]


@pytest.mark.parametrize("family", sorted({e["family"] for e in RECORDS if e.get("family")}))
def test_verify_illegal_record_exits_1_at_the_first_illegal_entry(tmp_path: Path, family: str) -> None:
    entry = case(family)
    result = plot("verify", write(tmp_path, "r.json", json.dumps(entry["record"])), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    expected_error = entry["expect"]["error"]
    assert data["ok"] is False
    assert data["moves"] == expected_error["index"]
    assert data["foundation_cards"] == entry["expect"]["foundation_cards"]
    assert set(data["error"]) == {"index", "move", "reason"}
    assert data["error"]["index"] == expected_error["index"]
    assert data["error"]["move"] == expected_error["move"]
    _, direct = replay(entry["record"]["deal"], entry["record"]["moves"])
    assert direct.error is not None and data["error"]["reason"] == direct.error.reason


def test_verify_plain_output_names_the_illegal_entry(tmp_path: Path) -> None:
    record = {"deal": 5, "moves": ["stock>waste", "t0>t1", "undo"]}
    result = plot("verify", write(tmp_path, "r.json", json.dumps(record)))
    assert result.returncode == 1
    assert "illegal entry 1 (t0>t1)" in result.stdout
    assert "t1's top is a 10: it takes only a 9, not an 8" in result.stdout


def test_verify_plain_output_of_a_legal_record(tmp_path: Path) -> None:
    result = plot("verify", write(tmp_path, "r.json", json.dumps(case(None, "won")["record"])))
    assert result.returncode == 0
    assert "104 cards on the foundations" in result.stdout and "won" in result.stdout


def test_verify_reads_standard_input() -> None:
    record = {"deal": 5, "moves": ["t9>f0", "stock>waste"]}
    result = plot("verify", "-", "--json", stdin=json.dumps(record))
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "ok": True,
        "moves": 2,
        "foundation_cards": 2,
        "status": "playing",
        "error": None,
    }


@pytest.mark.parametrize(
    ("entries", "index", "fragment"),
    [
        (["t9>f0", "waste>t3"], 1, "the waste is empty"),
        (["t9>f0", "t12>t0"], 1, "unknown pile 't12'"),
        (["bogus", "t9>f0"], 0, "'bogus' is not a move"),
        (["t9>f0", 7], 1, "is not a move"),
        (["t9>f0", "resign", "undo"], 2, "the game is over (resigned)"),
    ],
)
def test_verify_unparsable_or_illegal_entry_is_exit_1_and_stops_there(
    tmp_path: Path, entries: list[object], index: int, fragment: str
) -> None:
    result = plot("verify", write(tmp_path, "r.json", json.dumps({"deal": 5, "moves": entries})), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["error"]["index"] == index
    assert fragment in data["error"]["reason"]
    assert data["moves"] == index
    # Later entries are not applied: t9>f0 (the Ace onto deal 5's King) is the only foundation move.
    assert data["foundation_cards"] == (2 if index > 0 else 1)


def test_verify_honours_undo_off(tmp_path: Path) -> None:
    record = {"deal": 5, "moves": ["t0>t6", "undo"], "undo": False}
    result = plot("verify", write(tmp_path, "r.json", json.dumps(record)), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["error"] == {"index": 1, "move": "undo", "reason": "undo is off in this game"}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "is not JSON"),
        (b"\xff\xfe\x00garbage", "is not JSON"),
        ("[" * 100_000, "nested too deeply"),
        ("[1, 2]", "is not a game record"),
        ('{"moves": []}', "no 'deal' field"),
        ('{"deal": 5}', "no 'moves' field"),
        ('{"deal": -1, "moves": []}', "out of range"),
        ('{"deal": 18446744073709551616, "moves": []}', "out of range"),
        ('{"deal": "5", "moves": []}', "whole number"),
        ('{"deal": 5, "moves": "stock>waste"}', "'moves' must be a list"),
        ('{"deal": 5, "moves": [], "undo": "no"}', "'undo' must be true or false"),
    ],
)
def test_verify_unreadable_or_not_a_record_is_exit_2_with_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    result = plot("verify", write(tmp_path, "r.json", content), "--json")
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith("plot verify:") and "\n" not in message
    assert fragment in message
    # --json: the JSON error object on stdout, with the same reason.
    out = json.loads(result.stdout)
    assert out["ok"] is False and out["status"] is None and out["moves"] == 0
    assert out["error"] == {"index": None, "move": None, "reason": message.removeprefix("plot verify: ")}
    assert result.stdout.count("\n") == 1


def test_verify_json_errors_are_json_too(tmp_path: Path) -> None:
    result = plot("verify", str(tmp_path / "absent.json"), "--json")
    assert result.returncode == 2 and "cannot read" in json.loads(result.stdout)["error"]["reason"]
    result = plot("verify", str(tmp_path / "absent.json"), "--json", "--salt", "ab")
    assert result.returncode == 2 and "go together" in json.loads(result.stdout)["error"]["reason"]


def test_verify_counts_in_the_right_number(tmp_path: Path) -> None:
    result = plot("verify", write(tmp_path, "r.json", '{"deal": 5, "moves": ["stock>waste"]}'))
    assert result.returncode == 0 and result.stdout.startswith("legal: 1 entry, ")


def test_verify_missing_file_is_exit_2(tmp_path: Path) -> None:
    result = plot("verify", str(tmp_path / "absent.json"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "absent.json" in result.stderr


def test_verify_checks_the_commitment(tmp_path: Path) -> None:
    entry = case(None, "won")
    path = write(tmp_path, "r.json", json.dumps(entry["record"]))
    salt = "ab" * 32
    good = commitment(entry["record"]["deal"], salt)

    result = plot("verify", path, "--json", "--commitment", good, "--salt", salt)
    assert result.returncode == 0
    assert json.loads(result.stdout)["commitment_ok"] is True

    result = plot("verify", path, "--commitment", good.upper(), "--salt", salt)
    assert result.returncode == 0
    assert "commitment matches" in result.stdout

    other = commitment(entry["record"]["deal"] + 1, salt)
    result = plot("verify", path, "--json", "--commitment", other, "--salt", salt)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["commitment_ok"] is False and data["ok"] is True
    assert "commitment mismatch" in result.stderr

    result = plot("verify", path, "--commitment", good, "--salt", "cd" * 32)
    assert result.returncode == 1
    assert "commitment mismatch" in result.stderr


def test_verify_reveal_takes_the_salt_and_commitment_saved_beside_the_record(tmp_path: Path) -> None:
    entry = case(None, "won")
    path = write(tmp_path, "01-ann.json", json.dumps(entry["record"]))
    salt = "cd" * 16
    at_start = commitment(entry["record"]["deal"], salt)
    reveal = {"salt": salt, "commitment_at_start": at_start, "commitment_revealed": "x"}
    write(tmp_path, "reveal.json", json.dumps(reveal))
    result = plot("verify", path, "--reveal")
    assert result.returncode == 0 and "commitment matches deal" in result.stdout
    other = tmp_path / "elsewhere"
    other.mkdir()
    wrong = {"salt": "ee", "commitment_at_start": reveal["commitment_at_start"]}
    result = plot("verify", path, "--reveal", write(other, "reveal.json", json.dumps(wrong)), "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["commitment_ok"] is False
    third = tmp_path / "third"
    third.mkdir()
    write(third, "reveal.json", '{"salt": "ee"}')
    result = plot("verify", write(third, "r.json", json.dumps(entry["record"])), "--reveal", "--json")
    assert result.returncode == 2 and "is not a saved reveal" in json.loads(result.stdout)["error"]["reason"]
    result = plot("verify", path, "--reveal", str(tmp_path / "absent.json"))
    assert result.returncode == 2 and "cannot read the reveal" in result.stderr


def test_verify_commitment_needs_a_salt(tmp_path: Path) -> None:
    path = write(tmp_path, "r.json", json.dumps({"deal": 5, "moves": []}))
    result = plot("verify", path, "--commitment", "00" * 32)
    assert result.returncode == 2
    assert "--salt" in result.stderr


# ---------------------------------------------------------------- plot solo


def solo(tmp_path: Path, lines: list[str], *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    record = tmp_path / "record.json"
    result = plot("solo", *args, "--save", str(record), stdin="".join(line + "\n" for line in lines))
    return result, record


def test_solo_plays_a_game_from_stdin_and_saves_a_verifiable_record(tmp_path: Path) -> None:
    lines = ["help", "moves", "t9>f0", "t0>t6", "undo", "stock>waste", "undo", "waste>t5", "resign"]
    result, record_path = solo(tmp_path, lines, "5")
    assert result.returncode == 0
    out = result.stdout
    assert "deal 5" in out and "base rank King" in out
    assert "stock>waste" in out and "t9>f0" in out  # help, and the 'moves' list
    assert "stock>waste turned a card: it cannot be undone" in out
    assert "game over: resigned, 2 cards on the foundations" in out
    assert str(record_path) in out
    record = json.loads(record_path.read_text())
    # Only accepted entries are recorded: the undo after stock>waste and waste>t5 were refused.
    assert record == {"deal": 5, "moves": ["t9>f0", "t0>t6", "undo", "stock>waste", "resign"]}
    game, result_replayed = replay(record["deal"], record["moves"])
    assert result_replayed.ok and game.status == "resigned"


def test_solo_bad_input_gets_one_line_errors_and_play_goes_on(tmp_path: Path) -> None:
    lines = ["t12>t0", "foo", "waste>x", "reserve>t1", "t9 > F0", "quit"]
    result, record_path = solo(tmp_path, lines, "5")
    assert result.returncode == 0
    errors = [line for line in result.stdout.splitlines() if "not allowed:" in line]
    assert len(errors) == 4
    assert "unknown pile 't12'" in errors[0]
    assert "'foo' is not a move" in errors[1]
    assert "unknown pile 'x'" in errors[2]
    assert "the reserve plays only to a foundation" in errors[3]
    assert "game left unfinished with 2 cards on the foundations" in result.stdout
    assert json.loads(record_path.read_text())["moves"] == ["t9>f0"]  # spaces and case forgiven


def test_solo_ends_on_end_of_input_and_without_moves_saves_nothing(tmp_path: Path) -> None:
    result, record_path = solo(tmp_path, [], "5")
    assert result.returncode == 0
    assert "game left unfinished" in result.stdout
    assert not record_path.exists()


def test_solo_with_undo_off(tmp_path: Path) -> None:
    result, record_path = solo(tmp_path, ["t0>t6", "undo", "quit"], "5", "--no-undo")
    assert "undo is off in this game" in result.stdout
    assert json.loads(record_path.read_text()) == {"deal": 5, "moves": ["t0>t6"], "undo": False}


def test_solo_random_deal_default_save_location(tmp_path: Path) -> None:
    result = plot("solo", stdin="stock>waste\nquit\n", env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 0
    saved = list((tmp_path / "plot").glob("solo-*.json"))
    assert len(saved) == 1 and str(saved[0]) in result.stdout
    record = json.loads(saved[0].read_text())
    assert record["moves"] == ["stock>waste"]
    assert f"deal {record['deal']}" in result.stdout
    turned = Game(record["deal"]).stock[-1]  # the first stock card, now the waste's only card
    assert f"waste (1, top last): {card_name(turned)}" in result.stdout


def test_solo_plays_to_a_won_game(tmp_path: Path) -> None:
    moves = list(case(None, "won")["record"]["moves"])
    deal = str(case(None, "won")["record"]["deal"])
    result, record_path = solo(tmp_path, moves, deal)
    assert result.returncode == 0
    assert "game over: won, 104 cards on the foundations" in result.stdout
    assert json.loads(record_path.read_text())["moves"] == moves


def test_solo_rejects_a_bad_deal_number() -> None:
    result = plot("solo", "-3")
    assert result.returncode == 2
    assert result.stderr.startswith("plot solo: not a deal number")
