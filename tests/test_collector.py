"""service/collector.py: the cyclic collector paused by several threads at once is off while any
holds it, on again when the last lets go, and left off if it was off before; what a process
settles is set aside from the collector's passes, and its garbage is not."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

from service import collector


def test_the_collector_is_off_while_any_thread_holds_it_paused() -> None:
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}
    waited: list[bool] = []  # each hand-over happened (not timed out): the pauses overlapped

    def first() -> None:
        with collector.paused():
            first_in.set()
            waited.append(second_in.wait(10))
        first_out.set()

    def second() -> None:
        waited.append(first_in.wait(10))
        with collector.paused():
            second_in.set()
            waited.append(first_out.wait(10))  # the first let go: still off, this one holds it
            seen["after_first"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after_first": False}
    assert waited == [True, True, True]
    assert gc.isenabled()


def test_nested_pauses_end_as_they_began() -> None:
    with collector.paused():
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


SETTLING = """
import gc, weakref
from service import collector

class Node:
    pass

kept = Node(); kept.me = kept  # alive, in a cycle
lost = Node(); lost.me = lost; gone = weakref.ref(lost); del lost  # cyclic garbage
gc.disable()  # no pass but those asked for
collector.settle()
assert gone() is None, "garbage set aside"
assert gc.get_freeze_count() > 0
assert not any(o is kept for o in gc.get_objects()), "walked by the collector's passes"
later = Node(); later.me = later; after = weakref.ref(later); del later
gc.collect()
assert after() is None, "what comes after is not collected"
print("settled")
"""


def test_settling_sets_aside_what_is_alive_and_collects_the_garbage_first() -> None:
    # In a process of its own: settling this one would set aside every test's objects.
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", SETTLING], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "settled"
