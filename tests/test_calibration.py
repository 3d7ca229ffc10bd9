"""bench/calibration.py, the command that measures the analysis's values against the expert's
own games (docs/analysis.md, "Calibration"), run on a handful of games: its tables have their
shape and the values their invariants. The 5% and 0.05 bounds need the full run's hundreds of
games (the figures in docs/analysis.md); a tiny sample cannot show them."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from bench import calibration
from domain.analysis import scale_for, table_key
from domain.rules import normalize_rules
from domain.value_tables import TABLES


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    return calibration.measure(games=3, processes=1)


def test_the_measurement_gives_the_solitaire_means_beside_the_served_values(
    measured: dict[str, Any],
) -> None:
    solo = measured["solitaire"]
    assert solo["model"] == "1p-d6-easy"  # a table learned from self-play, not the old figures
    for part in ("start", "mid_kind", "mid_point"):
        served, (taken, ci) = solo[part]["served"], solo[part]["taken"]
        assert served > 1 and taken >= 1 and ci >= 0, part
    assert solo["mid_kind"]["turn"] == solo["mid_point"]["turn"] == calibration.MID
    # the mid-game point is later than the start: fewer turns are expected from it
    assert solo["mid_point"]["served"] < solo["start"]["served"]


def assert_deciles(duels: dict[str, Any], players: int, games: int) -> None:
    """A decile table's shape, and every value's invariants."""
    assert duels["players"] == players and duels["model"] == f"{players}p-d6-c3"
    rows = duels["rows"]
    assert [r["bin"] for r in rows] == [f"{b / 10:.1f}–{(b + 1) / 10:.1f}" for b in range(10)]
    assert sum(r["count"] for r in rows) == duels["points"] > 0
    assert duels["points"] % players == 0  # every seat's value at every version
    for b, row in enumerate(rows):
        if row["count"]:
            assert b / 10 <= row["predicted"] <= (b + 1) / 10 + 1e-12
            assert 0 <= row["observed"] <= 1
            assert 1 <= row["games"] <= games
    assert duels["out_of_range"] == 0
    assert duels["worst_sum_error"] <= 1e-9  # the seats' values sum to 1 at every version
    assert len(duels["start"]) == players
    assert sum(duels["start"]) == pytest.approx(1, abs=1e-9)
    # the baseline is a constant 1/N: one winner among N seats scores (N - 1) / N² a value
    assert duels["constant"] == pytest.approx(1 / players)
    assert duels["brier_constant"] == pytest.approx((players - 1) / players**2)
    assert 0 <= duels["brier"] <= 1


def test_the_decile_table_has_its_shape_and_every_value_its_invariants(
    measured: dict[str, Any],
) -> None:
    assert list(measured["duels"]) == [2]  # by default, games of two only
    assert_deciles(measured["duels"][2], 2, measured["games"])
    assert measured["duels"][2]["brier_constant"] == 0.25
    text = calibration.report(measured)
    assert text.startswith("Solitaire")
    assert "| bin | values | games | mean predicted | observed win rate | off by |" in text
    assert "Games of two" in text and "Brier score" in text


def test_games_of_three_are_measured_alone_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results: list[dict[str, Any]] = []
    real = calibration.measure

    def kept(*args: Any, **kwargs: Any) -> dict[str, Any]:  # the real run, its result kept
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(calibration, "measure", kept)
    argv = ["--only", "duels", "--duels", "2", "--players", "3", "--processes", "1"]
    assert calibration.main(argv) == 0
    [measured] = results
    assert "solitaire" not in measured and list(measured["duels"]) == [3]
    assert_deciles(measured["duels"][3], 3, 2)
    text = capsys.readouterr().out
    assert text.startswith("Games of three") and "(a constant 0.333: 0.2222)" in text
    assert "Solitaire" not in text


def test_the_fit_is_monotone_and_pools_violators() -> None:
    assert calibration.pool_adjacent([1.0, 3.0, 2.0, 4.0], [1.0, 1.0, 1.0, 1.0]) == [
        1.0,
        2.5,
        2.5,
        4.0,
    ]
    pairs = [(x / 100, float(x % 3 == 0)) for x in range(-50, 99)]  # noisy, rising on average
    knots = calibration.knots("chance", pairs, bins=10)
    xs, ys = zip(*knots, strict=True)
    assert list(xs) == sorted(set(xs)) and all(a < b for a, b in itertools.pairwise(ys))
    assert all(0 < y < 1 for y in ys)


def test_the_shipped_tables_cover_the_fitted_kinds_and_are_strictly_increasing() -> None:
    for players, rules, _ in calibration.FIT:
        key = table_key(normalize_rules(rules, players), players)
        assert key in TABLES, key
        assert scale_for(normalize_rules(rules, players), players).calibrated
    for key, table in TABLES.items():
        xs = [x for x, _ in table["knots"]]
        ys = [y for _, y in table["knots"]]
        assert all(a < b for a, b in itertools.pairwise(xs)), key
        assert all(a < b for a, b in itertools.pairwise(ys)), key
        assert table["games"] >= 500 and not any(math.isnan(y) for y in ys), key


def test_games_of_three_and_four_map_the_seats_not_to_act_and_the_rest_borrow_nearest() -> None:
    """The race model's shares of the seats not to act are too confident with three or four
    players: each count has its own learned map (strictly increasing, inside (0, 1)); five and
    more borrow four's, two players and solitaire have none."""
    for key in ("3p-d6-c3", "4p-d6-c3"):
        others = TABLES[key]["others"]
        xs, ys = zip(*others, strict=True)
        assert all(a < b for a, b in itertools.pairwise(xs)), key
        assert all(a < b for a, b in itertools.pairwise(ys)) and ys[0] > 0 and ys[-1] < 1, key
        assert TABLES[key]["others_games"] >= 200, key
    for players, fitted in ((3, "3p-d6-c3"), (4, "4p-d6-c3"), (6, "4p-d6-c3")):
        scale = scale_for(normalize_rules({"dice_faces": 8}, players), players)
        assert scale.others is not None and scale.others.fitted == fitted
    for players in (1, 2):
        assert scale_for(normalize_rules(None, players), players).others is None
