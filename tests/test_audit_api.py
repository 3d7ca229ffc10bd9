"""Exports, imports (read-only games) and board pictures over HTTP (contract: Auditing)."""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET
from typing import Any

from flask.testing import FlaskClient

from domain.audit import audit_records
from domain.game import chain_hash
from service.application.aggregates import vault_id
from service.config import Settings
from service.http.app import create_app
from tests.support.games import MANUAL_ROLLS, choose, create_game, export_text, play_manual
from tests.support.http import bearer, ok

NDJSON = "application/x-ndjson"


def events_of(client: FlaskClient, game_id: str) -> list[dict[str, Any]]:
    page = ok(client.get(f"/v1/games/{game_id}/events?limit=1000"))
    events: list[dict[str, Any]] = page["events"]
    return events


def problem_code(response: Any, status: int) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    code: str = response.get_json()["code"]
    return code


def server_game_with_actions(client: FlaskClient, actions: int) -> tuple[str, list[str]]:
    game_id, tokens = create_game(client, players=["Ann", "Bob"], client_seed="table 4")
    state = ok(client.get(f"/v1/games/{game_id}"))
    for _ in range(actions):
        token = tokens[state["turn"]["player"]]
        response = client.post(
            f"/v1/games/{game_id}/actions", json=choose(state), headers=bearer(token)
        )
        state = ok(response)["game"]
    return game_id, tokens


# ------------------------------------------------------------------------------ export
def test_an_export_is_a_header_then_each_event_as_events_serves_it(client: FlaskClient) -> None:
    game_id, _ = play_manual(client)
    response = client.get(f"/v1/games/{game_id}/export")
    assert response.status_code == 200 and response.mimetype == NDJSON
    assert f"cantstop-{game_id}.ndjson" in response.headers["Content-Disposition"]
    text = response.get_data(as_text=True)
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0] == {"format": "cantstop-game", "format_version": 1, "game_id": game_id}
    assert lines[1:] == events_of(client, game_id)
    assert [line["version"] for line in lines[1:]] == list(range(1, 12))


def test_audit_export_and_board_of_what_is_not_a_game_are_not_found(client: FlaskClient) -> None:
    game_id, _ = play_manual(client, MANUAL_ROLLS[:1])
    secret_store = vault_id(uuid.UUID(game_id))  # a vault's rows are in the same table
    for other in (str(uuid.uuid4()), "not-a-game", str(secret_store)):
        for path in ("audit", "export", "board.svg"):
            assert problem_code(client.get(f"/v1/games/{other}/{path}"), 404) == "not_found"


def test_a_live_game_audits_valid_with_its_draws_pending(client: FlaskClient) -> None:
    game_id, _ = server_game_with_actions(client, 12)
    verdict = ok(client.get(f"/v1/games/{game_id}/audit"))
    assert verdict["valid"] is True and verdict["first_bad_version"] is None
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["dice"]["detail"].startswith("pending")
    assert "live state" in checks["final_state"]["detail"]


# ------------------------------------------------------------------------------ import
def test_an_imported_export_keeps_every_event_and_can_be_browsed(client: FlaskClient) -> None:
    game_id, _ = server_game_with_actions(client, 15)
    exported = export_text(client, game_id)
    response = client.post("/v1/games/import", data=exported, content_type=NDJSON)
    imported = ok(response, 201)
    new_id = imported["game"]["id"]
    assert new_id != game_id
    assert response.headers["Location"] == f"/v1/games/{new_id}"
    assert imported["read_only"] is True
    assert imported["source"] == {"kind": "export", "game_id": game_id}

    # The same events: versions, times, data and hashes (the chain does not include the id).
    assert events_of(client, new_id) == events_of(client, game_id)
    original, copy = ok(client.get(f"/v1/games/{game_id}")), imported["game"]
    # The same state, but that nobody may act in the copy, which says it is imported.
    assert original["legal_actions"] and "imported" not in original
    assert copy["legal_actions"] == [] and copy["imported"] is True
    mine: dict[str, Any] = {"id": None, "legal_actions": [], "imported": True}
    assert {**original, **mine} == {**copy, **mine}
    assert ok(client.get(f"/v1/games/{new_id}")) == copy
    assert ok(client.get(f"/v1/games/{new_id}?version=3"))["imported"] is True
    listed = {g["id"]: g for g in ok(client.get("/v1/games"))["games"]}
    assert listed[new_id]["imported"] is True and "imported" not in listed[game_id]
    assert ok(client.get(f"/v1/games/{new_id}?version=3"))["version"] == 3
    assert ok(client.get(f"/v1/games/{new_id}/audit"))["valid"] is True
    assert client.get(f"/v1/games/{new_id}/board.svg?version=2").status_code == 200


