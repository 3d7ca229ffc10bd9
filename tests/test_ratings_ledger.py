"""The ratings ledger (contract 1.3): every rated result and every operator's exclusion, in the
order the ratings fold them; anyone folds it again (``cantstop ratings LEDGER``) and gets the
server's ratings, each line checked against its game's export; moderation through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from openskill.models import PlackettLuce

from domain.audit import audit_records, parse_export
from service.application.games.scheduler import Scheduler
from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.racing import race_cleanly

Json = dict[str, Any]
PASSWORD = "correct horse battery"
CLOCK = {"turn_seconds": 600}


def sign_up(client: FlaskClient, handle: str) -> str:
    response = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert response.status_code == 201, response.get_json()
    token: str = response.get_json()["token"]
    return token


def act(client: FlaskClient, game_id: str, token: str, action: Json) -> Json:
    reply = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    game: Json = reply.get_json()["game"]
    return game


def to_last_resignation(
    client: FlaskClient, tokens: dict[str, str], handles: list[str], *, turns: bool = True
) -> tuple[str, str]:
    """A rated game of these accounts (seats in this order) in which every seat plays one turn
    (a move, then stop), then all but the first two resign, last seat first: its id and who is
    left to resign (the second). ``turns=False``: nobody plays a turn."""
    lobby = client.post(
        "/v1/games",
        json={"seats": len(handles), "rated": True, "clock": CLOCK},
        headers=bearer(tokens[handles[0]]),
    )
    assert lobby.status_code == 201, lobby.get_json()
    game: Json = lobby.get_json()["game"]
    for handle in handles[1:]:
        joined = client.post(
            f"/v1/games/{game['id']}/players", json={}, headers=bearer(tokens[handle])
        )
        assert joined.status_code == 201, joined.get_json()
        game = joined.get_json()["game"]
    seat_of = {p["account"]: i for i, p in enumerate(game["players"])}
    token_of = {seat_of[h]: tokens[h] for h in handles}
    passed = 0
    while turns and passed < len(handles):
        player = game["turn"]["player"]
        types = [a["type"] for a in game["legal_actions"]]
        if "stop" in types:
            action: Json = {"type": "stop"}
        elif "move" in types:
            action = next(a for a in game["legal_actions"] if a["type"] == "move")
        else:
            action = {"type": "roll"}
        game = act(client, game["id"], token_of[player], action)
        if game["turn"]["player"] != player:
            passed += 1
    for handle in reversed(handles[2:]):
        act(client, game["id"], tokens[handle], {"type": "resign"})
    return game["id"], handles[1]


def rated_game(
    client: FlaskClient, tokens: dict[str, str], handles: list[str], *, turns: bool = True
) -> Json:
    """As ``to_last_resignation``, to the end: the first wins, the second comes second, …"""
    game_id, last = to_last_resignation(client, tokens, handles, turns=turns)
    game = act(client, game_id, tokens[last], {"type": "resign"})
    assert game["status"] == "finished"
    return game


def ledger(client: FlaskClient, query: str = "") -> list[Json]:
    response = client.get(f"/v1/ratings/ledger{query}")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/x-ndjson"
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines()]


def served(client: FlaskClient, handles: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """(pool, handle) → (mu, sigma) as the profiles serve them."""
    found = {}
    for handle in handles:
        for rating in client.get(f"/v1/accounts/{handle}").get_json()["ratings"]:
            found[(rating["pool"], handle)] = (rating["mu"], rating["sigma"])
    return found


def openskill_fold(lines: list[Json]) -> dict[tuple[str, str], tuple[float, float]]:
    """The ledger folded with the library alone (PlackettLuce, its defaults), independently of
    the service's code: results skipped while one of their accounts is excluded."""
    model = PlackettLuce()
    ratings: dict[tuple[str, str], Any] = {}
    excluded: set[str] = set()
    for line in sorted(lines, key=lambda entry: entry["seq"]):
        if line["type"] == "exclude":
            excluded.add(line["handle"].lower())
            continue
        if line["type"] == "reinstate":
            excluded.discard(line["handle"].lower())
            continue
        handles: list[str] = []
        ranks: list[int] = []
        for group in line["ranking"]:
            place = len(handles)
            handles += group
            ranks += [place] * len(group)
        if excluded & {h.lower() for h in handles}:
            continue
        keys = [(line["pool"], h.lower()) for h in handles]
        teams = [[ratings.get(key) or model.rating()] for key in keys]
        after = model.rate(teams, ranks=[float(r) for r in ranks])
        for key, team in zip(keys, after, strict=True):
            ratings[key] = team[0]
    return {key: (r.mu, r.sigma) for key, r in ratings.items()}


