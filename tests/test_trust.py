"""Trust under adversaries and faults (contract 1.1): seeds committed before the client's, a
player's entropy in each roll, damaged stored rows and snapshots reported, hostile bodies and
conditional requests answered as RFC 9110 and problem+json say, never a 500."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent
from flask import Flask
from flask.testing import FlaskClient

from domain import fairness
from domain.game import Game
from service.application.aggregates import vault_id
from service.application.store import Store
from service.config import Settings
from service.http.app import create_app
from tests.support.racing import race_cleanly
from tests.support.stored import json_fields

ROOT = Path(__file__).resolve().parent.parent
Json = dict[str, Any]

SNAPSHOT_EVERY = Store.SNAPSHOT_INTERVALS[Game]  # a game's snapshot every N events


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def problem(response: Any, status: int, code: str) -> Json:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body: Json = response.get_json()
    assert body["code"] == code and body["status"] == status
    return body


def commit(client: FlaskClient) -> str:
    response = client.post("/v1/seed-commitments")
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert len(body["seed_commitment"]) == 64 and body["expires_at"].endswith("Z")
    commitment: str = body["seed_commitment"]
    return commitment


def play_to_the_end(client: FlaskClient, created: Json, entropy: bool = True) -> Json:
    """Both seats play: first legal action, stop after one move, every roll with entropy."""
    game: Json = created["game"]
    tokens = [s["token"] for s in created["seats"]]
    for step in range(20_000):
        if game["status"] == "finished":
            return game
        legal = game["legal_actions"]
        action: Json = {"type": "stop"} if {"type": "stop"} in legal else dict(legal[0])
        if action["type"] == "roll" and entropy:
            action["entropy"] = f"e-{step}"
        response = client.post(
            f"/v1/games/{game['id']}/actions",
            json=action,
            headers=bearer(tokens[game["turn"]["player"]]),
        )
        assert response.status_code == 200, response.get_json()
        game = response.get_json()["game"]
    raise AssertionError("the game did not end")


def events(client: FlaskClient, game_id: str) -> list[Json]:
    found: list[Json] = client.get(f"/v1/games/{game_id}/events?limit=1000").get_json()["events"]
    return found


# ------------------------------------------------------------------------ seed commitments
def test_a_committed_seed_is_used_once_and_revealed_at_the_end(client: FlaskClient) -> None:
    commitment = commit(client)
    body = {"players": ["Ann", "Bob"], "seed_commitment": commitment, "client_seed": "ann-0413"}
    created = client.post("/v1/games", json=body)
    assert created.status_code == 201, created.get_json()
    game = created.get_json()["game"]
    assert game["fairness"] == {
        "seed_commitment": commitment,
        "client_seed": "ann-0413",
        "server_seed": None,
    }
    first = events(client, game["id"])[0]["data"]
    assert first["seed_committed_at"].endswith("Z")
    again = client.post("/v1/games", json=body)  # two games can never share a commitment
    problem(again, 422, "invalid_request")

    finished = play_to_the_end(client, created.get_json())
    seed = finished["fairness"]["server_seed"]
    assert fairness.commitment(seed) == commitment
    audit = client.get(f"/v1/games/{game['id']}/audit").get_json()
    assert audit["valid"] is True, audit
    dice = next(c for c in audit["checks"] if c["name"] == "dice")
    assert "entropy" in dice["detail"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"players": ["Ann", "Bob"]}, "client_seed"),  # a commitment needs a client seed
        ({"players": ["Ann", "Bob"], "client_seed": "has space"}, "client_seed"),
        ({"players": ["Ann", "Bob"], "client_seed": "x" * 65}, "client_seed"),
        ({"players": ["Ann", "Bob"], "dice": "manual", "client_seed": "c"}, "server dice"),
    ],
)
def test_a_bad_game_request_does_not_use_up_the_commitment(
    client: FlaskClient, body: Json, fragment: str
) -> None:
    commitment = commit(client)
    refused = problem(
        client.post("/v1/games", json={**body, "seed_commitment": commitment}),
        422,
        "invalid_request",
    )
    assert fragment in refused["detail"]
    fine = {"players": ["Ann", "Bob"], "seed_commitment": commitment, "client_seed": "c"}
    assert client.post("/v1/games", json=fine).status_code == 201


def test_unknown_and_expired_commitments_are_refused(app: Flask, client: FlaskClient) -> None:
    body = {"players": ["Ann", "Bob"], "client_seed": "c", "seed_commitment": "ab" * 32}
    problem(client.post("/v1/games", json=body), 422, "invalid_request")
    games = app.extensions["cantstop"].games
    seed = "cd" * 32
    now = time.time()
    games.store.commitments.put(fairness.commitment(seed), seed, now - 3600, now - 1)  # expired
    body["seed_commitment"] = fairness.commitment(seed)
    problem(client.post("/v1/games", json=body), 422, "invalid_request")


def test_racing_games_on_one_commitment_give_exactly_one_game(app: Flask) -> None:
    commitment = commit(app.test_client())
    body = {"players": ["Ann", "Bob"], "seed_commitment": commitment, "client_seed": "c"}

    def create() -> int:
        return app.test_client().post("/v1/games", json=body).status_code

    statuses = race_cleanly([create] * 8)
    assert sorted(statuses) == [201] + [422] * 7


# -------------------------------------------------------------------------------- entropy
def test_a_roll_with_entropy_records_it_and_its_dice_follow_from_it(client: FlaskClient) -> None:
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    game, tokens = created["game"], [s["token"] for s in created["seats"]]
    seat = game["turn"]["player"]
    response = client.post(
        f"/v1/games/{game['id']}/actions",
        json={"type": "roll", "entropy": "ann-says-7731"},
        headers=bearer(tokens[seat]),
    )
    assert response.status_code == 200, response.get_json()
    rolled = response.get_json()["events"][0]
    assert rolled["type"] == "DiceRolled"
    assert rolled["data"]["entropy"] == "ann-says-7731"
    # Without entropy the event has no such field at all (as in games recorded before 1.1).
    after_roll = {"game": response.get_json()["game"], "seats": created["seats"]}
    finished = play_to_the_end(client, after_roll, entropy=False)
    history = events(client, game["id"])
    plain = [e for e in history if e["type"] == "DiceRolled" and "entropy" not in e["data"]]
    assert plain
    seed, client_seed = finished["fairness"]["server_seed"], finished["fairness"]["client_seed"]
    data = rolled["data"]
    assert data["dice"] == fairness.draw(seed, client_seed, data["nonce"], 4, 6, "ann-says-7731")
    assert client.get(f"/v1/games/{game['id']}/audit").get_json()["valid"] is True


def test_an_export_with_entropy_verifies_with_the_auditors_script(
    client: FlaskClient, tmp_path: Path
) -> None:
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    finished = play_to_the_end(client, created)
    export = client.get(f"/v1/games/{finished['id']}/export").get_data()
    path = tmp_path / "game.ndjson"
    path.write_bytes(export)
    script = ROOT / "docs" / "verify_export.py"
    ran = subprocess.run(
        [sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0 and ran.stdout.strip().endswith("OK"), ran.stdout
    # Changing a roll's entropy breaks the draw (and the chain): the script finds it.
    lines = export.decode().splitlines()
    records = [json.loads(line) for line in lines[1:]]
    index = next(i for i, r in enumerate(records) if "entropy" in r["data"])
    records[index]["data"]["entropy"] = "forged"
    path.write_text("\n".join([lines[0], *map(json.dumps, records)]) + "\n")
    ran = subprocess.run(
        [sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 1 and f"version {index + 1}" in ran.stdout


@pytest.mark.parametrize(
    ("dice_mode", "action"),
    [
        ("manual", {"type": "roll", "dice": [1, 2, 3, 4], "entropy": "abc"}),
        ("server", {"type": "roll", "entropy": ""}),
        ("server", {"type": "roll", "entropy": "two words"}),
        ("server", {"type": "roll", "entropy": "x" * 65}),
        ("server", {"type": "stop", "entropy": "abc"}),
    ],
)
def test_bad_entropy_is_refused_and_records_nothing(
    client: FlaskClient, dice_mode: str, action: Json
) -> None:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": dice_mode}
    ).get_json()
    game = created["game"]
    token = created["seats"][game["turn"]["player"]]["token"]
    response = client.post(f"/v1/games/{game['id']}/actions", json=action, headers=bearer(token))
    problem(response, 422, "invalid_request")
    assert client.get(f"/v1/games/{game['id']}").get_json()["version"] == game["version"]


# ------------------------------------------------------------------------- damaged rows
def sqlite_path(app: Flask) -> str:
    url: str = app.extensions["cantstop"].settings.database_url
    return url[len("sqlite:///") :]


@contextlib.contextmanager
def fresh_client(app: Flask) -> Iterator[FlaskClient]:
    """A client of a new app on ``app``'s store: nothing cached, every read from the store."""
    fresh_app = create_app(app.extensions["cantstop"].settings)
    try:
        yield fresh_app.test_client()
    finally:
        fresh_app.extensions["cantstop"].close()


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'damaged.sqlite'}")
    app = create_app(settings, create_tables=True)
    yield app
    app.extensions["cantstop"].close()


