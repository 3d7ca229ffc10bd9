"""One test at a time on a PostgreSQL server that others share (``CANTSTOP_TEST_POSTGRES_URL``).

A throwaway server (the default) is one xdist worker's own. A server given by the variable is
shared by the run's workers (and by any other run pointed at it), and PostgreSQL's snapshot
horizon (``pg_snapshot_xmin``) is the whole server's, not one database's: the log's readers stop
below the oldest transaction open anywhere on it (README, "Long transactions"). So one worker's
open transaction held another's views back, and a test that writes and then reads its view to
the end failed (``test_a_crash_half_way_through_a_batch_loses_and_doubles_nothing`` under
``make test``). Each test that uses the server takes its turn with an exclusive ``flock`` on a
file named after the server, so two never run at once; the other tests go on in parallel."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

WAIT = 1800.0
"""Seconds a test waits for its turn: the longest test's run, with room to spare."""


@contextlib.contextmanager
def one_at_a_time(server_url: str) -> Iterator[None]:
    """Hold the server for the block, waiting (a bounded poll) while another test holds it."""
    name = hashlib.sha256(server_url.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"cantstop-test-postgres-{name}.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no turn on {server_url} in {WAIT:.0f} s") from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
