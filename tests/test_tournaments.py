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

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import Repository
from flask import Flask
from flask.testing import FlaskClient
from openapi_core import OpenAPI

from domain.tournament import Tournament, audit_tournament, parse_tournament_export, replayed
from service.config import Settings
from service.http.app import create_app
from tests.conftest import CheckedClient
from tests.support.http import bearer
from tests.support.polling import wait_until
from tests.support.racing import race_cleanly
from tests.support.servers import run_scheduler
from tests.support.spec import load_spec, validator

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


SPEC: list[OpenAPI] = []


@pytest.fixture(autouse=True)
def _validated(openapi_spec: OpenAPI) -> Iterator[None]:
    """Every /v1/ request and answer of these tests is checked against openapi.yaml."""
    SPEC.append(openapi_spec)
    yield
    SPEC.clear()


def client_of(app: Flask) -> FlaskClient:
    app.test_client_class = CheckedClient
    client = app.test_client()
    assert isinstance(client, CheckedClient)
    client.spec = SPEC[0]
    return client


def plain_of(app: Flask) -> FlaskClient:
    """A client whose answers are not checked against openapi.yaml: the driver's many game
    reads and actions (the games' endpoints have tests of their own)."""
    return FlaskClient(app, app.response_class)


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
    checked, client = client, plain_of(client.application)

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
    served: Json = checked.get(f"/v1/tournaments/{tid}").get_json()  # checked by openapi.yaml
    assert served == found
    return served


def export(client: FlaskClient, tid: str) -> list[Json]:
    reply = client.get(f"/v1/tournaments/{tid}/export")
    assert reply.status_code == 200
    assert reply.mimetype == "application/x-ndjson"
    return [json.loads(line) for line in reply.get_data(as_text=True).splitlines()]


def audited(client: FlaskClient, tid: str, body: Json, folder: Path) -> Json:
    """The domain's audit of the tournament's export, as served, with every table's game
    export: pairings and seatings recomputed by the rule, standings from the results, and each
    result against its game; then ``cantstop audit`` of the files, as an auditor runs it, to the
    same verdict. The verdict."""
    raw = client.get(f"/v1/tournaments/{tid}/export").get_data()
    header, records = parse_tournament_export(raw)
    plain = plain_of(client.application)
    games: dict[str, Any] = {}
    texts = []
    for table in body["tables"]:
        text = plain.get(f"/v1/games/{table['game_id']}/export").get_data(as_text=True)
        texts.append(text)
        lines = [json.loads(line) for line in text.splitlines()]
        games[table["game_id"]] = (lines[0], lines[1:])
    verdict = audit_tournament(header, records, games)
    assert verdict["valid"], verdict
    assert {c["name"] for c in verdict["checks"]} >= {"pairings", "standings", "games"}
    assert verdict["standings"] == body["standings"]
    (folder / "tournament.ndjson").write_bytes(raw)
    (folder / "games.ndjson").write_text("".join(texts))
    command = ["audit", "tournament.ndjson", "--games", "games.ndjson"]
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *command],
        capture_output=True,
        text=True,
        check=False,
        cwd=folder,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == verdict
    return verdict


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


def test_a_swiss_of_nine_at_tables_of_three_is_played_to_the_end(
    hosts: list[Flask], tmp_path: Path
) -> None:
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
    assert lines[0]["format"] == "cantstop-tournament" and lines[0]["tournament_id"] == tid
    never_two_open_tables(lines)
    audited(client, tid, final, tmp_path)
    assert sum(1 for line in lines[1:] if line["type"] == "RoundPaired") == 3
    assert sum(1 for line in lines[1:] if line["type"] == "ResultRecorded") == 9
    game_started_reached_everyone(hosts[-1], final)
    listed = client.get("/v1/tournaments?status=finished").get_json()["tournaments"]
    assert [t["id"] for t in listed] == [tid]


