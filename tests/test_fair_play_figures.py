"""Fair-play figures (contract 1.3): per account and pool, how often its contested decisions in
finished rated games matched the expert's, its mean loss on them, and the pool's distribution of
match rates beside them; only games that count in the ratings count here."""

from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain import strategies
from domain.analysis import KEY as ANALYSIS_KEY
from domain.analysis import analyse
from domain.commands import Move, Roll, Stop
from domain.fairplay import CONTESTED, percentile, seat_figures
from domain.position import Position
from domain.strategies.expert import ExpertStrategy
from service.application.analysis import analyst, fairplay, jobs
from service.application.analysis.fairplay import POOL_MINIMUM, SCAN_EVERY
from service.config import Settings
from service.http.app import create_app
from service.runtime import Runtime
from tests.support.games import UNKNOWN, export_text
from tests.support.http import Json, bearer
from tests.support.played import play
from tests.support.polling import wait_until
from tests.support.racing import race_cleanly
from tests.support.servers import run_scheduler

PASSWORD = "correct horse battery staple"
CLOCK = {"turn_seconds": 3600}  # a rated game needs a clock (contract 1.3)
EXPERT = strategies.get("expert")
RANDOM = strategies.get("random")


def runtime_of(client: FlaskClient) -> Runtime:
    rt = client.application.extensions["cantstop"]
    assert isinstance(rt, Runtime)
    return rt


def sign_up(client: FlaskClient, handle: str, *, bot: bool = False) -> str:
    body: Json = (
        {"handle": handle, "bot": True} if bot else {"handle": handle, "password": PASSWORD}
    )
    reply = client.post("/v1/accounts", json=body)
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def rated_game(client: FlaskClient, host: str, guest: str, *, rated: bool = True) -> str:
    """A game of two accounts (the host's lobby, the guest joins), under way."""
    body: Json = {"seats": 2, "rated": True, "clock": CLOCK} if rated else {"seats": 2}
    created = client.post("/v1/games", json=body, headers=bearer(host))
    assert created.status_code == 201, created.get_json()
    game_id: str = created.get_json()["game"]["id"]
    joined = client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(guest))
    assert joined.status_code == 201, joined.get_json()
    return game_id


def act(client: FlaskClient, game_id: str, token: str, action: Json) -> Json:
    reply = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    state: Json = reply.get_json()["game"]
    return state


def play_with(
    client: FlaskClient, game_id: str, players: dict[str, tuple[str, Any]], seed: int
) -> Json:
    """Each account plays its seat with its strategy (server dice) until the game ends."""
    rt = runtime_of(client)
    rng = random.Random(seed)
    state: Json = client.get(f"/v1/games/{game_id}").get_json()
    for _ in range(5000):
        if state["status"] == "finished":
            return state
        seat = state["turn"]["player"]
        token, strategy = players[state["players"][seat]["account"]]
        position = Position.from_game(rt.games.game(uuid.UUID(game_id)))
        action = strategy.choose(position, rng)
        if isinstance(action, Roll):
            body: Json = {"type": "roll"}
        elif isinstance(action, Move):
            body = {"type": "move", "sums": list(action.sums)}
        else:
            assert isinstance(action, Stop), action
            body = {"type": "stop"}
        state = act(client, game_id, token, body)
    raise AssertionError("the game did not end")


def one_turn_each_then_resign(client: FlaskClient, game_id: str, tokens: dict[str, str]) -> None:
    """Both seats play a turn (roll, the first move, stop; or a bust), then the guest resigns:
    a rated result, not an aborted game."""
    state: Json = client.get(f"/v1/games/{game_id}").get_json()
    for _ in range(2):
        seat = state["turn"]["player"]
        token = tokens[state["players"][seat]["account"]]
        state = act(client, game_id, token, {"type": "roll"})
        if state["turn"]["player"] == seat and state["turn"]["phase"] == "move":
            move = next(a for a in state["legal_actions"] if a["type"] == "move")
            act(client, game_id, token, move)
            state = act(client, game_id, token, {"type": "stop"})
    seat = state["turn"]["player"]
    state = act(client, game_id, tokens[state["players"][seat]["account"]], {"type": "resign"})
    assert state["status"] == "finished" and state.get("finish_reason") != "aborted"


def analyse_finished(client: FlaskClient) -> None:
    """What the worker processes do: the finished rated games' jobs queued (the views moved on)
    and worked out, here in process."""
    rt = runtime_of(client)
    for view in rt.moved_views:
        rt.views.catch_up(view)
    worker = rt.analyst.worker("test")
    for _ in range(50):
        if not worker.step():
            return
    raise AssertionError("the queue did not empty")


