"""Delivering webhooks: a dispatcher in the scheduling process (``cantstop worker``), never on a
request's path.

At each poll of the scheduler's loop, ``Dispatcher.step`` claims the deliveries that are due (as
many as it has threads free; a claim is one conditional statement, so dispatchers on several
hosts never claim one delivery twice, and a claim is a lease: the deliveries of a dispatcher that
died are due again when it ends) and hands each to a small pool of threads, so a receiver that
hangs holds one thread for one attempt's deadline and no other delivery waits for it.

One attempt (``post``), bounded in time and size whatever the receiver does:

- the host is resolved **once**; every address must be public (unless
  ``CANTSTOP_WEBHOOK_ALLOW_PRIVATE``), and the connection goes to that address, never through a
  second lookup (DNS rebinding); TLS sends the host name (SNI) and verifies the certificate
  against it, on the socket connected to the address;
- connecting may take 3 s, each read 5 s, and the whole attempt ``CANTSTOP_WEBHOOK_TIMEOUT`` (10
  s): a watchdog shuts the socket down at the deadline, whatever the thread waits for (a
  receiver that answers a byte at a time is cut there too);
- at most 64 KiB of the answer are read (status line, headers and body together), then the
  connection is closed: an answer of gigabytes costs 64 KiB;
- redirects are not followed: a 3xx is a failure like any other non-2xx.

A 2xx answer is a delivery. Anything else is retried after 5 s, 30 s, 2 min, 10 min, 1 h, 5 h,
10 h and 10 h (each up to 10% later, so that retries spread), then given up: 9 attempts over
about 27 hours. Every attempt is logged (``GET /v1/account/webhooks/{id}/deliveries``); the log
of a delivery made or given up is kept 7 days. A host refused at delivery (it did not resolve,
or not within 5 s, or to an address that is not public) is logged with one fixed error,
``DELIVERY_HOST_REFUSED``, whichever it was: the log tells no more of the server's network
than creation does.

No receiver holds the others' deliveries back: the claim leases at most ``MAX_IN_FLIGHT`` (2)
of one webhook's deliveries at a time, hands out every webhook's first before any's second,
healthiest first (service/persistence/webhooks.py); a webhook whose receiver has failed
``FAILING_AFTER`` (20) attempts in a row backs off as a whole, all its deliveries with it: each
further failure pauses it for the next retry interval, 5 s, 30 s, … up to 10 h (which then
repeats), until one is delivered. Each dispatcher has a pool of lookups of its own (not
creation's): a delivery whose lookup finds it full (names slow to answer) is not attempted, nor
counted against it or its webhook, and is due again in ``BUSY_RETRY`` seconds.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import math
import random
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from standardwebhooks import Webhook

from domain.game import format_at
from service import metrics
from service.application.errors import ApplicationError, describe
from service.application.notify.webhooks import (
    DELIVERY_HOST_REFUSED,
    FAILING_AFTER,
    MAX_IN_FLIGHT,
    RESOLVE_TIMEOUT,
    Lookups,
    Resolver,
    WebhookConfig,
    WebhookLookupsBusy,
    Webhooks,
    WebhookUrlNotPublic,
    WebhookUrlUnresolvable,
    micros,
    parse_url,
    resolve,
    system_resolver,
    utcnow,
)
from service.persistence.accounts import Credentials
from service.persistence.webhooks import AttemptRow, Claimed

log = logging.getLogger("cantstop.webhooks")

SCHEDULE = (5, 30, 120, 600, 3600, 5 * 3600, 10 * 3600, 10 * 3600)  # seconds before each retry
MAX_ATTEMPTS = 1 + len(SCHEDULE)
JITTER = 0.1  # a retry comes up to this share of its delay later
CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 5.0
RESPONSE_CAP = 64 * 1024  # bytes of an answer read at most: status line, headers and body
LEASE_MARGIN = 60.0  # seconds a claim outlives the longest attempt
RETAIN = timedelta(days=7)  # how long the log of a delivery made or given up is kept
PRUNE_EVERY = 600.0  # seconds between prunings of the log
USER_AGENT = "cantstop-webhooks/1"
MAX_ERROR = 200
BUSY_RETRY = 5.0  # seconds before a delivery whose lookup found no room is due again


# ---------------------------------------------------------------------------- the watchdog
class Watchdog:
    """Shuts each watched socket down at its deadline, waking whatever thread waits on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watched: dict[int, tuple[float, socket.socket]] = {}
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, deadline: float) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="webhook-watchdog", daemon=True
                )
                self._thread.start()
            self._watched[id(sock)] = (deadline, sock)
            self._cond.notify()

    def unwatch(self, sock: socket.socket) -> None:
        """Forget ``sock`` (before closing it: the watchdog then never touches it again)."""
        with self._cond:
            self._watched.pop(id(sock), None)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for key, (deadline, sock) in list(self._watched.items()):
                    if deadline <= now:
                        del self._watched[key]
                        # The plain socket's shutdown, also under TLS: wakes a blocked read.
                        with contextlib.suppress(OSError):
                            socket.socket.shutdown(sock, socket.SHUT_RDWR)
                soonest = min((deadline for deadline, _ in self._watched.values()), default=None)
                self._cond.wait(None if soonest is None else max(0.0, soonest - now))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)