def test_an_arena_of_six_seats_tables_until_its_window_closes(
    hosts: list[Flask], tmp_path: Path
) -> None:
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

    plain = plain_of(hosts[0])

    def played_some() -> bool:  # at least six tables finished: players were seated again
        nonlocal seen
        seen = plain.get(f"/v1/tournaments/{tid}").get_json()
        done = [t for t in seen["tables"] if t["result"] is not None]
        if len(done) >= 6:
            return True
        for table in seen["tables"]:
            if table["result"] is None:
                game = plain.get(f"/v1/games/{table['game_id']}").get_json()
                if game["status"] == "in_progress":
                    play_a_turn(plain, game, tokens)
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
    audited(client, tid, final, tmp_path)
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

    def go() -> int:
        return (
            client_of(app).post(f"/v1/tournaments/{tid}/players", headers=bearer(ann)).status_code
        )

    answers = race_cleanly([go] * 6)
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


def test_one_its_creator_never_starts_is_abandoned_after_a_month_untouched(app: Flask) -> None:
    """A tournament to be started by its creator, left alone: due IDLE after its last event (a
    registration moves that on), then finished as abandoned by the scheduler's chore, which the
    audit accepts; not a moment before. (It was listed as open for ever.)"""
    client = client_of(app)
    creator = sign_up(client, "host11", bot=False)
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    offset = [timedelta(days=20)]
    tournaments = app.extensions["cantstop"].tournaments
    tournaments.clock = lambda: datetime.now(UTC) + offset[0]
    register(client, tid, sign_up(client, "idle1"))  # an event, 20 days on: IDLE from here
    tournaments.views.catch_up(tournaments.view)
    for days in (31, 49):
        offset[0] = timedelta(days=days)
        assert tournaments.poll() == 0
    assert client.get(f"/v1/tournaments/{tid}").get_json()["status"] == "created"
    offset[0] = timedelta(days=50, minutes=1)
    assert tournaments.poll() == 1
    body = client.get(f"/v1/tournaments/{tid}").get_json()
    assert (body["status"], body["finish_reason"]) == ("finished", "abandoned")
    assert body["players"] == ["idle1"] and body["rounds"] == []
    listed = client.get("/v1/tournaments?status=created").get_json()["tournaments"]
    assert tid not in {t["id"] for t in listed}
    header, records = parse_tournament_export(client.get(f"/v1/tournaments/{tid}/export").data)
    verdict = audit_tournament(header, records, {})  # (no tables: no --games file for the CLI)
    assert verdict["valid"], verdict


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
        # Counted per account, not per token: a token minted for the third does not help.
        minted = client.post("/v1/tokens", json={"handle": "busy", "password": PASSWORD})
        assert minted.status_code == 201, minted.get_json()
        token = minted.get_json()["token"]
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
        # Another account, from the same address, is not held by the first one's count.
        other = sign_up(client, "calm", bot=False)
        create(client, other, kind="swiss", players_per_table=2, rounds=1)
    finally:
        application.extensions["cantstop"].close()


BAD_CREATIONS: list[Json] = [
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
    *(  # times whose conversion to UTC overflows a datetime (were 500 internal_error)
        {"name": "x", "kind": "swiss", "players_per_table": 2, "rounds": 1, "starts_at": at}
        for at in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
    ),
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
]


def test_bad_creations_are_refused_with_nothing_recorded(app: Flask) -> None:
    client = client_of(app)
    token = sign_up(client, "picky")
    for body in BAD_CREATIONS:
        payload = {"clock": CLOCK, **body}
        if payload.get("clock") is None:
            payload.pop("clock")
        reply = client.post("/v1/tournaments", json=payload, headers=bearer(token))
        assert reply.status_code == 422, (body, reply.get_json())
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


