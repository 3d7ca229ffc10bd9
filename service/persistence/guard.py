"""Bounded waits: each store operation tried at most twice, then 503; a breaker that answers at once
after a failure; the health of the last write."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from eventsourcing.persistence import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    PersistenceError,
)

from service.persistence.errors import NoAnswer, StoreUnavailable, WritersQueued

log = logging.getLogger("cantstop.store")

CONNECT_TIMEOUT = 1  # seconds to wait for a pooled PostgreSQL connection (an integer)
LIBPQ_CONNECT_TIMEOUT = 2  # seconds for libpq to open one (its minimum is 2)
ATTEMPTS = 2
RETRY_PAUSE = 0.05
COOLDOWN = 1.0
# Seconds a SQLite statement waits for a lock another connection holds. Commits hold it for
# microseconds (WAL, synchronous=NORMAL; under FULL the processes' writers queue on a file
# lock first), so only a lock taken from outside (a backup tool's exclusive transaction) waits
# this long, and the request then gets its 503 within about 2 s, as promised.
SQLITE_LOCK_TIMEOUT = 2
URL_FIELDS = ("dbname", "host", "port", "user", "password")
# Rows in one multi-row INSERT: actions have a few; an import's thousands go in chunks of this
# many, in one transaction (SQLite binds at most 32,766 values per statement, PostgreSQL 65,535).
ROWS_PER_STATEMENT = 200

T = TypeVar("T")


class Breaker:
    """Opens for ``cooldown`` seconds after a failed store operation: meanwhile every operation
    fails at once instead of waiting for a database that just failed."""

    def __init__(self, cooldown: float = COOLDOWN) -> None:
        self.cooldown = cooldown
        self._open_until = 0.0
        self._lock = threading.Lock()
        self.last_error = ""

    @property
    def is_open(self) -> bool:
        return time.monotonic() < self._open_until

    def check(self) -> None:
        if self.is_open:
            raise StoreUnavailable(f"the event store is unavailable ({self.last_error}); retry")

    def trip(self, exc: BaseException) -> None:
        with self._lock:
            first = not self.last_error
            self.last_error = type(exc).__name__
            self._open_until = time.monotonic() + self.cooldown
        if first:
            log.warning("event store unavailable: %s: %s", type(exc).__name__, exc)

    def reset(self) -> None:
        if self.last_error:
            with self._lock:
                was, self.last_error = self.last_error, ""
            if was:
                log.info("event store available again")


BREAKER = Breaker()
TRANSIENT = (InterfaceError, OperationalError)


def guarded(call: Callable[[], T], *, breaker: Breaker = BREAKER) -> T:
    """Run one store operation: at most ``ATTEMPTS`` tries, then StoreUnavailable (503)."""
    breaker.check()
    for attempt in range(ATTEMPTS):
        try:
            result = call()
        except TRANSIENT as exc:
            # A server that did not answer in time is not asked again at once: that would
            # double the wait of every request while it is down.
            if attempt + 1 < ATTEMPTS and not breaker.is_open and not _no_answer(exc):
                time.sleep(RETRY_PAUSE)
                continue
            breaker.trip(exc)
            raise StoreUnavailable(
                f"the event store is unavailable ({type(exc).__name__}); retry"
            ) from exc
        except IntegrityError:
            raise
        except (DatabaseError, PersistenceError) as exc:  # e.g. not a database file at all
            log.error("event store error: %s: %s", type(exc).__name__, exc)
            raise StoreUnavailable(f"the event store failed ({type(exc).__name__})") from exc
        breaker.reset()
        return result
    raise AssertionError("unreachable")


class WriteHealth:
    """How a recorder's last write of events went, for /healthz: a store can go on answering
    reads while it refuses every write (a full disk), and a read is all the health check itself
    does."""

    def __init__(self) -> None:
        self.failed_at: float | None = None  # wall-clock seconds (time.time) of the first failure
        self.reason = ""  # the last failure's kind (the message, which may name hosts, is logged)

    def failed(self, exc: BaseException) -> None:
        self.reason = type(exc.__cause__ or exc).__name__
        if self.failed_at is None:
            self.failed_at = time.time()

    def succeeded(self) -> None:
        if self.failed_at is not None:
            self.failed_at, self.reason = None, ""


def guarded_write(call: Callable[[], T], *, breaker: Breaker, writes: WriteHealth) -> T:
    """``guarded`` for a write, whose outcome is kept in ``writes``. A conflict
    (IntegrityError) says the store works, and changes nothing there."""
    try:
        result = guarded(call, breaker=breaker)
    except StoreUnavailable as exc:
        writes.failed(exc)
        raise
    writes.succeeded()
    return result


def _no_answer(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: the stores wrap the drivers' errors) is ``NoAnswer``,
    or SQLite's lock that stayed taken for the whole lock timeout: asking again at once would
    only wait as long again."""
    return caused_by(
        exc,
        lambda cause: (
            isinstance(cause, NoAnswer | WritersQueued)
            or (
                isinstance(cause, sqlite3.OperationalError)
                and getattr(cause, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED")
            )
        ),
    )


def caused_by(exc: BaseException, test: Callable[[BaseException], bool]) -> bool:
    """Whether ``exc`` or what caused it passes ``test`` (the stores wrap the drivers' errors
    in the library's)."""
    cause: BaseException | None = exc
    while cause is not None:
        if test(cause):
            return True
        cause = cause.__cause__
    return False


SQLITE_BREAKER = Breaker(cooldown=0)
