"""Request rate limits (``CANTSTOP_RATE_LIMITS``, parsed by ``service.config.parse_limits``),
counted by the ``limits`` library in fixed windows, checked by the limited views themselves.

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
  ``tournament`` covers ``POST /v1/tournaments``, counted per account (per address without a
  valid personal token), on by default (10 an hour): per token, an account could mint tokens
  to make more.
- With Redis the counters live there, shared by every worker and host; without it, or while it is
  unreachable, each process counts in its own memory (the effective limit is then the configured
  one times the number of processes). Counting never touches the event store.
- Every limited answer carries the ``X-RateLimit-*`` headers; over the limit the answer is 429
  ``rate_limited`` (problem+json, through the app's error handlers) with ``Retry-After``.

Only the limited views pay: each is wrapped by a check of its own, and no hook runs on the
other requests (an extension's app-wide hooks cost every action ~257k instructions while no
limit named it: docs/performance.md, levers).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import flask
from flask import Flask, Response
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import FixedWindowRateLimiter
from werkzeug.exceptions import TooManyRequests

from service.application.aggregates import token_hash
from service.config import Settings
from service.errors import ApplicationError
from service.http.core import (
    after_this_request,
    bearer_token,
    json_bytes,
    parse_json,
    runtime,
    this_request,
)

log = logging.getLogger("cantstop")

KEY_PREFIX = "cantstop:rl"
SCOPES: dict[str, tuple[str, ...]] = {
    "create": ("games.create_game", "games.commit_seed", "audit.import_game"),
    "action": ("games.act",),
    "signin": ("accounts.sign_up", "accounts.sign_in"),
    "challenge": ("matchmaking.challenge",),
    "tournament": ("tournaments.create_tournament",),
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
# While Redis is unreachable the counts are kept in memory; it is asked again after 1 s, then
# 2, 4, ... up to 32 s, so that a frozen Redis holds one request in that long by its timeout.
FIRST_RECHECK, LAST_RECHECK = 1.0, 32.0


def client_address(req: flask.Request) -> str:
    return f"a:{req.remote_addr or 'unknown'}"


def seat_or_address(req: flask.Request) -> str:
    token = bearer_token(req.environ)
    return f"t:{token_hash(token)[:32]}" if token is not None else client_address(req)


def account_or_address(req: flask.Request) -> str:
    """The account the personal token speaks for (any of its tokens counts alike); the client's
    address without a valid one (the view then answers 401)."""
    try:
        principal = runtime().accounts.authenticate(bearer_token(req.environ))
    except ApplicationError:
        return client_address(req)
    return f"u:{principal.handle.lower()}"


def handle_asked(req: flask.Request, field: str = "handle") -> str:
    """The handle a sign-up or sign-in names (lower case), read from its JSON body (read the
    way the view reads it, which then finds it read already); the client's address if none."""
    try:
        body = parse_json(json_bytes(req))
    except Exception:  # a body the view will refuse (413, 415, 422): counted by address
        return client_address(req)
    handle = body.get(field) if isinstance(body, dict) else None
    return f"h:{handle.lower()[:40]}" if isinstance(handle, str) else client_address(req)


def challenged(req: flask.Request) -> str:
    """The account a challenge is to: a flood of challenges to one account is limited, from
    however many challengers."""
    return handle_asked(req, "to")


KEYS: dict[str, Callable[[flask.Request], str]] = {
    "create": client_address,
    "action": seat_or_address,
    "audit": client_address,
    "signin": client_address,
    "signin_handle": handle_asked,
    "challenge": challenged,
    "tournament": account_or_address,
}


def storage_uri(redis_url: str | None) -> str:
    if redis_url is None:
        return "memory://"
    if redis_url.startswith("unix://"):
        return "redis+unix://" + redis_url[len("unix://") :]
    return redis_url


@dataclass(frozen=True)
class Rule:
    """One count a view's request is held to: the scope's limit, counted per ``key``."""

    scope: str
    item: RateLimitItem
    key: Callable[[flask.Request], str]
    methods: frozenset[str]


class RateLimited(TooManyRequests):
    """429: answered as problem+json ``rate_limited`` by the app's error handlers."""