def test_events_are_typed_by_openapi_and_streamed_with_the_standings(app: Flask) -> None:
    """A Swiss of two, one round, played out: every export line validates against its
    TournamentEvent schema; the tournament's stream from the start sends the same events, the
    standings with the last of its page that may move them (tests/test_tournament_abuse.py),
    and ends after Finished (then 204)."""
    client = client_of(app)
    creator = sign_up(client, "host8", bot=False)
    tokens = {"duo1": sign_up(client, "duo1"), "duo2": sign_up(client, "duo2")}
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    for token in tokens.values():
        register(client, tid, token)
    stop = run_scheduler(app)
    try:
        client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator))
        final = drive(client, tid, tokens)
    finally:
        stop()
    spec = load_spec()
    typed = validator(spec, "TournamentEvent")
    lines = export(client, tid)
    for line in lines[1:]:
        typed.validate(line)
    assert [line["type"] for line in lines[1:]] == [
        "Created",
        "Registered",
        "Registered",
        "Started",
        "RoundPaired",
        "ResultRecorded",
        "Finished",
    ]
    response = client.get(f"/v1/tournaments/{tid}/stream?after=0", buffered=False)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    text = "".join(
        chunk.decode() if isinstance(chunk, bytes) else chunk for chunk in response.response
    )
    sent = [
        json.loads(row[len("data: ") :]) for row in text.splitlines() if row.startswith("data: ")
    ]
    assert [e["type"] for e in sent] == [line["type"] for line in lines[1:]]
    for event in sent:
        typed.validate(event)
    assert sent[-1]["type"] == "Finished"
    assert sent[-1]["standings"] == final["standings"]
    assert [e["version"] for e in sent if "standings" in e] == [sent[-1]["version"]]  # one page
    ended = client.get(f"/v1/tournaments/{tid}/stream", headers={"Last-Event-ID": str(len(sent))})
    assert ended.status_code == 204


