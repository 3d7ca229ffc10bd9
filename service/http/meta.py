"""The service's own routes: health, and the OpenAPI document with its viewer (the index, ``/``,
is negotiated with the lobby page: service/http/pages)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from flask import Blueprint, Flask, Response
from flask_swagger_ui import get_swaggerui_blueprint

from domain.game import format_at
from service.http.core import download, json_response, runtime
from service.persistence.guard import WriteHealth
from service.runtime import Runtime

meta_api = Blueprint("meta", __name__)

# A link to the top-level openapi.yaml in the source tree; the file itself in a built wheel.
OPENAPI_PATH = Path(__file__).parent / "openapi.yaml"


def openapi_text() -> str:
    return OPENAPI_PATH.read_text(encoding="utf-8")


@meta_api.get("/openapi.yaml")
def openapi() -> Response:
    return download(openapi_text(), "application/yaml")


@meta_api.get("/v1/keys")
def keys() -> Response:
    """The receipts' public keys, retired ones kept (contract 1.2)."""
    return json_response(runtime().receipts.published())


@meta_api.get("/healthz")
def healthz() -> Response:
    rt = runtime()
    checks: dict[str, str] = {}
    status = 200
    try:
        rt.games.store.recorder.max_notification_id()
        checks["database"] = "ok"
    except Exception as exc:  # any failure of the store is reported, not raised
        checks["database"] = f"down: {type(exc).__name__}"
        status = 503
    # A store that answers reads may still refuse writes (a full disk): this worker's last
    # write says so. Still 200: games can be read, and a write may succeed again.
    checks["writes"] = writes_status(rt.games.store.recorder)
    checks["redis"] = rt.redis_status()  # down: still 200; actions are recorded, streams poll
    if status == 200:  # a view whose code changed is served as it stands until rebuilt
        checks["views"] = views_status(rt)
    healthy = (
        status == 200
        and checks["writes"] == "ok"
        and checks.get("views") == "ok"
        and not checks["redis"].startswith("down")
    )
    body = {"status": "ok" if healthy else "degraded", "checks": checks}
    return json_response(body, status)


def views_status(rt: Runtime) -> str:
    """``ok``, or which views wait for ``cantstop projections rebuild`` (their code changed)."""
    try:
        stale = [view.name for view in rt.all_views() if rt.views.stale(view)]
    except Exception as exc:  # any failure of the store is reported, not raised
        return f"down: {type(exc).__name__}"
    if not stale:
        return "ok"
    return f"stale: {', '.join(stale)} (code changed: cantstop projections rebuild)"


def writes_status(recorder: object) -> str:
    """How this worker's last write of events went: "ok", or "failing since <time>: <kind>"."""
    writes = getattr(recorder, "writes", None)
    if not isinstance(writes, WriteHealth) or writes.failed_at is None:
        return "ok"
    at = format_at(datetime.fromtimestamp(writes.failed_at, UTC))
    return f"failing since {at}: {writes.reason}"


def register(app: Flask) -> None:
    app.register_blueprint(meta_api)
    docs: Blueprint = get_swaggerui_blueprint(
        "/docs", "/openapi.yaml", config={"app_name": "Can't Stop API"}
    )

    @docs.after_request
    def framed_nowhere(response: Response) -> Response:
        """Swagger UI's page runs inline scripts, so it cannot take the pages' policy
        (``core.html_policy``); it is still shown in no one's frame (clickjacking) and never
        sniffed. A hook of this blueprint's alone: no other request runs it (app.py)."""
        response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    app.register_blueprint(docs)
