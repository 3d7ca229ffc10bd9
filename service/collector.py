"""Python's cyclic garbage collector paused around work that allocates a great deal and makes no
reference cycles: an analysis (service/application/analysis/jobs.py) and the pages of a view's
rebuild (service/persistence/views.py).

The collector runs every few hundred allocations of container objects and, every so often,
walks every object the process holds. Work that makes millions of short-lived objects while
holding many long-lived ones (the expert's tables of points; a rebuild's page of 20,000 decoded
events) pays for those walks though it leaves nothing for them to find: ~15% of an analysis's
CPU, a third of a rebuild's (docs/performance.md). What such work drops is freed by reference
counts as before; tests hold each to leaving no cyclic garbage (tests/test_analysis.py,
tests/test_rebuilds.py), or what they leave is swept soon: a rebuild sweeps the youngest
generation after each pass, and every few pages for a view that leaves cycles (``sweep``;
``views.View.leaves_cycles``), where a library's own (openskill's, four objects a rated game)
are found in a pass over what the pages left alive, not over everything held.

The collector is one per process, and threads may pause it at once: it is off while any of them
holds it paused, and on again (if it was on before the first) when the last lets go.

A server's process also sets aside what it built to start (``settle``): its modules, the app
and its settings live as long as the process, and the collector's full passes walked all of
them every time to find nothing in them.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the ``with`` block (see the module)."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


def sweep() -> None:
    """Collect the youngest generation now, paused or not: the cyclic garbage made since the
    last collection, in a pass over only the objects made since then that are still alive (they
    move to an older generation)."""
    gc.collect(0)


def settle() -> None:
    """Set aside from the collector's passes every object alive now (``gc.freeze``), after a
    collection so that no garbage is set aside with them. Call it once a process has built what
    it keeps for its life: an HTTP worker, once its app is loaded, holds ~93,000 such objects,
    and each full pass walked them all (110–149 ms with the worker's threads stopped, once in
    ~12,000 actions under the bench's load; docs/performance.md, levers). The objects set aside
    are freed by their reference counts as before; only a cycle among them that became garbage
    later would stay, and what a process keeps for its life does not."""
    gc.collect()
    gc.freeze()
