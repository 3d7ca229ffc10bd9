"""Tournaments in the service (issue #45): a Swiss of 9 bot accounts at tables of 3 for 3 rounds
and an arena of 6 for a window, played to the end through the API by a driver acting for each
account, on SQLite and on PostgreSQL with two hosts' schedulers racing; then the invariants
(every table's game created once, seats bound to the table's accounts, nobody at two open tables,
``game_started`` to every player) and the attacks.

The games are real: server dice, ``columns_to_win`` 1 so that a table ends in a few turns. The
arena's window is closed by moving the service's clock (``Tournaments.clock``) past its end, on
every host, rather than by waiting a minute: the events are stamped by that clock, so the
tournament's history stays in order.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.polling import wait_until
from tests.support.servers import run_scheduler

Json = dict[str, Any]
PASSWORD = "correct horse battery"
FAST = {"columns_to_win": 1}
CLOCK = {"turn_seconds": 60}
CLOCKED = {"clock": CLOCK}
LIMITS = "signin=1000/minute,tournament=1000/hour"


def settings_of(database_url: str, limits: str = LIMITS) -> Settings:
    return Settings(database_url=database_url, rate_limits=limits)


@pytest.fixture
def hosts(database_url: str) -> Iterator[list[Flask]]:
    """One host on SQLite; two on PostgreSQL (one store), each with its scheduler."""
    count = 2 if database_url.startswith("postgres") else 1
    apps = [create_app(settings_of(database_url), create_tables=True) for _ in range(count)]
    stops = [run_scheduler(app) for app in apps]
    yield apps
    for stop in stops:
        stop()
    for app in apps:
        app.extensions["cantstop"].close()


def client_of(app: Flask) -> FlaskClient:
    return app.test_client()


def sign_up(client: FlaskClient, handle: str, *, bot: bool = True) -> str:
    body: Json = (
        {"handle": handle, "bot": True} if bot else {"handle": handle, "password": PASSWORD}
    )
    reply = client.post("/v1/accounts", json=body)
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def create(client: FlaskClient, token: str, **body: Any) -> Json:
    payload = {"name": "Friday", "clock": CLOCK, "rules": FAST, **body}
    reply = client.post("/v1/tournaments", json=payload, headers=bearer(token))
    assert reply.status_code == 201, reply.get_json()
    tournament: Json = reply.get_json()["tournament"]
    return tournament


def register(client: FlaskClient, tid: str, token: str) -> None:
    reply = client.post(f"/v1/tournaments/{tid}/players", headers=bearer(token))
    assert reply.status_code == 201, reply.get_json()


def act(client: FlaskClient, game_id: str, token: str, action: Json) -> Json | None:
    """The action, or None if refused (the game moved on meanwhile: a timeout, another host)."""
    reply = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    if reply.status_code != 200:
        return None
    game: Json = reply.get_json()["game"]
    return game


def play_a_turn(client: FlaskClient, game: Json, tokens: dict[str, str]) -> None:
    """The seat on turn rolls, takes the first move and stops (or busts)."""
    seat = game["turn"]["player"]
    handle = game["players"][seat]["account"]
    if handle not in tokens:
        return  # an idle account: the clock ends its turns
    token = tokens[handle]
    game_id = game["id"]
    state = act(client, game_id, token, {"type": "roll"})
    if state is None or state["turn"] is None or state["turn"]["player"] != seat:
        return
    move = next((a for a in state["legal_actions"] if a["type"] == "move"), None)
    if move is None:
        return
    if act(client, game_id, token, {"type": "move", "sums": move["sums"]}) is not None:
        act(client, game_id, token, {"type": "stop"})


def drive(client: FlaskClient, tid: str, tokens: dict[str, str], seconds: float = 120) -> Json:
    """Play every open table's turns for its accounts until the tournament finishes."""
    found: Json = {}

    def finished() -> bool:
        nonlocal found
        found = client.get(f"/v1/tournaments/{tid}").get_json()
        if found["status"] == "finished":
            return True
        for table in found["tables"]:
            if table["result"] is not None:
                continue
            game = client.get(f"/v1/games/{table['game_id']}").get_json()
            if game["status"] == "in_progress":
                play_a_turn(client, game, tokens)
        return False

    wait_until(finished, seconds, f"tournament {tid} to finish")
    return found


