"""The analysis of played games (domain/analysis.py): the expert's own play loses nothing, a
stop that would have won is a loss when the player rolled, every roll's ``value_before`` is the
exact expectation of its ``value_after``, luck is centred on zero over many games, every
seat's figures add up, and the values are what they say: chances in [0, 1] that sum to 1
over the seats, or turns. Games are played in memory through the ``Game`` aggregate
(tests/support/played.py); nothing is mocked. (How close the values come to what the
expert's games do is measured by bench/calibration.py: tests/test_calibration.py.)"""

from __future__ import annotations

import gc
import json
import math
import random
import statistics
from collections.abc import Callable
from functools import cache
from itertools import pairwise, product
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import strategies
from domain.analysis import BLUNDERS, Analysis, AnalysisRefused, Point, analyse, scale_for
from domain.audit import DERIVED
from domain.commands import Roll
from domain.errors import InvalidRequest
from domain.game import Game
from domain.position import Position
from domain.rules import normalize_rules
from domain.strategies import turn
from domain.strategies.expert import ExpertStrategy
from domain.strategies.turn import SHARED_POINTS, Shared
from domain.value_tables import TABLES
from tests.support.played import lobby_game, play
from tests.support.positions import positions

TOLERANCE = 1e-9

KINDS: list[tuple[list[str], dict[str, Any] | None]] = [
    (["expert", "expert"], None),
    (["expert"], {"solitaire": "easy"}),
    (["expert"], {"solitaire": "advanced"}),
    (["expert", "expert"], {"dice_faces": 8}),
    (["expert", "expert", "expert"], {"jumping": True, "steep_hill": True}),
    (["expert", "expert"], {"forced_move": True}),
    (["expert"], {"solitaire": "advanced", "steep_hill": True}),
]


@cache
def expert_game(index: int, seed: int = 3) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    players, rules = KINDS[index]
    records = play(players, rules=rules, seed=seed)
    return records, analyse(records)


def add_up(seat: dict[str, Any]) -> float:
    """How far the seat's figures are from value_end − value_start = luck − skill_loss + drift."""
    change = float(seat["value_end"]) - float(seat["value_start"])
    return abs(change - (float(seat["luck"]) - float(seat["skill_loss"]) + float(seat["drift"])))


@pytest.mark.parametrize("index", range(len(KINDS)), ids=[str(k) for k in KINDS])
def test_the_experts_own_decisions_lose_nothing(index: int) -> None:
    records, analysis = expert_game(index)
    assert records[-1]["type"] in ("GameFinished", "SeedRevealed")
    assert analysis["finished"] and analysis["decisions"]
    for decision in analysis["decisions"]:
        assert decision["loss"] == pytest.approx(0, abs=1e-12), decision
        assert decision["value_chosen"] == pytest.approx(decision["value_best"], abs=1e-12)
    for seat in analysis["seats"]:
        assert seat["skill_loss"] == pytest.approx(0, abs=1e-12)
        assert seat["blunders"] == 0
        assert add_up(seat) <= TOLERANCE


@pytest.mark.parametrize("index", range(len(KINDS)), ids=[str(k) for k in KINDS])
def test_every_kind_of_game_is_analysed_in_its_own_terms(index: int) -> None:
    records, analysis = expert_game(index)
    players, rules = KINDS[index]
    solo = len(players) == 1
    assert analysis["strategy"] == "expert"
    assert analysis["strategy_version"] == ExpertStrategy.version
    assert analysis["kind"] == ("turns" if solo else "chance")
    assert analysis["blunder_threshold"] == BLUNDERS[analysis["kind"]]
    assert analysis["version"] == len(records)
    faces = (rules or {}).get("dice_faces", 6)
    assert [s["seat"] for s in analysis["seats"]] == list(range(len(players)))
    winner = next(r for r in records if r["type"] == "GameFinished")["data"]["winner"]
    for seat in analysis["seats"]:
        if solo:
            # minus the turns still to take: the whole game's worth at the start, 0 once won
            assert seat["value_start"] < -1
            assert seat["value_end"] == 0
        else:
            assert 0 < seat["value_start"] < 1
            assert seat["value_end"] == (1.0 if seat["seat"] == winner else 0.0)
    if not solo:  # every seat's chance at the start, which sum to 1
        assert math.fsum(s["value_start"] for s in analysis["seats"]) == pytest.approx(1)
    rolled = [r for r in records if r["type"] == "DiceRolled"]
    assert [r["version"] for r in analysis["rolls"]] == [r["version"] for r in rolled]
    for roll, record in zip(analysis["rolls"], rolled, strict=True):
        assert roll["dice"] == record["data"]["dice"]
        assert all(1 <= d <= faces for d in roll["dice"])
        assert roll["seat"] == record["data"]["seat"]
        assert roll["luck"] == pytest.approx(roll["value_after"] - roll["value_before"])
        assert roll["bust"] == (not record["data"]["moves"])
    versions = [v["version"] for v in analysis["values"]]
    assert versions == sorted(versions) and versions[-1] == len(records) - (
        records[-1]["type"] == "SeedRevealed"
    )


