"""The Redis link's status for /healthz: one PING at a time in a process, the others answered
the last answer meanwhile, so a flood of /healthz while Redis hangs holds no request thread for
a PING's timeout each (the probe is public and unthrottled)."""

from __future__ import annotations

import threading

import pytest
import redis

from service.live.redis_link import RedisLink


def test_one_ping_at_a_time_and_the_others_get_the_last_answer(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = RedisLink(redis_url)
    try:
        assert link.status() == "ok"  # a real PING
        pings: list[int] = []
        entered, release = threading.Event(), threading.Event()

        def hanging_ping() -> bool:
            pings.append(1)
            entered.set()
            assert release.wait(30), "the test never let the PING end"
            raise redis.ConnectionError("Timeout reading from socket")

        monkeypatch.setattr(link.client, "ping", hanging_ping)
        answers: list[str] = []
        pinger = threading.Thread(target=lambda: answers.append(link.status()))
        pinger.start()
        assert entered.wait(30), "the first asker did not PING"
        # while that PING hangs, others answer at once with the last answer, and send none
        assert [link.status() for _ in range(5)] == ["ok"] * 5
        assert len(pings) == 1
        release.set()
        pinger.join(30)
        assert answers == ["down: ConnectionError"]
        assert link.status() == "down: ConnectionError"  # none under way: a new PING
        assert len(pings) == 2
    finally:
        release.set()
        link.close()