def corrupt(app: Flask, aggregate_id: uuid.UUID, version: int) -> None:
    """Overwrite one stored row's state with bytes that are not JSON, in the real file."""
    with sqlite3.connect(sqlite_path(app)) as db:
        changed = db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (b"\x00not json\xff", aggregate_id.hex, version),
        ).rowcount
    assert changed == 1


def new_manual_game(client: FlaskClient) -> tuple[str, list[str]]:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}
    ).get_json()
    return created["game"]["id"], [s["token"] for s in created["seats"]]


DICE = ([1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6], [1, 3, 5, 6], [2, 2, 4, 6])


def step(client: FlaskClient, game_id: str, tokens: list[str]) -> Json:
    """One action of a manual-dice game by the seat to act: roll (dice in rotation), the first
    legal move, or stop."""
    game = client.get(f"/v1/games/{game_id}").get_json()
    legal = game["legal_actions"]
    action: Json = {"type": "stop"} if {"type": "stop"} in legal else dict(legal[0])
    if action["type"] == "roll":
        action["dice"] = DICE[game["version"] % len(DICE)]
    response = client.post(
        f"/v1/games/{game_id}/actions", json=action, headers=bearer(tokens[game["turn"]["player"]])
    )
    assert response.status_code == 200, response.get_json()
    after: Json = response.get_json()["game"]
    return after


