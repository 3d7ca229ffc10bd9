"""The analysis gives today's answers: every number of the analyses of a fixed set of games
(two to four players, both solitaires, eight-sided dice, the options, a lobby game with a
resignation, one analysis stopped part way) against a file recorded from the code before the
analysis was made fast (issue #44), to 1e-9 relative. Kept analyses are keyed by
``domain.analysis.KEY``, which did not change: what they hold must not either.

    PYTHONPATH=TREE python tests/test_analysis_golden.py --record   # rewrite the file
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.analysis import KEY, analyse
from tests.support.played import lobby_game, play

GOLDEN = Path(__file__).resolve().parent / "support" / "analysis_golden.json"
RELATIVE = 1e-9
DIGITS = 11  # kept in the file: rounding them moves a figure by 5e-11 of itself at most
ABSOLUTE = 1e-12  # for figures that are zero but for rounding (a luck, a drift)

JUMPING_STEEP = {"jumping": True, "steep_hill": True}
# (name, players, rules, seed, the version analysed up to: None for the whole game)
GAMES: list[tuple[str, list[str], dict[str, Any] | None, int, int | None]] = [
    ("duel", ["rule-of-28", "expert"], None, 11, None),
    ("duel-part-way", ["expert", "rule-of-28"], None, 13, 60),
    ("random-vs-expert", ["random", "expert"], None, 5, None),
    ("three-jumping-steep", ["expert", "rule-of-28", "expert"], JUMPING_STEEP, 3, None),
    ("four", ["rule-of-28", "expert", "expert", "rule-of-28"], None, 4, None),
    ("solitaire-easy", ["expert"], {"solitaire": "easy"}, 6, 120),
    ("solitaire-advanced-steep", ["expert"], {"solitaire": "advanced", "steep_hill": True}, 7, 150),
    ("d8", ["expert", "rule-of-28"], {"dice_faces": 8}, 8, 150),
    ("forced-move", ["rule-of-28", "expert"], {"forced_move": True}, 9, 120),
    ("two-columns", ["expert", "rule-of-28"], {"columns_to_win": 2}, 10, 120),
]
LOBBY = (21, 40, 200)  # seed, the action at which a seat resigns, the version analysed up to


def analyses() -> dict[str, dict[str, Any]]:
    out = {}
    for name, players, rules, seed, upto in GAMES:
        out[name] = analyse(play(players, rules=rules, seed=seed), upto)
    seed, resign_at, upto = LOBBY
    out["lobby-resigned"] = analyse(lobby_game(seed, resign_at), upto)
    return out


def split(analysis: Any, path: str = "") -> tuple[Any, list[tuple[str, float]]]:
    """An analysis as its form (every float replaced by "#") and its floats, in order, each
    with where it stands: the file keeps the form's digest and the floats only (it stays small)."""
    if isinstance(analysis, dict):
        form, numbers = {}, []
        for key, value in analysis.items():
            form[key], found = split(value, f"{path}.{key}")
            numbers += found
        return form, numbers
    if isinstance(analysis, list):
        items, numbers = [], []
        for i, value in enumerate(analysis):
            item, found = split(value, f"{path}[{i}]")
            items.append(item)
            numbers += found
        return items, numbers
    if isinstance(analysis, float):
        return "#", [(path, analysis)]
    return analysis, []


def digest(form: Any) -> str:
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()


def kept(analysis: dict[str, Any]) -> dict[str, Any]:
    form, numbers = split(analysis)
    return {"form": digest(form), "numbers": [float(f"{x:.{DIGITS}g}") for _, x in numbers]}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(GOLDEN.read_text())
    return recorded


def test_the_key_of_kept_analyses_is_the_recorded_one(golden: dict[str, Any]) -> None:
    assert golden["key"] == KEY


@pytest.mark.parametrize("name", [g[0] for g in GAMES] + ["lobby-resigned"])
def test_the_analysis_gives_the_recorded_answers(golden: dict[str, Any], name: str) -> None:
    if name == "lobby-resigned":
        seed, resign_at, last = LOBBY
        found = analyse(lobby_game(seed, resign_at), last)
    else:
        _, players, rules, seed, upto = next(g for g in GAMES if g[0] == name)
        found = analyse(play(players, rules=rules, seed=seed), upto)
    want = golden["games"][name]
    form, numbers = split(found)
    assert digest(form) == want["form"], "the analysis's form (its keys, moves, dice) changed"
    assert len(numbers) == len(want["numbers"])
    differences = [
        f"{where}: {x!r}, recorded {y!r}"
        for (where, x), y in zip(numbers, want["numbers"], strict=True)
        if not math.isclose(x, y, rel_tol=RELATIVE, abs_tol=ABSOLUTE)
    ]
    assert not differences, "\n".join(differences[:20])


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    recorded = {"key": KEY, "games": {k: kept(v) for k, v in analyses().items()}}
    GOLDEN.write_text(json.dumps(recorded, separators=(",", ":"), allow_nan=False) + "\n")
    print(f"{GOLDEN}: {GOLDEN.stat().st_size:,} bytes")
