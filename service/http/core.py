"""The bottom of the HTTP layer: problem+json answers, the map from error codes to statuses, and
request parsing shared by every blueprint (bodies, query arguments, the bearer token).

Blueprints import this module and the application, never each other.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from io import BytesIO
from typing import Any, cast

import flask
import orjson
from flask import Flask, Response, current_app, render_template, request
from marshmallow import Schema, ValidationError
from werkzeug.datastructures import Headers, MIMEAccept
from werkzeug.exceptions import (
    ClientDisconnected,
    HTTPException,
    NotFound,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    RequestTimeout,
    RequestURITooLarge,
)
from werkzeug.routing import BaseConverter

from domain import jsondoc
from domain.errors import DomainError
from domain.record_sheet import RecordSheet, record_sheet
from service.application.errors import ApplicationError
from service.application.errors import NotFound as NotFoundProblem
from service.application.players.accounts import Principal
from service.runtime import Runtime

log = logging.getLogger("cantstop")

PROBLEM_TYPES = "urn:cantstop:problem:"
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
    "turn_moved_on": "Turn moved on",
    "idempotency_key_reused": "Idempotency key reused",
    "idempotency_key_in_use": "Idempotency key in use",
    "not_acceptable": "Not acceptable",
    "method_not_allowed": "Method not allowed",
    "payload_too_large": "Payload too large",
    "unsupported_media_type": "Unsupported media type",
    "uri_too_long": "URI too long",
    "headers_too_large": "Request header fields too large",
    "internal_error": "Internal error",
    "store_unavailable": "Store unavailable",
    "corrupt_game": "Corrupt game",
    "rate_limited": "Too many requests",
}
STATUS = {
    # domain
    "invalid_request": 422,
    "illegal_action": 409,
    "game_over": 409,
    "not_your_turn": 403,
    "invalid_dice": 422,
    # application
    "store_unavailable": 503,
    "corrupt_game": 409,
    "analysis_failed": 503,
    "game_too_long": 422,
    "too_many_analyses": 429,
    "not_found": 404,
    "unauthorized": 401,
    "version_conflict": 412,
    "concurrent_action": 409,
    "turn_moved_on": 409,
    "idempotency_key_reused": 422,
    "idempotency_key_in_use": 409,
    "read_only": 409,
    "import_invalid": 422,
    "imported_game": 409,
    "rated_needs_clock": 422,
    "rated_game_in_progress": 409,
    "too_many_streams": 503,
    "too_many_client_streams": 429,
    "turn_timed_out": 409,
    "not_your_seat": 403,
    "already_seated": 409,
    "handle_taken": 409,
    "handle_reserved": 422,
    "insufficient_scope": 403,
    "too_many_tokens": 409,
    "webhook_url_not_https": 422,
    "webhook_url_not_public": 422,
    "webhook_url_unresolvable": 422,
    "too_many_webhooks": 409,
    "webhook_lookups_busy": 503,
    "challenge_not_pending": 409,
    "too_many_challenges": 429,
    "seek_not_open": 409,
    "too_many_seeks": 429,
    "already_registered": 409,
    "tournament_started": 409,
    "tournament_finished": 409,
    "tournament_full": 409,
    "tournament_not_ready": 409,
    "not_registered": 404,
    "not_your_registration": 403,
    "not_tournament_creator": 403,
    "account_excluded": 403,
    "shutting_down": 503,
    "too_many_seat_changes": 409,
    "too_many_pauses": 409,
    # HTTP
    "malformed_request": 400,
    "not_acceptable": 406,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
}
HTTP_CODES = {
    404: "not_found",
    408: "request_timeout",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    414: "uri_too_long",
    429: "rate_limited",
    415: "unsupported_media_type",
    431: "headers_too_large",
}
# An Idempotency-Key, for an action or a creation: 1 to 200 visible ASCII characters.
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
# ASCII digits only: ``\d`` and ``int()`` also take other scripts' digits ("٢", "２").
DIGITS = re.compile(r"[0-9]{1,12}")
# A version as its entity tag says it (If-Match compares strongly: "02" is not "2").
VERSION_TAG = re.compile(r"0|[1-9][0-9]{0,11}")


class HttpProblem(ApplicationError):
    """A refusal that only the HTTP layer can see (a query argument, a header, a media type)."""


class BadRequest(HttpProblem):
    code = "invalid_request"


class NotAcceptable(HttpProblem):
    code = "not_acceptable"


class MalformedBody(HttpProblem):
    code = "malformed_request"


def request_class(*, max_body_bytes: int, max_line: int, max_headers: int) -> type[flask.Request]:
    """Flask's request with the service's limits, judged as the request is built: no
    ``before_request`` hook and no read of the request context, because a registered hook costs
    Flask's machinery around it on every request before it does anything, and each read of
    ``flask.request`` resolves a context variable (docs/performance.md (levers)).

    - The body limit (``max_body_bytes``, 413) is set on each request through Flask's own
      per-request setter (Flask 3.1): the app's config is not read through the context on
      every read. A view may still raise it for its own request (the import).
    - gunicorn's own limits are raised (service/gunicorn_settings.py) so that the app answers
      an over-long request line (414) or header block (431) itself, as problem+json. Such a
      request is refused the way Flask refuses one that matches no route: the refusal is kept
      as the request's ``refusal`` and raised by ``App.dispatch_request`` (http/app.py) in
      place of the view, after the ``before_request`` hooks, and answered by the error
      handlers. A request that also matches no route, or not with its method, is 404 or 405:
      routing's own refusal comes first."""

    class Request(flask.Request):
        refusal: HTTPException | None = None  # raised in place of the view (App)

        def __init__(self, environ: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            super().__init__(environ, *args, **kwargs)
            self.max_content_length = max_body_bytes
            if environ.get("PATH_INFO", "")[:2] == "//":
                # Werkzeug's routing drops leading slashes: //v1/games was /v1/games. A path
                # with doubled slashes names nothing, there as anywhere (url_map.merge_slashes).
                self.refusal = NotFound()
                return
            uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or self.full_path
            if len(uri) > max_line:
                detail = f"the request target is longer than {max_line} bytes"
                self.refusal = RequestURITooLarge(detail)
                return
            size = 0
            for name, value in environ.items():  # a loop and a slice: a third cheaper here
                if name[:5] == "HTTP_":
                    size += len(name) + len(value)
            if size > max_headers:
                detail = f"the request's header fields are larger than {max_headers} bytes in all"
                self.refusal = RequestHeaderFieldsTooLarge(detail)

    return Request


class GameIdConverter(BaseConverter):
    """``/v1/games/<game:game_id>``: any path segment but ``import``, which names the import's
    own route (``POST /v1/games/import``). Without it, ``GET /v1/games/import`` read a game
    called "import" (404) and a 405 from that path named ``GET`` in its ``Allow``; now the path
    is the import's alone: 405, ``Allow: POST``. Other ids are judged by the view (404 with the
    id named), as before."""

    regex = r"(?!import$)[^/]+"


def runtime() -> Runtime:
    rt = current_app.extensions["cantstop"]
    assert isinstance(rt, Runtime)
    return rt


# ------------------------------------------------------------------------------ answers
CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def accepted() -> MIMEAccept:
    """The request's ``Accept``, its media ranges without their parameters: Werkzeug matches a
    range's parameters exactly, so ``text/csv; charset=utf-8`` matched no type of ours (406)
    and ``text/html;charset=utf-8`` no page. Each type here has one form (UTF-8 text)."""
    accept = request.accept_mimetypes
    if not any(";" in value for value, _ in accept):
        return accept
    return MIMEAccept([(value.split(";", 1)[0].strip(), quality) for value, quality in accept])


OCTET_STREAM = "application/octet-stream"


def download_type(native: str) -> str:
    """A download's media type: ``native`` (also for ``*/*`` and no ``Accept``), or
    ``application/octet-stream`` when the request prefers it. The bytes are the same; the
    second is what clients generated from openapi.yaml read as bytes whatever the file is."""
    return accepted().best_match([native, OCTET_STREAM]) or native


def download(body: Any, native: str, headers: dict[str, str] | None = None) -> Response:
    """A download's answer, typed by ``download_type``: one URL, two media types, so it says
    ``Vary: Accept`` (a cache must not hand the octet-stream answer to a page that asked for
    the picture, nor the other way round)."""
    response = Response(body, mimetype=download_type(native), headers=headers)
    response.vary.add("Accept")
    return response


def wants_page() -> bool:
    """A browser asking for a page, not the API: it prefers text/html to JSON (``*/*`` and no
    ``Accept`` mean JSON), and the path is not under ``/v1``."""
    accept = accepted()
    if request.path.startswith("/v1/") or not accept:
        return False
    return accept.best_match(["application/json", "text/html"]) == "text/html"


def html_policy(response: Response) -> Response:
    """The headers of every HTML answer of the app, pages and error pages alike: a strict
    policy (no inline script or style, nothing from elsewhere), no sniffing, no referrer
    beyond the site."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def problem(status: int, code: str, detail: str, **extra: Any) -> Response:
    """An error's answer: problem+json, or an HTML page to a browser asking for a page. Outside
    the API (``/v1``) an error may be either, so it varies with ``Accept``."""
    response = _problem(status, code, detail, **extra)
    if status == 406 or not request.path.startswith("/v1/"):
        response.vary.add("Accept")  # (a 406 is the answer to this Accept only)
    return response


def _problem(status: int, code: str, detail: str, **extra: Any) -> Response:
    title = TITLES.get(code, code.replace("_", " ").capitalize())
    if wants_page():  # the pages' errors are pages (service/http/pages/templates)
        html = render_template("pages/error.html", status=status, title=title, detail=detail)
        return html_policy(Response(html, status, mimetype="text/html"))
    body = {
        "type": PROBLEM_TYPES + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return Response(dumps(body), status, mimetype="application/problem+json")


def error_problem(exc: DomainError | ApplicationError, **extra: Any) -> Response:
    """The answer to a refusal, by its code."""
    more = getattr(exc, "extra", {})
    status = STATUS.get(exc.code, 409)
    response = problem(status, exc.code, exc.detail, **more, **extra)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    if status == 401:  # RFC 6750: say which scheme, and whether the token sent was refused
        sent = bearer_token() is not None
        response.headers["WWW-Authenticate"] = 'Bearer realm="cantstop"' + (
            ', error="invalid_token"' if sent else ""
        )
    return response


class Body:
    """An answer's one chunk of bytes, and the response's ``close`` for the server to call."""

    __slots__ = ("chunks", "close")

    def __init__(self, data: bytes, close: Callable[[], None]) -> None:
        self.chunks = (data,)
        self.close = close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)


class Answer(Response):
    """Flask's response, handed to the server as Werkzeug hands it, with less work when there
    is nothing to fix (docs/performance.md, levers): its headers as they are, not a copy
    checked again field by field, when they hold no ``Location`` or ``Content-Location`` to
    rewrite and a length already set, for a status that has a body; and its body as one chunk
    of bytes, not a generator in a ``ClosingIterator``. Anything else goes Werkzeug's way."""

    def get_wsgi_headers(self, environ: dict[str, Any]) -> Headers:
        status = self.status_code
        if 200 <= status < 300 and status != 204:
            length = False
            for key, _ in self.headers:
                name = key.lower()
                if name in ("location", "content-location"):
                    break
                length = length or name == "content-length"
            else:
                if length:
                    return self.headers  # what Werkzeug's copy would hold
        return super().get_wsgi_headers(environ)

    def get_app_iter(self, environ: dict[str, Any]) -> Iterable[bytes]:
        body = self.response
        status = self.status_code
        if (
            type(body) is list
            and len(body) == 1
            and type(body[0]) is bytes
            and not self.direct_passthrough
            and 200 <= status < 300
            and status != 204
            and environ["REQUEST_METHOD"] != "HEAD"
        ):
            return Body(body[0], self.close)
        return super().get_app_iter(environ)


def json_response(
    payload: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``payload`` as JSON (orjson: UTF-8, keys in the order built). (``headers`` are set one
    by one: Werkzeug's constructor takes a third longer to copy them in.)"""
    response = Answer(dumps(payload), status, content_type="application/json")
    if headers:
        for name, value in headers.items():
            response.headers[name] = value
    return response


def dumps(payload: Any) -> bytes:
    """orjson's bytes; a key that is not a string is written as one. (orjson checks every key
    under that option, which doubles its time on a state view: only payloads that need it pay.)"""
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:
        return orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS)


def install_error_handlers(app: Flask) -> None:
    """Every error, whatever its cause, is problem+json with a stable code (an HTML page to a
    browser asking for a page: ``wants_page``)."""

    @app.errorhandler(ApplicationError)
    def _application(exc: ApplicationError) -> Response:
        return error_problem(exc)

    @app.errorhandler(DomainError)
    def _domain(exc: DomainError) -> Response:
        return error_problem(exc)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = HTTP_CODES.get(status, "invalid_request")
        if status == 413:
            # The request's own limit (``request_class``): an import raises it (audit.py).
            detail = f"the body is larger than {request.max_content_length} bytes"
        elif status == 429:
            detail = f"too many requests ({exc.description}); retry later"
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


# ------------------------------------------------------------------------------ requests
class UnsupportedMediaType(HttpProblem):
    code = "unsupported_media_type"


def is_json(mimetype: str) -> bool:
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def json_body() -> Any:
    """The request's JSON body: ``Content-Type: application/json`` (UTF-8), at most
    ``jsondoc.MAX_DEPTH`` levels deep; 413 when too large, 415 for another media type, 422 for a
    bad document."""
    return parse_json(json_bytes())


def has_body(req: flask.Request) -> bool:
    """Whether the request brings a body (a length above 0, or chunks), for a route whose body
    is optional."""
    environ = req.environ
    length = (environ.get("CONTENT_LENGTH") or "0").lstrip("0")
    return bool(length) or "HTTP_TRANSFER_ENCODING" in environ


def this_request() -> flask.Request:
    """The request itself, not Flask's context proxy, for a view that reads it often: each read
    through ``flask.request`` is a context lookup (docs/performance.md, levers).
    ``_get_current_object`` is a public door despite its underscore: Werkzeug documents it on
    ``LocalProxy`` (werkzeug.local) and Flask's "Notes On Proxies" tells to use it for this."""
    req: flask.Request = request._get_current_object()  # type: ignore[attr-defined]
    return req


LATER = "cantstop.after_this_request"  # the request gave a function to after_this_request


def after_this_request(f: Callable[[Response], Response]) -> Callable[[Response], Response]:
    """Flask's ``after_this_request``, noted on the request: ``App.process_response``
    (http/app.py) skips Flask's walk of the after-request functions for a request that gave
    none and whose blueprints and app registered none (docs/performance.md, levers). The
    service's code calls it through here only (tests/test_fast_paths.py)."""
    this_request().environ[LATER] = True
    flask.after_this_request(f)
    return f


def json_bytes(req: flask.Request | None = None) -> bytes:
    """The request's body, unparsed, once its size and media type are right (413, 415).
    ``req``: the request (``this_request``), when the caller holds it already."""
    if req is None:
        req = this_request()
    environ = req.environ
    read: bytes | None = environ.get(JSON_READ)  # judged already (a rate limit's key read it)
    if read is not None:
        return read
    data = _json_bytes(req, environ)
    environ[JSON_READ] = data
    return data


JSON_READ = "cantstop.json_body"  # the body, once json_bytes has judged it (size, type)


def _json_bytes(req: flask.Request, environ: dict[str, Any]) -> bytes:
    if "HTTP_CONTENT_ENCODING" in environ:
        check_not_encoded(environ)
    if environ.get("CONTENT_TYPE") == "application/json":  # as nearly every client sends it
        data = _sized_body(req, environ)
        if data is not None:
            return data
    data = whole_body(req)  # 413 first: the size is wrong whatever the type
    if req.content_type == "application/json":
        return data
    if not is_json(req.mimetype):
        raise UnsupportedMediaType(
            "send the body as JSON (Content-Type: application/json), "
            f"not {req.mimetype or 'without a Content-Type'}"
        )
    utf8_only(req, "JSON bodies")
    return data


def utf8_only(req: flask.Request, what: str) -> None:
    """415 for a body labelled with a charset other than UTF-8 (``what``: which bodies)."""
    charset = req.mimetype_params.get("charset", "utf-8").lower()
    if charset not in ("utf-8", "utf8"):
        raise UnsupportedMediaType(f"{what} are UTF-8, not {charset}")


def check_not_encoded(environ: Mapping[str, Any]) -> None:
    """415 for a body sent with a ``Content-Encoding`` (gzip, ...): bodies are read as sent, and
    a plain body labelled gzip was acted on as if it were not labelled (RFC 9110, 8.4)."""
    coding = str(environ.get("HTTP_CONTENT_ENCODING", "")).strip().lower()
    if coding not in ("", "identity"):
        raise UnsupportedMediaType(
            f"bodies are read as sent: send them without Content-Encoding, not {coding[:40]!r}"
        )


def whole_body(req: flask.Request) -> bytes:
    """The request's body, whole, or 413 if it is over the request's limit. A body without a
    length (chunked) stops at the limit, silently in Werkzeug: as it cannot tell whether more
    was coming, one that reaches the limit is refused."""
    check_not_encoded(req.environ)
    try:
        data = req.get_data(cache=True)
    except BlockingIOError:
        raise stalled_body() from None
    except ClientDisconnected as exc:  # Werkzeug's for a failed read of a body without a length
        if isinstance(exc.__context__, BlockingIOError):
            raise stalled_body() from None
        raise
    except HTTPException:
        raise
    except Exception as exc:
        # The server reads a chunked body as the app asks for it: a chunk it cannot parse (a
        # size that is no number, a chunk longer than it said) is raised by this read, as the
        # server's own exception (PEP 3333 names none). The body is the client's: 400.
        raise MalformedBody(f"the request's body cannot be read: {exc}") from None
    limit = req.max_content_length
    if limit is not None and len(data) >= limit and "CONTENT_LENGTH" not in req.environ:
        raise RequestEntityTooLarge()
    return data


def stalled_body() -> RequestTimeout:
    """A body whose client sent nothing for the server's read timeout (gunicorn_settings.py:
    the read fails with EAGAIN) is 408, not a 500."""
    return RequestTimeout("the client sent nothing more of the body in time")


def _sized_body(req: flask.Request, environ: dict[str, Any]) -> bytes | None:
    """The body of a request that says its length (``Content-Length``, no ``Transfer-Encoding``:
    nearly every client), read from the server's stream as Werkzeug would, without its stream
    wrapper: layers of Python calls on every action for what one read does (docs/performance.md
    (levers)). None for any other request, which takes Werkzeug's way. Too long a body is 413, a
    short one 422, like any body that is not a JSON document. The bytes read are left as the
    environ's ``wsgi.input`` (PEP 3333's, which the app may replace), so that Werkzeug's
    ``get_data`` or ``stream``, if anything reads them afterwards, answers the same bytes."""
    length = environ.get("CONTENT_LENGTH")
    if not length or not length.isdigit() or not length.isascii():
        return None
    if "HTTP_TRANSFER_ENCODING" in environ:
        return None
    size = int(length)
    limit = req.max_content_length
    if limit is not None and size > limit:
        raise RequestEntityTooLarge()
    try:  # (no context manager here: it is on every action's path; docs/performance.md, levers)
        data: bytes = environ["wsgi.input"].read(size) if size else b""
    except BlockingIOError:
        raise stalled_body() from None
    if len(data) != size:  # the client went away mid-body, or sent less than it said
        raise BadRequest(f"the body ended after {len(data)} of its {size} bytes")
    environ["wsgi.input"] = BytesIO(data)  # read whole: later readers get the same bytes
    return data


def parse_json(data: bytes) -> Any:
    """A JSON document (UTF-8) at most ``jsondoc.MAX_DEPTH`` levels deep; 422 if it is not."""
    try:
        return jsondoc.check_depth(orjson.loads(data))
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON (UTF-8): {exc}") from None
    except jsondoc.MalformedJson as exc:
        raise BadRequest(f"the body is not accepted: {exc}") from None


def load(schema: Schema, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        loaded = schema.load(data)
    except ValidationError as exc:
        raise BadRequest("the body does not fit the schema", errors=exc.messages) from None
    assert isinstance(loaded, dict)
    return loaded


def int_arg(name: str, default: int, low: int, high: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not DIGITS.fullmatch(raw):
        raise BadRequest(f"{name} must be a non-negative integer")
    value = int(raw)
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{name} must be {bound}")
    return value


# ``?version=N``: any integer is a version to look up (contract: outside 1..current is 404).
SIGNED_DIGITS = re.compile(r"-?[0-9]+")


def version_arg() -> int | None:
    """``?version=N`` as an integer: 422 if it is none, else whatever it is (outside the game's
    versions, 404 where the game is read). Beyond twelve digits it is no game's version: 404
    here (``int`` refuses strings of over 4,300 digits, and none is needed)."""
    raw = request.args.get("version")
    if raw is None:
        return None
    if not SIGNED_DIGITS.fullmatch(raw):
        raise BadRequest("version must be an integer")
    if len(raw.lstrip("-")) > 12:
        shown = raw if len(raw) <= 24 else f"{raw[:20]}… ({len(raw)} characters)"
        raise NotFoundProblem(f"no game has a version {shown}")
    return int(raw)


def asked_sheet(game_id: uuid.UUID, version: int | None = None) -> tuple[RecordSheet, str]:
    """The record sheet a request asks for, of the game at ``version`` (default: the latest),
    and its file name without extension. ``?seat=S``: needed when the game has more than one
    player (422), as every player has a sheet of their own."""
    games = runtime().games
    state = games.state(game_id, version)  # 404 for an unknown game or version
    seats = len(state["players"])
    if seats > 1 and request.args.get("seat") is None:
        raise BadRequest("a multiplayer game has one sheet per player: add ?seat=S")
    seat = int_arg("seat", 0, 0, seats - 1)
    events = games.history(game_id, after=0, limit=state["version"])
    sheet = record_sheet(events, seat, game_id=str(game_id))
    return sheet, f"cantstop-{game_id}-seat{seat}-v{state['version']}"


def me(scope: str | None = None) -> Principal:
    """The account the request's personal token speaks for (401 without one; 403
    insufficient_scope without ``scope``)."""
    return runtime().accounts.authenticate(bearer_token(), scope)


def bearer_token(environ: Mapping[str, Any] | None = None) -> str | None:
    """The ``Authorization: Bearer`` token sent, if any. ``environ``: the request's, when the
    caller holds it already (each read of ``request`` is a context lookup: ``this_request``)."""
    header: str = (request.environ if environ is None else environ).get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


HELD = "cantstop.limits.held"
"""The environ's ``limits.Held`` of a rate-limited view's request (service/http/limits.py)."""


def limit_count(scope: str) -> int | None:
    """The count of the ``scope`` rate limit this request is held to; None if none holds it."""
    held = this_request().environ.get(HELD)
    return None if held is None else cast("int | None", held.most(scope))


def spend(scope: str, cost: int) -> None:
    """Count this request ``cost`` more times against its ``scope`` rate limits, once the view
    knows what it costs, before doing the work; 429 ``rate_limited`` past them. Nothing where
    no such limit holds the request."""
    held = this_request().environ.get(HELD)
    if held is not None and cost > 0:
        held.spend(scope, cost)


EVENTS_A_COUNT = 1_000
"""Events (or a transcript's actions) of a replay counted as one against the ``audit`` rate limit
(an audit costs ~100 µs of CPU an event): a game of some hundred events counts once, as its own
``/audit`` does, an import of 8,000 events eight times. Counted once a request whatever its
size, 256 KiB of busts (15,881 events) cost as much of the limit as a game of ten."""


def audit_charge() -> Callable[[int], None]:
    """What a replay of a whole document (an import, a transcript's verification) spends of its
    ``audit`` rate limit, told its events before the work: one count each ``EVENTS_A_COUNT``
    events (begun), the request itself having counted one; told a larger number later, it
    spends only the difference (429 ``rate_limited`` past the limit). Never more than the
    limit's whole count, else a deployment's low limit (``audit=5/minute``) could never be
    answered for a long game."""
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


def address_key(remote: str | None) -> str:
    """The key an address is counted under, beside accounts' (``u:``) and tokens' (``t:``): the
    rate limits and the analysis's per-client cap count an address alike."""
    return f"a:{client_of(remote)}"


@functools.lru_cache(maxsize=4096)
def client_of(remote: str | None) -> str:
    """A client's address as the rate limits and per-client caps count it: an IPv4 address (or
    an IPv4-mapped IPv6 one) as it is, an IPv6 address by its /64 network. A /64 is what one
    subscriber is handed (RFC 6177), and its 2^64 addresses cost nothing to rotate through: per
    address, one host could sign in, create games or open streams without ever reaching a
    count (tests/test_client_addresses.py)."""
    if not remote:
        return "unknown"
    if ":" not in remote:
        return remote
    try:
        address = ipaddress.IPv6Address(remote.partition("%")[0])
    except ValueError:
        return remote
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))


# ------------------------------------------------------------------------------ conditionals
# RFC 9110's entity tag: an optional W/, then any visible characters but DQUOTE, quoted.
ENTITY_TAG = re.compile(r'[ \t]*(W/)?"([\x21\x23-\x7e\x80-\uffff]*)"[ \t]*(?:,|$)')


def entity_tags(field: str, name: str) -> list[tuple[bool, str]] | None:
    """An If-Match or If-None-Match field: None for ``*``, else its tags as (weak, text). A
    value that is no list of entity tags (``2``, unquoted) is 422 invalid_request: Werkzeug
    read ``2`` as the tag ``"2"``, so it matched version 2."""
    if field.strip() == "*":
        return None
    tags: list[tuple[bool, str]] = []
    position, end = 0, len(field)
    while True:
        while position < end and field[position] in " \t,":  # (a list may have empty elements)
            position += 1
        if position == end:
            return tags
        found = ENTITY_TAG.match(field, position)
        if found is None:
            raise BadRequest(f'{name} must be "*" or a list of entity tags such as "12"')
        tags.append((found.group(1) is not None, found.group(2)))
        position = found.end()


def not_modified(version_tag: str) -> bool:
    """RFC 9110 If-None-Match on a read: weak comparison, lists and ``*``."""
    field = request.environ.get("HTTP_IF_NONE_MATCH")
    if field is None:
        return False
    tags = entity_tags(field, "If-None-Match")
    return tags is None or any(text == version_tag for _, text in tags)


def required_versions(environ: Mapping[str, Any] | None = None) -> frozenset[int] | None:
    """RFC 9110 If-Match on a change: None when absent or ``*`` (the game exists, so ``*``
    always matches); else the versions its strong tags name. A weak tag never matches (If-Match
    compares strongly), so a list of weak tags only is an empty set: 412."""
    field = (request.environ if environ is None else environ).get("HTTP_IF_MATCH")
    if field is None:
        return None
    tags = entity_tags(field, "If-Match")
    if tags is None:
        return None
    return frozenset(int(text) for weak, text in tags if not weak and VERSION_TAG.fullmatch(text))