def test_one_unreadable_row_never_breaks_other_games(sqlite_app: Flask, tmp_path: Path) -> None:
    client = sqlite_app.test_client()
    damaged, _ = new_manual_game(client)
    healthy, tokens = new_manual_game(client)
    corrupt(sqlite_app, uuid.UUID(damaged), 1)
    settings = sqlite_app.extensions["cantstop"].settings
    # Two more workers (or restarts): neither holds the game in memory, both rebuild their
    # projections from the damaged log. (The worker that recorded the game still serves it from
    # memory; its audit reports the damage all the same.)
    assert sqlite_app.test_client().get(f"/v1/games/{damaged}/audit").get_json()["valid"] is False
    for app in (create_app(settings), create_app(settings)):
        fresh = app.test_client()
        listed = fresh.get("/v1/games")
        assert listed.status_code == 200
        assert healthy in {g["id"] for g in listed.get_json()["games"]}
        assert fresh.get("/v1/solitaire/leaderboard").status_code == 200
        for path in ("", "/events", "?version=1", "/record-sheet?seat=0", "/board.svg"):
            body = problem(fresh.get(f"/v1/games/{damaged}{path}"), 409, "corrupt_game")
            assert body["version"] == 1
        audit = fresh.get(f"/v1/games/{damaged}/audit").get_json()
        assert audit["valid"] is False and audit["first_bad_version"] == 1
        assert fresh.get(f"/v1/games/{damaged}/export").status_code == 200
        step(fresh, healthy, tokens)  # the other game plays on
        app.extensions["cantstop"].close()


def test_a_deleted_row_is_reported_at_its_version_not_skipped(sqlite_app: Flask) -> None:
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    for _ in range(8):
        step(client, game_id, tokens)
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        deleted = db.execute(
            "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = 3",
            (uuid.UUID(game_id).hex,),
        ).rowcount
    assert deleted == 1
    with fresh_client(sqlite_app) as fresh:  # nothing cached
        # The history does not skip from 2 to 4, and a past position names the gap, not the
        # event after it; from version 3 on, the events that are there are served.
        for path in ("/events", "/events?after=1", "?version=5"):
            body = problem(fresh.get(f"/v1/games/{game_id}{path}"), 409, "corrupt_game")
            assert body["version"] == 3, path
        tail = fresh.get(f"/v1/games/{game_id}/events?after=3").get_json()["events"]
        assert tail and tail[0]["version"] == 4
        audit = fresh.get(f"/v1/games/{game_id}/audit").get_json()
        assert audit["valid"] is False and audit["first_bad_version"] == 3