def export(client: FlaskClient, tid: str) -> list[Json]:
    import json

    reply = client.get(f"/v1/tournaments/{tid}/export")
    assert reply.status_code == 200
    assert reply.mimetype == "application/x-ndjson"
    return [json.loads(line) for line in reply.get_data(as_text=True).splitlines()]


def never_two_open_tables(lines: list[Json]) -> None:
    """Replaying the export: nobody is seated while at a table without a result."""
    at_table: dict[str, str] = {}  # lower handle -> game id
    for line in lines[1:]:
        data = line["data"]
        seated = (
            data["tables"]
            if line["type"] == "RoundPaired"
            else [data]
            if line["type"] == "TableSeated"
            else []
        )
        for table in seated:
            for handle in table["players"]:
                assert handle.lower() not in at_table, (handle, table["game_id"])
                at_table[handle.lower()] = table["game_id"]
        if line["type"] == "ResultRecorded":
            for handle, game_id in list(at_table.items()):
                if game_id == data["game_id"]:
                    del at_table[handle]


def tables_created_once(hosts: list[Flask], client: FlaskClient, body: Json) -> None:
    """Each table's game exists, once, its seats bound to the table's accounts in order, rated
    as the tournament, with its clock; together the hosts created each exactly once."""
    tables = body["tables"]
    ids = [t["game_id"] for t in tables]
    assert len(ids) == len(set(ids))
    made = sum(app.extensions["cantstop"].tournaments.created_tables for app in hosts)
    assert made == len(tables)
    for table in tables:
        game = client.get(f"/v1/games/{table['game_id']}").get_json()
        assert [p["account"] for p in game["players"]] == table["players"]
        assert game["rated"] == body["rated"]
        assert game["clock"] == body["clock"]
        assert game["status"] == "finished"


def game_started_reached_everyone(app: Flask, body: Json) -> None:
    rt = app.extensions["cantstop"]
    for table in body["tables"]:
        for handle in table["players"]:

            def told(handle: str = handle, game_id: str = table["game_id"]) -> bool:
                rt.notices.move_on()
                return any(
                    n.type == "game_started" and game_id in n.text
                    for n in rt.notices.after(handle.lower(), 0, 1000)
                )

            wait_until(told, 10, f"game_started to {handle}")


def test_a_swiss_of_nine_at_tables_of_three_is_played_to_the_end(hosts: list[Flask]) -> None:
    client = client_of(hosts[0])
    creator = sign_up(client, "organizer", bot=False)
    tokens = {f"swissbot{i}": sign_up(client, f"swissbot{i}") for i in range(9)}
    body = create(client, creator, kind="swiss", players_per_table=3, rounds=3, rated=True)
    tid = body["id"]
    assert body["status"] == "created" and body["players"] == []
    clients = [client_of(app) for app in hosts]
    for n, token in enumerate(tokens.values()):  # registrations through either host
        register(clients[n % len(clients)], tid, token)
    started = client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator))
    assert started.status_code == 200, started.get_json()
    assert started.get_json()["status"] == "started"

    final = drive(client, tid, tokens)

    assert final["finish_reason"] == "completed"
    assert [r["number"] for r in final["rounds"]] == [1, 2, 3]
    assert all(len(r["tables"]) == 3 and len(r["byes"]) == 0 for r in final["rounds"])
    assert len(final["tables"]) == 9
    standings = client.get(f"/v1/tournaments/{tid}/standings").get_json()["standings"]
    assert standings == final["standings"]
    assert [s["rank"] for s in standings] == list(range(1, 10))
    assert sum(s["games"] for s in standings) == 27
    points = [s["points"] for s in standings]
    assert points == sorted(points, reverse=True)
    assert sum(points) == pytest.approx(9 * (2 + 1 + 0))  # 2, 1, 0 at each table of three
    tables_created_once(hosts, client, final)
    lines = export(client, tid)
    assert lines[0] == {"format": "cantstop-tournament", "format_version": 1, "tournament_id": tid}
    never_two_open_tables(lines)
    assert sum(1 for line in lines[1:] if line["type"] == "RoundPaired") == 3
    assert sum(1 for line in lines[1:] if line["type"] == "ResultRecorded") == 9
    game_started_reached_everyone(hosts[-1], final)
    listed = client.get("/v1/tournaments?status=finished").get_json()["tournaments"]
    assert [t["id"] for t in listed] == [tid]


