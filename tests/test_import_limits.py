"""What an import may cost (POST /v1/games/import, docs/auditing.md "Sizes"): at most
``MAX_IMPORT_EVENTS`` events, refused 422 ``game_too_long`` before the heavy work; the ``audit``
rate limit counted once a thousand events; and an export's ``game_id`` that is a UUID written
otherwise than this server writes it is refused, never judged as another server's game."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from domain.game import chain_hash
from service.application.games.auditing import MAX_IMPORT_EVENTS
from tests.support.games import export_text, play_manual
from tests.support.http import ok

NDJSON = "application/x-ndjson"
Json = dict[str, Any]

# Seat 0 climbs column 2 to its top (3 spaces) and claims it; from then on a roll of four ones
# (every pair sums to 2, a claimed column) busts: DiceRolled and TurnBusted, two events for an
# action of ~33 bytes.
CLAIM_COLUMN_2: list[Json] = [
    {"type": "roll", "dice": [1, 1, 1, 1]},
    {"type": "move", "sums": [2, 2]},
    {"type": "roll", "dice": [1, 1, 1, 1]},
    {"type": "move", "sums": [2]},
    {"type": "stop"},
]
BUST: Json = {"type": "roll", "dice": [1, 1, 1, 1]}


def busts(count: int) -> Json:
    return {
        "players": ["Ann", "Bob"],
        "first_player": 0,
        "actions": CLAIM_COLUMN_2 + [BUST] * count,
    }


def body_of(transcript: Json) -> bytes:
    return json.dumps({"transcript": transcript}, separators=(",", ":")).encode()


def problem_code(response: Any, status: int) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    code: str = response.get_json()["code"]
    return code


def listed(client: FlaskClient) -> list[Json]:
    games: list[Json] = ok(client.get("/v1/games?limit=100"))["games"]
    return games


# ------------------------------------------------------------------------------ the cap
def test_a_transcript_of_busts_that_fills_the_body_limit_is_game_too_long(
    client: FlaskClient,
) -> None:
    """256 KiB of busts (the usual body limit) expanded to a game of 15,881 events, imported
    and counted once: refused now, and nothing stored."""
    count = (256 * 1024 - len(body_of(busts(0)))) // (
        len(json.dumps(BUST, separators=(",", ":"))) + 1
    )
    transcript = busts(count)
    assert len(body_of(transcript)) <= 256 * 1024
    before = listed(client)
    response = client.post(
        "/v1/games/import", data=body_of(transcript), content_type="application/json"
    )
    assert problem_code(response, 422) == "game_too_long"
    assert str(MAX_IMPORT_EVENTS) in response.get_json()["detail"]
    assert listed(client) == before


def test_a_transcript_of_more_actions_than_the_cap_is_refused_before_it_is_replayed(
    client: FlaskClient,
) -> None:
    """Each action records an event at least: that many actions are refused unread (here the
    first is already illegal, which a replay would have reported as ``import_invalid``)."""
    stops = {"players": ["Ann", "Bob"], "actions": [{"type": "stop"}] * MAX_IMPORT_EVENTS}
    response = client.post("/v1/games/import", json={"transcript": stops})
    assert problem_code(response, 422) == "game_too_long"
    fewer = {"players": ["Ann", "Bob"], "actions": [{"type": "stop"}] * (MAX_IMPORT_EVENTS - 1)}
    response = client.post("/v1/games/import", json={"transcript": fewer})
    assert problem_code(response, 422) == "import_invalid"


def test_an_export_of_more_events_than_the_cap_is_refused_before_it_is_audited(
    client: FlaskClient,
) -> None:
    header = json.dumps({"format": "cantstop-game", "format_version": 1, "game_id": "elsewhere"})
    too_many = "\n".join([header, *["{}"] * (MAX_IMPORT_EVENTS + 1)])
    response = client.post("/v1/games/import", data=too_many, content_type=NDJSON)
    assert problem_code(response, 422) == "game_too_long"
    at_the_cap = "\n".join([header, *["{}"] * MAX_IMPORT_EVENTS])  # audited, and refused
    response = client.post("/v1/games/import", data=at_the_cap, content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"


# ------------------------------------------------------------------------------ the charge
def test_an_import_counts_against_audit_once_a_thousand_events(limited: Any) -> None:
    """A game of 2,5xx events counts 3 (the request itself one of them); a small one counts 1.
    Never more than the limit's whole count, so a low limit still lets a long game in."""
    transcript = busts(1_250)  # 1 + 1 + 5 + 2 x 1,250 events
    client = limited("audit=5/minute").test_client()
    first = client.post("/v1/games/import", json={"transcript": transcript})
    assert first.status_code == 201, first.get_json()
    assert 2_000 < first.get_json()["game"]["version"] <= 3_000
    assert first.headers["X-RateLimit-Remaining"] == "2"
    again = client.post("/v1/games/import", json={"transcript": transcript})
    assert problem_code(again, 429) == "rate_limited"

    # An export counts by its events alike (its own GET /export counts one).
    client = limited("audit=10/minute").test_client()
    imported = ok(client.post("/v1/games/import", json={"transcript": transcript}), 201)
    exported = export_text(client, imported["game"]["id"])
    response = client.post("/v1/games/import", data=exported, content_type=NDJSON)
    assert response.status_code == 201, response.get_json()
    assert response.headers["X-RateLimit-Remaining"] == str(10 - 3 - 1 - 3)
    small = client.post("/v1/games/import", json={"transcript": busts(1)})
    assert small.status_code == 201 and small.headers["X-RateLimit-Remaining"] == "2"

    lowest = limited("audit=2/minute").test_client()
    capped = lowest.post("/v1/games/import", json={"transcript": transcript})
    assert capped.status_code == 201 and capped.headers["X-RateLimit-Remaining"] == "0"


