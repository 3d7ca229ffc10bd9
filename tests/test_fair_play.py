"""Fair play in rated games (contract 1.3): a rated game needs a clock; one that ends before every
seat has played a turn is aborted and rates nobody; the expert's advice and analysis are closed
to everyone while it is played."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from cantstop_client.verify import verify_export
from flask import Flask
from flask.testing import FlaskClient

from domain import fairness
from domain.audit import audit_records
from domain.commands import NewGame
from domain.errors import InvalidRequest
from domain.game import Game, chain_hash, event_records, parse_at
from service.application.players.ratings import Ratings
from service.application.players.standings import rated_game
from tests.support.http import bearer
from tests.support.rated import (
    CLOCK,
    NDJSON,
    act,
    export_text,
    finished_rated_game,
    play_a_turn,
    rated_pair,
    seat_tokens,
    sign_up,
)

Json = dict[str, Any]


def refused(reply: Any, status: int, code: str) -> None:
    assert reply.status_code == status, reply.get_json()
    assert reply.mimetype == "application/problem+json" and reply.get_json()["code"] == code


def ratings_of(client: FlaskClient, handle: str) -> list[Json]:
    found: list[Json] = client.get(f"/v1/accounts/{handle}").get_json()["ratings"]
    return found


# ------------------------------------------------------------------------ rated needs a clock
def test_a_rated_game_challenge_or_seek_without_a_clock_is_refused_recording_nothing(
    client: FlaskClient,
) -> None:
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    ann = bearer(tokens["ann"])
    versus_bot = [{"account": "ann"}, {"name": "Robo", "bot": "expert"}]
    asks: list[tuple[str, Json]] = [
        ("/v1/games", {"players": versus_bot, "rated": True}),
        ("/v1/games", {"players": versus_bot, "rated": True, "clock": None}),
        ("/v1/games", {"seats": 2, "rated": True}),
        ("/v1/challenges", {"to": "bob", "rated": True}),
        ("/v1/challenges", {"to": "expert", "rated": True}),  # a bot would accept at once
        ("/v1/seeks", {"rated": True}),
    ]
    for path, body in asks:
        refused(client.post(path, json=body, headers=ann), 422, "rated_needs_clock")
    assert client.get("/v1/games").get_json()["total"] == 0
    assert client.get("/v1/challenges", headers=ann).get_json()["outgoing"] == []
    # With a clock, each is made; unrated games need none.
    for path, body in asks[:1] + asks[2:]:
        made = client.post(path, json={**body, "clock": CLOCK}, headers=ann)
        assert made.status_code == 201, (path, made.get_json())
    assert client.post("/v1/games", json={"players": ["Ann", "Bob"]}).status_code == 201


# ------------------------------------------------------------------------------ aborted games
def test_resigning_a_rated_game_before_every_seat_played_aborts_it(
    client: FlaskClient,
) -> None:
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    # Before any roll: aborted, no winner, nobody rated, and the history audits as valid.
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    game = act(client, game["id"], by_seat[game["turn"]["player"]], {"type": "resign"})
    assert (game["status"], game["finish_reason"], game["winner"]) == ("finished", "aborted", None)
    # After one seat's turn only, the other resigning: aborted too (one seat had not played).
    second = rated_pair(client, tokens, "ann", "bob")
    second = play_a_turn(client, second, by_seat := seat_tokens(second, tokens))
    second = act(client, second["id"], by_seat[second["turn"]["player"]], {"type": "resign"})
    assert (second["finish_reason"], second["winner"]) == ("aborted", None)
    for game_id in (game["id"], second["id"]):
        assert client.get(f"/v1/games/{game_id}/audit").get_json()["valid"] is True
        assert verify_export(export_text(client, game_id))["valid"] is True  # the client's check
        finished = client.get(f"/v1/games/{game_id}/events?after=0&limit=100").get_json()
        last = [e for e in finished["events"] if e["type"] == "GameFinished"]
        assert last[0]["data"]["reason"] == "aborted"
        created = finished["events"][0]["data"]
        assert created["rated"] is True and created["abortable"] is True
    assert ratings_of(client, "ann") == [] and ratings_of(client, "bob") == []
    profile = client.get("/v1/accounts/ann").get_json()
    assert profile["counts"] == {"games": 2, "finished": 2, "rated": 2}  # played, not rated


def test_once_both_seats_played_a_turn_a_resignation_is_rated_as_before(
    client: FlaskClient,
) -> None:
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    game = finished_rated_game(client, tokens)
    assert game["winner"] is not None
    assert client.get(f"/v1/games/{game['id']}/audit").get_json()["valid"] is True
    assert [r["games"] for r in ratings_of(client, "ann") + ratings_of(client, "bob")] == [1, 1]


def test_unrated_games_are_not_aborted(client: FlaskClient) -> None:
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"], "clock": CLOCK})
    game = created.get_json()
    first = game["game"]["turn"]["player"]
    done = act(client, game["game"]["id"], game["seats"][first]["token"], {"type": "resign"})
    assert (done["finish_reason"], done["winner"]) == ("last_player", 1 - first)


SEED = "5" * 64


def resigned_at_once(abortable: bool | None) -> list[Json]:
    """A rated game of two, resigned before any roll: its history as served (seed revealed)."""

    def draw(nonce: int, count: int, faces: int, entropy: str | None = None) -> list[int]:
        return fairness.draw(SEED, "c", nonce, count, faces, entropy)

    setup = NewGame(
        players=["ann", "bob"],
        accounts=["ann", "bob"],
        rated=True,
        clock=CLOCK,
        client_seed="c",
        abortable=abortable,
    )
    game = Game.start(uuid.UUID(int=7), setup, server_seed=SEED, draw=draw)
    assert game.current is not None
    game.resign(game.current)
    game.reveal_seed(SEED)
    return event_records(game.collect_events())


def test_histories_replay_under_the_abort_rule_they_were_recorded_with() -> None:
    """A rated game recorded before contract 1.3 (no ``abortable``) resigned at once was won by
    the other seat, and its history still verifies; recorded since, the rules abort it, and a
    history that says otherwise (its chain computed again) is refused at that version."""
    old = resigned_at_once(abortable=False)
    assert "abortable" not in old[0]["data"]
    assert old[-2]["data"]["reason"] == "last_player"
    assert audit_records(old)["valid"] is True
    new = resigned_at_once(abortable=None)  # as the rules are now, for a rated game
    assert new[0]["data"]["abortable"] is True and new[-2]["data"]["reason"] == "aborted"
    assert audit_records(new)["valid"] is True
    forged = [dict(r, data=dict(r["data"])) for r in new]
    finished = forged[-2]
    finished["data"].update(reason="last_player", winner=old[-2]["data"]["winner"])
    for record in forged[-2:]:
        before = forged[forged.index(record) - 1]["hash"]
        record["prev_hash"] = before
        record["hash"] = chain_hash(
            before, record["version"], record["type"], record["at"], record["data"]
        )
    verdict = audit_records(forged)
    assert verdict["valid"] is False and verdict["first_bad_version"] == finished["version"]
    with pytest.raises(InvalidRequest):  # an unrated game is never abortable
        Game.start(uuid.uuid4(), NewGame(players=["a1", "b1"], dice="manual", abortable=True))


def rated_game_of(players: list[str]) -> Game:
    def draw(nonce: int, count: int, faces: int, entropy: str | None = None) -> list[int]:
        return fairness.draw(SEED, "c", nonce, count, faces, entropy)

    setup = NewGame(players=players, accounts=players, rated=True, clock=CLOCK, client_seed="c")
    return Game.start(uuid.UUID(int=8), setup, server_seed=SEED, draw=draw)


def test_an_early_resignation_aborts_a_game_of_three_at_once() -> None:
    """One seat of three resigning before everyone has played ends the game there, aborted: it
    is not left for whoever is losing to abort by resigning many rounds later."""
    game = rated_game_of(["ann", "bob", "cy"])
    assert game.current is not None
    game.resign(game.current)
    assert (game.status, game.finish_reason, game.winner) == ("finished", "aborted", None)
    game.reveal_seed(SEED)
    assert audit_records(event_records(game.collect_events()))["valid"] is True


def test_a_first_turn_that_times_out_aborts_the_game_at_once() -> None:
    game = rated_game_of(["ann", "bob"])
    deadline = game.deadline
    assert deadline is not None
    game.time_out(deadline)
    assert (game.status, game.finish_reason, game.winner) == ("finished", "aborted", None)


def folded(app: Flask, game_ids: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """Every account's rating per pool, folded from the finished rated games given, in the
    order they finished (as the ratings fold them)."""
    rt = app.extensions["cantstop"]
    rated = []
    for game_id in game_ids:
        gid = uuid.UUID(game_id)
        found = rated_game(rt.games.game(gid), rt.games.history(gid, limit=10_000))
        if found is not None:
            rated.append((found[1], found[0].game_id, found[0]))
    ratings = Ratings.of(game for _, _, game in sorted(rated, key=lambda r: r[:2]))
    return {
        (pool, handle): (r.mu, r.sigma)
        for pool, accounts in ratings.by_pool.items()
        for handle, r in accounts.items()
    }


def served(
    client: FlaskClient, handles: tuple[str, ...]
) -> dict[tuple[str, str], tuple[float, float]]:
    return {
        (r["pool"], handle): (r["mu"], r["sigma"])
        for handle in handles
        for r in ratings_of(client, handle)
    }


@pytest.mark.parametrize("first_plays", [True, False], ids=["rated", "aborted"])
def test_a_timeout_racing_a_resignation_leaves_the_fold_of_rated_games(
    app: Flask, client: FlaskClient, first_plays: bool
) -> None:
    """The seat to act lets its turn run out twice (its third timeout resigns it); then that
    third timeout and the other seat's resignation race. Whichever lands, the game ends once,
    and the ratings are the fold of the rated games as they finished. If no seat has played a
    turn of its own, the first turn's timeout and the resignation race: either aborts."""
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    earlier = finished_rated_game(client, tokens)  # a rated result before, in the same pool
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    slow = game["turn"]["player"]
    rt = app.extensions["cantstop"]
    gid = uuid.UUID(game["id"])

    def time_out() -> None:
        state = client.get(f"/v1/games/{game['id']}").get_json()
        rt.timekeeper.tick(gid, parse_at(state["turn"]["deadline"]))

    if first_plays:  # then its third timeout in a row resigns it
        game = play_a_turn(client, game, by_seat)
        game = play_a_turn(client, game, by_seat)
        for _ in range(2):
            time_out()
            game = play_a_turn(client, client.get(f"/v1/games/{game['id']}").get_json(), by_seat)
    # else its first turn's timeout aborts the game at once, as the resignation would
    assert client.get(f"/v1/games/{game['id']}").get_json()["turn"]["player"] == slow

    start = threading.Barrier(2)
    resigned: list[int] = []

    def resign() -> None:
        start.wait()
        reply = app.test_client().post(
            f"/v1/games/{game['id']}/actions",
            json={"type": "resign"},
            headers=bearer(by_seat[1 - slow]),
        )
        resigned.append(reply.status_code)

    def timeout() -> None:
        start.wait()
        time_out()

    threads = [threading.Thread(target=resign), threading.Thread(target=timeout)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert resigned and resigned[0] in (200, 409)
    final = client.get(f"/v1/games/{game['id']}").get_json()
    assert final["status"] == "finished"
    events = client.get(f"/v1/games/{game['id']}/events?limit=1000").get_json()["events"]
    assert [e["type"] for e in events].count("GameFinished") == 1
    if first_plays:
        winner = 1 - slow if resigned[0] == 409 else slow  # the timeout landed first, or not
        assert (final["finish_reason"], final["winner"]) == ("last_player", winner)
    else:
        assert (final["finish_reason"], final["winner"]) == ("aborted", None)
    expected = folded(app, [earlier["id"], game["id"]])
    now = served(client, ("ann", "bob"))
    assert now.keys() == expected.keys()
    for key, (mu, sigma) in expected.items():
        assert now[key][0] == pytest.approx(mu, abs=1e-9)
        assert now[key][1] == pytest.approx(sigma, abs=1e-9)
    assert all(r["games"] == (2 if first_plays else 1) for r in ratings_of(client, "ann"))


# ---------------------------------------------------------------------- advice and analysis
def test_advice_and_analysis_are_closed_while_a_rated_game_is_played(client: FlaskClient) -> None:
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    game = play_a_turn(client, game, by_seat)
    game_id, version = game["id"], game["version"]
    asks = [
        f"/v1/games/{game_id}/advice",
        f"/v1/games/{game_id}/advice?version={version - 1}",
        f"/v1/games/{game_id}/analysis",
        f"/v1/games/{game_id}/analysis?version=1",
    ]
    for path in asks:
        for headers in ({}, bearer(tokens["ann"]), bearer(tokens["bob"])):
            refused(client.get(path, headers=headers), 409, "rated_game_in_progress")
    # An imported copy of the game in play is never finished: it stays closed.
    copy = client.post("/v1/games/import", data=export_text(client, game_id), content_type=NDJSON)
    assert copy.status_code == 201, copy.get_json()
    copy_id = copy.get_json()["game"]["id"]
    for kind in ("advice", "analysis"):
        refused(client.get(f"/v1/games/{copy_id}/{kind}"), 409, "rated_game_in_progress")
    # An unrated game in play: advice as before. Unknown games: 404 first.
    unrated = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()["game"]
    assert client.get(f"/v1/games/{unrated['id']}/advice").status_code == 200
    assert client.get(f"/v1/games/{uuid.uuid4()}/advice").status_code == 404

    # Finished: open to everyone, at any version.
    game = play_a_turn(client, client.get(f"/v1/games/{game_id}").get_json(), by_seat)
    done = act(client, game_id, by_seat[game["turn"]["player"]], {"type": "resign"})
    assert done["status"] == "finished"
    opening = next(
        e["version"]
        for e in client.get(f"/v1/games/{game_id}/events").get_json()["events"]
        if e["type"] == "TurnOrderDecided"
    )
    advice = client.get(f"/v1/games/{game_id}/advice?version={opening}")
    assert advice.status_code == 200 and advice.get_json()["recommended"] == {"type": "roll"}
    for path in (f"/v1/games/{game_id}/analysis", f"/v1/games/{game_id}/analysis?version=1"):
        assert client.get(path).status_code in (200, 202)  # kept, or its job queued
