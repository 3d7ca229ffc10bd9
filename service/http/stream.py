"""``GET /v1/games/{id}/stream``: a game's events as server-sent events (service.live.hub)."""

from __future__ import annotations

from flask import Blueprint, Response, request

from service.application.games import parse_game_id
from service.http.core import BadRequest, error_problem, runtime
from service.live.hub import GameStream, ShuttingDown, TooManyStreams

stream_api = Blueprint("stream", __name__)

LAST_EVENT_ID_MAX = 10**12


def _resume_point() -> int | None:
    """``Last-Event-ID`` (what an EventSource sends when it reconnects) wins over ``?after``."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.args.get("after")),
    ):
        if raw is None:
            continue
        raw = raw.strip()
        if not raw.isdigit() or not raw.isascii() or int(raw) > LAST_EVENT_ID_MAX:
            raise BadRequest(f"{name} must be a version: a non-negative integer")
        return int(raw)
    return None


@stream_api.get("/v1/games/<game_id>/stream")
def stream(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    hub = runtime().hub
    after = _resume_point()
    state = hub.games.state(gid)  # 404 not_found for an unknown game
    version, finished = state["version"], state["status"] == "finished"
    if after is None:
        after = version
    elif after > version:
        raise BadRequest(
            f"the game is at version {version}; cannot resume after {after}", version=version
        )
    if finished and after >= version:
        # Nothing will ever follow: 204 tells an EventSource not to reconnect.
        return Response(status=204)
    try:
        box = hub.open(gid)
    except (TooManyStreams, ShuttingDown) as exc:
        response = error_problem(exc)
        response.headers["Retry-After"] = "5"
        return response
    body = GameStream(hub, box, after, finished=finished)
    response = Response(body, mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
