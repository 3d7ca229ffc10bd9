"""`cantstop verify` per the contract: verdict JSON, JSON Lines for several files, exit 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

VALID = {
    "players": ["Ann", "Bob"],
    "rules": {"columns_to_win": 3},
    "first_player": 1,
    "actions": [
        {"type": "roll", "dice": [3, 4, 2, 6]},
        {"type": "move", "sums": [7, 8]},
        {"type": "stop"},
        {"type": "resign", "seat": 1},
    ],
}
ILLEGAL = {
    "players": ["Ann", "Bob"],
    "actions": [{"type": "roll", "dice": [1, 5, 4, 6]}, {"type": "move", "sums": [5]}],
}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return str(path)


def test_a_valid_transcript_exits_0_with_its_verdict(tmp_path: Path) -> None:
    result = run("verify", write(tmp_path, "ok.json", VALID))
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["valid"] is True
    assert verdict["applied"] == 4
    assert verdict["error"] is None
    assert verdict["game"]["status"] == "finished"
    assert verdict["game"]["winner"] == 0
    # Bob climbed 7 and 8, stopped, then resigned: his markers came off the board.
    assert verdict["game"]["players"][1]["markers"] == {}
    assert verdict["game"]["players"][1]["resigned"] is True
    assert verdict["game"]["id"] is None
    assert "trace" not in verdict


def test_an_illegal_move_exits_1_naming_the_action(tmp_path: Path) -> None:
    result = run("verify", "--trace", write(tmp_path, "bad.json", ILLEGAL))
    assert result.returncode == 1
    verdict = json.loads(result.stdout)
    assert verdict["valid"] is False
    assert verdict["applied"] == 1
    assert verdict["error"]["index"] == 1
    assert verdict["error"]["code"] == "illegal_action"
    assert [s["turn"]["phase"] for s in verdict["trace"]] == ["move"]


def test_several_files_give_json_lines_in_order(tmp_path: Path) -> None:
    files = [write(tmp_path, "a.json", VALID), write(tmp_path, "b.json", ILLEGAL)]
    result = run("verify", *files)
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["valid"] for v in lines] == [True, False]
    assert [v["file"] for v in lines] == files


def test_several_files_give_one_line_each_even_one_that_cannot_be_judged(
    tmp_path: Path,
) -> None:
    """A file that is not a transcript (or cannot be read) still has its line, in its place, so
    the lines match the files one to one; the run exits 2, its reason also on standard error."""
    files = [
        write(tmp_path, "a.json", VALID),
        write(tmp_path, "b.json", "{not json"),
        str(tmp_path / "absent.json"),
        write(tmp_path, "c.json", {"actions": []}),
        write(tmp_path, "d.json", ILLEGAL),
    ]
    result = run("verify", *files)
    assert result.returncode == 2
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["file"] for v in lines] == files
    assert [v["valid"] for v in lines] == [True, False, False, False, False]
    assert ["malformed" in v for v in lines] == [False, True, True, True, False]
    assert "absent.json" in lines[2]["malformed"]
    assert result.stderr.strip().splitlines() == [v["malformed"] for v in lines[1:4]]


def test_standard_input_is_read_with_a_dash() -> None:
    result = run("verify", "-", stdin=json.dumps(VALID))
    assert result.returncode == 0
    assert json.loads(result.stdout)["valid"] is True


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        json.dumps({"actions": []}),
        json.dumps({"players": ["A", "B"], "rules": {"gravity": True}}),
        json.dumps({"players": ["A", "B"], "rules": {"jumping": True, "forced_move": True}}),
        json.dumps({"players": ["A", "B"], "actions": [{"type": "dance"}]}),
        json.dumps({"players": ["A", "B"], "actions": [{"type": {}}]}),
        json.dumps({"players": ["A", "B"], "actions": [{"type": "resign"}]}),
        json.dumps({"players": ["A", "B"], "actions": [{"type": "move", "sums": "7"}]}),
    ],
    ids=[
        "not-json",
        "array",
        "no-players",
        "unknown-rule",
        "bad-combo",
        "bad-type",
        "object-type",
        "resign-no-seat",
        "bad-sums",
    ],
)
def test_malformed_input_exits_2_with_one_line(tmp_path: Path, content: str) -> None:
    result = run("verify", write(tmp_path, "x.json", content))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = run("verify", str(tmp_path / "absent.json"))
    assert result.returncode == 2
    assert "absent.json" in result.stderr


@pytest.mark.parametrize(
    ("actions", "code", "index"),
    [
        ([{"type": "roll", "dice": [1, 2, 3]}], "invalid_dice", 0),
        ([{"type": "roll", "dice": [1, 2, 3, 4], "seat": 1}], "not_your_turn", 0),
        ([{"type": "stop"}], "illegal_action", 0),
        ([{"type": "resign", "seat": 1}, {"type": "roll", "dice": [1, 2, 3, 4]}], "game_over", 1),
    ],
)
def test_every_refusal_code_is_reported(
    tmp_path: Path, actions: list[dict[str, Any]], code: str, index: int
) -> None:
    result = run("verify", write(tmp_path, "t.json", {"players": ["A", "B"], "actions": actions}))
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["index"]) == (code, index)
