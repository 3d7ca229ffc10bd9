"""service/collector.py: the cyclic collector paused by several threads at once is off while any
holds it, on again when the last lets go, and left off if it was off before."""

from __future__ import annotations

import gc
import threading

from service import collector


def test_the_collector_is_off_while_any_thread_holds_it_paused() -> None:
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collector.paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with collector.paused():
            second_in.set()
            first_out.wait(10)  # the first let go: still off, this one holds it
            seen["after_first"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after_first": False}
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