@pytest.mark.parametrize("key", ["prev_hash", "hash", "timestamp"])
def test_a_row_that_decodes_but_lacks_an_events_field_is_corrupt_game_not_a_500(
    sqlite_app: Flask, key: str
) -> None:
    """Valid JSON, one key of the event taken out: its history, record sheet and stream name the
    version (a black-box review found a 500 on the first two and a cut stream)."""
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    for _ in range(6):
        step(client, game_id, tokens)
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        where = "WHERE originator_id = ? AND originator_version = 4"
        (state,) = db.execute(
            f"SELECT state FROM stored_events {where}", (uuid.UUID(game_id).hex,)
        ).fetchone()
        fields = json_fields(sqlite_app, state)
        del fields[key]
        db.execute(
            f"UPDATE stored_events SET state = ? {where}",
            (json.dumps(fields).encode(), uuid.UUID(game_id).hex),
        )
    with fresh_client(sqlite_app) as fresh:  # nothing cached
        for path in ("/events", "/events?after=2", "/record-sheet?seat=0"):
            body = problem(fresh.get(f"/v1/games/{game_id}{path}"), 409, "corrupt_game")
            assert body["version"] == 4, path
        assert fresh.get(f"/v1/games/{game_id}/events?after=4").status_code == 200
        stream = fresh.get(f"/v1/games/{game_id}/stream?after=0", buffered=True)
        if key == "prev_hash":  # the game itself reads (its state does not need the field)
            assert stream.status_code == 200
            frames = stream.get_data(as_text=True)
            # (read a page at a time: the page that holds the damage is not sent)
            assert "id: 4\n" not in frames
            assert frames.rstrip().endswith(": ended: corrupt_game")
        else:  # the game cannot be rebuilt: refused before the stream starts
            assert problem(stream, 409, "corrupt_game")["version"] == 4
        audit = fresh.get(f"/v1/games/{game_id}/audit").get_json()
        assert audit["valid"] is False and audit["first_bad_version"] == 4


def test_a_damaged_vault_is_reported_on_actions_of_that_game_only(sqlite_app: Flask) -> None:
    client = sqlite_app.test_client()
    damaged, damaged_tokens = new_manual_game(client)
    healthy, tokens = new_manual_game(client)
    corrupt(sqlite_app, vault_id(uuid.UUID(damaged)), 1)
    with fresh_client(sqlite_app) as fresh:  # nothing cached
        roll = {"type": "roll", "dice": [1, 2, 3, 4]}
        problem(
            fresh.post(
                f"/v1/games/{damaged}/actions", json=roll, headers=bearer(damaged_tokens[0])
            ),
            409,
            "corrupt_game",
        )
        assert fresh.get(f"/v1/games/{damaged}").status_code == 200  # its events are fine
        ok = fresh.post(f"/v1/games/{healthy}/actions", json=roll, headers=bearer(tokens[0]))
        assert ok.status_code == 200


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param({"not": "a seed"}, id="an-object"),
        pytest.param("x", id="not-64-hex"),
        pytest.param("ab" * 32, id="another-seed"),  # well formed, but not the committed one
    ],
)
def test_a_damaged_stored_seed_is_corrupt_game_never_a_500_nor_other_dice(
    sqlite_app: Flask, seed: Any
) -> None:
    """A vault whose seed is damaged: a roll would draw dice from a seed that does not match the
    published commitment (nobody could verify them), and the end of the game could never reveal
    it. Every action of that game is 409 corrupt_game and records nothing; others play on."""
    client = sqlite_app.test_client()
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    game = created["game"]
    tokens = [s["token"] for s in created["seats"]]
    healthy, healthy_tokens = new_manual_game(client)
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        key = (vault_id(uuid.UUID(game["id"])).hex,)
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = 1",
            key,
        ).fetchone()
        opened = json_fields(sqlite_app, state)
        opened["server_seed"] = seed
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 1",
            (json.dumps(opened).encode(), *key),
        )
    with fresh_client(sqlite_app) as fresh:  # nothing cached
        to_act = bearer(tokens[game["turn"]["player"]])
        for action, token in (({"type": "roll"}, to_act), ({"type": "resign"}, bearer(tokens[0]))):
            answer = fresh.post(f"/v1/games/{game['id']}/actions", json=action, headers=token)
            problem(answer, 409, "corrupt_game")
        assert fresh.get(f"/v1/games/{game['id']}").get_json()["version"] == game["version"]
        roll = {"type": "roll", "dice": [1, 2, 3, 4]}
        ok = fresh.post(
            f"/v1/games/{healthy}/actions", json=roll, headers=bearer(healthy_tokens[0])
        )
        assert ok.status_code == 200


def test_a_tampered_snapshot_is_found_by_the_audit(sqlite_app: Flask) -> None:
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    game = client.get(f"/v1/games/{game_id}").get_json()
    read_at = 2 * SNAPSHOT_EVERY + 5
    while game["version"] < read_at + 5:
        assert game["status"] == "in_progress"
        game = step(client, game_id, tokens)
    truth = client.get(f"/v1/games/{game_id}?version={read_at}").get_json()
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        row = db.execute(
            "SELECT originator_version, state FROM stored_snapshots WHERE originator_id = ? "
            "AND originator_version <= ? ORDER BY originator_version DESC LIMIT 1",
            (uuid.UUID(game_id).hex, read_at),
        ).fetchone()
        assert row is not None and row[0] == 2 * SNAPSHOT_EVERY
        tampered_version = row[0]
        state = json_fields(sqlite_app, row[1])
        markers = state["state"]["markers"]
        markers[1][7] = 5  # Bob gains a marker in column 7 that no event gave him
        db.execute(
            "UPDATE stored_snapshots SET state = ? WHERE originator_id = ? "
            "AND originator_version = ?",
            (json.dumps(state).encode(), uuid.UUID(game_id).hex, tampered_version),
        )
    with fresh_client(sqlite_app) as fresh:
        served = fresh.get(f"/v1/games/{game_id}?version={read_at}").get_json()
        assert served != truth  # reads trust snapshots: the audit is where this is caught
        audit = fresh.get(f"/v1/games/{game_id}/audit").get_json()
        snapshots = next(c for c in audit["checks"] if c["name"] == "snapshots")
        assert audit["valid"] is False
        assert snapshots["ok"] is False and snapshots["version"] == tampered_version
        assert "players" in snapshots["detail"]