def test_an_export_is_imported_only_as_utf8(client: FlaskClient) -> None:
    """As JSON bodies are: another charset is 415, and nothing is imported (an export labelled
    latin-1 was imported as if UTF-8; found by a black-box review)."""
    game_id, _ = server_game_with_actions(client, 3)
    exported = export_text(client, game_id)
    before = len(ok(client.get("/v1/games"))["games"])
    for charset in ("latin-1", "utf-16"):
        labelled = f"{NDJSON}; charset={charset}"
        refused = client.post("/v1/games/import", data=exported, content_type=labelled)
        assert refused.status_code == 415, refused.get_json()
        assert refused.get_json()["code"] == "unsupported_media_type"
    assert len(ok(client.get("/v1/games"))["games"]) == before
    utf8 = f"{NDJSON}; charset=UTF-8"
    ok(client.post("/v1/games/import", data=exported, content_type=utf8), 201)


def test_an_imported_game_with_a_clock_shows_no_deadline(client: FlaskClient) -> None:
    """Its turn never times out (nobody plays it): a deadline there would be a time that passes
    and never comes."""
    created = ok(
        client.post("/v1/games", json={"players": ["Ann", "Bob"], "clock": {"turn_seconds": 60}}),
        201,
    )
    game_id = created["game"]["id"]
    original = ok(client.get(f"/v1/games/{game_id}"))
    assert original["turn"]["deadline"] is not None
    exported = export_text(client, game_id)
    copy = ok(client.post("/v1/games/import", data=exported, content_type=NDJSON), 201)["game"]
    assert copy["turn"]["deadline"] is None and copy["clock"] == {"turn_seconds": 60}
    assert {**copy["turn"], "deadline": 0} == {**original["turn"], "deadline": 0}
    assert ok(client.get(f"/v1/games/{copy['id']}/audit"))["valid"] is True


def test_every_action_and_join_on_an_imported_game_is_refused_read_only(
    client: FlaskClient,
) -> None:
    game_id, tokens = server_game_with_actions(client, 3)
    lobby, _ = create_game(client, seats=3)
    ok(client.post(f"/v1/games/{lobby}/players", json={"name": "Ann"}), 201)
    copies = [
        ok(client.post("/v1/games/import", data=export_text(client, g), content_type=NDJSON), 201)
        for g in (game_id, lobby)
    ]
    played, waiting = (c["game"]["id"] for c in copies)
    path = f"/v1/games/{played}/actions"
    for headers in ({}, bearer(tokens[0]), bearer(tokens[1]), bearer("made-up")):
        for action in ({"type": "roll"}, {"type": "stop"}, {"type": "resign"}):
            assert problem_code(client.post(path, json=action, headers=headers), 409) == "read_only"
    join = client.post(f"/v1/games/{waiting}/players", json={"name": "Bob"})
    assert problem_code(join, 409) == "read_only"
    # Nor is the imported lobby offered as open: its seats are no one's to take.
    open_games = [g["id"] for g in ok(client.get("/v1/games?open=true"))["games"]]
    assert lobby in open_games and waiting not in open_games
    # An imported game has no seats to hold, whatever token is sent.
    for headers in ({}, bearer(tokens[0]), bearer("made-up")):
        assert problem_code(client.get(f"/v1/games/{played}/seat", headers=headers), 409) == (
            "read_only"
        )
    # The originals are untouched and still playable.
    assert ok(client.get(f"/v1/games/{lobby}"))["status"] == "waiting"
    ok(client.post(f"/v1/games/{lobby}/players", json={"name": "Bob"}), 201)