# ------------------------------------------------------------------------------ the origin
@pytest.mark.parametrize(
    "spelled",
    [
        lambda g: g + " ",  # a trailing space
        lambda g: g[:8] + "\u200b" + g[8:],  # a zero-width space
        lambda g: g.replace("-", "\u2011"),  # non-breaking hyphens
        lambda g: g.upper(),
        lambda g: "{" + g + "}",
        lambda g: "urn:uuid:" + g,
        lambda g: g.replace("-", ""),
        lambda g: "\u0430" + g[1:],  # a Cyrillic а first (in place of any digit)
        lambda g: g[:-1] + "\u03bf",  # a Greek omicron last
    ],
    ids=["space", "zwsp", "nbhyphen", "upper", "braces", "urn", "hex", "cyrillic", "greek"],
)
def test_an_export_naming_a_game_here_in_another_spelling_is_refused(
    client: FlaskClient, spelled: Any
) -> None:
    """The origin check compares an export with this server's game only under the id as this
    server writes it; a rewrite of that game named by a look-alike was imported as judged by
    the audit alone, its source shown as (what looks like) the game played here."""
    game_id, _ = play_manual(client)
    header, *lines = export_text(client, game_id).splitlines()
    events = [json.loads(line) for line in lines]
    last = events[-1]
    last["at"] = "2099-01-01T00:00:00.000000Z"  # a rewrite, its chain recomputed
    last["hash"] = chain_hash(
        last["prev_hash"], last["version"], last["type"], last["at"], last["data"]
    )
    forged = [json.dumps(e) for e in events]
    canonical = "\n".join([header, *forged])
    response = client.post("/v1/games/import", data=canonical, content_type=NDJSON)
    assert problem_code(response, 422) == "import_invalid"
    origin = next(c for c in response.get_json()["verdict"]["checks"] if c["name"] == "origin")
    assert origin["ok"] is False  # only this server can tell: on its own the rewrite verifies

    renamed = json.dumps({**json.loads(header), "game_id": spelled(game_id)})
    before = listed(client)
    response = client.post(
        "/v1/games/import", data="\n".join([renamed, *forged]), content_type=NDJSON
    )
    assert problem_code(response, 422) == "invalid_request"
    detail = response.get_json()["detail"]
    assert game_id in detail or "look-alike" in detail
    assert listed(client) == before


def test_an_export_of_a_game_played_elsewhere_is_still_judged_by_the_audit_alone(
    client: FlaskClient,
) -> None:
    game_id, _ = play_manual(client)
    header, *lines = export_text(client, game_id).splitlines()
    words = "Faced decade, baffled cab: fade bead deaf"  # 32 of a-f, but words: no UUID
    others = ("game 7 at the club", str(uuid.uuid4()), "x" * 31 + "-not-a-uuid", words)
    for other in (*others, "партия 7 клуба"):  # (any script)
        renamed = json.dumps({**json.loads(header), "game_id": other})
        response = client.post(
            "/v1/games/import", data="\n".join([renamed, *lines]), content_type=NDJSON
        )
        assert response.status_code == 201, response.get_json()
        assert response.get_json()["source"]["game_id"] == other


def test_a_transcripts_verification_counts_against_audit_once_a_thousand_actions(
    limited: Any,
) -> None:
    """POST /v1/transcripts/verify replays as an import does: 2,1xx actions count 3 before
    the replay (it counted one whatever its length, ~16,000 events of busts for one)."""
    client = limited("audit=5/minute").test_client()
    long = client.post("/v1/transcripts/verify", json=busts(2_100))
    assert long.status_code == 200 and long.get_json()["valid"], long.get_json()
    assert long.headers["X-RateLimit-Remaining"] == "2"
    refused = client.post("/v1/transcripts/verify", json=busts(2_100))
    assert problem_code(refused, 429) == "rate_limited"
    short = limited("audit=5/minute").test_client().post("/v1/transcripts/verify", json=busts(1))
    assert short.status_code == 200 and short.headers["X-RateLimit-Remaining"] == "4"
