"""``GET /v1/games/{id}/stream``: a game's events as server-sent events, and ``GET
/v1/account/stream``: an account's notices (service.live.hub)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from flask import Blueprint, Response, request

from service.application.errors import NotFound
from service.application.games.use_cases import parse_game_id
from service.http.core import BadRequest, client_of, error_problem, me, runtime
from service.live.hub import ShuttingDown, StreamBody, TooManyClientStreams, TooManyStreams

stream_api = Blueprint("stream", __name__)

LAST_EVENT_ID_MAX = 10**12
LAST_EVENT_ID_DIGITS = len(str(LAST_EVENT_ID_MAX))
ADOPT = "cantstop.stream"  # the environ key under which a stream waits to be handed over


def _resume_point() -> int | None:
    """``Last-Event-ID`` (what an EventSource sends when it reconnects) wins over ``?after``."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.args.get("after")),
    ):
        if raw is None:
            continue
        if name == "Last-Event-ID":  # (a header's value may have blanks around it; a query not)
            raw = raw.strip()
            if not raw:  # an empty one, as an event with an empty id sets: no resume point
                continue
        # Its digits past the leading zeros, at most LAST_EVENT_ID_MAX's, counted before int()
        # reads them: int() refuses a string of over 4300 digits (ValueError: it was a 500).
        digits = raw.lstrip("0") or "0"
        if (
            not raw.isdigit()
            or not raw.isascii()
            or len(digits) > LAST_EVENT_ID_DIGITS
            or int(digits) > LAST_EVENT_ID_MAX
        ):
            raise BadRequest(f"{name} must be a version: a non-negative integer")
        return int(digits)
    return None


@stream_api.get("/v1/games/<game_id>/stream")
def stream(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    hub = runtime().hub
    after = _resume_point()
    state = hub.games.state(gid)  # 404 not_found for an unknown game
    # An imported game never changes either: its stream ends once its stored events are sent.
    version = state["version"]
    finished = state["status"] == "finished" or state.get("imported", False)
    if after is None:
        after = version
    elif after > version:
        raise BadRequest(
            f"the game is at version {version}; cannot resume after {after}", version=version
        )
    if finished and after >= version:
        # Nothing will ever follow: 204 tells an EventSource not to reconnect.
        response = Response(status=204)
        del response.headers["Content-Type"]  # no body: no media type (Flask adds text/html)
        return response
    if request.method == "HEAD":  # the answer's head only: no stream is opened (RFC 9110)
        return _head()
    return _served(
        lambda: hub.stream(
            gid, after, version=version, finished=finished, client=client_of(request.remote_addr)
        )
    )


@stream_api.get("/v1/account/stream")
def account_stream() -> Response:
    """The account's notices (service/application/notify/notices.py): challenges, games started,
    turns, games finished. Never ends by itself: a client reconnects with ``Last-Event-ID``.
    It ends when its token is revoked or the account closed (service/live/hub.py,
    TOKEN_CHECK)."""
    principal = me("play")
    rt = runtime()
    after = _resume_point()
    latest = rt.notices.latest(principal.handle)  # caught up to the log's end first
    if after is None:
        after = latest
    elif after > latest:
        raise BadRequest(
            f"the account's newest notice is {latest}; cannot resume after {after}",
            latest=latest,
        )
    else:  # notices older than the retention are gone: resume from the oldest kept
        after = max(after, rt.notices.first_kept(principal.handle) - 1)
    if request.method == "HEAD":
        return _head()
    return _served(
        lambda: rt.hub.account_stream(
            principal.handle,
            after,
            latest=latest,
            client=client_of(request.remote_addr),
            token_id=principal.token_id,  # the stream ends when this token dies (hub.py)
        )
    )


def _head() -> Response:
    response = Response(mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    return response


def _served(open_stream: Callable[[], StreamBody]) -> Response:
    try:
        body = open_stream()
    except (TooManyStreams, TooManyClientStreams, ShuttingDown) as exc:
        response = error_problem(exc)
        response.headers["Retry-After"] = "5"
        return response
    # Under the service's worker the connection is handed to the hub's loop once the answer's
    # head is final (service/server.py): this request's thread does not wait on the stream.
    request.environ[ADOPT] = body
    response = Response(body, mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


@stream_api.get("/v1/tournaments/<tournament_id>/stream")
def tournament_stream(tournament_id: str) -> Response:
    """The tournament's events (registrations, rounds, results, its end); of each page read,
    the last that may move the standings carries them (``Tournaments.records``); ends after
    ``Finished``. Resumed with ``Last-Event-ID``."""
    try:
        tid = uuid.UUID(tournament_id)
    except ValueError:
        raise NotFound(f"no tournament {tournament_id!r}") from None
    rt = runtime()
    after = _resume_point()
    version, finished = rt.tournaments.version(tid)  # 404 for no tournament
    if after is None:
        after = version
    elif after > version:
        raise BadRequest(
            f"the tournament is at version {version}; cannot resume after {after}",
            version=version,
        )
    if finished and after >= version:
        response = Response(status=204)
        del response.headers["Content-Type"]
        return response
    if request.method == "HEAD":
        return _head()
    tournaments = rt.tournaments
    return _served(
        lambda: rt.hub.tournament_stream(
            tid,
            after,
            version=version,
            finished=finished,
            client=client_of(request.remote_addr),
            records=lambda after, limit: tournaments.records(tid, after, limit),
        )
    )