# --------------------------------------------------------------------- a bounded answer
class ResponseTooLarge(Exception):
    pass


class _Capped:
    """The answer's stream, of which at most ``left`` bytes are read in all."""

    def __init__(self, fp: Any, left: int) -> None:
        self.fp = fp
        self.left = left

    def _size(self, wanted: int | None) -> int:
        if self.left <= 0:
            raise ResponseTooLarge(f"the answer is over {RESPONSE_CAP} bytes")
        return self.left if wanted is None or wanted < 0 else min(wanted, self.left)

    def readline(self, limit: int = -1) -> bytes:
        data: bytes = self.fp.readline(self._size(limit))
        self.left -= len(data)
        return data

    def read(self, amt: int | None = None) -> bytes:
        data: bytes = self.fp.read(self._size(amt))
        self.left -= len(data)
        return data

    def read1(self, amt: int = -1) -> bytes:
        data: bytes = self.fp.read1(self._size(amt))
        self.left -= len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        count: int = self.fp.readinto(view[: self._size(len(view))])
        self.left -= count
        return count

    def peek(self, n: int = 0) -> bytes:
        data: bytes = self.fp.peek(n)
        return data[: max(0, self.left)]

    def close(self) -> None:
        self.fp.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fp, name)


class _Response(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = _Capped(self.fp, RESPONSE_CAP)  # type: ignore[assignment]


class _Connection(http.client.HTTPConnection):
    """http.client on a socket already connected (to the address resolved once)."""

    response_class = _Response

    def connect(self) -> None:  # never: the socket is given
        raise ConnectionError("the connection was closed")


# ---------------------------------------------------------------------------- an attempt
@dataclass(frozen=True)
class Outcome:
    delivered: bool
    status_code: int | None
    error: str | None
    address: str | None
    duration_ms: int
    busy: bool = False  # not attempted: this server's lookups had no room (not the receiver's)


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    config: WebhookConfig,
    watchdog: Watchdog,
    ssl_context: ssl.SSLContext,
    resolver: Resolver = system_resolver,
    lookups: Lookups,
) -> Outcome:
    """POST ``body`` to ``url`` once, within ``config.timeout`` seconds in all (the lookup in
    ``lookups``, the dispatcher's own)."""
    started = time.monotonic()
    deadline = started + config.timeout
    address: str | None = None
    status: int | None = None
    sock: socket.socket | None = None

    def outcome(error: str | None) -> Outcome:
        delivered = error is None and status is not None and 200 <= status < 300
        return Outcome(
            delivered,
            status,
            None if error is None else error[:MAX_ERROR],
            address,
            int((time.monotonic() - started) * 1000),
        )

    try:
        target = parse_url(url, allow_private=config.allow_private)
        addresses = resolve(
            target,
            allow_private=config.allow_private,
            timeout=min(RESOLVE_TIMEOUT, deadline - time.monotonic()),
            resolver=resolver,
            lookups=lookups,
        )
        failure = "no address to connect to"
        for address in addresses[:2]:
            try:
                sock = _connect(address, target.port, deadline, watchdog)
                break
            except OSError as exc:
                failure = _why(exc, deadline, config)
        if sock is None:
            return outcome(failure)
        if target.scheme == "https":
            raw = sock
            sock = ssl_context.wrap_socket(
                raw, server_hostname=target.host, do_handshake_on_connect=False
            )
            watchdog.unwatch(raw)
            watchdog.watch(sock, deadline)
            assert isinstance(sock, ssl.SSLSocket)
            sock.do_handshake()
        connection = _Connection(target.host, target.port)
        connection.sock = sock
        connection.putrequest("POST", target.path, skip_host=True, skip_accept_encoding=True)
        for name, value in (
            ("Host", target.host_header),
            ("User-Agent", USER_AGENT),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            *headers.items(),
        ):
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        if time.monotonic() >= deadline:  # cut by the watchdog: what was read is no answer
            return outcome(f"no answer within {config.timeout:g} s")
        status = response.status
        try:  # the body, up to the cap and the deadline: what it says changes nothing
            while response.read(16 * 1024) and time.monotonic() < deadline:
                pass
        except (ResponseTooLarge, OSError, http.client.HTTPException):
            pass
        if 300 <= status < 400:
            return outcome(f"redirected ({status}): redirects are not followed")
        if not 200 <= status < 300:
            return outcome(f"answered {status}")
        return outcome(None)
    except WebhookLookupsBusy as exc:  # not attempted: no room for the lookup
        return Outcome(False, None, exc.detail[:MAX_ERROR], None, 0, busy=True)
    except (WebhookUrlNotPublic, WebhookUrlUnresolvable):  # one error, whichever it was
        return outcome(DELIVERY_HOST_REFUSED)
    except ApplicationError as exc:  # the URL is refused (https only, since it was made)
        return outcome(exc.detail)
    except ResponseTooLarge:
        return outcome(f"the answer's status line and headers are over {RESPONSE_CAP} bytes")
    except ssl.SSLCertVerificationError as exc:
        return outcome(f"TLS: {exc.verify_message or exc.reason}")
    except (OSError, http.client.HTTPException) as exc:
        return outcome(_why(exc, deadline, config))
    finally:
        if sock is not None:
            watchdog.unwatch(sock)
            sock.close()