def snapshot_versions(app: Flask, game_id: str) -> list[int]:
    with sqlite3.connect(sqlite_path(app)) as db:
        rows = db.execute(
            "SELECT originator_version FROM stored_snapshots WHERE originator_id = ? "
            "ORDER BY originator_version",
            (uuid.UUID(game_id).hex,),
        ).fetchall()
    return [version for (version,) in rows]


def test_snapshots_are_stored_with_the_events_that_make_them_due(sqlite_app: Flask) -> None:
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    game = client.get(f"/v1/games/{game_id}").get_json()
    while game["version"] < 3 * SNAPSHOT_EVERY + 5:
        game = step(client, game_id, tokens)
    assert snapshot_versions(sqlite_app, game_id) == [SNAPSHOT_EVERY * n for n in (1, 2, 3)]


def test_a_stray_snapshot_row_is_replaced_not_a_reason_to_refuse_actions(
    sqlite_app: Flask,
) -> None:
    """Damage (a snapshot row where no events are yet) must not stop the game: the events that
    reach that version are recorded, with the snapshot they make."""
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        db.execute(
            "INSERT INTO stored_snapshots VALUES (?, ?, ?, ?)",
            (uuid.UUID(game_id).hex, SNAPSHOT_EVERY, "domain.game:Game.Snapshot", b"\x00stray\xff"),
        )
    game = client.get(f"/v1/games/{game_id}").get_json()
    while game["version"] < SNAPSHOT_EVERY + 2:
        game = step(client, game_id, tokens)  # asserts 200 on every action
    assert snapshot_versions(sqlite_app, game_id) == [SNAPSHOT_EVERY]
    with fresh_client(sqlite_app) as fresh:  # reads from the store
        past = fresh.get(f"/v1/games/{game_id}?version={SNAPSHOT_EVERY + 1}")
        assert past.status_code == 200 and past.get_json()["version"] == SNAPSHOT_EVERY + 1
        audit = fresh.get(f"/v1/games/{game_id}/audit").get_json()
        assert audit["valid"] is True, audit


def test_a_snapshot_that_cannot_be_stored_does_not_fail_the_action(sqlite_app: Flask) -> None:
    """A snapshot goes in after its events: once they are stored the action is done, and a
    snapshot refused by the store is only logged (a rebuild then reads a few more events)."""
    client = sqlite_app.test_client()
    game_id, tokens = new_manual_game(client)
    with sqlite3.connect(sqlite_path(sqlite_app)) as db:
        db.execute(
            "CREATE TRIGGER refuse_snapshots BEFORE INSERT ON stored_snapshots "
            "BEGIN INSERT INTO no_such_table VALUES (1); END"  # an OperationalError
        )
    game = client.get(f"/v1/games/{game_id}").get_json()
    while game["version"] < SNAPSHOT_EVERY + 2:
        game = step(client, game_id, tokens)  # asserts 200 on every action
    assert snapshot_versions(sqlite_app, game_id) == []
    with fresh_client(sqlite_app) as fresh:  # reads from the store
        assert fresh.get(f"/v1/games/{game_id}").get_json()["version"] == game["version"]
        assert fresh.get(f"/v1/games/{game_id}/audit").get_json()["valid"] is True