def keep(client: FlaskClient, game_id: str, decisions: list[Json]) -> None:
    """A finished game's analysis kept as the workers keep one, with these decisions (the
    figures read nothing else from it)."""
    rt = runtime_of(client)
    state = rt.games.state(uuid.UUID(game_id))
    analysis = {"finished": True, "strategy_version": ExpertStrategy.version}
    text = json.dumps(analysis | {"version": state["version"], "decisions": decisions})
    rt.analyst.stored.put(uuid.UUID(game_id), ANALYSIS_KEY, state["version"], text)


def decisions(seat: int, contested: int, matched: int, easy: int = 0) -> list[Json]:
    """``contested`` decisions of the seat, ``matched`` of them the expert's (the others lose
    0.1), and ``easy`` ones whose runner-up is within the threshold (lost, or not: not counted)."""
    roll, stop = {"type": "roll"}, {"type": "stop"}
    made = []
    for i in range(contested):
        chosen = roll if i < matched else stop
        loss = 0.0 if i < matched else 0.1
        made.append(
            {"seat": seat, "chosen": chosen, "best": roll, "value_best": 0.6, "loss": loss}
            | {"value_chosen": 0.6 - loss, "value_second": 0.5}
        )
    for _ in range(easy):
        made.append(
            {"seat": seat, "chosen": stop, "best": roll, "value_best": 0.6, "loss": 0.01}
            | {"value_chosen": 0.59, "value_second": 0.59}
        )
    return made


def figures(client: FlaskClient, handle: str) -> Json:
    reply = client.get(f"/v1/accounts/{handle}/fair-play")
    assert reply.status_code == 200, reply.get_json()
    found: Json = reply.get_json()
    return found


# ------------------------------------------------------------------------------ the domain
def test_the_expert_matches_itself_and_the_runner_up_is_never_above_the_best() -> None:
    records = play(["expert", "random"], seed=3)

    analysis = analyse(records)
    for decision in analysis["decisions"]:
        if decision["value_second"] is not None:
            assert decision["value_second"] <= max(decision["value_best"], decision["value_chosen"])
    expert, chance = seat_figures(analysis, 2)
    assert expert.contested > 0 and expert.matched == expert.contested and expert.loss == 0
    assert chance.decisions > 0 and chance.contested <= chance.decisions
    assert 0 < CONTESTED < 0.05


def test_percentiles_interpolate_between_ranks() -> None:
    rates = [0.2, 0.4, 0.6, 0.8, 1.0]
    assert percentile(rates, 0.5) == pytest.approx(0.6)
    assert percentile(rates, 0.9) == pytest.approx(0.92)
    assert percentile(rates, 0.99) == pytest.approx(0.992)
    assert percentile([0.7], 0.99) == pytest.approx(0.7)
    assert percentile([], 0.5) is None


