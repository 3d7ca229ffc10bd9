"""HTTP routes for auditors: audit, export, import, and the board as a picture (contract: Auditing).

Imported games are read-only: every action on one, and every join, is refused with 409
``read_only`` before anything else is checked (no seat of an imported game holds a token).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from marshmallow import Schema, ValidationError, fields

from service import schemas
from service.api import BadRequest, _version_arg
from service.app import problem, runtime
from service.auditing import audit, export_lines, import_export, import_transcript, is_imported
from service.board_svg import render_board
from service.games import NotFound, parse_game_id

audit_api = Blueprint("audit_api", __name__)

NDJSON = "application/x-ndjson"
IMPORT_MAX_BYTES = 2 * 1024 * 1024  # a long game exports to well under 1 MiB
READ_ONLY_ENDPOINTS = frozenset({"api.act", "api.join_game"})


def _json(payload: Any, status: int = 200, **headers: str) -> Response:
    response = jsonify(payload)
    response.status_code = status
    response.headers.update(headers)
    return response


class ImportTranscriptSchema(Schema):
    transcript = fields.Dict(required=True)


@audit_api.before_app_request
def refuse_changes_to_imported_games() -> Response | None:
    """Actions and joins on an imported game: 409 ``read_only``, before the token is checked."""
    if request.method != "POST" or request.endpoint not in READ_ONLY_ENDPOINTS:
        return None
    raw = (request.view_args or {}).get("game_id")
    try:
        game_id = parse_game_id(str(raw))
    except NotFound:  # an id that is not one: the route itself answers 404
        return None
    if not is_imported(runtime().games, game_id):
        return None
    return problem(409, "read_only", "this game was imported: it can be read, not played")


@audit_api.get("/v1/games/<game_id>/audit")
def audit_game(game_id: str) -> Response:
    verdict = audit(runtime().games, parse_game_id(game_id))
    return _json(verdict)


@audit_api.get("/v1/games/<game_id>/export")
def export_game(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    text = export_lines(runtime().games, gid)
    return Response(
        text,
        mimetype=NDJSON,
        headers={"Content-Disposition": f'attachment; filename="cantstop-{gid}.ndjson"'},
    )


@audit_api.post("/v1/games/import")
def import_game() -> Response:
    request.max_content_length = max(IMPORT_MAX_BYTES, request.max_content_length or 0)
    games = runtime().games
    source: str | None = None
    if request.mimetype == NDJSON:
        game_id, source = import_export(games, request.get_data(cache=False))
        kind = "export"
    elif request.mimetype == "application/json":
        body: Any = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise BadRequest('the body must be a JSON object: {"transcript": {...}}')
        try:
            loaded = ImportTranscriptSchema().load(body)
            schemas.TranscriptSchema().load(loaded["transcript"])
        except ValidationError as exc:
            raise BadRequest("the body does not fit the schema", errors=exc.messages) from None
        game_id = import_transcript(games, loaded["transcript"])
        kind = "transcript"
    else:
        return problem(
            415,
            "unsupported_media_type",
            f"send an export as {NDJSON}, or a transcript as application/json",
        )
    state = games.state(game_id)
    payload = {
        "game": schemas.GameStateSchema().dump(state),
        "read_only": True,
        "source": {"kind": kind, "game_id": source},
    }
    return _json(payload, 201, Location=f"/v1/games/{game_id}", ETag=f'"{state["version"]}"')


@audit_api.get("/v1/games/<game_id>/board.svg")
def board_svg(game_id: str) -> Response:
    state = runtime().games.state(parse_game_id(game_id), _version_arg())
    return Response(
        render_board(state), mimetype="image/svg+xml", headers={"ETag": f'"{state["version"]}"'}
    )