def test_an_actions_events_are_all_stored_or_none_with_their_notification_ids(
    sqlite_app: Flask,
) -> None:
    """Events without a snapshot go in one multi-row statement: the ids it answers are the
    notification log's, and a conflict on any row stores none of them."""
    recorder = sqlite_app.extensions["cantstop"].games.store.recorder
    originator = uuid.uuid4()

    def stored(version: int) -> StoredEvent:
        return StoredEvent(originator, version, "tests:Event", b"{}")

    recorder.insert_events([stored(1)])  # something in the log before
    ids = recorder.insert_events([stored(2), stored(3), stored(4)])
    logged = recorder.select_notifications(ids[0], 10)
    assert [n.id for n in logged] == ids and len(ids) == 3
    assert [n.originator_version for n in logged] == [2, 3, 4]
    with pytest.raises(IntegrityError):
        recorder.insert_events([stored(5), stored(3)])  # version 3 is taken
    assert [e.originator_version for e in recorder.select_events(originator)] == [1, 2, 3, 4]
    assert recorder.insert_events([stored(5)]) == [ids[-1] + 1]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_batch_larger_than_one_statement_is_stored_whole_or_not_at_all(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An import stores a whole game's events in one call: more rows than one statement may
    bind (SQLite 32,766 values, PostgreSQL 65,535) still go in one transaction, in order."""
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgres"
        else f"sqlite:///{tmp_path / 'big.sqlite'}"
    )
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        recorder = app.extensions["cantstop"].games.store.recorder
        originator = uuid.uuid4()

        def stored(version: int) -> StoredEvent:
            return StoredEvent(originator, version, "tests:Event", b"{}")

        many = 20_000
        ids = recorder.insert_events([stored(v) for v in range(1, many + 1)])
        assert len(ids) == many and ids == list(range(ids[0], ids[0] + many))
        versions = [e.originator_version for e in recorder.select_events(originator)]
        assert versions == list(range(1, many + 1))
        with pytest.raises(IntegrityError):  # the last row conflicts: none of them is stored
            recorder.insert_events([stored(v) for v in range(many + 1, 2 * many)] + [stored(1)])
        assert len(recorder.select_events(originator)) == many
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_on_postgresql_snapshots_go_with_their_events_and_replace_stray_rows(
    postgres_url: str,
) -> None:
    """The same two properties on PostgreSQL, where events and snapshots are one statement."""
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    try:
        client = app.test_client()
        game_id, tokens = new_manual_game(client)
        hex_id = uuid.UUID(game_id)
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(
                "INSERT INTO cantstop_snapshots VALUES (%s, %s, 'domain.game:Game.Snapshot', %s)",
                (hex_id, 2 * SNAPSHOT_EVERY, b"\x00stray\xff"),
            )
        game = client.get(f"/v1/games/{game_id}").get_json()
        while game["version"] < 2 * SNAPSHOT_EVERY + 5:
            game = step(client, game_id, tokens)  # asserts 200 on every action
        with psycopg.connect(postgres_url) as db:
            rows = db.execute(
                "SELECT originator_version, state FROM cantstop_snapshots "
                "WHERE originator_id = %s ORDER BY originator_version",
                (hex_id,),
            ).fetchall()
        assert [version for version, _ in rows] == [SNAPSHOT_EVERY, 2 * SNAPSHOT_EVERY]
        transcoder = app.extensions["cantstop"].games.store.mapper.transcoder
        snapshots = [transcoder.decode(bytes(state)) for _, state in rows]
        assert all(s["topic"] == "domain.game:Game" for s in snapshots)  # the stray row is gone
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_on_postgresql_the_insert_stores_every_byte_and_maps_a_conflict(postgres_url: str) -> None:
    """A command's insert goes through libpq itself (its own parameters, prepared per
    session): rows come back exactly as given, a duplicate version is the library's
    IntegrityError (a conflict, judged again), and nothing of a refused statement is stored."""
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    try:
        recorder = app.extensions["cantstop"].games.store.recorder
        recorder.datastore.pool.open()  # as after the first request: the fast path's condition
        originator = uuid.uuid4()
        rows = [
            StoredEvent(originator, 1, "tests:Évènement ✓", b"\x00\xff{}\x00"),
            StoredEvent(originator, 2**40, "tests:Event", bytes(range(256))),
        ]
        ids = recorder.insert_events(rows)
        assert len(ids) == 2 and ids == sorted(ids)
        assert recorder.select_events(originator) == rows
        with pytest.raises(IntegrityError):
            recorder.insert_events([StoredEvent(originator, 3, "t", b"x"), rows[0]])
        assert recorder.select_events(originator) == rows
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_on_postgresql_a_session_that_lost_its_prepared_insert_still_records(
    postgres_url: str,
) -> None:
    """A session whose prepared statements went (``DEALLOCATE ALL``, as a pooler or a
    ``DISCARD ALL`` does) prepares the insert again: the action is recorded, once."""
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    try:
        client = app.test_client()
        game_id, tokens = new_manual_game(client)
        for _ in range(20):  # the pool takes its connections in turn: each prepares the insert
            game = step(client, game_id, tokens)
        pool = app.extensions["cantstop"].games.store.recorder.datastore.pool
        taken = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
        try:
            for conn in taken:
                conn.execute("DEALLOCATE ALL")
        finally:
            for conn in taken:
                pool.putconn(conn)
        for _ in range(20):
            after = step(client, game_id, tokens)  # asserts 200
        assert after["version"] > game["version"]
        versions = [
            e["version"] for e in client.get(f"/v1/games/{game_id}/events").get_json()["events"]
        ]
        assert versions == list(range(1, after["version"] + 1))
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_on_postgresql_a_session_that_holds_the_insert_already_uses_it(postgres_url: str) -> None:
    """A server session may hold the insert from an earlier client of the same server
    connection (a pooler, or this worker's record of it lost): preparing it again is refused
    there (duplicate_prepared_statement), and the statement prepared is used."""
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    try:
        client = app.test_client()
        game_id, tokens = new_manual_game(client)
        for _ in range(20):  # every pooled connection prepares the insert
            game = step(client, game_id, tokens)
        app.extensions["cantstop"].games.store.recorder._prepared.clear()  # forget they did
        for _ in range(20):
            after = step(client, game_id, tokens)  # asserts 200
        assert after["version"] > game["version"]
    finally:
        app.extensions["cantstop"].close()


# ----------------------------------------------------------------------- hostile bodies
DEEP = b"[" * 1000 + b"]" * 1000


@pytest.mark.parametrize(
    "path",
    ["/v1/games", "/v1/games/{id}/actions", "/v1/transcripts/verify", "/v1/games/import"],
)
def test_json_nested_1000_deep_is_a_422_not_a_500(client: FlaskClient, path: str) -> None:
    game_id, tokens = new_manual_game(client)
    response = client.post(
        path.format(id=game_id),
        data=DEEP,
        content_type="application/json",
        headers=bearer(tokens[0]),
    )
    problem(response, 422, "invalid_request")
    nested = {"players": ["Ann", "Bob"], "rules": {"x": json.loads("[" * 40 + "]" * 40)}}
    problem(client.post("/v1/games", json=nested), 422, "invalid_request")


def test_only_utf8_json_bodies_are_accepted(client: FlaskClient) -> None:
    body = json.dumps({"players": ["Ann", "Bob"]})
    problem(
        client.post("/v1/games", data=body, content_type="text/plain"),
        415,
        "unsupported_media_type",
    )
    problem(
        client.post("/v1/games", data=body.encode("utf-16"), content_type="application/json"),
        422,
        "invalid_request",
    )
    problem(
        client.post(
            "/v1/games", data=body.encode("utf-16"), content_type="application/json; charset=utf-16"
        ),
        415,
        "unsupported_media_type",
    )
    assert client.post("/v1/games", data=body, content_type="application/json").status_code == 201


def test_an_action_body_parsed_before_is_still_judged_by_its_media_type_and_game(
    client: FlaskClient,
) -> None:
    """Action bodies are parsed once per distinct body (service/http/games.py): the same bytes
    sent again still answer 415 under another media type, and are judged on the game as it is
    now, not as it was when they were first parsed."""
    game_id, tokens = new_manual_game(client)
    url = f"/v1/games/{game_id}/actions"
    roll = b'{"type":"roll","dice":[1,2,3,4]}'
    sent = client.post(url, data=roll, content_type="application/json", headers=bearer(tokens[0]))
    assert sent.status_code == 200
    problem(
        client.post(url, data=roll, content_type="text/plain", headers=bearer(tokens[0])),
        415,
        "unsupported_media_type",
    )
    again = client.post(url, data=roll, content_type="application/json", headers=bearer(tokens[0]))
    problem(again, 409, "illegal_action")  # a move is due now, not a roll
    nested = b'{"type":"roll","dice":[[1],2,3,4]}'
    for _ in range(2):  # a die that is not an integer: refused each time, nothing recorded
        wrong = client.post(
            url, data=nested, content_type="application/json", headers=bearer(tokens[0])
        )
        assert wrong.status_code in (409, 422)
    assert (
        client.get(f"/v1/games/{game_id}").get_json()["version"]
        == sent.get_json()["game"]["version"]
    )


def cantstop_verify(path: Path) -> subprocess.CompletedProcess[str]:
    """``cantstop verify FILE``, run as a user would."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("cantstop")), "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cantstop_verify_on_a_deep_document_is_exit_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(DEEP)
    ran = cantstop_verify(path)
    assert ran.returncode == 2
    assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    "text",
    [
        '{"players": ["A", "B"], "actions": [{"type": "roll", "seat": 10000000000000000000000}]}',
        '{"players": ["A", "B"], "actions": [{"type": "move", "sums": [18446744073709551616]}]}',
        '{"players": ["A", "B"], "actions": [{"type": "roll", "seat": NaN}]}',
        '{"players": ["A", "B"], "first_player": -Infinity}',
        '{"players": ["A", "B"], "first_player": 1e400}',
    ],
)
def test_the_api_and_cantstop_verify_read_numbers_alike(
    client: FlaskClient, tmp_path: Path, text: str
) -> None:
    """An integer beyond 64 bits is a float to the API's parser, and NaN or an infinity no JSON:
    the CLI read them as Python's json does, and gave a verdict where the API said 422 (found by
    a black-box review). A transcript that is not well formed is 422 and exit status 2."""
    answer = client.post(
        "/v1/transcripts/verify", data=text, headers={"Content-Type": "application/json"}
    )
    problem(answer, 422, "invalid_request")
    path = tmp_path / "transcript.json"
    path.write_text(text)
    ran = cantstop_verify(path)
    assert ran.returncode == 2, ran.stdout
    assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr


