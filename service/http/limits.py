"""Request rate limits (``CANTSTOP_RATE_LIMITS``, parsed by ``service.config.parse_limits``),
enforced by Flask-Limiter with fixed windows.

- ``create`` covers ``POST /v1/games``, ``POST /v1/games/import`` and ``POST
  /v1/seed-commitments``, counted per client address; ``action`` covers ``POST
  /v1/games/{id}/actions``, counted per seat token (by its SHA-256; per address when no token is
  sent); ``audit`` covers what works through a whole history, whose cost grows with a game's
  length and which anyone may ask for: ``GET /v1/games/{id}/audit``, ``/export``, ``/analysis``
  and ``/record-sheet`` (the pages' record-sheet files too), ``POST /v1/transcripts/verify`` and
  ``POST /v1/games/import`` (an audit of the whole export; it counts as a creation too), counted
  per client address, and on by default (120 a minute, contract 1.3); ``signin`` covers sign-up
  (``POST /v1/accounts``) and sign-in (``POST /v1/tokens``), counted twice: per handle (in lower
  case) and per client address. ``signin`` is on by default (10 a minute), even when the others
  are off: it is what stands between a password and someone guessing it. ``challenge`` covers
  ``POST /v1/challenges``, counted per challenged account, and is on by default too (20 a
  minute): a flood of challenges to one account is refused however many send it.
- With Redis the counters live there, shared by every worker and host; without it, or while it is
  unreachable, each process counts in its own memory (the effective limit is then the configured
  one times the number of processes). Counting never touches the event store.
- Every limited answer carries the ``X-RateLimit-*`` headers; over the limit the answer is 429
  ``rate_limited`` (problem+json, through the app's error handlers) with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask, Response, g, request
from flask_limiter import Limiter

from service.application.aggregates import token_hash
from service.config import Settings
from service.http.core import bearer_token, json_bytes, parse_json

KEY_PREFIX = "cantstop:rl"
SCOPES: dict[str, tuple[str, ...]] = {
    "create": ("games.create_game", "games.commit_seed", "audit.import_game"),
    "action": ("games.act",),
    "signin": ("accounts.sign_up", "accounts.sign_in"),
    "challenge": ("matchmaking.challenge",),
    "audit": (
        "audit.audit_game",
        "audit.export_game",
        "analysis.analysis",
        "sheets.sheet",
        "pages.record_sheet_file",
        "transcripts.verify_transcript",
        "audit.import_game",
    ),
}


def client_address() -> str:
    return f"a:{request.remote_addr or 'unknown'}"


def seat_or_address() -> str:
    token = bearer_token()
    return f"t:{token_hash(token)[:32]}" if token is not None else client_address()


def handle_asked(field: str = "handle") -> str:
    """The handle a sign-up or sign-in names (lower case), read from its JSON body (read the
    way the view reads it, which then finds it read already); the client's address if none."""
    try:
        body = parse_json(json_bytes())
    except Exception:  # a body the view will refuse (413, 415, 422): counted by address
        return client_address()
    handle = body.get(field) if isinstance(body, dict) else None
    return f"h:{handle.lower()[:40]}" if isinstance(handle, str) else client_address()


def challenged() -> str:
    """The account a challenge is to: a flood of challenges to one account is limited, from
    however many challengers."""
    return handle_asked("to")


KEYS: dict[str, Callable[[], str]] = {
    "create": client_address,
    "action": seat_or_address,
    "audit": client_address,
    "signin": client_address,
    "challenge": challenged,
}


def storage_uri(redis_url: str | None) -> str:
    if redis_url is None:
        return "memory://"
    if redis_url.startswith("unix://"):
        return "redis+unix://" + redis_url[len("unix://") :]
    return redis_url


def init_app(app: Flask, settings: Settings) -> Limiter | None:
    """Limit the scoped endpoints (call after the blueprints are registered); None when off."""
    limits = settings.limits
    if not limits:
        return None

    limited = frozenset(endpoint for scope in limits for endpoint in SCOPES[scope])

    # Flask-Limiter puts Retry-After on every answer of a limited endpoint, where it tells a
    # client to wait; it belongs only to a refusal that asks for a retry later (429, 503).
    # A view's own Retry-After (``g.retry_after``: a 202's, when to ask again) stands as set.
    # Registered before the limiter's own hook, so it runs after it.
    @app.after_request
    def _retry_after_only_when_refused(response: Response) -> Response:
        if request.endpoint not in limited:
            return response
        own = g.get("retry_after")
        if own is not None:
            response.headers["Retry-After"] = str(own)
        elif response.status_code not in (429, 503):
            response.headers.pop("Retry-After", None)
        return response

    limiter = Limiter(
        key_func=client_address,
        app=app,
        storage_uri=storage_uri(settings.redis_url),
        storage_options={"socket_timeout": 1, "socket_connect_timeout": 1},
        strategy="fixed-window",
        headers_enabled=True,
        swallow_errors=True,  # Redis down: count in memory, never fail the request
        in_memory_fallback_enabled=True,
        key_prefix=KEY_PREFIX,
    )

    # The limiter's hooks run on every request of the app once any limit is on (the default
    # signin, challenge and audit limits turn it on everywhere): ~0.5M instructions an action
    # spent resolving limits an action never has. Its documented request filter ends that
    # search at once for the endpoints no limit names; a limited view's own decorator checks
    # its limits as before (docs/performance.md, "Levers").
    @limiter.request_filter
    def _not_limited() -> bool:
        return request.endpoint not in limited

    for scope, limit in limits.items():
        shared = limiter.shared_limit(
            f"{limit.count} per {limit.period} second",
            scope=scope,
            key_func=KEYS[scope],
            methods=["GET", "HEAD", "POST"] if scope == "audit" else ["POST"],  # not OPTIONS
        )
        for endpoint in SCOPES[scope]:
            app.view_functions[endpoint] = shared(app.view_functions[endpoint])  # type: ignore[assignment]
        if scope == "signin":  # and per handle
            per_handle = limiter.shared_limit(
                f"{limit.count} per {limit.period} second",
                scope="signin_handle",
                key_func=handle_asked,
                methods=["POST"],
            )
            for endpoint in SCOPES[scope]:
                app.view_functions[endpoint] = per_handle(app.view_functions[endpoint])  # type: ignore[assignment]
    return limiter