def test_an_arena_of_six_seats_tables_until_its_window_closes(hosts: list[Flask]) -> None:
    client = client_of(hosts[0])
    creator = sign_up(client, "arenaboss", bot=False)
    tokens = {f"arenabot{i}": sign_up(client, f"arenabot{i}") for i in range(6)}
    body = create(client, creator, kind="arena", players_per_table=2, minutes=1)
    tid = body["id"]
    for token in tokens.values():
        register(client, tid, token)
    assert client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator)).status_code == 200
    offset = [timedelta(0)]

    def shifted() -> datetime:
        return datetime.now(UTC) + offset[0]

    for app in hosts:
        app.extensions["cantstop"].tournaments.clock = shifted
    seen: Json = {}

    def played_some() -> bool:  # at least six tables finished: players were seated again
        nonlocal seen
        seen = client.get(f"/v1/tournaments/{tid}").get_json()
        done = [t for t in seen["tables"] if t["result"] is not None]
        if len(done) >= 6:
            return True
        for table in seen["tables"]:
            if table["result"] is None:
                game = client.get(f"/v1/games/{table['game_id']}").get_json()
                if game["status"] == "in_progress":
                    play_a_turn(client, game, tokens)
        return False

    wait_until(played_some, 120, "six arena tables to finish")
    offset[0] = timedelta(minutes=2)  # the window closes: tables under way finish and count
    final = drive(client, tid, tokens)
    assert final["finish_reason"] == "completed"
    assert len(final["tables"]) >= 6
    assert {p for t in final["tables"] for p in t["players"]} == set(tokens)
    tables_created_once(hosts, client, final)
    lines = export(client, tid)
    never_two_open_tables(lines)
    seated = [line for line in lines[1:] if line["type"] == "TableSeated"]
    assert len(seated) == len(final["tables"])
    standings = final["standings"]
    assert sum(s["games"] for s in standings) == 2 * len(final["tables"]) - sum(
        2 for t in final["tables"] if t["result"]["aborted"]
    )
    game_started_reached_everyone(hosts[-1], final)


# ------------------------------------------------------------------------------- attacks
@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    application = create_app(settings_of(database_url), create_tables=True)
    yield application
    application.extensions["cantstop"].close()


def test_registering_twice_even_racing_is_one_registration(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host1", bot=False)
    ann = sign_up(client, "ann")
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    answers: list[int] = []
    lock = threading.Lock()

    def go() -> None:
        reply = app.test_client().post(f"/v1/tournaments/{tid}/players", headers=bearer(ann))
        with lock:
            answers.append(reply.status_code)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201] + [409] * 5
    again = client.post(f"/v1/tournaments/{tid}/players", headers=bearer(ann))
    assert again.status_code == 409 and again.get_json()["code"] == "already_registered"
    assert client.get(f"/v1/tournaments/{tid}").get_json()["players"] == ["ann"]


def test_a_started_swiss_takes_no_registration(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host2", bot=False)
    players = [sign_up(client, f"p{i}") for i in range(3)]
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    for token in players[:2]:
        register(client, tid, token)
    assert client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator)).status_code == 200
    late = client.post(f"/v1/tournaments/{tid}/players", headers=bearer(players[2]))
    assert late.status_code == 409 and late.get_json()["code"] == "tournament_started"
    body = client.get(f"/v1/tournaments/{tid}").get_json()
    assert len(body["rounds"]) == 1 and body["rounds"][0]["tables"][0]["players"]