@pytest.mark.parametrize("index", [0, 3, 4], ids=[str(KINDS[i]) for i in (0, 3, 4)])
def test_an_analysis_leaves_no_garbage_for_the_cyclic_collector(index: int) -> None:
    """The analyst works an analysis out with the cyclic collector off
    (service/collector.py ``paused``): that is safe only while an
    analysis, from scratch or followed version by version, makes no reference cycles, whose
    memory would then wait for the collector. Nothing it dropped is left for it to find."""
    players, rules = KINDS[index]
    records = play(players, rules=rules, seed=5)
    gc.collect()
    gc.disable()
    try:
        analyse(records)
        running = Analysis()
        running.extend(records)
        for version in range(1, len(records) + 1):
            running.advance(version)
        running.result(len(records))
        del running
        assert gc.collect() == 0
    finally:
        gc.enable()


class GreedyRoller:
    """The expert, except that it rolls on, once, when stopping would win the game."""

    def __init__(self) -> None:
        self.refused = False

    def __call__(self, position: Position, rng: random.Random) -> Any:
        if not self.refused and position.phase == "roll_or_stop" and position.stopping_wins():
            self.refused = True
            return Roll()
        return strategies.get("expert").choose(position, rng)


@pytest.mark.parametrize(
    ("players", "rules"),
    [(2, None), (1, {"solitaire": "easy"}), (2, {"dice_faces": 8, "jumping": True})],
)
def test_a_stop_that_would_have_won_is_a_loss_when_the_player_rolled(
    players: int, rules: dict[str, Any] | None
) -> None:
    # a stop that wins is worth 1 against others; alone, the turn under way is the last: -1
    winning = 1.0 if players > 1 else -1.0
    for seed in range(40):
        roller = GreedyRoller()
        records = play([roller] + ["expert"] * (players - 1), rules=rules, seed=seed)
        if not roller.refused:
            continue  # seat 0 never stood one stop from winning: another game
        analysis = analyse(records)
        refused = [
            d
            for d in analysis["decisions"]
            if d["seat"] == 0 and d["chosen"] == {"type": "roll"} and d["value_best"] == winning
        ]
        break
    else:
        pytest.fail("no game gave seat 0 a winning stop to refuse")
    assert len(refused) == 1
    decision = refused[0]
    record = records[decision["version"] - 1]
    assert record["type"] == "DiceRolled" and record["data"]["seat"] == 0
    assert decision["best"] == {"type": "stop"}
    # rolling risks a bust, stopping wins for certain: the loss is what rolling risked
    assert decision["value_chosen"] < decision["value_best"]
    assert decision["loss"] == pytest.approx(decision["value_best"] - decision["value_chosen"])
    assert decision["loss"] > 0
    seat = analysis["seats"][0]
    assert seat["skill_loss"] == pytest.approx(decision["loss"], abs=1e-12)  # its only loss
    assert add_up(seat) <= TOLERANCE


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions())
def test_value_before_is_the_exact_expectation_over_every_ordered_roll(
    position: Position,
) -> None:
    """Brute force over all 6⁴ or 8⁴ ordered rolls, each valued as a position of its own in
    phase "move" (the expert's best move there), against ``Point.expected``."""
    expert = ExpertStrategy()
    point = Point(expert, position)
    faces = position.rules.dice_faces
    board = position.board()
    worth: dict[tuple[tuple[int, ...], ...], float] = {}
    total = 0.0
    values = []
    for dice in product(range(1, faces + 1), repeat=4):
        moves = tuple(board.legal_moves(dice, position.runners))
        if moves not in worth:
            if moves:
                rolled = Position.make(
                    position.rules,
                    position.markers,
                    seat=position.seat,
                    claimed=position.claimed,
                    runners=position.runners,
                    phase="move",
                    dice=dice,
                    resigned=position.resigned,
                )
                worth[moves] = Point(ExpertStrategy(), rolled).value()
            else:
                worth[moves] = point.bust()
        values.append(worth[moves])
    total = math.fsum(values) / faces**4
    assert point.expected() == pytest.approx(total, abs=1e-12)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(
        [
            (["rule-of-28", "expert"], None),
            (["random", "rule-of-28"], {"steep_hill": True}),
            (["rule-of-28"], {"solitaire": "advanced"}),
            (["random", "expert", "rule-of-28"], {"dice_faces": 8}),
        ]
    ),
    cut=st.floats(0.05, 1.0),
)
def test_every_seats_figures_add_up(
    seed: int, kind: tuple[list[str], dict[str, Any] | None], cut: float
) -> None:
    """value_end − value_start = luck − skill_loss + drift for every seat, at any version, with
    luck and skill loss the sums of the seat's own rolls and decisions."""
    players, rules = kind
    records = play(players, rules=rules, seed=seed)
    version = max(2, round(cut * len(records)))
    analysis = analyse(records, version)
    assert analysis["version"] == version
    assert all(r["version"] <= version for r in analysis["rolls"] + analysis["decisions"])
    for seat in analysis["seats"]:
        rolls = [r["luck"] for r in analysis["rolls"] if r["seat"] == seat["seat"]]
        losses = [d["loss"] for d in analysis["decisions"] if d["seat"] == seat["seat"]]
        assert seat["luck"] == pytest.approx(math.fsum(rolls), abs=1e-12)
        assert seat["skill_loss"] == pytest.approx(math.fsum(losses), abs=1e-12)
        assert seat["decisions"] == len(losses)
        assert all(loss >= 0 for loss in losses)
        assert add_up(seat) <= TOLERANCE


