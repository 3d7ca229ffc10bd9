"""Request rate limits (``CANTSTOP_RATE_LIMITS``, parsed by ``service.config.parse_limits``),
counted by the ``limits`` library in fixed windows, checked by the limited views themselves.

- ``create`` covers ``POST /v1/games``, ``POST /v1/games/import`` and ``POST
  /v1/seed-commitments``, counted per client address; ``action`` covers ``POST
  /v1/games/{id}/actions``, counted per seat token (by its SHA-256; per address when no token is
  sent); ``audit`` covers what works through a whole history, whose cost grows with a game's
  length and which anyone may ask for: ``GET /v1/games/{id}/audit``, ``/export``, ``/analysis``
  and ``/record-sheet`` (the pages' record-sheet files too), ``POST /v1/transcripts/verify`` and
  ``POST /v1/games/import`` (an audit of the whole export; it counts as a creation too; these
  two count once more for each 1,000 events or actions begun, ``core.audit_charge``), counted
  per client address, and on by default (120 a minute, contract 1.3); an account's bulk export
  (``GET /v1/accounts/{handle}/games/export``) too. ``signin`` covers sign-up (``POST
  /v1/accounts``) and sign-in (``POST /v1/tokens``), counted three times: per client address,
  per handle (in lower case) from that address, and per handle from the addresses not known
  for it (none signed in or signed it up from there within ``KNOWN_FOR``). ``signin`` is on by
  default (10 a minute), even when the others are off: it is what stands between a password
  and someone guessing it. Guesses spread over many addresses are capped per account, and they
  never refuse the right password from an address its owner signed in from.
  ``challenge`` covers ``POST /v1/challenges`` from a signed-in caller (a personal token with
  the ``play`` scope), counted twice: per challenger, then per challenged account; on by default
  too (20 a minute): a flood of challenges to one account is refused however many send it.
  Without such a token nothing is counted (the view answers 401): else anyone, signed in or
  not, could spend another account's count and so lock it out of being challenged. A
  challenger refused by its own count spends nothing of the challenged account's.
  ``tournament`` covers ``POST /v1/tournaments``, counted per account (per address without a
  valid personal token holding ``play``, which the view needs), on by default (10 an hour): per
  token, an account could mint tokens to make more. ``webhook`` covers ``POST
  /v1/account/webhooks`` (each looks a host name up), counted the same way (the scope
  ``account``), on by default (30 an hour, three times the cap of 10 webhooks).
- A client's address is counted as it is, but an IPv6 address by its /64 network
  (``client_of``).
  ``bots`` covers the requests that give a game a computer player (``bot_games``): ``POST
  /v1/games`` naming a bot among its players, ``POST /v1/games/{id}/players`` seating one,
  ``POST /v1/games/{id}/rematch`` of a game with bot seats and ``POST /v1/challenges`` to a
  built-in bot; counted per client address, the others not at all; on by default (60 an
  hour). The server plays every bot turn itself: a game of two experts cost its worker ~140 ms
  of CPU and ~140 events, asked for by a request of ~2 ms.
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
from typing import Any, TypeVar

import flask
from flask import Flask, Response
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import FixedWindowRateLimiter
from werkzeug.exceptions import TooManyRequests

from service.application.aggregates import token_hash
from service.application.games.use_cases import parse_game_id
from service.application.players.accounts import BOTS, Principal
from service.config import Settings
from service.errors import ApplicationError
from service.http.core import (
    HELD,
    address_key,
    after_this_request,
    bearer_token,
    json_bytes,
    parse_json,
    runtime,
    this_request,
)

log = logging.getLogger("cantstop")

T = TypeVar("T")
KEY_PREFIX = "cantstop:rl"
SCOPES: dict[str, tuple[str, ...]] = {
    "create": ("games.create_game", "games.commit_seed", "audit.import_game"),
    "action": ("games.act",),
    "signin": ("accounts.sign_up", "accounts.sign_in"),
    "challenge": ("matchmaking.challenge",),
    "tournament": ("tournaments.create_tournament",),
    "webhook": ("webhooks.create_webhook",),
    # each counted only when it gives a game a computer player (``bot_games``)
    "bots": (
        "games.create_game",
        "games.join_game",
        "games.rematch",
        "matchmaking.challenge",
    ),
    "audit": (
        "audit.audit_game",
        "audit.export_game",
        "accounts.export_account_games",
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
    return address_key(req.remote_addr)


def seat_or_address(req: flask.Request) -> str:
    token = bearer_token(req.environ)
    return f"t:{token_hash(token)[:32]}" if token is not None else client_address(req)


SIGNED_IN = "cantstop.limits.signed_in"  # the request's principal (or None), once looked up


def signed_in(req: flask.Request) -> Principal | None:
    """The account the request's personal token speaks for; None without a valid one (the
    view then answers 401). Looked up once a request, however many counts ask."""
    environ = req.environ
    if SIGNED_IN not in environ:
        try:
            environ[SIGNED_IN] = runtime().accounts.authenticate(bearer_token(environ))
        except ApplicationError:
            environ[SIGNED_IN] = None
    principal: Principal | None = environ[SIGNED_IN]
    return principal


def account_with(scope: str) -> Callable[[flask.Request], str]:
    """The account the personal token speaks for (any of its tokens counts alike), when the
    token holds ``scope``, which the view needs; else the client's address (the view then
    answers 401 or 403). So a token the view refuses spends only its caller's own count, never
    the account's: a third party's ``play`` token cannot use up its owner's webhooks."""

    def key(req: flask.Request) -> str:
        principal = signed_in(req)
        if principal is None or scope not in principal.scopes:
            return client_address(req)
        return f"u:{principal.handle.lower()}"

    return key