def test_only_the_account_withdraws_itself_and_only_the_creator_starts(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host3", bot=False)
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    register(client, tid, ann)
    register(client, tid, bob)
    other = client.delete(f"/v1/tournaments/{tid}/players/ann", headers=bearer(bob))
    assert other.status_code == 403 and other.get_json()["code"] == "not_your_registration"
    nobody = client.delete(f"/v1/tournaments/{tid}/players/ann")
    assert nobody.status_code == 401
    start = client.post(f"/v1/tournaments/{tid}/start", headers=bearer(ann))
    assert start.status_code == 403 and start.get_json()["code"] == "not_tournament_creator"
    gone = client.delete(f"/v1/tournaments/{uuid.uuid4()}/players/ann", headers=bearer(ann))
    assert gone.status_code == 404
    for _ in range(2):  # idempotent
        mine = client.delete(f"/v1/tournaments/{tid}/players/ann", headers=bearer(ann))
        assert mine.status_code == 204
    assert client.get(f"/v1/tournaments/{tid}").get_json()["players"] == ["bob"]


@pytest.mark.parametrize("count", [0, 1])
def test_too_few_players_end_with_a_clear_reason(app: Flask, count: int) -> None:
    client = client_of(app)
    creator = sign_up(client, "host4", bot=False)
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=2)["id"]
    for i in range(count):
        register(client, tid, sign_up(client, f"solo{i}"))
    started = client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator))
    assert started.status_code == 200
    body = started.get_json()
    assert body["status"] == "finished" and body["finish_reason"] == "not_enough_players"
    assert body["rounds"] == []


def test_a_tournament_due_starts_by_itself(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host5", bot=False)
    soon = datetime.now(UTC) + timedelta(seconds=1)
    body = create(
        client,
        creator,
        kind="swiss",
        players_per_table=2,
        rounds=1,
        starts_at=soon.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    )
    stop = run_scheduler(app)
    try:
        wait_until(
            lambda: client.get(f"/v1/tournaments/{body['id']}").get_json()["status"] == "finished",
            10,
            "the tournament to start (and end: nobody registered)",
        )
    finally:
        stop()
    assert client.get(f"/v1/tournaments/{body['id']}").get_json()["finish_reason"] == (
        "not_enough_players"
    )


def test_a_player_who_never_moves_is_timed_out_and_the_round_ends(app: Flask) -> None:
    """Two players at a 5 s clock: one never acts; three timeouts resign it, the game ends, and
    the Swiss (one round) finishes with its result."""
    client = client_of(app)
    creator = sign_up(client, "host6", bot=False)
    active, idle = sign_up(client, "active"), sign_up(client, "idle")
    tid = create(
        client, creator, kind="swiss", players_per_table=2, rounds=1, clock={"turn_seconds": 5}
    )["id"]
    register(client, tid, active)
    register(client, tid, idle)
    stop = run_scheduler(app)
    try:
        client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator))
        final = drive(client, tid, {"active": active}, seconds=90)
    finally:
        stop()
    assert final["status"] == "finished"
    result = final["tables"][0]["result"]
    assert result is not None
    if not result["aborted"]:  # the idle player resigned (timed out) below the active one
        assert result["places"]["active"] < result["places"]["idle"]


