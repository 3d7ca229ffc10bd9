"""The arena: faithful to the Game aggregate, reproducible, and the bots' strength in numbers;
and the ``cantstop bots`` command line."""

from __future__ import annotations

import argparse
import json
import random
import uuid
from typing import Any

import pytest

from domain import arena, strategies
from domain.commands import NewGame, Roll
from domain.game import Game
from domain.position import Position
from domain.rules import Rules
from domain.strategies.base import Action
from service import arena_cli


# ------------------------------------------------------------------------------ faithfulness
def replay_through_the_aggregate(
    players: list[str], rules: Rules, first: int, seed: int, setup: dict[str, Any]
) -> arena.Outcome:
    """Play a seeded game in the arena, then the same actions (the arena's dice as manual dice)
    through ``Game``: every position the bots saw must be the aggregate's, move for move."""
    seen: list[tuple[Position, Action]] = []
    outcome = arena.play(
        [strategies.get(p) for p in players],
        rules,
        first=first,
        dice_rng=random.Random(seed),
        bot_rng=random.Random(seed + 1),
        observer=lambda position, action: seen.append((position, action)),
    )
    names = [f"{p}#{i}" for i, p in enumerate(players)]
    game = Game.start(
        uuid.uuid4(), NewGame(players=names, rules=setup, dice="manual", first_player=first)
    )
    for position, action in seen:
        assert Position.from_game(game) == position
        game.act(position.seat, action)
    assert game.status == "finished"
    assert game.winner == outcome.winner
    assert game.turns_completed == outcome.turns
    return outcome