def test_luck_is_centred_on_zero_over_many_games() -> None:
    """Each roll's luck has conditional mean exactly zero given everything before it (its
    value_before is the expectation over every roll), so the lucks of a run of games are
    martingale differences: their mean over n rolls is about normal with standard error
    sd/√n (martingale central limit theorem). A bound of 4 standard errors fails by chance
    with probability 6e-5 (two-sided normal tail); the seeds are fixed, so the test is
    deterministic anyway. (The exactness itself is tested roll by roll above; this checks it
    against dice drawn as the server draws them, uniformly and independently.)"""
    lucks: list[float] = []
    for seed in range(8):
        players = ["rule-of-28", "expert"] if seed % 2 else ["expert"]
        rules = None if seed % 2 else {"solitaire": "easy"}
        records = play(players, rules=rules, seed=100 + seed)
        analysis = analyse(records)
        lucks += [r["luck"] / scale(analysis) for r in analysis["rolls"]]
    n = len(lucks)
    assert n > 400, n
    mean, sd = statistics.fmean(lucks), statistics.stdev(lucks)
    assert abs(mean) <= 4 * sd / math.sqrt(n), (mean, sd, n)
    assert sd > 0


def scale(analysis: dict[str, Any]) -> float:
    """Lucks of solitaire (turns) and of games of two (chances) on one scale: a turn is
    worth about as much luck as a tenth of a game's chance."""
    return 10.0 if analysis["kind"] == "turns" else 1.0


def reached(version: int) -> Callable[[Game], bool]:
    return lambda game: game.version >= version


def test_an_analysis_up_to_a_version_is_the_analysis_of_the_game_as_it_stood() -> None:
    """Nothing after the version leaks into it: the game played only that far gives the same
    analysis, to the bit."""
    whole = play(["rule-of-28", "expert"], seed=7)
    for stop_at in (5, 20, 41):
        early = play(["rule-of-28", "expert"], seed=7, until=reached(stop_at))
        same = [(r["type"], r["data"]) for r in early]  # their times differ, nothing else
        assert same == [(r["type"], r["data"]) for r in whole[: len(early)]]
        assert analyse(early) == analyse(whole, len(early))
    assert analyse(whole, 41)["values"][-1]["version"] == 41