def body_object(req: flask.Request) -> dict[str, Any] | None:
    """The request's JSON body if it is an object, read the way the view reads it (which then
    finds its bytes read already); None for any other body, which the view will refuse (413,
    415, 422) or which names nothing a count looks for."""
    try:
        body = parse_json(json_bytes(req))
    except Exception:  # a body the view will refuse
        return None
    return body if isinstance(body, dict) else None


def handle_asked(req: flask.Request, field: str = "handle") -> str | None:
    """The handle a request names in ``field`` of its JSON body (lower case); None if it names
    none."""
    body = body_object(req)
    handle = None if body is None else body.get(field)
    return handle.lower()[:40] if isinstance(handle, str) else None


def address_and_handle(req: flask.Request) -> str:
    """A sign-up's or sign-in's handle, from the client's address: guesses at one account's
    password are counted where they come from, so that no one else's count holds its owner
    (the client's address alone if the body names no handle)."""
    handle = handle_asked(req)
    address = client_address(req)
    return address if handle is None else f"{address}|h:{handle}"


KNOWN_FOR = 30 * 24 * 3600
"""Seconds an address stays known for a handle after it signed in as it (or signed it up)."""


def known_key(address: str, handle: str) -> str:
    return f"{KEY_PREFIX}/known/{address}|h:{handle}"


def stranger(req: flask.Request) -> str | None:
    """A sign-in's (or sign-up's) handle, counted per handle alone, when the client's address
    is not known for it (no sign-in as it from there within ``KNOWN_FOR``): guesses spread over
    many addresses are capped per account, and they hold back only other strangers, never its
    owner from an address it signed in from (``Limiter.know``). None when known: not counted."""
    handle = handle_asked(req)
    if handle is None:
        return None
    limiter: Limiter | None = flask.current_app.extensions.get("limiter")
    if limiter is not None and limiter.knows(known_key(client_address(req), handle)):
        return None
    return f"h:{handle}"


def challenger(req: flask.Request) -> str | None:
    """The signed-in account that challenges (a personal token with the ``play`` scope); None
    otherwise: the view refuses it (401, 403) and nothing is counted."""
    principal = signed_in(req)
    if principal is None or "play" not in principal.scopes:
        return None
    return f"u:{principal.handle.lower()}"


def challenged(req: flask.Request) -> str | None:
    """The account a signed-in caller challenges: a flood of challenges to one account is
    limited, from however many challengers. Nothing is counted for a caller the view will
    refuse (no valid token, or one without ``play``), so none can spend another's count."""
    if challenger(req) is None:
        return None
    handle = handle_asked(req, "to")
    return client_address(req) if handle is None else f"h:{handle}"


def bot_games(req: flask.Request) -> str | None:
    """The client's address when the request would give a game a computer player, whose every
    turn the server then plays: a creation naming a bot among its players, a bot seated in a
    lobby, a rematch of a game with bot seats (they sit in the rematch too), a challenge to a
    built-in bot (it accepts at once). None otherwise: the request is not counted. Read the
    way the view reads it (a body it will refuse names no bot here)."""
    endpoint = req.endpoint
    if endpoint == "games.rematch":
        try:
            game_id = parse_game_id(str((req.view_args or {}).get("game_id")))
            players = runtime().games.state(game_id)["players"]
        except ApplicationError:  # no such game: the view answers it
            return None
        has_bot = any(player.get("bot") is not None for player in players)
        return client_address(req) if has_bot else None
    if endpoint == "matchmaking.challenge":
        return client_address(req) if handle_asked(req, "to") in BOTS else None
    body = body_object(req)
    if body is None:
        return None
    if endpoint == "games.join_game":
        asked = [body]
    else:
        players = body.get("players")
        asked = players if isinstance(players, list) else []
    if any(isinstance(player, dict) and player.get("bot") is not None for player in asked):
        return client_address(req)
    return None


