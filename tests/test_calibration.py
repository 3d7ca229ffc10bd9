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


def test_the_decile_table_has_its_shape_and_every_value_its_invariants(
    measured: dict[str, Any],
) -> None:
    duels = measured["duels"]
    rows = duels["rows"]
    assert [r["bin"] for r in rows] == [f"{b / 10:.1f}–{(b + 1) / 10:.1f}" for b in range(10)]
    assert sum(r["count"] for r in rows) == duels["points"] > 0
    for b, row in enumerate(rows):
        if row["count"]:
            assert b / 10 <= row["predicted"] <= (b + 1) / 10 + 1e-12
            assert 0 <= row["observed"] <= 1
            assert 1 <= row["games"] <= measured["games"]
    assert duels["out_of_range"] == 0
    assert duels["worst_sum_error"] <= 1e-9  # the seats' values sum to 1 at every version
    assert sum(duels["start"]) == pytest.approx(1, abs=1e-9)
    assert 0 <= duels["brier"] <= 1 and duels["brier_half"] == 0.25
    text = calibration.report(measured)
    assert "| bin | values | games | mean predicted | observed win rate | off by |" in text
    assert "Brier score" in text


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
