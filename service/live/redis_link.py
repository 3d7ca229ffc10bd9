"""A Redis client with a circuit breaker, shared by the live hub and /healthz.

(The rate limits keep their own connection, through the ``limits`` library's storage, with its
own fallback to memory: service/http/limits.py.)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger("cantstop.live")

RECONNECT_MIN, RECONNECT_MAX = 0.1, 2.0


class RedisLink:
    """A Redis client with a circuit breaker, shared by the publisher and /healthz.

    After a failure, callers that can do without Redis (publishing, the streams) skip it for a
    short, growing while instead of paying a failed round trip on every request. No retries: the
    caller always has a fallback, and actions must not wait on Redis.
    """

    def __init__(self, url: str, *, timeout: float = 1.0) -> None:
        self.url = url
        self.timeout = timeout
        self.client = self.connect()
        self._lock = threading.Lock()
        self._failures = 0
        self._skip_until = 0.0
        self._status: str | None = None  # the last PING's answer
        self._pinging = threading.Lock()

    def connect(self, *, read_timeout: float | None = None) -> redis.Redis:
        options: dict[str, Any] = {}
        if not self.url.startswith("unix:"):
            options["socket_keepalive"] = True  # TCP only
        return redis.Redis.from_url(
            self.url,
            socket_connect_timeout=self.timeout,
            socket_timeout=read_timeout or self.timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            **options,
        )

    def close(self) -> None:
        self.client.close()

    def available(self) -> bool:
        """False while the breaker is open after a recent failure."""
        return time.monotonic() >= self._skip_until

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            first = self._failures == 1
            pause = min(RECONNECT_MAX, RECONNECT_MIN * 2 ** (self._failures - 1))
            self._skip_until = time.monotonic() + pause
        if first:
            log.warning(
                "redis unavailable (%s: %s: %s); actions are still recorded, streams poll the "
                "store",
                what,
                type(exc).__name__,
                exc,
            )
        else:
            log.debug("redis still unavailable (%s: %s)", what, type(exc).__name__)

    def succeeded(self) -> None:
        if self._failures:
            with self._lock:
                recovered = self._failures > 0
                self._failures, self._skip_until = 0, 0.0
            if recovered:
                log.info("redis available again")

    def status(self) -> str:
        """``ok`` or ``down: <reason>``, from a PING (the breaker does not apply), one at a time
        in the process: while Redis hangs a PING waits out its timeout (1 s), and a flood of
        /healthz (public, unthrottled: a load balancer's probe) would otherwise hold a request
        thread that long each. While one is under way, others get the last answer at once."""
        known = self._status
        if not self._pinging.acquire(blocking=known is None):  # (the first asker waits)
            assert known is not None
            return known  # another thread asks Redis now
        try:
            if known is None and self._status is not None:  # answered while this one waited
                return self._status
            try:
                self.client.ping()
            except Exception as exc:  # whatever the failure, Redis is not usable
                self.failed("ping", exc)
                answer = f"down: {type(exc).__name__}"
            else:
                self.succeeded()
                answer = "ok"
            self._status = answer
            return answer
        finally:
            self._pinging.release()