def test_a_history_the_rules_refuse_is_refused_at_its_version() -> None:
    records = play(["expert", "expert"], seed=5)
    moved = next(r for r in records if r["type"] == "MovePlayed")
    forged = [dict(r) for r in records]
    forged[moved["version"] - 1] = {**moved, "data": {**moved["data"], "sums": [2, 12]}}
    with pytest.raises(AnalysisRefused) as refused:
        analyse(forged)
    assert refused.value.version == moved["version"]
    broken = [dict(r) for r in records]
    broken[9] = {"version": 10, "unreadable": "cannot be decoded"}
    with pytest.raises(AnalysisRefused) as refused:
        analyse(broken)
    assert refused.value.version == 10
    with pytest.raises(AnalysisRefused) as refused:
        analyse(records[:3] + records[4:])
    assert refused.value.version == 4
    with pytest.raises(ValueError):
        analyse(records, len(records) + 1)
    with pytest.raises(ValueError):
        analyse([])


def as_stored(records: list[dict[str, Any]]) -> list[int]:
    """The versions a history has grown to, one command at a time (a command is stored with
    the events it brings about: TurnBusted, GameFinished)."""
    ends = [i for i in range(1, len(records)) if records[i]["type"] not in DERIVED]
    return [*ends, len(records)]


def followed(records: list[dict[str, Any]]) -> tuple[Analysis, dict[int, str]]:
    """An ``Analysis`` fed the history as the store grows it, asked for every version as the
    game reaches it: the analysis and its answers, as JSON text."""
    analysis, answers, had = Analysis(), {}, 0
    for end in as_stored(records):
        analysis.extend(records[had:end])
        for version in range(had + 1, end + 1):
            analysis.advance(version)
            answers[version] = text(analysis.result(version))
        had = end
    return analysis, answers


def text(analysis: dict[str, Any]) -> str:
    return json.dumps(analysis, separators=(",", ":"), allow_nan=False)


def test_a_followed_analysis_is_the_analysis_from_scratch_at_every_version() -> None:
    """The lobby, the opening, the first turns and a resignation: each version's answer, as the
    game reached it and again once it went on, is ``analyse`` of it from scratch, to the byte."""
    records = lobby_game(seed=4, resign_at=9)
    records = records[: next(v for v in as_stored(records) if v >= 40)]
    analysis, answers = followed(records)
    assert analysis.reached == len(records) and len(answers) == len(records)
    assert any(r["type"] == "PlayerResigned" for r in records)
    for version in range(1, len(records) + 1):
        assert answers[version] == text(analyse(records, version)), version
        assert text(analysis.result(version)) == answers[version], version


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(
        [
            (["rule-of-28", "expert"], None),
            (["random", "rule-of-28"], {"steep_hill": True, "forced_move": True}),
            (["rule-of-28"], {"solitaire": "advanced"}),
            (["random", "rule-of-28"], {"dice_faces": 8, "jumping": True}),
        ]
    ),
    cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3),
)
def test_a_followed_analysis_is_the_analysis_from_scratch(
    seed: int, kind: tuple[list[str], dict[str, Any] | None], cuts: list[float]
) -> None:
    """Whole games followed version by version: any version's answer (drawn; each from scratch
    costs a replay of the game that far) is ``analyse`` of it, to the byte, and the same
    whether read as the game reached it or once it was over."""
    players, rules = kind
    records = play(players, rules=rules, seed=seed)
    # The first 120 versions or so (at a command's end, as the store grows): a whole solitaire
    # or eight-sided game analysed from scratch at each cut costs minutes, and what is checked
    # (following equals starting over) does not depend on the game's length.
    records = records[: next((v for v in as_stored(records) if v >= 120), len(records))]
    analysis, answers = followed(records)
    for cut in cuts:
        version = max(1, math.ceil(cut * len(records)))
        assert answers[version] == text(analyse(records, version)), version
    assert all(text(analysis.result(v)) == answers[v] for v in range(1, len(records) + 1))