# ----------------------------------------------------------------------- conditionals
@pytest.mark.parametrize("tag", ['"5"', 'W/"5"', '"4", "5"', "*", 'W/"1", W/"5"'])
def test_if_none_match_follows_rfc_9110(client: FlaskClient, tag: str) -> None:
    game_id, tokens = new_manual_game(client)
    for seat in (0, 0, 0):  # roll, move, stop: version 5
        legal = client.get(f"/v1/games/{game_id}").get_json()["legal_actions"]
        action = {"type": "stop"} if {"type": "stop"} in legal else dict(legal[0])
        if action["type"] == "roll":
            action["dice"] = [1, 2, 3, 4]
        client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(tokens[seat]))
    assert client.get(f"/v1/games/{game_id}").get_json()["version"] == 5
    response = client.get(f"/v1/games/{game_id}", headers={"If-None-Match": tag})
    assert response.status_code == 304 and response.headers["ETag"] == '"5"'
    changed = client.get(f"/v1/games/{game_id}", headers={"If-None-Match": '"4"'})
    assert changed.status_code == 200


@pytest.mark.parametrize(
    ("tag", "status"), [("*", 200), ('"1", "2"', 200), ('W/"2"', 412), ('"1"', 412)]
)
def test_if_match_compares_strongly_and_accepts_a_star(
    client: FlaskClient, tag: str, status: int
) -> None:
    game_id, tokens = new_manual_game(client)  # version 2
    response = client.post(
        f"/v1/games/{game_id}/actions",
        json={"type": "roll", "dice": [1, 2, 3, 4]},
        headers={**bearer(tokens[0]), "If-Match": tag},
    )
    assert response.status_code == status, response.get_json()
    if status == 412:
        assert response.get_json()["code"] == "version_conflict"