# ------------------------------------------------------------------------------ the API
def test_the_experts_choices_match_at_every_contested_decision_a_random_players_do_not(
    client: FlaskClient,
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    players = {"ann": (ann, EXPERT), "bob": (bob, RANDOM)}
    for seed in range(6):
        play_with(client, rated_game(client, ann, bob), players, seed)
        analyse_finished(client)
        [theirs] = figures(client, "bob")["pools"]
        if theirs["contested"] >= 5:
            break
    [mine] = figures(client, "ann")["pools"]
    assert mine["games"] == theirs["games"] == seed + 1
    assert mine["contested"] > 0 and mine["decisions"] >= mine["contested"]
    assert mine["matched"] == mine["contested"]
    assert (mine["match_rate"], mine["mean_loss"]) == (1.0, 0.0)
    assert theirs["contested"] >= 5
    assert theirs["match_rate"] < 1 and theirs["mean_loss"] > 0
    assert theirs["match_rate"] == theirs["matched"] / theirs["contested"]
    # The same figures again, from the rows kept: no game summarised twice.
    rt = runtime_of(client)
    rt.fair_play.catch_up()
    assert figures(client, "ann")["pools"] == [mine]


def test_the_pools_distribution_is_over_its_people_with_enough_contested_decisions(
    client: FlaskClient,
) -> None:
    handles = ["ann", "bob", "cy", "dee", "eve"]
    tokens = {h: sign_up(client, h) for h in handles}
    tokens["robo"] = sign_up(client, "robo", bot=True)
    # (host, guest, host's contested and matched, guest's): ann plays "robo", a bot account.
    games = [
        ("ann", "bob", (POOL_MINIMUM, POOL_MINIMUM), (POOL_MINIMUM, POOL_MINIMUM // 2)),
        ("cy", "dee", (POOL_MINIMUM, POOL_MINIMUM // 4), (POOL_MINIMUM * 2, POOL_MINIMUM)),
        ("eve", "robo", (POOL_MINIMUM - 1, 0), (POOL_MINIMUM * 3, POOL_MINIMUM * 3)),
    ]
    for host, guest, (hc, hm), (gc, gm) in games:
        game_id = rated_game(client, tokens[host], tokens[guest])
        one_turn_each_then_resign(client, game_id, tokens)
        seats = [p["account"] for p in client.get(f"/v1/games/{game_id}").get_json()["players"]]
        host_seat = seats.index(host)
        keep(
            client,
            game_id,
            decisions(host_seat, hc, hm, easy=3) + decisions(1 - host_seat, gc, gm),
        )
    ann = figures(client, "ann")
    assert ann["threshold"] == CONTESTED and ann["pool_minimum"] == POOL_MINIMUM
    [pool] = ann["pools"]
    assert pool["games"] == 1 and pool["decisions"] == POOL_MINIMUM + 3
    assert (pool["contested"], pool["matched"]) == (POOL_MINIMUM, POOL_MINIMUM)
    assert pool["match_rate"] == 1.0 and pool["mean_loss"] == 0.0
    # ann 1, bob 0.5, cy 0.25, dee 0.5; eve is under the minimum; robo is a bot account.
    rates = sorted([1.0, 0.5, 0.25, 0.5])
    assert pool["pool_accounts"] == 4
    assert pool["pool_match_rate"] == {
        "p50": pytest.approx(percentile(rates, 0.5)),
        "p90": pytest.approx(percentile(rates, 0.9)),
        "p99": pytest.approx(percentile(rates, 0.99)),
    }
    [cy] = figures(client, "cy")["pools"]
    assert cy["match_rate"] == 0.25 and cy["mean_loss"] == pytest.approx(0.1 * 0.75)
    [eve] = figures(client, "eve")["pools"]
    assert eve["contested"] == POOL_MINIMUM - 1 and eve["match_rate"] == 0.0
    [robo] = figures(client, "robo")["pools"]
    assert robo["match_rate"] == 1.0  # its own figures are served; it is not in the pool's


def test_unrated_imported_and_aborted_games_never_count(client: FlaskClient) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    tokens = {"ann": ann, "bob": bob}
    unrated = rated_game(client, ann, bob, rated=False)
    one_turn_each_then_resign(client, unrated, tokens)
    aborted = rated_game(client, ann, bob)
    state = act(client, aborted, ann, {"type": "resign"})  # before any turn: aborted (1.3)
    assert state["status"] == "finished"
    counted = rated_game(client, ann, bob)
    one_turn_each_then_resign(client, counted, tokens)
    imported = client.post(
        "/v1/games/import",
        data=export_text(client, counted),
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert imported.status_code == 201, imported.get_json()
    copy = imported.get_json()["game"]["id"]
    for game_id in (unrated, aborted, counted, copy):
        keep(client, game_id, decisions(0, 10, 10) + decisions(1, 10, 5))
    for handle in ("ann", "bob"):
        [pool] = figures(client, handle)["pools"]
        assert pool["games"] == 1 and pool["contested"] == 10  # the rated game played here


def test_a_rated_game_longer_than_the_analysis_takes_counts_by_its_first_versions(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rated game past MAX_VERSIONS (here lowered to 40, for a test's game) is analysed by the
    workers up to there, and those decisions count in both seats' figures; the endpoint still
    refuses its analysis as too long. (Such a game was never queued: padding a rated game past
    the maximum took it out of the fair-play figures.)"""
    for module in (jobs, analyst, fairplay):
        monkeypatch.setattr(module, "MAX_VERSIONS", 40)
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    game_id = rated_game(client, ann, bob)
    players = {"ann": (ann, EXPERT), "bob": (bob, EXPERT)}
    assert play_with(client, game_id, players, seed=1)["version"] > 40
    analyse_finished(client)
    kept = runtime_of(client).analyst.kept(uuid.UUID(game_id))
    assert kept is not None and kept["version"] == 40 and not kept["finished"]
    for handle in ("ann", "bob"):
        [pool] = figures(client, handle)["pools"]
        assert pool["games"] == 1 and pool["decisions"] > 0
        assert pool["matched"] == pool["contested"]  # the expert against itself
    mine = [d for d in kept["decisions"] if d["seat"] == 0]
    assert figures(client, "ann")["pools"][0]["decisions"] == len(mine)
    refused = client.get(f"/v1/games/{game_id}/analysis")
    assert refused.status_code == 422 and refused.get_json()["code"] == "game_too_long"


def test_an_unknown_account_is_404_and_one_without_rated_games_has_no_pools(
    client: FlaskClient,
) -> None:
    unknown = client.get("/v1/accounts/nobody/fair-play")
    assert unknown.status_code == 404
    assert unknown.get_json()["code"] == "not_found"
    assert client.get(f"/v1/accounts/{UNKNOWN}/fair-play").status_code == 404
    sign_up(client, "ann")
    assert figures(client, "ann")["pools"] == []


def test_two_processes_summarising_at_once_write_each_game_once(
    app: Flask, database_url: str
) -> None:
    """Two workers catch up at the same moment: every (game, seat) has one row."""
    client = app.test_client()
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    for _ in range(3):
        game_id = rated_game(client, ann, bob)
        one_turn_each_then_resign(client, game_id, {"ann": ann, "bob": bob})
        keep(client, game_id, decisions(0, 4, 3) + decisions(1, 4, 1))
    other = create_app(Settings(database_url=database_url))
    try:
        runtimes = [runtime_of(client), other.extensions["cantstop"]]
        race_cleanly([rt.fair_play.catch_up for rt in runtimes])
        rows = runtimes[0].fair_play.table.execute(
            "SELECT count(*) AS n FROM cantstop_fair_play", fetch="one"
        )
        assert rows["n"] == 6
        [pool] = figures(client, "ann")["pools"]
        assert (pool["games"], pool["contested"]) == (3, 12)
    finally:
        other.extensions["cantstop"].close()


def test_the_schedulers_loop_summarises_without_anyone_asking(client: FlaskClient) -> None:

    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    game_id = rated_game(client, ann, bob)
    one_turn_each_then_resign(client, game_id, {"ann": ann, "bob": bob})
    keep(client, game_id, decisions(0, 6, 6) + decisions(1, 6, 2))
    rt = runtime_of(client)

    def rows() -> int:
        found = rt.fair_play.table.execute(
            "SELECT count(*) AS n FROM cantstop_fair_play WHERE game_id = ?", [game_id], fetch="one"
        )
        return int(found["n"])

    assert rows() == 0
    halt = run_scheduler(client.application)
    try:
        wait_until(lambda: rows() == 2, 10, "the scheduler's loop to summarise the game")
    finally:
        halt()


def test_a_thousand_requests_search_once_a_second_and_read_the_pool_once(
    client: FlaskClient,
) -> None:
    """The figures are read often (a profile page, a moderator's list): each request is one
    indexed sum over the account's rows; the search for new games and the pool's distribution
    are not redone for each."""
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    game_id = rated_game(client, ann, bob)
    one_turn_each_then_resign(client, game_id, {"ann": ann, "bob": bob})
    keep(client, game_id, decisions(0, 6, 6) + decisions(1, 6, 2))
    fair_play = runtime_of(client).fair_play
    started = time.monotonic()
    first = figures(client, "ann")  # checked against openapi.yaml; the rest are the same
    assert first["pools"][0]["games"] == 1
    plain = client.application.test_client()
    answers = [plain.get("/v1/accounts/ann/fair-play") for _ in range(1000)]
    elapsed = time.monotonic() - started
    assert {a.status_code for a in answers} == {200}
    assert all(a.get_json() == first for a in answers)
    assert fair_play.summarised == 1 and fair_play.pool_reads == 1
    assert fair_play.searches <= 1 + elapsed / SCAN_EVERY


def test_an_analysis_kept_without_runner_up_values_is_passed_over_and_the_rest_count(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    old, new = (rated_game(client, ann, bob) for _ in range(2))
    for game_id in (old, new):
        one_turn_each_then_resign(client, game_id, {"ann": ann, "bob": bob})
    before = [{k: v for k, v in d.items() if k != "value_second"} for d in decisions(0, 5, 5)]
    keep(client, old, before)  # kept by a version before value_second
    keep(client, new, decisions(0, 3, 2) + decisions(1, 3, 1))
    [pool] = figures(client, "ann")["pools"]
    assert (pool["games"], pool["contested"], pool["matched"]) == (1, 3, 2)
    assert f"game {old} is not summarised" in caplog.text