@pytest.mark.parametrize("kept", [SHARED_POINTS, 64], ids=["as_kept", "emptied_often"])
def test_analyses_sharing_their_points_answer_as_each_does_on_its_own(
    kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analyst keeps the points' runners and children (``Shared``) from game to game: games
    of other dice, boards where markers are jumped and solitaire in between, one after the
    other and round again, each answer is its own analysis's to the byte; also when what is
    kept is emptied again and again as it passes its bound."""
    monkeypatch.setattr(turn, "SHARED_POINTS", kept)
    shared = Shared()
    for index in (0, 3, 4, 6, 0, 3):
        records, alone = expert_game(index)
        assert text(analyse(records, shared=shared)) == text(alone), KINDS[index]
    assert shared.states and shared.settled  # they were shared


def test_a_followed_analysis_refuses_what_analyse_refuses() -> None:
    records = play(["expert", "expert"], seed=5)
    analysis = Analysis(records[:20])
    with pytest.raises(AnalysisRefused) as refused:
        analysis.extend(records[:3])  # not the next versions
    assert refused.value.version == 21
    assert len(analysis.records) == 20  # nothing added
    moved = next(r for r in records[20:] if r["type"] == "MovePlayed")
    forged = {**moved, "data": {**moved["data"], "sums": [2, 12]}}
    analysis.extend([*records[20 : moved["version"] - 1], forged])
    analysis.advance(moved["version"] - 1)
    with pytest.raises(AnalysisRefused) as refused:
        analysis.advance(moved["version"])
    assert refused.value.version == moved["version"]
    with pytest.raises(ValueError):
        analysis.result(moved["version"] + 1)


def by_version(analysis: dict[str, Any]) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for entry in analysis["values"]:
        out.setdefault(entry["version"], {})[entry["seat"]] = entry["value"]
    return out


@pytest.mark.parametrize("index", range(len(KINDS)), ids=[str(k) for k in KINDS])
def test_every_seats_value_is_a_chance_and_they_sum_to_one_at_every_version(index: int) -> None:
    """Against others the values are chances to win (the tie-break the expert plays by is not
    in them): every seat's at every version, each in [0, 1], summing to 1 until the game ends,
    and every roll's and decision's figures in [0, 1] too. Alone: minus the turns still to
    take, this one included, so at most -1 until the game is won."""
    records, analysis = expert_game(index)
    seats = len(analysis["seats"])
    ended = next(r["version"] for r in records if r["type"] == "GameFinished")
    figures = [r[f] for r in analysis["rolls"] for f in ("value_before", "value_after")]
    figures += [d[f] for d in analysis["decisions"] for f in ("value_chosen", "value_best")]
    for version, values in by_version(analysis).items():
        assert sorted(values) == list(range(seats)), version
        if seats == 1:
            assert values[0] <= -1 or (version == ended and values[0] == 0)
            continue
        assert all(0 <= v <= 1 for v in values.values()), (version, values)
        assert math.fsum(values.values()) == pytest.approx(1, abs=1e-9), (version, values)
    if seats > 1:
        assert all(0 <= v <= 1 for v in figures)
    else:
        assert all(v <= -1 for v in figures)


def test_every_variant_gets_values_in_range() -> None:
    """Two to eight players, both dice, every option, both solitaires: each gets a scale, its
    own table where the self-play measured that kind of game and a neighbour's otherwise, and
    the scale keeps the expert's order (strictly increasing), a winning stop's worth (1, or -1
    alone) and the range (chances in [0, 1])."""
    calibrated = set()
    for players in range(1, 9):
        for faces in (6, 8):
            for options in ({}, {"jumping": True, "steep_hill": True}, {"forced_move": True}):
                modes = ("easy", "advanced") if players == 1 else (None,)
                for mode in modes:
                    raw: dict[str, Any] = {"dice_faces": faces, **options}
                    if players == 1:
                        raw = {k: v for k, v in raw.items() if k != "forced_move"}
                        raw["solitaire"] = mode
                    try:
                        rules = normalize_rules(raw, players)
                    except InvalidRequest:
                        continue  # not a game anybody can create
                    scale = scale_for(rules, players)
                    assert scale.fitted in TABLES, scale.name
                    if scale.calibrated:
                        calibrated.add(scale.name)
                    if players == 1:
                        assert scale(0.0) == -1.0
                        grid = [-x / 4 for x in range(0, 400)]
                        served = [scale(x) for x in grid]
                        assert all(v <= -1 for v in served)
                    else:
                        assert scale(1.0) == 1.0 and scale(1.6) == 1.0 and scale(-1000) == 0.0
                        grid = [-0.5 + x / 400 for x in range(600)]
                        served = [scale(x) for x in grid]
                        assert all(0 <= v <= 1 for v in served)
                    # the expert's order is kept: a worse choice always shows a loss (the
                    # grid runs down from the top alone, up against others)
                    inside = [v for v in served if 0 < v < 1] if players > 1 else served
                    step = -1 if players == 1 else 1
                    assert all(step * (b - a) > 0 for a, b in pairwise(inside))
                    # three and more: the seats not to act through their own map, in range
                    assert (scale.others is not None) == (players >= 3), scale.name
                    if scale.others is not None:
                        shares = [scale.others(x / 200) for x in range(1, 201)]
                        assert all(0 < a < b <= 1 for a, b in pairwise(shares))
    assert {"1p-d6-easy", "2p-d6-c3"} <= calibrated