def _connect(address: str, port: int, deadline: float, watchdog: Watchdog) -> socket.socket:
    """A socket connected to ``address`` (never to a name: no second lookup), watched."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        watchdog.watch(sock, deadline)
        sock.settimeout(max(0.01, min(CONNECT_TIMEOUT, deadline - time.monotonic())))
        sock.connect((address, port))
        sock.settimeout(max(0.01, min(READ_TIMEOUT, deadline - time.monotonic())))
    except BaseException:
        watchdog.unwatch(sock)
        sock.close()
        raise
    return sock


def _why(exc: BaseException, deadline: float, config: WebhookConfig) -> str:
    if time.monotonic() >= deadline - 0.005:
        return f"no answer within {config.timeout:g} s"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    return describe(exc)


def sign(secret: str, message_id: str, payload: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (signed with the library)."""
    whole = datetime.fromtimestamp(int(at.timestamp()), UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(whole.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, whole, payload),
    }


# --------------------------------------------------------------------------- the dispatcher
class Dispatcher:
    def __init__(
        self,
        webhooks: Webhooks,
        *,
        clock: Callable[[], datetime] = utcnow,
        ssl_context: ssl.SSLContext | None = None,
        schedule: Sequence[float] = SCHEDULE,
    ) -> None:
        self.webhooks = webhooks
        self.tables = webhooks.tables
        self.config = webhooks.config
        self.clock = clock  # when deliveries are due (the signature's time is the real one)
        self.ssl_context = ssl_context or ssl.create_default_context()
        self.schedule = tuple(schedule)
        self.token = uuid.uuid4().hex  # this dispatcher's mark on the rows it claims
        self.watchdog = Watchdog()
        self.pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="webhook")
        # Its own lookups (creation's cannot take them): room for every attempt under way,
        # and as many again for lookups still stuck after their attempt ended.
        self.lookups = Lookups(
            2 * self.config.concurrency, self.config.concurrency, "webhook-delivery-dns"
        )
        self._lock = threading.Lock()
        self._busy = 0
        self._pruned = -math.inf  # the first step prunes, however soon after boot
        self.attempted = 0  # attempts finished by this dispatcher (tests read it)

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.schedule)

    def step(self) -> int:
        """Claim what is due (as many as there are threads free) and start delivering it: how
        many. Never waits for a receiver. (A chore of the scheduler's loop.)"""
        with self._lock:
            free = self.config.concurrency - self._busy
        self._prune()
        if free <= 0:
            return 0
        now = self.clock()
        lease = now + timedelta(seconds=self.config.timeout + RESOLVE_TIMEOUT + LEASE_MARGIN)
        claimed = self.tables.claim(micros(now), micros(lease), self.token, free, MAX_IN_FLIGHT)
        for item in claimed:
            with self._lock:
                self._busy += 1
            self.pool.submit(self._deliver, item)
        return len(claimed)

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    def _deliver(self, item: Claimed) -> None:
        try:
            at = self.clock()
            outcome = self.attempt(item)
            if outcome.busy:  # not attempted: due again soon, nothing logged nor counted
                self.tables.release(item, micros(at + timedelta(seconds=BUSY_RETRY)))
                return
            if outcome.delivered:
                status, next_at = "delivered", at
            elif item.attempt >= self.max_attempts:
                status, next_at = "failed", at
            else:
                delay = self.schedule[item.attempt - 1] * (1 + random.uniform(0, JITTER))
                status, next_at = "pending", at + timedelta(seconds=delay)
            attempt = AttemptRow(
                delivery_id=item.id,
                attempt=item.attempt,
                at=format_at(at),
                status_code=outcome.status_code,
                error=outcome.error,
                duration_ms=outcome.duration_ms,
                address=outcome.address,
            )
            self.tables.finish(
                item,
                attempt,
                status,
                micros(next_at),
                failed=not outcome.delivered,
                now_us=micros(at),
                failing_after=FAILING_AFTER,
                pauses_us=[int(seconds * 1_000_000) for seconds in self.schedule],
            )
            metrics.webhook_attempt(status)  # counted if CANTSTOP_METRICS=on
        except Exception as exc:  # the store failed: the delivery is due again when its lease ends
            log.warning("webhooks: delivery %s: %s", item.id, describe(exc))
        finally:
            with self._lock:
                self._busy -= 1
                self.attempted += 1

    def attempt(self, item: Claimed) -> Outcome:
        headers = sign(item.secret, item.id, item.payload, datetime.now(UTC))
        return post(
            item.url,
            item.payload.encode("utf-8"),
            headers,
            config=self.config,
            watchdog=self.watchdog,
            ssl_context=self.ssl_context,
            resolver=self.webhooks.resolver,
            lookups=self.lookups,
        )

    def _prune(self) -> None:
        now = time.monotonic()
        if now - self._pruned < PRUNE_EVERY:
            return
        self._pruned = now
        try:
            self.tables.prune(micros(self.clock() - RETAIN))
            swept = self.tables.sweep_unreachable(Credentials.PASSWORDS, Credentials.TOKENS)
        except ApplicationError as exc:
            log.warning("webhooks: pruning the log: %s", exc.detail)
            return
        if swept:
            log.info("webhooks: %d of closed accounts deleted", swept)

    def run(self, stop: threading.Event, poll: float = 0.25) -> None:
        """``step`` until ``stop`` is set (a dispatcher alone, without a scheduler's loop)."""
        while not stop.is_set():
            try:
                self.step()
            except ApplicationError as exc:
                log.warning("webhooks: %s", exc.detail)
            stop.wait(poll)

    def close(self) -> None:
        """Wait for the attempts under way (each ends by its deadline), then stop."""
        self.pool.shutdown(wait=True)
        self.watchdog.close()
