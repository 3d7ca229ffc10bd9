"""Routes for auditors: audit, export, import, and the board as a picture (contract: Auditing).

Imported games are read-only: the application refuses every action on one, and every join, with
409 ``read_only`` before anything else is checked (no seat of an imported game holds a token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, request
from marshmallow import Schema, fields

from service.application.games.auditing import audit, export_lines, import_export, import_transcript
from service.application.games.use_cases import parse_game_id
from service.http import schemas
from service.http.core import (
    BadRequest,
    UnsupportedMediaType,
    download,
    is_json,
    json_body,
    json_response,
    limit_count,
    load,
    runtime,
    spend,
    this_request,
    utf8_only,
    version_arg,
    whole_body,
)
from service.render.board_svg import render_board

audit_api = Blueprint("audit", __name__)

NDJSON = "application/x-ndjson"
# An export carries each event's times and hashes (~300 bytes an event): a long game exports to
# well under 1 MiB, and 2 MiB holds ~7,000 events. A transcript carries only the actions (~35
# bytes each, ~10 times denser), so it keeps the usual body limit, as /v1/transcripts/verify
# does: 256 KiB holds ~8,000 actions, about as many events as the export's limit. Raising it as
# well let 1.7 MB of transcript import as a 64,000-event game, each audit of which then cost
# seconds of CPU (docs/auditing.md, "Imports").
IMPORT_MAX_BYTES = 2 * 1024 * 1024
EVENTS_A_COUNT = 1_000
"""Events of an import counted as one against the ``audit`` rate limit (an audit costs ~100 µs
of CPU an event): a game of some hundred events counts once, as its own ``/audit`` does, and an
import of ``MAX_IMPORT_EVENTS`` eight times. Counted once a request whatever its size, 256 KiB
of busts (15,881 events) cost as much of the limit as a game of ten."""


class ImportTranscriptSchema(Schema):
    transcript = fields.Nested(schemas.TranscriptSchema, required=True)


IMPORT_TRANSCRIPT = ImportTranscriptSchema()


@audit_api.get("/v1/games/<game_id>/audit")
def audit_game(game_id: str) -> Response:
    return json_response(audit(runtime().games, parse_game_id(game_id)))


@audit_api.get("/v1/games/<game_id>/export")
def export_game(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    text = export_lines(runtime().games, gid)
    return download(
        text, NDJSON, {"Content-Disposition": f'attachment; filename="cantstop-{gid}.ndjson"'}
    )


def audit_charge() -> Callable[[int], None]:
    """What an import spends of its ``audit`` rate limit, told its events before the work: one
    count each ``EVENTS_A_COUNT`` events (begun), the request itself having counted one; told a
    larger number later, it spends only the difference (429 ``rate_limited`` past the limit).
    Never more than the limit's whole count, else a deployment's low limit (``audit=5/minute``)
    could never be answered for a long game."""
    spent = 1
    most = limit_count("audit")

    def charge(events: int) -> None:
        nonlocal spent
        cost = -(-events // EVENTS_A_COUNT)
        if most is not None:
            cost = min(cost, most)
        if cost > spent:
            spend("audit", cost - spent)
            spent = cost

    return charge


@audit_api.post("/v1/games/import")
def import_game() -> Response:
    games = runtime().games
    source: str | None = None
    if request.mimetype == NDJSON:
        utf8_only(this_request(), "exports")
        request.max_content_length = max(IMPORT_MAX_BYTES, request.max_content_length or 0)
        game_id, source = import_export(games, whole_body(this_request()), audit_charge())
        kind = "export"
    elif is_json(request.mimetype):
        body: Any = json_body()
        if not isinstance(body, dict):
            raise BadRequest('the body must be a JSON object: {"transcript": {...}}')
        load(IMPORT_TRANSCRIPT, body)
        game_id = import_transcript(games, body["transcript"], audit_charge())
        kind = "transcript"
    else:
        raise UnsupportedMediaType(
            f"send an export as {NDJSON}, or a transcript as application/json"
        )
    state = games.state(game_id)
    payload = {
        "game": state,
        "read_only": True,
        "source": {"kind": kind, "game_id": source},
    }
    headers = {"Location": f"/v1/games/{game_id}", "ETag": f'"{state["version"]}"'}
    return json_response(payload, 201, headers)


@audit_api.get("/v1/games/<game_id>/board.svg")
def board_svg(game_id: str) -> Response:
    state = runtime().games.state(parse_game_id(game_id), version_arg())
    return download(render_board(state), "image/svg+xml", {"ETag": f'"{state["version"]}"'})
