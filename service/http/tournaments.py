"""Tournaments (issue #45, contract 1.3): create, start, list, read, register, withdraw, pause
and resume (arena), standings and export (service/application/tournaments/). The tournament's
own stream is served with the other streams (service/http/stream.py)."""

from __future__ import annotations

import uuid

import orjson
from flask import Blueprint, Response, request

from service.application.errors import NotFound
from service.http import schemas
from service.http.core import (
    BadRequest,
    download,
    int_arg,
    json_body,
    json_response,
    load,
    me,
    runtime,
)
from service.http.idempotent import creates_signed_in

tournaments_api = Blueprint("tournaments", __name__)

CREATE = schemas.TournamentRequestSchema()
NDJSON = "application/x-ndjson"
STATUSES = ("created", "started", "finished")
FRESH = {"Cache-Control": "no-cache"}


def parsed(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound(f"no tournament {raw!r}") from None


def _no_content() -> Response:
    response = Response(status=204)
    del response.headers["Content-Type"]
    return response


@tournaments_api.post("/v1/tournaments")
@creates_signed_in
def create_tournament() -> Response:
    principal = me("play")  # who asks comes first: a stranger learns nothing of the schema
    data = load(CREATE, json_body())
    found = runtime().tournaments.create(principal, data)
    return json_response({"tournament": found}, 201, {"Location": f"/v1/tournaments/{found['id']}"})


@tournaments_api.get("/v1/tournaments")
def list_tournaments() -> Response:
    status = request.args.get("status")
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}")
    raw_cursor = request.args.get("cursor")
    cursor = None
    if raw_cursor is not None:
        if not raw_cursor.isascii() or not raw_cursor.isdigit() or len(raw_cursor) > 18:
            raise BadRequest("cursor must be a next_cursor this listing gave")
        cursor = int(raw_cursor)
    limit = int_arg("limit", 50, 1, 100)
    return json_response(runtime().tournaments.list(status, limit, cursor), headers=FRESH)


@tournaments_api.get("/v1/tournaments/<tournament_id>")
def get_tournament(tournament_id: str) -> Response:
    return json_response(runtime().tournaments.read(parsed(tournament_id)), headers=FRESH)


@tournaments_api.post("/v1/tournaments/<tournament_id>/start")
def start_tournament(tournament_id: str) -> Response:
    return json_response(runtime().tournaments.start(me("play"), parsed(tournament_id)))


@tournaments_api.post("/v1/tournaments/<tournament_id>/players")
def register(tournament_id: str) -> Response:
    found = runtime().tournaments.register(me("play"), parsed(tournament_id))
    return json_response({"tournament": found}, 201)


@tournaments_api.delete("/v1/tournaments/<tournament_id>/players/<handle>")
def withdraw(tournament_id: str, handle: str) -> Response:
    runtime().tournaments.withdraw(me("play"), parsed(tournament_id), handle)
    return _no_content()


@tournaments_api.post("/v1/tournaments/<tournament_id>/players/<handle>/pause")
def pause(tournament_id: str, handle: str) -> Response:
    runtime().tournaments.pause(me("play"), parsed(tournament_id), handle)
    return _no_content()


@tournaments_api.delete("/v1/tournaments/<tournament_id>/players/<handle>/pause")
def resume(tournament_id: str, handle: str) -> Response:
    runtime().tournaments.resume(me("play"), parsed(tournament_id), handle)
    return _no_content()


@tournaments_api.get("/v1/tournaments/<tournament_id>/standings")
def standings(tournament_id: str) -> Response:
    key = parsed(tournament_id)
    rt = runtime()
    rt.tournaments.version(key)  # 404 for no tournament
    return json_response({"standings": rt.tournaments.standings(key)}, headers=FRESH)


@tournaments_api.get("/v1/tournaments/<tournament_id>/export")
def export(tournament_id: str) -> Response:
    key = parsed(tournament_id)
    lines = runtime().tournaments.export(key)
    text = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    return download(
        text,
        NDJSON,
        {"Content-Disposition": f'attachment; filename="cantstop-tournament-{key}.ndjson"'},
    )