def test_creation_is_rate_limited(database_url: str) -> None:
    application = create_app(
        settings_of(database_url, "signin=1000/minute,tournament=2/hour"), create_tables=True
    )
    try:
        client = client_of(application)
        token = sign_up(client, "busy", bot=False)
        for _ in range(2):
            create(client, token, kind="swiss", players_per_table=2, rounds=1)
        third = client.post(
            "/v1/tournaments",
            json={
                "name": "x",
                "kind": "swiss",
                "players_per_table": 2,
                "rounds": 1,
                "clock": CLOCK,
            },
            headers=bearer(token),
        )
        assert third.status_code == 429 and third.get_json()["code"] == "rate_limited"
    finally:
        application.extensions["cantstop"].close()


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "swiss", "players_per_table": 2, "rounds": 1},  # no name
        {"name": "x" * 81, "kind": "swiss", "players_per_table": 2, "rounds": 1},
        {"name": "a\nb", "kind": "swiss", "players_per_table": 2, "rounds": 1},
        {"name": "x", "kind": "knockout", "players_per_table": 2, "rounds": 1},
        {"name": "x", "kind": "swiss", "players_per_table": 9, "rounds": 1},
        {"name": "x", "kind": "swiss", "players_per_table": 1, "rounds": 1},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 0},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 21},
        {"name": "x", "kind": "swiss", "players_per_table": 2},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 1, "minutes": 5},
        {"name": "x", "kind": "arena", "players_per_table": 2, "minutes": 0},
        {"name": "x", "kind": "arena", "players_per_table": 2, "minutes": 1441},
        {"name": "x", "kind": "arena", "players_per_table": 2, "minutes": 1.5},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 1, "clock": None},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 1, "starts_at": "then"},
        {
            "name": "x",
            "kind": "swiss",
            "players_per_table": 2,
            "rounds": 1,
            "starts_at": "2020-01-01T00:00:00Z",
        },
        {
            "name": "x",
            "kind": "swiss",
            "players_per_table": 2,
            "rounds": 1,
            "starts_at": "2999-01-01T00:00:00Z",
        },
        {
            "name": "x",
            "kind": "swiss",
            "players_per_table": 2,
            "rounds": 1,
            "rules": {"solitaire": "easy"},
        },
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 1, "creator": "admin"},
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": True},
        {"name": "x", "kind": "swiss", "players_per_table": "2", "rounds": 1},
    ],
)
def test_bad_creations_are_refused_with_nothing_recorded(app: Flask, body: Json) -> None:
    client = client_of(app)
    token = sign_up(client, "picky", bot=False)
    payload = {"clock": CLOCK, **body}
    if payload.get("clock") is None:
        payload.pop("clock")
    reply = client.post("/v1/tournaments", json=payload, headers=bearer(token))
    assert reply.status_code == 422, reply.get_json()
    assert reply.get_json()["code"] in ("invalid_request", "rated_needs_clock")
    assert client.get("/v1/tournaments").get_json()["tournaments"] == []


def test_huge_and_forged_requests_are_refused(app: Flask) -> None:
    client = client_of(app)
    token = sign_up(client, "forger", bot=False)
    huge = client.post(
        "/v1/tournaments",
        data=b'{"name": "' + b"x" * 400_000 + b'"}',
        headers={**bearer(token), "Content-Type": "application/json"},
    )
    assert huge.status_code == 413
    unsigned = client.post("/v1/tournaments", json={"name": "x"})
    assert unsigned.status_code == 401
    forged = client.post("/v1/tournaments", json={"name": "x"}, headers=bearer("cs_forged"))
    assert forged.status_code == 401
    assert client.get("/v1/tournaments/not-a-uuid").status_code == 404
    assert client.get(f"/v1/tournaments/{uuid.uuid4()}").status_code == 404
    assert client.get("/v1/tournaments?status=open").status_code == 422
    assert client.get("/v1/tournaments?cursor=-1").status_code == 422


def test_a_closed_account_is_withdrawn(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host7", bot=False)
    leaver = sign_up(client, "leaver")
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    register(client, tid, leaver)
    assert client.delete("/v1/account", headers=bearer(leaver)).status_code == 204
    body = client.get(f"/v1/tournaments/{tid}").get_json()
    assert body["players"] == []
    lines = export(client, tid)
    assert lines[-1]["type"] == "Withdrawn"
    assert lines[-1]["data"] == {"handle": "leaver", "reason": "account_closed"}
