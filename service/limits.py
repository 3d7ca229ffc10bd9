"""Request rate limits: fixed windows counted in Redis (shared by every worker and host).

``CANTSTOP_RATE_LIMITS`` is ``off`` (the default) or a comma-separated list of
``<scope>=<count>/<period>``. The scope is ``create`` (``POST /v1/games`` and
``POST /v1/games/import``, counted per remote address) or ``action``
(``POST /v1/games/{id}/actions``, counted per seat token, by its SHA-256; per remote address when no
token is sent). The period is ``[N]second``, ``[N]minute``, ``[N]hour`` or ``[N]day`` (also ``s``,
``m``, ``h``, ``d``, plurals allowed)::

    CANTSTOP_RATE_LIMITS="create=30/minute,action=120/minute"
    CANTSTOP_RATE_LIMITS="action=10/5s"

A request over its limit is refused before it reaches the game with 429 ``rate_limited`` and a
``Retry-After`` header (seconds to the end of the window). Each window is one Redis key, ``INCR``
then ``EXPIRE`` in one round trip, named by the window's start on the host's clock. Without Redis,
or while Redis is unreachable, each worker process counts in its own memory, so the effective limit
is the configured one times the number of processes. Counting never touches the event store:
losing every counter loses or repeats no action; it only forgets who was close to their limit.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flask import Flask, Response, request

from service.app import problem
from service.config import ConfigError
from service.live import RedisLink, link_of

SCOPES = {"create": ("api.create_game", "audit_api.import_game"), "action": ("api.act",)}
UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
UNITS |= {"d": 86400, "day": 86400}
RULE = re.compile(r"^(?P<scope>[a-z_]+)=(?P<count>\d{1,9})/(?P<n>\d{0,6})(?P<unit>[a-z]+)$")
KEY_PREFIX = "cantstop:rl:"
MEMORY_PRUNE_AT = 50_000


class RateLimitError(ConfigError):
    pass


@dataclass(frozen=True)
class Limit:
    scope: str
    count: int
    period: int  # seconds

    def __str__(self) -> str:
        return f"{self.scope}={self.count}/{self.period}s"


def parse_limits(text: str | None) -> dict[str, Limit]:
    """``create=30/minute,action=120/minute`` → {scope: Limit}; ``off`` or empty → {}."""
    text = (text or "").strip().lower()
    if text in ("", "off", "none"):
        return {}
    limits: dict[str, Limit] = {}
    for part in text.split(","):
        part = part.strip().replace(" ", "")
        match = RULE.match(part)
        if match is None:
            raise RateLimitError(
                f"CANTSTOP_RATE_LIMITS: {part!r} is not <scope>=<count>/<period>, "
                "e.g. create=30/minute,action=120/minute (or off)"
            )
        scope, unit = match["scope"], match["unit"]
        if scope not in SCOPES:
            raise RateLimitError(
                f"CANTSTOP_RATE_LIMITS: unknown scope {scope!r}; use {' or '.join(SCOPES)}"
            )
        seconds = UNITS.get(unit) or UNITS.get(unit.removesuffix("s"))
        if seconds is None:
            raise RateLimitError(
                f"CANTSTOP_RATE_LIMITS: unknown period {match['unit']!r}; "
                "use second, minute, hour or day"
            )
        period = int(match["n"] or 1) * seconds
        count = int(match["count"])
        if count < 1 or period < 1:
            raise RateLimitError(f"CANTSTOP_RATE_LIMITS: {part!r} must allow at least 1 request")
        if scope in limits:
            raise RateLimitError(f"CANTSTOP_RATE_LIMITS: {scope!r} is given twice")
        limits[scope] = Limit(scope, count, period)
    return limits


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # seconds to the end of the window


class MemoryCounter:
    """Fixed windows in this process's memory: the fallback without Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def hit(self, key: str, window: int) -> int:
        with self._lock:
            if len(self._counts) >= MEMORY_PRUNE_AT:
                self._prune(window)
            count = self._counts.get(key, 0) + 1
            self._counts[key] = count
            return count

    def _prune(self, window: int) -> None:
        # Keys end in ":<window start>"; drop the windows that have ended.
        self._counts = {k: v for k, v in self._counts.items() if int(k.rsplit(":", 1)[1]) >= window}


class Limiter:
    def __init__(
        self,
        limits: dict[str, Limit],
        link: RedisLink | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits
        self.link = link
        self.clock = clock
        self.memory = MemoryCounter()

    def check(self, scope: str, client: str) -> Verdict:
        limit = self.limits.get(scope)
        if limit is None:
            return Verdict(True, 0)
        now = self.clock()
        window = int(now // limit.period) * limit.period
        key = f"{KEY_PREFIX}{scope}:{client}:{window}"
        retry_after = max(1, math.ceil(window + limit.period - now))
        count = self._hit_redis(key, limit.period)
        if count is None:
            count = self.memory.hit(key, window)
        return Verdict(count <= limit.count, retry_after)

    def _hit_redis(self, key: str, period: int) -> int | None:
        link = self.link
        if link is None or not link.available():
            return None
        try:
            pipe = link.client.pipeline(transaction=True)
            pipe.incr(key)
            pipe.expire(key, period + 1)
            count, _ = pipe.execute()
        except Exception as exc:  # counting falls back to memory; the request goes on
            link.failed("rate limit", exc)
            return None
        link.succeeded()
        return int(count)


def client_key(scope: str) -> str:
    """Who is counted: a seat token's hash for actions, else the remote address."""
    if scope == "action":
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            digest = hashlib.sha256(token.strip().encode("utf-8")).hexdigest()
            return f"t:{digest[:32]}"
    return f"a:{request.remote_addr or 'unknown'}"


def init_app(app: Flask) -> Limiter | None:
    """Refuse requests over their limit before any view runs (a no-op when limits are off)."""
    limits = parse_limits(app.extensions["cantstop"].settings.rate_limits)
    if not limits:
        return None
    limiter = Limiter(limits, link_of(app))
    app.extensions["cantstop.limits"] = limiter
    by_endpoint = {
        endpoint: scope
        for scope, endpoints in SCOPES.items()
        if scope in limits
        for endpoint in endpoints
    }

    @app.before_request
    def _rate_limit() -> Response | None:
        scope = by_endpoint.get(request.endpoint or "")
        if scope is None or request.method != "POST":
            return None
        verdict = limiter.check(scope, client_key(scope))
        if verdict.allowed:
            return None
        limit = limits[scope]
        response = problem(
            429,
            "rate_limited",
            f"more than {limit.count} {scope} requests in {limit.period} s from this client; "
            f"retry in {verdict.retry_after} s",
            retry_after=verdict.retry_after,
        )
        response.headers["Retry-After"] = str(verdict.retry_after)
        return response

    return limiter
