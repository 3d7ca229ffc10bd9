"""Webhooks (contract 1.2): an account's URLs that are sent its notices, signed by the Standard
Webhooks specification, for apps that are not connected to the account stream.

- **Registration** (scope ``account``): ``https`` only, and only to a host whose every address is
  public (not loopback, private, link-local, shared, multicast, reserved, documentation…): else
  422 ``webhook_url_not_https``, or ``webhook_url_not_public`` with one detail whether the host
  is not public or does not resolve (so a caller cannot probe which internal names exist). The
  host is resolved when the webhook is created and again at each delivery, which connects to the
  address that one lookup gave (``delivery.post``): a name that later resolves to a private
  address (DNS rebinding) gets no delivery. ``CANTSTOP_WEBHOOK_ALLOW_PRIVATE=true`` allows both
  ``http`` and non-public addresses (tests, closed networks). At most
  ``CANTSTOP_WEBHOOK_MAX_PER_ACCOUNT`` (10) webhooks per account: 409 ``too_many_webhooks``.
- **The secret**: 32 random bytes, ``whsec_<base64>`` (the specification's form), served once at
  creation and never again; kept in the store as issued, since signing needs it (see the README).
- **Lookups**: bounded, whatever a name server does. A lookup that never answers holds its
  thread (``getaddrinfo`` cannot be stopped), so lookups queue in ``Lookups``: a few threads
  and a short queue, and when both are taken the next is refused at once
  (``WebhookLookupsBusy``: 503 to a creation, with ``Retry-After``) rather than waiting behind
  them; a lookup still queued at its deadline is dropped, and refused the same. Creation has a
  pool of its own (per ``Webhooks``) and each dispatcher another, so creating webhooks never
  delays a delivery's lookup. An account that has its ``max_per_account`` webhooks is refused
  (409) before any lookup.
- **Enqueueing**: the notices view calls ``on_notices`` inside the transaction that writes the
  notices: one delivery per (notice, webhook of that account subscribed to its type), exactly
  once with the notice, and never on an action's path (no HTTP there: rows only). At most
  ``MAX_PENDING`` (1,000) of a webhook's deliveries wait: beyond that the oldest not in flight
  are given up (service/persistence/webhooks.py).
- **Delivering**: ``delivery.Dispatcher`` (service/application/notify/delivery.py), in the
  scheduling process.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import queue
import re
import secrets
import socket
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from domain.game import format_at
from service.application.errors import ApplicationError, NotFound
from service.application.notify.notices import NOTICE_TYPES, Notice
from service.application.store import Store
from service.config import ConfigError, env_int, env_number
from service.persistence.tables import Sql
from service.persistence.webhooks import (
    AttemptRow,
    Enqueued,
    WebhookRow,
    WebhookTables,
)

EVENT_TYPES = NOTICE_TYPES  # a webhook subscribes to notices by their types
MAX_URL = 2000
MAX_DESCRIPTION = 200
SECRET_BYTES = 32
RESOLVE_TIMEOUT = 5.0  # seconds a lookup may take when a webhook is created or delivered
CREATE_LOOKUPS = (4, 4)  # creation's lookups at once per process, and how many may queue
LOOKUP_IDLE = 30.0  # seconds an idle lookup thread waits for work before it ends
MAX_IN_FLIGHT = 2  # deliveries of one webhook attempted at once, by all dispatchers together
MAX_PENDING = 1000  # deliveries of one webhook waiting; beyond, the oldest are given up
FAILING_AFTER = 20  # failed attempts in a row from which each failure pauses the webhook
ID_SHAPE = re.compile(r"wh_[0-9a-f]{16}")
TRUE = ("true", "on", "yes", "1")
FALSE = ("false", "off", "no", "0", "")


# ------------------------------------------------------------------------------- refusals
class WebhookUrlNotHttps(ApplicationError):
    code = "webhook_url_not_https"


class WebhookUrlNotPublic(ApplicationError):
    code = "webhook_url_not_public"


class WebhookUrlUnresolvable(ApplicationError):
    code = "webhook_url_unresolvable"


HOST_REFUSED = (
    "the url's host must resolve, within 5 s, to public addresses only (loopback, private, "
    "link-local and other non-public addresses are refused)"
)
DELIVERY_HOST_REFUSED = (
    "refused: the host is not public, or did not resolve within 5 s (either way, not attempted)"
)
"""A delivery's logged error for any refused host, one string whether it did not resolve or
resolved to an address that is not public, as creation answers both alike."""


class WebhookLookupsBusy(ApplicationError):
    """The lookups of this process are all taken (by names that are slow to answer): refused
    at once rather than queued behind them. Not the URL's fault: retry."""

    code = "webhook_lookups_busy"  # 503 (service/http/core.py, STATUS)
    retry_after = 5