def assert_close(
    found: dict[tuple[str, str], tuple[float, float]],
    expected: dict[tuple[str, str], tuple[float, float]],
) -> None:
    assert set(found) == set(expected)
    for key, (mu, sigma) in expected.items():
        assert abs(found[key][0] - mu) <= 1e-9 and abs(found[key][1] - sigma) <= 1e-9, key


def moderate(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cantstop accounts …`` against the store, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
    env["CANTSTOP_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "accounts", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )


HANDLES = ["ann", "bob", "cy", "dee"]


@pytest.fixture
def players(client: FlaskClient) -> dict[str, str]:
    return {handle: sign_up(client, handle) for handle in HANDLES}


def test_the_ledger_folds_to_openskill_on_two_three_and_four_players_with_an_exclusion(
    client: FlaskClient, app: Flask, players: dict[str, str]
) -> None:
    rt = app.extensions["cantstop"]
    rated_game(client, players, ["ann", "bob"])
    rated_game(client, players, ["bob", "ann", "cy"])
    rated_game(client, players, ["cy", "dee", "ann", "bob"])
    rt.accounts.moderate("Bob", exclude=True, reason="engine help")
    assert client.get("/v1/accounts/bob").get_json()["excluded"] is True
    at_exclusion = served(client, HANDLES)
    skipped = [
        rated_game(client, players, ["ann", "bob"]),  # bob in it: rates nobody
        rated_game(client, players, ["dee", "cy", "bob", "ann"]),
    ]
    assert served(client, HANDLES) == at_exclusion  # nobody's rating moved, in any pool
    rated_game(client, players, ["cy", "ann", "dee"])  # without bob: rated
    rt.accounts.moderate("bob", exclude=False, reason="appeal upheld")
    assert client.get("/v1/accounts/bob").get_json()["excluded"] is False
    rated_game(client, players, ["bob", "ann"])
    rated_game(client, players, ["dee", "bob", "cy", "ann"])

    lines = ledger(client)
    assert [line["seq"] for line in lines] == list(range(1, 11))
    kinds = [line["type"] for line in lines]
    assert kinds == ["result"] * 3 + ["exclude"] + ["result"] * 3 + ["reinstate"] + ["result"] * 2
    assert lines[3] | {"at": "…"} == {
        "seq": 4,
        "type": "exclude",
        "handle": "bob",
        "at": "…",
        "reason": "engine help",
    }
    assert lines[2]["ranking"] == [["cy"], ["dee"], ["ann"], ["bob"]]
    assert {lines[4]["game_id"], lines[5]["game_id"]} == {g["id"] for g in skipped}
    assert {len(line["ranking"]) for line in lines if line["type"] == "result"} == {2, 3, 4}
    profiles = served(client, HANDLES)
    assert_close(profiles, openskill_fold(lines))
    # Rebuilt from the log: the same ledger, the same numbers, to the last bit.
    rt.views.rebuild(rt.ratings)
    assert ledger(client) == lines
    assert served(client, HANDLES) == profiles


def test_every_result_line_matches_its_games_export_and_its_audit(
    client: FlaskClient, players: dict[str, str]
) -> None:
    games = [rated_game(client, players, ["ann", "bob"]), rated_game(client, players, HANDLES)]
    lines = ledger(client)
    assert [line["game_id"] for line in lines] == [g["id"] for g in games]
    for line, game in zip(lines, games, strict=True):
        export = client.get(f"/v1/games/{line['game_id']}/export")
        header, records = parse_export(export.get_data())
        assert header["game_id"] == line["game_id"]
        assert records[-1]["hash"] == line["last_hash"]
        finished = next(r for r in records if r["type"] == "GameFinished")
        assert finished["at"] == line["finished_at"]
        assert audit_records(records)["valid"] is True
        winner = game["players"][game["winner"]]["account"]
        assert line["ranking"][0] == [winner]


def test_aborted_games_rate_nobody_and_are_not_in_the_ledger(
    client: FlaskClient, players: dict[str, str]
) -> None:
    aborted = rated_game(client, players, ["ann", "bob"], turns=False)
    assert aborted["finish_reason"] == "aborted"
    played = rated_game(client, players, ["ann", "bob"])
    assert [line["game_id"] for line in ledger(client)] == [played["id"]]
    assert [r["games"] for r in client.get("/v1/accounts/ann").get_json()["ratings"]] == [1]


def test_an_abandoned_rated_game_rates_nobody_and_is_not_in_the_ledger(database_url: str) -> None:
    """Both seats played a turn, then nobody acted for ``abandon_after`` (shorter here than the
    turn clock): the scheduler ends it, abandoned, and it rates nobody."""
    app = create_app(Settings(database_url=database_url, abandon_after=60), create_tables=True)
    rt = app.extensions["cantstop"]
    try:
        client = app.test_client()
        tokens = {handle: sign_up(client, handle) for handle in ("ann", "bob")}
        idle, _ = to_last_resignation(client, tokens, ["ann", "bob"])
        played = rated_game(client, tokens, ["ann", "bob"])
        now = [datetime.now(UTC) + timedelta(seconds=61)]
        scheduler = Scheduler(rt.games, rt.timekeeper, rt.views, clock=lambda: now[0])
        scheduler.refresh()
        scheduler.run_due()
        state = client.get(f"/v1/games/{idle}").get_json()
        assert (state["status"], state["finish_reason"]) == ("finished", "abandoned")
        assert [line["game_id"] for line in ledger(client)] == [played["id"]]
        assert [r["games"] for r in client.get("/v1/accounts/bob").get_json()["ratings"]] == [1]
    finally:
        rt.close()


def test_the_ledger_pages_by_seq_and_filters_by_pool(
    client: FlaskClient, app: Flask, players: dict[str, str]
) -> None:
    for _ in range(3):
        rated_game(client, players, ["ann", "bob"])
    app.extensions["cantstop"].accounts.moderate("dee", exclude=True, reason="spam")
    rated_game(client, players, ["ann", "bob", "cy"])
    everything = ledger(client)
    assert [line["seq"] for line in everything] == [1, 2, 3, 4, 5]
    first = client.get("/v1/ratings/ledger?limit=2")
    assert first.headers["Link"] == '</v1/ratings/ledger?after=2&limit=2>; rel="next"'
    pages = [json.loads(line) for line in first.get_data(as_text=True).splitlines()]
    pages += ledger(client, "?after=2&limit=2") + ledger(client, "?after=4&limit=2")
    assert pages == everything
    last = client.get("/v1/ratings/ledger?after=4&limit=2")
    assert "Link" not in last.headers  # not full: the end
    # Past the end: no line at all (the checking client's validator takes no body for none).
    assert client.application.test_client().get("/v1/ratings/ledger?after=5").data == b""
    two = everything[0]["pool"]
    by_pool = ledger(client, f"?pool={two}")
    assert [line["seq"] for line in by_pool] == [1, 2, 3, 4]  # its results and the exclusion
    for query in ("?limit=0", "?limit=10001", "?after=-1", "?pool=2p-xyz", "?after=x"):
        refused = client.get(f"/v1/ratings/ledger{query}")
        assert (refused.status_code, refused.get_json()["code"]) == (422, "invalid_request")


def test_operators_exclude_and_reinstate_through_the_cli_and_the_offline_fold_agrees(
    client: FlaskClient, database_url: str, players: dict[str, str], tmp_path: Path
) -> None:
    for _ in range(10):
        rated_game(client, players, ["ann", "bob"])
    pool = ledger(client)[0]["pool"]
    board = client.get(f"/v1/leaderboards/{pool}").get_json()
    assert {entry["handle"] for entry in board["ranking"]} == {"ann", "bob"}

    done = moderate(database_url, "exclude", "BOB", "--reason", "played with the expert's help")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["excluded"] is True
    profile = client.get("/v1/accounts/bob").get_json()
    assert profile["excluded"] is True and profile["ratings"][0]["games"] == 10
    board = client.get(f"/v1/leaderboards/{pool}").get_json()
    assert [entry["handle"] for entry in board["ranking"]] == ["ann"]  # bob drops off
    lines = ledger(client)
    assert lines[-1]["type"] == "exclude" and lines[-1]["reason"] == "played with the expert's help"

    # Refused: nothing recorded.
    for args in (
        ("exclude", "bob", "--reason", "again"),
        ("reinstate", "cy", "--reason", "never excluded"),
        ("exclude", "nobody", "--reason", "unknown"),
        ("exclude", "cy", "--reason", "  "),
    ):
        refused = moderate(database_url, *args)
        assert refused.returncode == 1 and refused.stderr.startswith("cantstop: "), args
    missing = moderate(database_url, "exclude", "cy")
    assert missing.returncode == 2  # --reason is required
    assert ledger(client) == lines

    rated_game(client, players, ["bob", "ann"])  # skipped
    done = moderate(database_url, "reinstate", "bob", "--reason", "appeal upheld")
    assert done.returncode == 0, done.stderr
    rated_game(client, players, ["bob", "ann"])
    rated_game(client, players, ["cy", "dee", "bob"])
    assert client.get("/v1/accounts/bob").get_json()["excluded"] is False
    board = client.get(f"/v1/leaderboards/{pool}").get_json()
    assert {entry["handle"] for entry in board["ranking"]} == {"ann", "bob"}

    saved = tmp_path / "ledger.ndjson"
    saved.write_bytes(client.get("/v1/ratings/ledger").get_data())
    offline = offline_ratings(saved)
    assert offline.returncode == 0, offline.stderr
    report = json.loads(offline.stdout)
    assert (report["entries"], report["games"], report["skipped"]) == (15, 12, 1)
    recomputed = {
        (r["pool"], a["handle"]): (r["mu"], r["sigma"])
        for a in report["accounts"]
        for r in a["ratings"]
    }
    assert_close(recomputed, served(client, HANDLES))
    assert report["excluded"] == []


def test_a_store_built_before_the_ledger_serves_its_ratings_until_rebuilt(
    client: FlaskClient, app: Flask, players: dict[str, str]
) -> None:
    """An upgraded host over a version-1 ratings view (no ledger, no exclusions yet): its
    leaderboards answer as before, its ledger is 503 until ``projections rebuild ratings``."""
    rt = app.extensions["cantstop"]
    rated_game(client, players, ["ann", "bob"])
    lines = ledger(client)
    generation = rt.views.tracking(rt.ratings).generation
    with rt.games.store.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute("UPDATE cantstop_views SET version = 1 WHERE name = 'ratings'")
        for table in ("ledger", "excluded"):
            cursor.execute(f"DROP TABLE cantstop_view_ratings_{table}_g{generation}")
    board = client.get(f"/v1/leaderboards/{lines[0]['pool']}")
    assert board.status_code == 200 and board.get_json()["ranking"] == []
    refused = client.get("/v1/ratings/ledger")
    assert (refused.status_code, refused.get_json()["code"]) == (503, "store_unavailable")
    assert "projections rebuild ratings" in refused.get_json()["detail"]
    rt.views.rebuild(rt.ratings)
    assert ledger(client) == lines


def offline_ratings(path: Path) -> subprocess.CompletedProcess[str]:
    """``cantstop ratings FILE``, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "ratings", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_saved_ledger_that_is_not_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.ndjson"
    line = {"seq": 2, "type": "result", "pool": "2p-0123456789", "ranking": [["a"], ["b"]]}
    path.write_text(json.dumps(line) + "\n" + json.dumps(line | {"seq": 1}) + "\n")
    done = offline_ratings(path)
    assert done.returncode == 2 and "entry 2" in done.stderr  # out of order
    # nested past any ledger's depth (a RecursionError's traceback, before): a clear refusal
    path.write_text(json.dumps(line | {"seq": 1}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    deep = offline_ratings(path)
    assert deep.returncode == 2 and "entry 2" in deep.stderr, deep.stderr[-500:]
    assert "Traceback" not in deep.stderr


# ----------------------------------------------------------------------------------- races
@pytest.fixture
def two_hosts(postgres_url: str) -> Iterator[tuple[Flask, Flask]]:
    """Two hosts' apps on one PostgreSQL store."""
    one = create_app(Settings(database_url=postgres_url), create_tables=True)
    two = create_app(Settings(database_url=postgres_url))
    yield one, two
    one.extensions["cantstop"].close()
    two.extensions["cantstop"].close()


def test_an_exclusion_racing_games_that_finish_leaves_the_ratings_the_ledgers_fold(
    two_hosts: tuple[Flask, Flask],
) -> None:
    """Each round, on two hosts at once: two rated games of bob's end, an operator excludes (or
    reinstates) him, and both hosts move the ratings view on."""
    clients = [app.test_client() for app in two_hosts]
    runtimes = [app.extensions["cantstop"] for app in two_hosts]
    tokens = {handle: sign_up(clients[0], handle) for handle in HANDLES}

    def play_round(round_: int) -> None:
        games = [
            to_last_resignation(clients[0], tokens, ["ann", "bob"]),
            to_last_resignation(clients[1], tokens, ["cy", "dee", "bob"]),
        ]

        def finish(i: int) -> None:
            game_id, last = games[i]
            act(clients[i], game_id, tokens[last], {"type": "resign"})

        def moderate_bob() -> None:
            exclude = round_ % 2 == 0
            runtimes[1].accounts.moderate("bob", exclude=exclude, reason=f"round {round_}")

        def catch_up(i: int) -> None:
            runtimes[i].views.catch_up(runtimes[i].ratings)

        race_cleanly(
            [
                partial(finish, 0),
                partial(finish, 1),
                moderate_bob,
                partial(catch_up, 0),
                partial(catch_up, 1),
            ],
            timeout=60,
        )

    for round_ in range(3):
        play_round(round_)
    lines = ledger(clients[1])
    assert [line["seq"] for line in lines] == list(range(1, 10))
    assert [line["type"] for line in lines].count("result") == 6
    fold = openskill_fold(lines)
    for client in clients:
        assert_close(served(client, HANDLES), fold)
