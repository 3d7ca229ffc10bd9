"""The Flask app factory: one ``Games`` application per process, every error as problem+json."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flask import Flask, Response, current_app, json, request
from flask_swagger_ui import get_swaggerui_blueprint
from werkzeug.exceptions import HTTPException

from domain.errors import DomainError
from service.config import Settings, persistence_env
from service.games import Games, ServiceError
from service.index import GameIndex, Leaderboard

log = logging.getLogger("cantstop")

PROBLEM_TYPES = "urn:cantstop:problem:"
OPENAPI_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"
TITLES = {
    "invalid_request": "Invalid request",
    "unauthorized": "Unauthorized",
    "not_your_turn": "Not your turn",
    "not_found": "Not found",
    "illegal_action": "Illegal action",
    "game_over": "Game over",
    "version_conflict": "Version conflict",
    "invalid_dice": "Invalid dice",
    "concurrent_action": "Concurrent action",
    "idempotency_key_reused": "Idempotency key reused",
    "not_acceptable": "Not acceptable",
    "method_not_allowed": "Method not allowed",
    "payload_too_large": "Payload too large",
    "unsupported_media_type": "Unsupported media type",
    "internal_error": "Internal error",
}
DOMAIN_STATUS = {
    "invalid_request": 422,
    "illegal_action": 409,
    "game_over": 409,
    "not_your_turn": 403,
    "invalid_dice": 422,
}


class Runtime:
    """What one worker process holds: the application and its projections."""

    def __init__(self, settings: Settings, *, create_tables: bool) -> None:
        self.settings = settings
        env = persistence_env(settings.database_url, create_table=create_tables)
        env.update(
            {
                "IS_SNAPSHOTTING_ENABLED": "y",
                "AGGREGATE_CACHE_MAXSIZE": "500",
                "AGGREGATE_CACHE_FASTFORWARD": "y",
            }
        )
        env.update(settings.extra_env)
        self.games = Games(env=env)
        self.index = GameIndex()
        self.leaderboard = Leaderboard()

    def close(self) -> None:
        self.games.close()


def runtime() -> Runtime:
    rt = current_app.extensions["cantstop"]
    assert isinstance(rt, Runtime)
    return rt


def problem(status: int, code: str, detail: str, **extra: Any) -> Response:
    body = {
        "type": PROBLEM_TYPES + code,
        "title": TITLES.get(code, code.replace("_", " ").capitalize()),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return Response(json.dumps(body), status=status, mimetype="application/problem+json")


def domain_problem(exc: DomainError, **extra: Any) -> Response:
    return problem(DOMAIN_STATUS.get(exc.code, 409), exc.code, exc.detail, **extra)


def create_app(settings: Settings | None = None, *, create_tables: bool = False) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask("cantstop")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["cantstop"] = Runtime(settings, create_tables=create_tables)

    # Imported here: the blueprints import this module's helpers (runtime, problem).
    from service import limits, live
    from service.api import api
    from service.audit_api import audit_api
    from service.solitaire_api import solitaire_api

    app.register_blueprint(api)  # games, actions, history, transcripts, health
    live.init_app(app)  # GET /v1/games/{id}/stream and this process's hub
    limits.init_app(app)  # CANTSTOP_RATE_LIMITS
    app.register_blueprint(audit_api)  # audit, export, import, board.svg
    app.register_blueprint(solitaire_api)  # record sheets, leaderboard
    app.register_blueprint(
        get_swaggerui_blueprint("/docs", "/openapi.yaml", config={"app_name": "Can't Stop API"})
    )

    @app.errorhandler(ServiceError)
    def _service_error(exc: ServiceError) -> Response:
        return problem(exc.status, exc.code, exc.detail, **exc.extra)

    @app.errorhandler(DomainError)
    def _domain(exc: DomainError) -> Response:
        return domain_problem(exc)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = {
            404: "not_found",
            405: "method_not_allowed",
            406: "not_acceptable",
            413: "payload_too_large",
            415: "unsupported_media_type",
        }.get(status, "invalid_request")
        if status == 413:
            detail = f"the body is larger than {settings.max_body_bytes} bytes"
        else:
            detail = exc.description or exc.name
        response = problem(status, code, detail)
        for name, value in exc.get_headers():
            if name.lower() in ("allow", "retry-after"):  # a 405 must say what is allowed
                response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return problem(500, "internal_error", "an unexpected error; it has been logged")

    return app


def openapi_text() -> str:
    return OPENAPI_PATH.read_text(encoding="utf-8")
