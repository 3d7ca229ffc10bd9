"""Calls run at once, to test what holds when callers race (a constraint, a conditional write).

Threads started one after another may well run one after another on a loaded machine, and then
a race test passes whether or not the code is race-safe. Here every call waits at a barrier
first, so they start together."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def race(calls: Sequence[Callable[[], Any]], *, timeout: float = 120.0) -> list[Any]:
    """Run every call at once, each in its thread: what each returned, or the error it raised.
    Fails if a call has not finished within ``timeout`` seconds."""
    barrier = threading.Barrier(len(calls), timeout=30)
    results: list[Any] = [None] * len(calls)
    finished = [False] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except Exception as exc:  # the refusals are what a race test counts
            results[index] = exc
        finished[index] = True

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert all(finished), "a racing call did not finish"
    return results


def race_cleanly(calls: Sequence[Callable[[], Any]], *, timeout: float = 120.0) -> list[Any]:
    """``race``, where no call may raise."""
    results = race(calls, timeout=timeout)
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    return results


@contextlib.contextmanager
def arrivals(store: Any) -> Iterator[threading.Event]:
    """An event set once a request asks for a game under its lock (``Store.owned``), which an
    action does after taking its arrival time: a test holding the lock knows the request is in
    hand, not merely that its thread was started."""
    arrived = threading.Event()
    owned = store.owned

    def asked(*args: Any, **kwargs: Any) -> Any:
        arrived.set()
        return owned(*args, **kwargs)

    store.owned = asked
    try:
        yield arrived
    finally:
        del store.owned  # the class's method again