# A key of None: the request is not counted against that rule.
KEYS: dict[str, Callable[[flask.Request], str | None]] = {
    "create": client_address,
    "action": seat_or_address,
    "audit": client_address,
    "signin": client_address,
    "signin_handle": address_and_handle,
    "signin_stranger": stranger,
    "challenger": challenger,
    "challenge": challenged,
    "tournament": account_with("play"),
    "webhook": account_with("account"),
    "bots": bot_games,
}
# The scopes a configured limit is counted under, in order (a request refused by one is not
# counted against those after it): a limit named alone is counted under its own name.
COUNTED: dict[str, tuple[str, ...]] = {
    # per address, per handle from that address, and per handle from addresses not known for it
    "signin": ("signin", "signin_handle", "signin_stranger"),
    "challenge": ("challenger", "challenge"),  # per challenger, then per challenged account
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
    key: Callable[[flask.Request], str | None]  # None: this request is not counted
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

    def check(self, req: flask.Request, rules: Iterable[Rule], cost: int = 1) -> None:
        """Count the request ``cost`` times against each rule (in order, up to the first it
        breaks); its answer says the one broken, else the first (``X-RateLimit-*``). 429 when
        broken."""
        method = req.method
        keyed = [
            (rule, key)
            for rule in rules
            if method in rule.methods and (key := rule.key(req)) is not None
        ]
        if not keyed:  # (no ``X-RateLimit-*`` either: nothing was counted)
            return
        shown, broken = self._counting(lambda counter: self.count(counter, keyed, cost))
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

    def _counting(self, work: Callable[[FixedWindowRateLimiter], T]) -> T:
        """``work`` on the counters where they are now (``counter``); if Redis fails it, again
        in memory: counting never fails a request."""
        try:
            return work(self.counter())
        except Exception as exc:  # Redis down: count in memory
            if self.fallback is self.shared:
                raise
            self.storage_failed(exc)
            return work(self.fallback)

    def knows(self, key: str) -> bool:
        """Whether ``key`` (``known_key``) was marked by ``know`` within ``KNOWN_FOR``."""
        return self._counting(lambda counter: counter.storage.get(key) > 0)

    def know(self, key: str) -> None:
        """Mark ``key`` known for ``KNOWN_FOR`` seconds (a sign-in from that address)."""
        self._counting(lambda counter: counter.storage.incr(key, KNOWN_FOR))

    @staticmethod
    def count(
        counter: FixedWindowRateLimiter, keyed: list[tuple[Rule, str]], cost: int = 1
    ) -> tuple[tuple[RateLimitItem, int, float], bool]:
        shown: tuple[RateLimitItem, int, float] | None = None
        for rule, key in keyed:
            passed = counter.hit(rule.item, KEY_PREFIX, key, rule.scope, cost=cost)
            if shown is None or not passed:
                reset, remaining = counter.get_window_stats(rule.item, KEY_PREFIX, key, rule.scope)
                shown = (rule.item, remaining, reset)
            if not passed:
                return shown, True
        assert shown is not None  # (``keyed`` is never empty)
        return shown, False


# The views whose success makes the client's address known for the handle they name.
LEARNS = frozenset({"accounts.sign_in", "accounts.sign_up"})


@dataclass(frozen=True)
class Held:
    """What a limited view's request is held to, for the view to count its cost once it knows
    it (``core.spend``): an account's bulk export counts a game's export each, as one game's
    export is counted, not a page of up to 200 as one."""

    limiter: Limiter
    rules: tuple[Rule, ...]

    def most(self, scope: str) -> int | None:
        return next((rule.item.amount for rule in self.rules if rule.scope == scope), None)

    def spend(self, scope: str, cost: int) -> None:
        self.limiter.check(
            this_request(), [rule for rule in self.rules if rule.scope == scope], cost
        )


def limited(
    view: Callable[..., Any], limiter: Limiter, rules: tuple[Rule, ...], learns: bool = False
) -> Callable[..., Any]:
    """``view``, its request first counted against ``rules`` (429 past one of them). With
    ``learns``, a success (201) makes the client's address known for the handle the body names
    (``stranger``)."""

    @functools.wraps(view)
    def checked(**kwargs: Any) -> Any:
        req = this_request()
        limiter.check(req, rules)
        req.environ[HELD] = Held(limiter, rules)
        answer = view(**kwargs)
        if learns and getattr(answer, "status_code", None) == 201:
            handle = handle_asked(req)
            if handle is not None:
                limiter.know(known_key(client_address(req), handle))
        return answer

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
        scopes = COUNTED.get(scope, (scope,))
        for endpoint in SCOPES[scope]:
            for counted in scopes:
                rules.setdefault(endpoint, []).append(Rule(counted, item, KEYS[counted], methods))
    for endpoint, held_to in rules.items():
        app.view_functions[endpoint] = limited(
            app.view_functions[endpoint], limiter, tuple(held_to), endpoint in LEARNS
        )
    return limiter