def test_an_export_that_does_not_verify_is_refused_with_its_verdict(client: FlaskClient) -> None:
    game_id, _ = play_manual(client)
    lines = export_text(client, game_id).splitlines()
    record = json.loads(lines[7])
    record["data"]["sums"] = [12]
    lines[7] = json.dumps(record)
    response = client.post("/v1/games/import", data="\n".join(lines), content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"
    verdict = response.get_json()["verdict"]
    assert verdict["valid"] is False and verdict["first_bad_version"] == 7


def test_an_export_of_a_game_of_this_server_must_hold_what_this_server_recorded(
    client: FlaskClient,
) -> None:
    """A history rewritten after version 1 with its hash chain recomputed verifies on its own
    (here only a time moves; with a finished game's public seed, the dice could too): an
    export that names a game of this server is compared with it, hash by hash. A cut export
    of it still imports, and so does the rewrite under an id this server does not have."""
    game_id, _ = server_game_with_actions(client, 15)
    lines = export_text(client, game_id).splitlines()
    events = [json.loads(line) for line in lines[1:]]
    last = events[-1]
    moved = last["at"][:-2] + str((int(last["at"][-2]) + 1) % 10) + "Z"
    if moved < events[-2]["at"]:
        moved = events[-2]["at"]
    assert moved != last["at"]
    last["at"] = moved
    last["hash"] = chain_hash(last["prev_hash"], last["version"], last["type"], moved, last["data"])
    forged = [lines[0], *(json.dumps(e) for e in events)]
    alone = audit_records(json.loads(json.dumps(events)))
    assert alone["valid"] is True  # on its own, the rewrite verifies

    response = client.post("/v1/games/import", data="\n".join(forged), content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"
    verdict = response.get_json()["verdict"]
    assert verdict["first_bad_version"] == last["version"]
    origin = next(c for c in verdict["checks"] if c["name"] == "origin")
    assert origin["ok"] is False and game_id in origin["detail"]

    cut = "\n".join(lines[:8])
    assert client.post("/v1/games/import", data=cut, content_type=NDJSON).status_code == 201
    elsewhere = json.dumps({**json.loads(lines[0]), "game_id": str(uuid.uuid4())})
    unknown = "\n".join([elsewhere, *forged[1:]])
    assert client.post("/v1/games/import", data=unknown, content_type=NDJSON).status_code == 201


def test_an_export_with_a_lone_surrogate_is_refused_not_a_500(client: FlaskClient) -> None:
    # JSON text may escape a lone UTF-16 surrogate ("\\ud800"), which is no Unicode text: it
    # once reached the dice's HMAC, the store and the verdict's encoding as 500s.
    game_id, _ = play_manual(client)
    lines = export_text(client, game_id).splitlines()
    forged = [lines[0].replace(game_id, "\\ud800"), *lines[1:]]  # the header's game id
    response = client.post("/v1/games/import", data="\n".join(forged), content_type=NDJSON)
    assert problem_code(response, 422) == "invalid_request"
    assert "surrogate" in response.get_json()["detail"]
    forged = [*lines[:3], lines[3].replace('"type": "', '"type": "\\ud800'), *lines[4:]]
    response = client.post("/v1/games/import", data="\n".join(forged), content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"
    assert response.get_json()["verdict"]["first_bad_version"] == 3
    # A pair that is one character (an emoji) is text like any other.
    paired = [*lines[:3], lines[3].replace('"type": "', '"type": "\\ud83d\\ude00'), *lines[4:]]
    response = client.post("/v1/games/import", data="\n".join(paired), content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"  # no such event type, but read
    assert "surrogate" not in json.dumps(response.get_json()["verdict"])
    assert client.get("/v1/games").status_code == 200  # nothing half-stored broke the listing


def test_what_is_not_an_export_or_a_transcript_is_a_bad_request(client: FlaskClient) -> None:
    post = client.post
    assert problem_code(post("/v1/games/import", data="x", content_type=NDJSON), 422) == (
        "invalid_request"
    )
    assert problem_code(post("/v1/games/import", data="", content_type=NDJSON), 422) == (
        "invalid_request"
    )
    wrong_format = json.dumps({"format": "chess-game", "format_version": 1, "game_id": "g"})
    assert problem_code(post("/v1/games/import", data=wrong_format, content_type=NDJSON), 422) == (
        "invalid_request"
    )
    assert problem_code(post("/v1/games/import", data="x", content_type="text/plain"), 415) == (
        "unsupported_media_type"
    )
    body: dict[str, Any]
    for body in ({}, {"transcript": []}, {"transcript": {"players": []}}, {"other": 1}):
        assert problem_code(post("/v1/games/import", json=body), 422) == "invalid_request"
    unknown_field = {"transcript": {"players": ["Ann", "Bob"], "colour": "red"}}
    assert problem_code(post("/v1/games/import", json=unknown_field), 422) == "invalid_request"


def test_a_transcript_that_verifies_is_imported_as_a_manual_game(client: FlaskClient) -> None:
    transcript = {
        "players": ["Ann", "Bob"],
        "rules": {"columns_to_win": 2},
        "first_player": 1,
        "actions": [
            {"type": "roll", "dice": [3, 4, 2, 6]},
            {"type": "move", "sums": [7, 8]},
            {"type": "stop"},
            {"type": "roll", "dice": [1, 1, 1, 1]},
            {"type": "resign", "seat": 1},
        ],
    }
    verdict = ok(client.post("/v1/transcripts/verify", json=transcript))
    imported = ok(client.post("/v1/games/import", json={"transcript": transcript}), 201)
    assert imported["source"] == {"kind": "transcript", "game_id": None}
    game = imported["game"]
    assert game["imported"] is True and "imported" not in verdict["game"]
    assert {**game, "id": None, "imported": True} == {
        **verdict["game"],
        "id": None,
        "imported": True,
    }
    assert game["status"] == "finished" and game["winner"] == 0  # Bob (seat 1) resigned
    assert len(events_of(client, game["id"])) == game["version"]
    assert ok(client.get(f"/v1/games/{game['id']}/audit"))["valid"] is True


def test_a_transcript_that_does_not_verify_is_refused_with_its_verdict(
    client: FlaskClient,
) -> None:
    transcript = {"players": ["Ann", "Bob"], "actions": [{"type": "move", "sums": [7]}]}
    response = client.post("/v1/games/import", json={"transcript": transcript})
    assert problem_code(response, 422) == "import_invalid"
    verdict = response.get_json()["verdict"]
    assert verdict["valid"] is False
    assert verdict["error"]["index"] == 0 and verdict["error"]["code"] == "illegal_action"


def test_an_export_may_exceed_the_usual_body_limit_a_transcript_may_not(
    database_url: str,
) -> None:
    """An export (~300 bytes an event) is imported up to IMPORT_MAX_BYTES; a transcript (~35
    bytes an action) keeps the usual limit, as its verification does: else 1.7 MB of transcript
    imported as a 64,000-event game whose every audit cost seconds of CPU."""
    app = create_app(Settings(database_url=database_url, max_body_bytes=1024), create_tables=True)
    try:
        client = app.test_client()
        game_id, _ = play_manual(client)
        exported = export_text(client, game_id)
        assert len(exported.encode()) > 1024
        too_big = client.post("/v1/transcripts/verify", data=exported, content_type=NDJSON)
        assert problem_code(too_big, 413) == "payload_too_large"
        ok(client.post("/v1/games/import", data=exported, content_type=NDJSON), 201)
        # A transcript: the usual limit, as for its verification; nothing is imported.
        turn = [
            {"type": "roll", "dice": [3, 4, 2, 6]},
            {"type": "move", "sums": [7, 8]},
            {"type": "stop"},
        ]
        transcript = {"players": ["Ann", "Bob"], "actions": turn * 12}
        assert len(json.dumps({"transcript": transcript})) > 1024
        too_big = client.post("/v1/transcripts/verify", json=transcript)
        assert problem_code(too_big, 413) == "payload_too_large"
        listed = ok(client.get("/v1/games"), 200)
        too_big = client.post("/v1/games/import", json={"transcript": transcript})
        assert problem_code(too_big, 413) == "payload_too_large"
        assert ok(client.get("/v1/games"), 200) == listed
        turn_short = {"players": ["Ann", "Bob"], "actions": turn * 2}
        ok(client.post("/v1/games/import", json={"transcript": turn_short}), 201)
    finally:
        app.extensions["cantstop"].close()


# ------------------------------------------------------------------------------ pictures
def test_the_board_picture_follows_the_version_asked_for(client: FlaskClient) -> None:
    game_id, _ = play_manual(client)
    pictures = {}
    for query, version in (("", 11), ("?version=2", 2), ("?version=4", 4)):
        response = client.get(f"/v1/games/{game_id}/board.svg{query}")
        assert response.status_code == 200 and response.mimetype == "image/svg+xml"
        assert response.headers["ETag"] == f'"{version}"'
        root = ET.fromstring(response.data)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.get("data-version") == str(version)
        pictures[version] = response.data
    assert len(set(pictures.values())) == 3
    assert problem_code(client.get(f"/v1/games/{game_id}/board.svg?version=12"), 404) == (
        "not_found"
    )
    assert problem_code(client.get(f"/v1/games/{game_id}/board.svg?version=x"), 422) == (
        "invalid_request"
    )


def test_an_imported_exports_source_id_cannot_forge_a_log_line(
    client: FlaskClient, caplog: Any
) -> None:
    """The header's ``game_id`` is the exporter's words (any text, up to 200 characters): the
    import's log line quotes it, so a newline in it starts no line of its own (a review)."""
    game_id, _ = server_game_with_actions(client, 3)
    header, *rest = export_text(client, game_id).splitlines()
    forged = json.dumps({**json.loads(header), "game_id": "x\nERROR the database is gone"})
    caplog.set_level("INFO", logger="cantstop")
    response = client.post("/v1/games/import", data="\n".join([forged, *rest]), content_type=NDJSON)
    assert response.status_code == 201, response.get_json()
    lines = [r.getMessage() for r in caplog.records if "imported game" in r.getMessage()]
    assert lines and all("\n" not in line for line in lines), lines
