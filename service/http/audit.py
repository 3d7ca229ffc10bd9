"""Routes for auditors: audit, export, import, and the board as a picture (contract: Auditing).

Imported games are read-only: the application refuses every action on one, and every join, with
409 ``read_only`` before anything else is checked (no seat of an imported game holds a token).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request
from marshmallow import Schema, fields

from service.application.games.auditing import audit, export_lines, import_export, import_transcript
from service.application.games.use_cases import parse_game_id
from service.http import schemas
from service.http.core import (
    BadRequest,
    UnsupportedMediaType,
    audit_charge,
    download,
    is_json,
    json_body,
    json_response,
    load,
    runtime,
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