@pytest.mark.parametrize(
    "setup",
    [
        {},
        {"jumping": True},
        {"forced_move": True, "steep_hill": True},
        {"dice_faces": 8, "columns_to_win": 2},
        {"jumping": True, "steep_hill": True, "columns_to_win": "by_players"},
    ],
    ids=["plain", "jumping", "forced-steep", "eight-faces", "jumping-steep-columns-plus"],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_the_arena_plays_multiplayer_games_exactly_as_the_aggregate_does(
    setup: dict[str, Any], seed: int
) -> None:
    players = ["rule-of-28", "random", "rule-of-28"] if seed == 2 else ["rule-of-28", "random"]
    to_win = setup.get("columns_to_win", 3)
    if to_win == "by_players":
        to_win = {2: 5, 3: 4}.get(len(players), 3)
    rules = Rules(
        columns_to_win=to_win,
        jumping=setup.get("jumping", False),
        forced_move=setup.get("forced_move", False),
        steep_hill=setup.get("steep_hill", False),
        dice_faces=setup.get("dice_faces", 6),
    )
    replay_through_the_aggregate(players, rules, seed % len(players), seed, setup)


@pytest.mark.parametrize("mode", ["easy", "advanced"])
def test_the_arena_plays_solitaire_exactly_as_the_aggregate_does(mode: str) -> None:
    rules = Rules(columns_to_win=11, solitaire=mode)
    outcome = replay_through_the_aggregate(["rule-of-28"], rules, 0, 5, {"solitaire": mode})
    assert outcome.winner == 0


def test_the_arena_plays_the_expert_exactly_as_the_aggregate_does() -> None:
    replay_through_the_aggregate(["expert", "rule-of-28"], Rules(), 1, 3, {})


def test_a_strategy_that_answers_an_illegal_action_is_caught() -> None:
    class Stubborn:
        id = "stubborn"
        name = description = version = "x"

        def choose(self, position: Position, rng: random.Random) -> Action:
            return Roll()  # even when a move is due

    with pytest.raises(arena.IllegalStrategyAction):
        arena.play([Stubborn()], Rules(), dice_rng=random.Random(0), bot_rng=random.Random(0))


# ------------------------------------------------------------------------------ runs
def test_solo_reports_the_mean_turns_with_a_confidence_interval_reproducibly() -> None:
    first = arena.solo("rule-of-28", 60, columns=3, seed=4)
    assert first == arena.solo("rule-of-28", 60, columns=3, seed=4)
    assert first != arena.solo("rule-of-28", 60, columns=3, seed=5)
    assert first["games"] == 60 and first["columns"] == 3 and first["unfinished"] == 0
    low, high = first["ci95"]
    assert low < first["mean_turns"] < high
    assert first["min_turns"] <= first["median_turns"] <= first["max_turns"]


def test_the_rule_of_28_takes_the_published_number_of_turns_to_claim_three_columns() -> None:
    """Glenn & Aloi: 10.74 turns. 400 seeded races put the mean within 0.4 of it (the standard
    error of 400 races is 0.17)."""
    result = arena.solo("rule-of-28", 400, columns=3, seed=2009)
    assert abs(result["mean_turns"] - 10.74) < 0.4


def test_advanced_solitaire_takes_longer_than_easy() -> None:
    easy = arena.solo("rule-of-28", 30, seed=1)
    advanced = arena.solo("rule-of-28", 30, seed=1, solitaire="advanced")
    assert easy["columns"] == advanced["columns"] == 11
    assert advanced["mean_turns"] > easy["mean_turns"]


def test_duel_alternates_the_first_player_and_names_mirror_players_apart() -> None:
    result = arena.duel("random", "random", 40, seed=3)
    assert set(result["wins"]) == {"random#1", "random#2"}
    assert sum(result["wins"].values()) == 40
    by_player = result["first_mover"]["by_player"]
    assert set(by_player) == {"random#1", "random#2"}
    moving_first_wins = sum(r["moving_first"] * 20 for r in by_player.values())
    assert round(moving_first_wins) == round(result["first_mover"]["win_rate"] * 40)


def test_runs_refuse_unknown_bots_and_bad_numbers() -> None:
    with pytest.raises(strategies.UnknownStrategy):
        arena.solo("nobody", 1)
    with pytest.raises(ValueError, match="columns"):
        arena.solo("random", 1, columns=12)
    with pytest.raises(ValueError, match="games"):
        arena.duel("random", "random", 0)


def test_a_progress_callback_hears_every_game() -> None:
    ticks: list[int] = []
    arena.solo("random", 7, columns=1, progress=lambda: ticks.append(1))
    assert len(ticks) == 7


# ------------------------------------------------------------------------------ strength
def test_the_expert_beats_the_random_player_in_at_least_95_percent_of_100_duels() -> None:
    result = arena.duel("expert", "random", 100, seed=0)
    assert result["win_rate"]["expert"] >= 0.95


def test_the_expert_beats_the_rule_of_28_over_120_duels() -> None:
    """It wins about 80%: the lower end of the 95% interval of 120 games stays above 50%."""
    result = arena.duel("expert", "rule-of-28", 120, seed=0)
    assert result["ci95"]["expert"][0] > 0.5


def test_the_expert_needs_fewer_turns_than_the_rule_of_28() -> None:
    expert = arena.solo("expert", 40, columns=3, seed=0)
    rule = arena.solo("rule-of-28", 40, columns=3, seed=0)
    assert expert["ci95"][1] < rule["ci95"][0]


# ------------------------------------------------------------------------------ the command line
def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="cantstop")
    arena_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    status = args.func(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_bots_solo_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_cli(capsys, "bots", "solo", "rule-of-28", "--games", "20", "--seed", "3")
    assert status == 0 and err == ""  # no progress bar off a terminal
    result = json.loads(out)
    assert result["strategy"] == "rule-of-28" and result["columns"] == 11
    assert result["games"] == 20 and result["seed"] == 3 and "mean_turns" in result


def test_bots_duel_prints_wins_and_win_rates(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "bots", "duel", "rule-of-28", "random", "--games", "10")
    assert status == 0
    result = json.loads(out)
    assert set(result["wins"]) == set(result["win_rate"]) == {"rule-of-28", "random"}
    assert "decision_ms" not in result


def test_bots_take_variants_and_time_the_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bots", "duel", "rule-of-28", "random", "--games", "4", "--jumping", "--steep-hill"]
    status, out, _ = run_cli(capsys, *argv, "--dice-faces", "8", "--timing")
    assert status == 0
    result = json.loads(out)
    assert result["variants"] == {"jumping": True, "forced_move": False, "steep_hill": True}
    assert result["faces"] == 8
    timing = result["decision_ms"]["rule-of-28"]
    assert timing["decisions"] > 0
    assert timing["median_ms"] <= timing["p99_ms"] <= timing["p999_ms"] <= timing["max_ms"]
    assert 0 <= timing["over_50_ms"] <= timing["decisions"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["solo", "hal", "--games", "5"], "unknown bot 'hal'"),
        (["duel", "random", "hal", "--games", "5"], "unknown bot 'hal'"),
        (["solo", "random", "--games", "many"], "--games must be an integer"),
        (["solo", "random", "--games", "0"], "--games must be at least 1"),
        (["solo", "random", "--games", "5", "--columns", "12"], "--columns must be at most 11"),
        (["duel", "random", "random", "--games", "5", "--seed", "x"], "--seed must be an integer"),
        (["duel", "random", "random", "--games", "5", "--jumping", "--forced-move"], "exclude"),
    ],
)
def test_bots_exit_2_with_a_one_line_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], reason: str
) -> None:
    status, out, err = run_cli(capsys, "bots", *argv)
    assert status == 2 and out == ""
    assert reason in err and err.count("\n") == 1