def test_401_says_which_scheme_and_whether_the_token_was_refused(client: FlaskClient) -> None:
    game_id, _ = new_manual_game(client)
    missing = client.post(f"/v1/games/{game_id}/actions", json={"type": "stop"})
    problem(missing, 401, "unauthorized")
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="cantstop"'
    wrong = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "stop"}, headers=bearer("forged")
    )
    assert wrong.headers["WWW-Authenticate"] == 'Bearer realm="cantstop", error="invalid_token"'


# --------------------------------------------------------------------------- streams
def test_a_finished_games_stream_resumed_at_its_end_closes(app: Flask) -> None:
    client = app.test_client()  # a stream's body is not checked against the schema here
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    finished = play_to_the_end(client, created)
    history = events(client, finished["id"])
    end = next(e["version"] for e in history if e["type"] == "GameFinished")
    response = client.get(f"/v1/games/{finished['id']}/stream", headers={"Last-Event-ID": str(end)})
    assert response.status_code == 200
    text = response.get_data(as_text=True)  # returns only because the stream ends
    assert "event: SeedRevealed" in text and text.rstrip().endswith(": game over")


# ------------------------------------------------------------------------------ CORS
def test_cors_is_off_unless_configured(app: Flask, tmp_path: Path) -> None:
    origin = {"Origin": "https://table.example"}
    assert (
        "Access-Control-Allow-Origin"
        not in app.test_client().get("/v1/games", headers=origin).headers
    )
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'cors.sqlite'}",
        cors_origins=("https://table.example",),
    )
    cors_app = create_app(settings, create_tables=True)
    try:
        client = cors_app.test_client()
        preflight = client.options(
            "/v1/games/x/actions",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "Authorization, Idempotency-Key",
            },
        )
        assert preflight.headers["Access-Control-Allow-Origin"] == "https://table.example"
        allowed = preflight.headers["Access-Control-Allow-Headers"].lower()
        assert "authorization" in allowed and "idempotency-key" in allowed
        read = client.get("/v1/games", headers=origin)
        assert read.headers["Access-Control-Allow-Origin"] == "https://table.example"
        other = client.get("/v1/games", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
        # The two answers differ by Origin alone: a shared cache must keep them apart.
        assert "Origin" in read.vary and "Origin" in other.vary
    finally:
        cors_app.extensions["cantstop"].close()