class Limiter:
    """Fixed-window counts in Redis (or memory), falling back to memory while Redis is down."""

    def __init__(self, uri: str) -> None:
        storage = storage_from_string(uri, socket_timeout=1, socket_connect_timeout=1)
        assert isinstance(storage, Storage)  # (memory://, redis://: not an asyncio storage)
        self.storage = storage
        self.shared = FixedWindowRateLimiter(self.storage)
        self.fallback = (
            self.shared
            if isinstance(self.storage, MemoryStorage)
            else FixedWindowRateLimiter(MemoryStorage())
        )
        self.lock = threading.Lock()
        self.down_since: float | None = None  # when Redis was found unreachable, if it is
        self.recheck_at = 0.0
        self.recheck_after = FIRST_RECHECK

    def counter(self) -> FixedWindowRateLimiter:
        """Where to count now: Redis, or memory while it is down (asked again now and then)."""
        if self.down_since is None:
            return self.shared
        now = time.monotonic()
        if now < self.recheck_at:
            return self.fallback
        with self.lock:
            if now < self.recheck_at:
                return self.fallback
            self.recheck_at = now + self.recheck_after
            self.recheck_after = min(self.recheck_after * 2, LAST_RECHECK)
        try:
            alive = self.storage.check()
        except Exception:
            alive = False
        if not alive:
            return self.fallback
        log.info("rate limits: their storage answers again; counting there")
        self.down_since = None
        return self.shared

    def storage_failed(self, exc: Exception) -> None:
        log.warning("rate limits: their storage is unreachable (%s); counting in memory", exc)
        with self.lock:
            if self.down_since is None:
                self.down_since = time.monotonic()
                self.recheck_at = self.down_since + FIRST_RECHECK
                self.recheck_after = FIRST_RECHECK * 2

    def check(self, req: flask.Request, rules: Iterable[Rule]) -> None:
        """Count the request against each rule (in order, up to the first it breaks); its
        answer says the one broken, else the first (``X-RateLimit-*``). 429 when broken."""
        method = req.method
        keyed = [(rule, rule.key(req)) for rule in rules if method in rule.methods]
        if not keyed:
            return
        try:
            shown, broken = self.count(self.counter(), keyed)
        except Exception as exc:  # Redis down: count in memory, never fail the request
            if self.fallback is self.shared:
                raise
            self.storage_failed(exc)
            shown, broken = self.count(self.fallback, keyed)
        limit, remaining, reset = shown
        headers = {
            "X-RateLimit-Limit": str(limit.amount),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(int(reset + 1)),
        }
        if broken:
            # When to ask again: the window's end, in whole seconds, at least 1.
            headers["Retry-After"] = str(max(1, math.ceil(reset - time.time())))

        @after_this_request
        def _headers(response: Response) -> Response:  # on every answer, a refusal's too
            for name, value in headers.items():
                response.headers[name] = value
            return response

        if broken:
            raise RateLimited(f"{limit.amount} per {limit.multiples} second")

    @staticmethod
    def count(
        counter: FixedWindowRateLimiter, keyed: list[tuple[Rule, str]]
    ) -> tuple[tuple[RateLimitItem, int, float], bool]:
        shown: tuple[RateLimitItem, int, float] | None = None
        for rule, key in keyed:
            passed = counter.hit(rule.item, KEY_PREFIX, key, rule.scope)
            if shown is None or not passed:
                reset, remaining = counter.get_window_stats(rule.item, KEY_PREFIX, key, rule.scope)
                shown = (rule.item, remaining, reset)
            if not passed:
                return shown, True
        assert shown is not None  # (``keyed`` is never empty)
        return shown, False


def limited(
    view: Callable[..., Any], limiter: Limiter, rules: tuple[Rule, ...]
) -> Callable[..., Any]:
    """``view``, its request first counted against ``rules`` (429 past one of them)."""

    @functools.wraps(view)
    def checked(**kwargs: Any) -> Any:
        limiter.check(this_request(), rules)
        return view(**kwargs)

    return checked


def init_app(app: Flask, settings: Settings) -> Limiter | None:
    """Limit the scoped endpoints (call after the blueprints are registered); None when off."""
    limits = settings.limits
    if not limits:
        return None
    limiter = Limiter(storage_uri(settings.redis_url))
    app.extensions["limiter"] = limiter
    rules: dict[str, list[Rule]] = {}
    for scope, limit in limits.items():
        item = RateLimitItemPerSecond(limit.count, limit.period)
        methods = frozenset({"GET", "HEAD", "POST"} if scope == "audit" else {"POST"})
        scopes = (scope, "signin_handle") if scope == "signin" else (scope,)  # and per handle
        for endpoint in SCOPES[scope]:
            for counted in scopes:
                rules.setdefault(endpoint, []).append(Rule(counted, item, KEYS[counted], methods))
    for endpoint, held_to in rules.items():
        app.view_functions[endpoint] = limited(
            app.view_functions[endpoint], limiter, tuple(held_to)
        )
    return limiter