def test_a_poll_with_nothing_due_loads_no_tournament(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tournaments waiting for their start, and a Swiss waiting on its tables' games, are not
    due: the scheduler's chore reads the view's due rows and steps none of them."""
    client = client_of(app)
    creator = sign_up(client, "host9", bot=False)
    later = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for _ in range(5):
        create(client, creator, kind="swiss", players_per_table=2, rounds=1, starts_at=later)
    tid = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    for handle in ("wait1", "wait2"):
        register(client, tid, sign_up(client, handle))
    client.post(f"/v1/tournaments/{tid}/start", headers=bearer(creator))  # its round is paired
    tournaments = app.extensions["cantstop"].tournaments
    tournaments.views.catch_up(tournaments.view)

    def loaded(tournament_id: uuid.UUID) -> bool:
        raise AssertionError(f"tournament {tournament_id} was stepped with nothing due")

    monkeypatch.setattr(tournaments, "step", loaded)
    assert tournaments.poll() == 0


def test_an_excluded_account_is_withdrawn_and_cannot_register(
    app: Flask, database_url: str
) -> None:
    """``cantstop accounts exclude``, as an operator runs it, withdraws the account from every
    tournament not finished; it cannot register again (403 account_excluded)."""
    client = client_of(app)
    creator = sign_up(client, "host10", bot=False)
    cheat = sign_up(client, "cheat")
    first = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    second = create(client, creator, kind="arena", players_per_table=2, minutes=5)["id"]
    register(client, first, cheat)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
    env["CANTSTOP_DATABASE_URL"] = database_url
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "accounts", "exclude", "cheat", "--reason", "bots"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert client.get(f"/v1/tournaments/{first}").get_json()["players"] == []
    assert export(client, first)[-1]["data"] == {"handle": "cheat", "reason": "excluded"}
    refused = client.post(f"/v1/tournaments/{second}/players", headers=bearer(cheat))
    assert refused.status_code == 403 and refused.get_json()["code"] == "account_excluded"


def test_arena_players_pause_and_resume_themselves_only(app: Flask) -> None:
    client = client_of(app)
    creator = sign_up(client, "host11")
    ann, bob = sign_up(client, "pann"), sign_up(client, "pbob")
    arena = create(client, creator, kind="arena", players_per_table=2, minutes=5)["id"]
    swiss = create(client, creator, kind="swiss", players_per_table=2, rounds=1)["id"]
    for tid in (arena, swiss):
        register(client, tid, ann)
        register(client, tid, bob)
    path = f"/v1/tournaments/{arena}/players/pann/pause"
    assert client.post(path, headers=bearer(ann)).status_code == 204
    again = client.post(path, headers=bearer(ann))
    assert again.status_code == 409 and again.get_json()["code"] == "tournament_not_ready"
    other = client.delete(path, headers=bearer(bob))
    assert other.status_code == 403 and other.get_json()["code"] == "not_your_registration"
    assert client.delete(path, headers=bearer(ann)).status_code == 204
    in_swiss = client.post(f"/v1/tournaments/{swiss}/players/pann/pause", headers=bearer(ann))
    assert in_swiss.status_code == 422
    kinds = [line["type"] for line in export(client, arena)[1:]]
    assert kinds[-2:] == ["Paused", "Resumed"]


def test_a_creation_retried_with_its_key_is_answered_once(app: Flask) -> None:
    client = client_of(app)
    token = sign_up(client, "retrier")
    body = {"name": "Once", "kind": "swiss", "players_per_table": 2, "rounds": 1, **CLOCKED}
    headers = {**bearer(token), "Idempotency-Key": "tournament-1"}
    first = client.post("/v1/tournaments", json=body, headers=headers)
    second = client.post("/v1/tournaments", json=body, headers=headers)
    assert first.status_code == second.status_code == 201
    assert second.headers["Idempotent-Replayed"] == "true"
    assert first.get_json()["tournament"]["id"] == second.get_json()["tournament"]["id"]
    assert len(client.get("/v1/tournaments").get_json()["tournaments"]) == 1


def test_a_tournament_read_from_its_snapshot_is_the_one_its_events_build(app: Flask) -> None:
    """Tournaments are snapshotted every 20 events (service/application/store.py): a read from
    the latest snapshot and the events after it equals the replay of every event."""
    store = app.extensions["cantstop"].store
    tournament = Tournament.create(
        name="big",
        kind="swiss",
        rules=None,
        players_per_table=3,
        rounds=3,
        clock=CLOCK,
        creator="someone",
    )
    for i in range(45):
        tournament.register(f"p{i}", 25.0 + i)
    tournament.start()
    tournament.pair_next_round()
    store.save(tournament)
    assert [s.originator_version for s in store.snapshots.get(tournament.id)] == [20, 40]
    reads: Repository[uuid.UUID] = Repository(
        event_store=store.events, snapshot_store=store.snapshots
    )
    read: Any = reads.get(tournament.id)
    built = replayed(list(store.events.get(tournament.id)))
    assert built is not None
    assert read.as_json() == built.as_json() == tournament.as_json()


def test_a_stream_page_replays_from_the_nearest_snapshot(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tournament's stream reads a page after version ``after``: the tournament as it stood
    there comes from its nearest snapshot, and only the page's events are read on, not the whole
    tournament once a page (an arena of thousands of results, read from the start by an
    unauthenticated stream, replayed all of it for every page of 500). Every page holds what a
    replay from the start gives."""
    runtime = app.extensions["cantstop"]
    store, tournaments = runtime.games.store, runtime.tournaments
    tournament = Tournament.create(
        name="Big arena",
        kind="arena",
        rules={},
        players_per_table=2,
        minutes=60,
        clock={"turn_seconds": 30},
        creator="host",
    )
    for i in range(70):
        tournament.register(f"p{i}", 25.0 + i)
    store.save(tournament)
    tid = tournament.id
    whole = tournaments.records(tid, 0, 1000)
    assert [r["version"] for r in whole] == list(range(1, 72))
    read: list[int] = []
    events = store.events
    real_get = events.get

    def counted(*args: Any, **kwargs: Any) -> Any:
        for event in real_get(*args, **kwargs):
            read.append(event.originator_version)
            yield event

    monkeypatch.setattr(events, "get", counted)
    interval = type(store).SNAPSHOT_INTERVALS[Tournament]
    bare = [{k: v for k, v in r.items() if k != "standings"} for r in whole]
    for after, limit in [(0, 5), (1, 3), (19, 4), (20, 10), (41, 30), (65, 500), (71, 10)]:
        read.clear()
        page = tournaments.records(tid, after, limit)
        assert [{k: v for k, v in r.items() if k != "standings"} for r in page] == bare[
            after : after + limit
        ]
        assert len(read) <= interval + limit, (after, read)
        if page:  # its last record (a registration) carries the standings of that version
            assert [r["version"] for r in page if "standings" in r] == [page[-1]["version"]]
            built = replayed(list(real_get(tid, lte=page[-1]["version"])))
            assert built is not None and page[-1]["standings"] == built.standings()