class TooManyWebhooks(ApplicationError):
    code = "too_many_webhooks"


class InvalidWebhook(ApplicationError):
    code = "invalid_request"


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class WebhookConfig:
    allow_private: bool = False
    """``CANTSTOP_WEBHOOK_ALLOW_PRIVATE``: allow ``http`` URLs and non-public addresses."""
    timeout: float = 10.0
    """``CANTSTOP_WEBHOOK_TIMEOUT``: seconds one delivery attempt may take in all (resolving,
    connecting, TLS, sending, the answer's status and headers, up to 64 KiB of its body)."""
    max_per_account: int = 10
    """``CANTSTOP_WEBHOOK_MAX_PER_ACCOUNT``."""
    concurrency: int = 8
    """``CANTSTOP_WEBHOOK_CONCURRENCY``: deliveries in flight at once per scheduling process."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WebhookConfig:
        env = os.environ if environ is None else environ
        name = "CANTSTOP_WEBHOOK_ALLOW_PRIVATE"
        raw = (env.get(name) or "").strip().lower()
        if raw not in TRUE + FALSE:
            raise ConfigError(f"{name} must be true or false, not {raw!r}")
        return cls(
            allow_private=raw in TRUE,
            timeout=env_number(env, "CANTSTOP_WEBHOOK_TIMEOUT", 10.0, low=0.5, high=60),
            max_per_account=env_int(env, "CANTSTOP_WEBHOOK_MAX_PER_ACCOUNT", 10, low=1, high=100),
            concurrency=env_int(env, "CANTSTOP_WEBHOOK_CONCURRENCY", 8, low=1, high=64),
        )


# ------------------------------------------------------------------------ the addresses
def is_public(address: str) -> bool:
    """Whether a delivery may connect to ``address``: a global unicast address, not one that
    names this host, its networks or anything special (RFC 6890's registries)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return is_public(str(ip.ipv4_mapped))
        if ip.sixtofour is not None and not is_public(str(ip.sixtofour)):
            return False
        # Global unicast is 2000::/3; the rest (IPv4-compatible ::a.b.c.d, NAT64's 64:ff9b::,
        # unique local, link-local, multicast…) is refused.
        if ip not in ipaddress.IPv6Network("2000::/3"):
            return False
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


@dataclass(frozen=True)
class Target:
    """Where a webhook's URL points: what a delivery connects to and what it asks for."""

    scheme: str
    host: str  # as sent (IDNA, lower case; an IPv6 literal without brackets)
    port: int
    path: str  # the request target: path and query
    literal: bool  # the host is an IP address

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str, *, allow_private: bool) -> Target:
    """``url`` as a target, or a refusal: malformed (422 ``invalid_request``) or plain ``http``
    where it is not allowed (422 ``webhook_url_not_https``)."""
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in url):
        raise InvalidWebhook(f"the url must be at most {MAX_URL} characters, without spaces")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidWebhook(f"the url cannot be read: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise InvalidWebhook("the url must be https://…")
    if scheme == "http" and not allow_private:
        raise WebhookUrlNotHttps(
            "a webhook's url must be https:// (plain http is allowed only where "
            "CANTSTOP_WEBHOOK_ALLOW_PRIVATE=true)"
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidWebhook("the url must not hold a user name or password")
    if parts.fragment or url.endswith("#"):
        raise InvalidWebhook("the url must not have a fragment")
    host = parts.hostname or ""
    if not host:
        raise InvalidWebhook("the url must name a host")
    literal = _is_address(host)
    if not literal:
        if "%" in host or ":" in host:
            raise InvalidWebhook("the url's host is not an address or a name")
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise InvalidWebhook("the url's host is not a valid name") from None
        labels = host.rstrip(".").split(".")
        if not all(re.fullmatch(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?", x) for x in labels):
            raise InvalidWebhook("the url's host is not a valid name")
    if port == 0:
        raise InvalidWebhook("the url's port must be from 1 to 65535")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port or (443 if scheme == "https" else 80), path, literal)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (the system's resolver), in its order, each once."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


class Lookups:
    """At most ``threads`` lookups at once and ``waiting`` more queued; beyond that a lookup is
    refused at once (``WebhookLookupsBusy``). A lookup that never answers keeps its thread and
    its place until the resolver returns (and one whose caller gave up keeps its place in the
    queue until a thread drops it), so these bounds are all that stuck lookups can take, and
    nothing more queues behind them. Threads start when work comes (an idle one is used
    first) and end after ``LOOKUP_IDLE`` seconds without any."""

    def __init__(self, threads: int, waiting: int, name: str = "webhook-dns") -> None:
        self.threads = threads
        self.places = threads + waiting
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Future[list[str]], Resolver, str, int]] = (
            queue.SimpleQueue()
        )
        self._idle = threading.Semaphore(0)  # one per idle thread not yet promised a job
        self._lock = threading.Lock()
        self._taken = 0  # places taken: lookups under way or queued
        self._live = 0  # threads started and not ended
        self.running = 0  # lookups under way (tests read it)

    @property
    def queued(self) -> int:
        with self._lock:
            return self._taken - self.running

    def submit(self, resolver: Resolver, host: str, port: int) -> Future[list[str]]:
        future: Future[list[str]] = Future()
        with self._lock:
            if self._taken >= self.places:
                raise WebhookLookupsBusy(
                    "the server is looking up as many host names as it may at once (some "
                    "name servers are slow to answer): retry in a few seconds"
                )
            self._taken += 1
            self._jobs.put((future, resolver, host, port))
        if self._idle.acquire(blocking=False):
            return future  # an idle thread takes it
        with self._lock:
            if self._live < self.threads:
                self._live += 1
                threading.Thread(target=self._work, name=self.name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, resolver, host, port = self._jobs.get(timeout=LOOKUP_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._idle.acquire(blocking=False):  # (else a job is promised it)
                        self._live -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():  # (False: its caller gave up on it)
                with self._lock:
                    self.running += 1
                try:
                    future.set_result(resolver(host, port))
                except BaseException as exc:
                    future.set_exception(exc)
                finally:
                    with self._lock:
                        self.running -= 1
            with self._lock:
                self._taken -= 1
            self._idle.release()


def resolve(
    target: Target,
    *,
    allow_private: bool,
    timeout: float = RESOLVE_TIMEOUT,
    resolver: Resolver = system_resolver,
    lookups: Lookups,
) -> list[str]:
    """The addresses ``target`` may connect to, from one lookup bounded by ``timeout``: all of
    them public unless private ones are allowed (a name with any non-public address is
    refused whole), else ``WebhookUrlNotPublic``; ``WebhookUrlUnresolvable`` if none;
    ``WebhookLookupsBusy`` if ``lookups`` has no room for it, or had not started it by the
    deadline (then the name was never asked: nothing is known of it)."""
    if target.literal:
        addresses = [target.host]
    else:
        lookup = lookups.submit(resolver, target.host, target.port)
        try:
            addresses = lookup.result(timeout=max(0.01, timeout))
        except FutureTimeout:
            if lookup.cancel():
                raise WebhookLookupsBusy(
                    f"the lookup of the host did not start within {timeout:g} s: the server's "
                    "lookups are taken (some name servers are slow to answer); retry"
                ) from None
            raise WebhookUrlUnresolvable(
                f"{target.host} did not resolve within {timeout:g} s"
            ) from None
        except (OSError, UnicodeError) as exc:
            raise WebhookUrlUnresolvable(f"{target.host} does not resolve ({exc})") from None
        if not addresses:
            raise WebhookUrlUnresolvable(f"{target.host} has no address")
    if not allow_private:
        refused = [address for address in addresses if not is_public(address)]
        if refused:
            # (Which address is not said: a name only this network resolves stays unknown.)
            raise WebhookUrlNotPublic(
                f"{target.host} is or resolves to an address that is not public (loopback, "
                "private, link-local and other non-public addresses are refused)"
            )
    return addresses


# ------------------------------------------------------------------------------ notices
def payload(notice: Notice) -> str:
    """The Standard Webhooks payload of a notice: ``{"type", "timestamp", "data"}``, ``data``
    being the notice exactly as the account stream serves it."""
    body = {"type": notice.type, "timestamp": notice.at, "data": notice.data}
    return orjson.dumps(body).decode("utf-8")


def micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def utcnow() -> datetime:
    return datetime.now(UTC)


# ----------------------------------------------------------------------------- the service
@dataclass(frozen=True)
class Created:
    webhook: WebhookRow
    secret: str


class Webhooks:
    def __init__(
        self,
        tables: WebhookTables,
        config: WebhookConfig,
        *,
        resolver: Resolver = system_resolver,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.tables = tables
        self.config = config
        self.resolver = resolver
        self.clock = clock
        self.lookups = Lookups(*CREATE_LOOKUPS)  # creation's own: deliveries have theirs
        self.max_pending = MAX_PENDING
        self.enqueued = 0  # deliveries this process enqueued (tests read it)
        self.given_up = 0  # deliveries this process gave up, their webhook's queue full

    @classmethod
    def of(cls, store: Store, config: WebhookConfig, *, create: bool) -> Webhooks:
        """The webhooks kept in the store's database (its tables created if ``create``)."""
        recorder: Any = store.recorder
        dialect = recorder.dialect
        tables = WebhookTables(recorder.datastore, dialect)
        if create:
            tables.create_table()
        return cls(tables, config)

    # ---------------------------------------------------------------------------- managing
    def create(
        self,
        account: str,
        url: str,
        events: Sequence[str],
        description: str = "",
        *,
        confirm: Callable[[], object] | None = None,
    ) -> Created:
        """A new webhook of ``account``. ``confirm`` (the HTTP layer's: the caller's token
        authenticated again) runs once the row is stored; if it raises, the row is deleted and
        its error raised: a creation that its account's closure overtook leaves nothing."""
        unknown = [kind for kind in events if kind not in EVENT_TYPES]
        if unknown or not events:
            raise InvalidWebhook(f"events must be one or more of {', '.join(EVENT_TYPES)}")
        target = parse_url(url, allow_private=self.config.allow_private)
        cap = self.config.max_per_account
        if self.tables.count(account.lower()) >= cap:  # before any lookup (``add`` holds it)
            raise TooManyWebhooks(
                f"an account may have {cap} webhooks: delete one first", limit=cap
            )
        try:
            resolve(
                target,
                allow_private=self.config.allow_private,
                resolver=self.resolver,
                lookups=self.lookups,
            )
        except (WebhookUrlNotPublic, WebhookUrlUnresolvable):
            # One answer either way: which names resolve inside this network is not told.
            raise WebhookUrlNotPublic(HOST_REFUSED) from None
        key = secrets.token_bytes(SECRET_BYTES)
        secret = "whsec_" + base64.b64encode(key).decode("ascii")
        now = self.clock()
        row = WebhookRow(
            id="wh_" + secrets.token_hex(8),
            account=account.lower(),
            url=url,
            events=tuple(kind for kind in EVENT_TYPES if kind in events),
            description=description,
            secret=secret,
            created_at=format_at(now),
            created_us=micros(now),
        )
        if not self.tables.add(row, self.config.max_per_account):
            raise TooManyWebhooks(
                f"an account may have {self.config.max_per_account} webhooks: delete one first",
                limit=self.config.max_per_account,
            )
        if confirm is not None:
            # The caller was judged before the lookup, which may take seconds; its account may
            # have closed since. A close records the account closed and revokes every token of
            # it (both committed), and only then reads its webhooks and deletes them
            # (``forget``). So the caller is judged again now, after our insert committed, and
            # the row is deleted here if it fails. Every interleaving ends with no row of the
            # closed account:
            # - the judgement reads the token revoked or the account closed: we delete it;
            # - it reads the token live and the account open: the close committed after those
            #   reads began, so after our insert committed (it came before, in this thread),
            #   and ``forget`` reads after the close: it finds our row and deletes it.
            # (Both deleting is harmless: the second finds nothing.) No lock and no cross-table
            # condition is needed. An insert conditional on a live token would not do: on
            # PostgreSQL (READ COMMITTED) its check may read before the revocation commits and
            # its row commit after ``forget``'s read, unless it locked the token's row.
            try:
                confirm()
            except BaseException:
                self.tables.delete(row.account, row.id)
                raise
        return Created(row, secret)

    def of_account(self, account: str) -> list[WebhookRow]:
        return self.tables.webhooks(account.lower())

    def get(self, account: str, webhook_id: str) -> WebhookRow:
        found = (
            self.tables.webhook(account.lower(), webhook_id)
            if ID_SHAPE.fullmatch(webhook_id)
            else None
        )
        if found is None:
            raise NotFound(f"no webhook {webhook_id[:40]!r} of this account")
        return found

    def delete(self, account: str, webhook_id: str) -> None:
        if not ID_SHAPE.fullmatch(webhook_id) or not self.tables.delete(
            account.lower(), webhook_id
        ):
            raise NotFound(f"no webhook {webhook_id[:40]!r} of this account")

    def forget(self, account: str) -> None:
        """Delete every webhook of the account (it closed)."""
        for row in self.of_account(account):
            self.tables.delete(row.account, row.id)

    def deliveries(
        self, account: str, webhook_id: str, limit: int
    ) -> list[tuple[Any, list[AttemptRow]]]:
        self.get(account, webhook_id)
        return self.tables.deliveries(webhook_id, limit)

    # ------------------------------------------------------------------------- enqueueing
    def on_notices(self, sql: Sql, notices: Sequence[Notice]) -> None:
        """The notices view's hook, inside its write transaction: one delivery per (notice,
        webhook of its account subscribed to its type, created by the notice's time)."""
        if not notices:
            return
        hooks: dict[str, list[WebhookRow]] = {}
        for row in self.tables.subscribed(sql, (notice.account for notice in notices)):
            hooks.setdefault(row.account, []).append(row)
        if not hooks:
            return
        at = self.clock()
        now = micros(at)
        queued: list[Enqueued] = []
        for notice in notices:
            for hook in hooks.get(notice.account.lower(), ()):
                if notice.type not in hook.events or _at_micros(notice.at, now) < hook.created_us:
                    continue
                queued.append(
                    Enqueued(
                        id="msg_" + uuid.uuid4().hex,
                        webhook_id=hook.id,
                        seq=notice.seq,
                        type=notice.type,
                        payload=payload(notice),
                        created_us=now,
                        # A paused webhook's (its receiver failing): due when the pause ends.
                        next_at_us=max(now, hook.paused_until_us),
                    )
                )
        if not queued:
            return
        self.given_up += self.tables.enqueue(sql, queued, self.max_pending, now, format_at(at))
        self.enqueued += len(queued)


def _at_micros(at: str, default: int) -> int:
    try:
        return micros(datetime.fromisoformat(at))
    except ValueError:
        return default
