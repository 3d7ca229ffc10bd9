"""HTTP routes, v1: thin views that load a schema, call the application, dump a schema."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, jsonify, request
from marshmallow import Schema, ValidationError

from domain.errors import IllegalAction
from domain.transcript import MalformedTranscript, verify
from domain.view import game_state, legal_actions
from service import schemas
from service.app import domain_problem, openapi_text, runtime
from service.games import ServiceError, parse_game_id
from service.live import redis_status

api = Blueprint("api", __name__)

MAX_EVENTS_PAGE = 1000
MAX_GAMES_PAGE = 200
# Schemas are stateless once built: build each once, not per request.
ACTION_RESULT = schemas.ActionResultSchema()
ACTION = schemas.ActionSchema()
CREATE_GAME = schemas.CreateGameSchema()
CREATED = schemas.CreatedSchema()
EVENT_PAGE = schemas.EventPageSchema()
GAME_LIST = schemas.GameListSchema()
GAME_STATE = schemas.GameStateSchema()
JOIN = schemas.JoinSchema()
TRANSCRIPT = schemas.TranscriptSchema()
VERDICT = schemas.VerdictSchema()
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
ETAG = re.compile(r'^(?:W/)?"?(\d{1,12})"?$')


class BadRequest(ServiceError):
    status, code = 422, "invalid_request"


def _body() -> Any:
    data = request.get_json(force=True, silent=True, cache=True)
    if data is None:
        raise BadRequest("the body must be a JSON document (Content-Type: application/json)")
    return data


def _load(schema: Schema, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        loaded = schema.load(data)
    except ValidationError as exc:
        raise BadRequest("the body does not fit the schema", errors=exc.messages) from None
    assert isinstance(loaded, dict)
    return loaded


def _int_arg(name: str, default: int, low: int, high: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"\d{1,12}", raw):
        raise BadRequest(f"{name} must be a non-negative integer")
    value = int(raw)
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{name} must be {bound}")
    return value


def _version_arg() -> int | None:
    raw = request.args.get("version")
    if raw is None:
        return None
    if not re.fullmatch(r"\d{1,12}", raw):
        raise BadRequest("version must be a positive integer")
    return int(raw)


def _bearer() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _json(payload: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    response = jsonify(payload)
    response.status_code = status
    response.headers.update(headers or {})
    return response


@api.get("/")
def root() -> Response:
    return _json(
        {
            "name": "Can't Stop game service",
            "api": "/v1",
            "docs": "/docs",
            "openapi": "/openapi.yaml",
            "health": "/healthz",
        }
    )


@api.get("/openapi.yaml")
def openapi() -> Response:
    return Response(openapi_text(), mimetype="application/yaml")


@api.get("/healthz")
def healthz() -> Response:
    rt = runtime()
    checks: dict[str, str] = {}
    status = 200
    try:
        rt.games.recorder.max_notification_id()
        checks["database"] = "ok"
    except Exception as exc:  # any failure of the store is reported, not raised
        checks["database"] = f"down: {type(exc).__name__}"
        status = 503
    checks["redis"] = redis_status()  # down: still 200; actions are recorded, streams poll
    healthy = status == 200 and not checks["redis"].startswith("down")
    body = {"status": "ok" if healthy else "degraded", "checks": checks}
    return _json(body, status)


@api.post("/v1/games")
def create_game() -> Response:
    data = _load(CREATE_GAME, _body())
    game, seats = runtime().games.create(**data)
    state = game_state(game, str(game.id))  # the aggregate just saved: no need to read it back
    payload = CREATED.dump(
        {
            "game": state,
            "seats": [{"seat": s.seat, "name": s.name, "token": s.token} for s in seats],
        }
    )
    return _json(payload, 201, {"Location": f"/v1/games/{game.id}", "ETag": f'"{game.version}"'})


@api.get("/v1/games")
def list_games() -> Response:
    status = request.args.get("status")
    if status is not None and status not in ("waiting", "in_progress", "finished"):
        raise BadRequest("status must be waiting, in_progress or finished")
    open_raw = request.args.get("open", "false")
    if open_raw not in ("true", "false"):
        raise BadRequest("open must be true or false")
    limit = _int_arg("limit", 50, 1, MAX_GAMES_PAGE)
    offset = _int_arg("offset", 0, 0)
    rt = runtime()
    rt.index.catch_up(rt.games)
    rows = rt.index.query(status=status, open_only=open_raw == "true")
    page = rows[offset : offset + limit]
    next_offset = offset + limit if offset + limit < len(rows) else None
    return _json(GAME_LIST.dump({"games": page, "total": len(rows), "next_offset": next_offset}))


@api.get("/v1/games/<game_id>")
def get_game(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    state = runtime().games.state(gid, _version_arg())
    etag = f'"{state["version"]}"'
    if request.args.get("version") is None and request.headers.get("If-None-Match") == etag:
        return Response(status=304, headers={"ETag": etag})
    return _json(GAME_STATE.dump(state), headers={"ETag": etag})


@api.post("/v1/games/<game_id>/players")
def join_game(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    data = _load(JOIN, _body())
    game, seat = runtime().games.join(gid, data["name"])
    state = game_state(game, str(gid))
    return _json(
        {"seat": seat.seat, "name": seat.name, "token": seat.token, "game": state},
        201,
        {"Location": f"/v1/games/{gid}", "ETag": f'"{game.version}"'},
    )


@api.post("/v1/games/<game_id>/actions")
def act(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    games = runtime().games
    game, seat = games.authenticate(gid, _bearer())
    action = _load(ACTION, _body())
    if game.dice_mode == "server" and "dice" in action:
        raise BadRequest('this game uses server dice: send {"type": "roll"} without dice')
    if_match = None
    if "If-Match" in request.headers:
        match = ETAG.match(request.headers["If-Match"].strip())
        if match is None:
            raise BadRequest('If-Match must be a version in quotes, e.g. "12"')
        if_match = int(match.group(1))
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise BadRequest("Idempotency-Key must be 1 to 200 visible ASCII characters")
    try:
        result = games.act(game, seat, action, if_match=if_match, idempotency_key=key)
    except IllegalAction as exc:
        return domain_problem(exc, legal_actions=legal_actions(game))
    payload = ACTION_RESULT.dump({"game": result.game, "events": result.events})
    headers = {"ETag": f'"{result.game["version"]}"'}
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    return _json(payload, headers=headers)


@api.get("/v1/games/<game_id>/events")
def events(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    after = _int_arg("after", 0, 0)
    limit = _int_arg("limit", 100, 1, MAX_EVENTS_PAGE)
    records = runtime().games.history(gid, after=after, limit=limit + 1)
    next_after = None
    if len(records) > limit:
        records = records[:limit]
        next_after = records[-1]["version"]
    return _json(EVENT_PAGE.dump({"events": records, "next_after": next_after}))


@api.post("/v1/transcripts/verify")
def verify_transcript() -> Response:
    doc = _body()
    loaded = _load(TRANSCRIPT, doc)
    try:
        verdict = verify(
            {k: v for k, v in doc.items() if k != "trace"}, trace=bool(loaded["trace"])
        )
    except MalformedTranscript as exc:
        raise BadRequest(str(exc)) from None
    return _json(VERDICT.dump(verdict))
