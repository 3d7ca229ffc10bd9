"""`cantstop audit FILE [--games FILE]` on a tournament's export (issue #45): told from a game's
export by its header; the verdict as JSON; exit 0 valid, 1 invalid, 2 unreadable.

docs/tournaments.md names these tests beside the promises they hold."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from domain.tournament import export_lines
from tests.support.tournaments import finished_arena, finished_swiss


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "audit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ndjson(lines: list[Any]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


@functools.cache
def swiss() -> tuple[list[dict[str, Any]], str]:
    """A finished Swiss of nine bots: its export's lines and its games' exports, one after
    another (as an account's bulk export holds them)."""
    tournament, games = finished_swiss()
    lines = export_lines(tournament.id, tournament.collect_events())
    bulk = "".join(ndjson([header, *records]) for header, records in games.values())
    return lines, bulk


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_tournament_export_with_its_games_is_valid(tmp_path: Path) -> None:
    lines, bulk = swiss()
    result = run(write(tmp_path, "t.ndjson", ndjson(lines)), "--games", write(tmp_path, "g", bulk))
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["valid"] and [c["name"] for c in verdict["checks"]][-1] == "games"
    assert verdict["standings"] == lines[0]["standings"]


def test_an_arena_export_without_games_is_valid(tmp_path: Path) -> None:
    tournament, _ = finished_arena()
    lines = export_lines(tournament.id, tournament.collect_events())
    result = run(write(tmp_path, "a.ndjson", ndjson(lines)))
    assert result.returncode == 0, result.stderr
    assert "games" not in [c["name"] for c in json.loads(result.stdout)["checks"]]


def test_a_forged_pairing_exits_1_with_its_version(tmp_path: Path) -> None:
    lines, _ = swiss()
    lines = copy.deepcopy(lines)
    paired = next(line for line in lines[1:] if line["type"] == "RoundPaired")
    tables = paired["data"]["tables"]
    tables[0]["players"][0], tables[1]["players"][0] = (
        tables[1]["players"][0],
        tables[0]["players"][0],
    )
    result = run(write(tmp_path, "forged.ndjson", ndjson(lines)))
    assert result.returncode == 1
    verdict = json.loads(result.stdout)
    assert verdict["first_bad_version"] == paired["version"]


def test_a_game_missing_from_games_exits_1(tmp_path: Path) -> None:
    lines, bulk = swiss()
    first_game = bulk.split("\n", 1)[0]
    kept = bulk[bulk.index("\n" + '{"format"', len(first_game)) + 1 :]
    result = run(write(tmp_path, "t.ndjson", ndjson(lines)), "--games", write(tmp_path, "g", kept))
    assert result.returncode == 1
    games = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "games")
    assert "no game export" in games["detail"]


def test_unreadable_input_exits_2_with_one_line(tmp_path: Path) -> None:
    lines, bulk = swiss()
    bad_header = {**lines[0], "tournament_id": "not-a-uuid"}
    result = run(write(tmp_path, "bad.ndjson", ndjson([bad_header, *lines[1:]])))
    assert result.returncode == 2 and "not a tournament export" in result.stderr
    tournament = write(tmp_path, "t.ndjson", ndjson(lines))
    assert run(tournament, "--receipt", "r.json", "--keys", "k.json").returncode == 2
    game = write(tmp_path, "game.ndjson", bulk.split('\n{"format"', 1)[0] + "\n")
    result = run(game, "--games", write(tmp_path, "g", bulk))
    assert result.returncode == 2 and "--games goes with a tournament" in result.stderr
    assert run(game).returncode == 0  # a game's export is audited as before
    result = run(tournament, "--games", str(tmp_path / "missing"))
    assert result.returncode == 2 and "cannot read" in result.stderr
