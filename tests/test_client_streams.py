"""The client package's account stream, challenges and seeks against a real server: notices
arrive typed, in order, resumed after a cut with nothing lost or twice; a challenge is
declined, then accepted into a game both players hear of; a challenge to ``expert`` is accepted
at once; two seeks of one pool are paired; a seek is withdrawn.

Every wait is bounded: a stream read that takes too long is closed by a timer and fails the
test (no sleeps).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from cantstop_client import Client, EventStream, Notice

from tests.support.faults import Fault, FaultyProxy
from tests.support.http import HOST
from tests.support.servers import free_port, serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("client-streams")
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_THREADS": "16"}
    with serving(tmp, *args, env=env, ready_port=port):
        yield f"http://{HOST}:{port}"


def person(url: str) -> tuple[Client, str]:
    handle = "p" + uuid.uuid4().hex[:10]
    client = Client(url)
    client.sign_up(handle, "correct horse battery")
    return client, handle


def next_notice(stream: EventStream[Notice], kind: str, timeout: float = 20) -> Notice:
    """The next notice of this type (others are skipped); fails after ``timeout`` seconds."""
    timer = threading.Timer(timeout, stream.close)
    timer.start()
    try:
        for notice in stream:
            if notice.type == kind:
                return notice
    finally:
        timer.cancel()
    raise AssertionError(f"no {kind} notice within {timeout} s")


def test_a_challenge_declined_then_accepted_over_the_stream(server: str) -> None:
    ann, ann_handle = person(server)
    bob, bob_handle = person(server)
    # after=0: every notice the account has, from its first; fresh accounts have none yet.
    with ann.account_stream(after=0) as ann_hears, bob.account_stream(after=0) as bob_hears:
        first = ann.challenge(bob_handle, rules={"columns_to_win": 3})
        assert first["status"] == "pending" and first["from"] == ann_handle
        told = next_notice(bob_hears, "challenge")
        assert told.challenge is not None and told.challenge["id"] == first["id"]
        assert told.id >= 1 and told.at is not None
        assert [c["id"] for c in bob.challenges()["incoming"]] == [first["id"]]
        assert bob.decline_challenge(first["id"])["status"] == "declined"
        declined = next_notice(ann_hears, "challenge_declined")
        assert declined.challenge is not None and declined.challenge["id"] == first["id"]

        second = ann.challenge(bob_handle)
        assert next_notice(bob_hears, "challenge").challenge == bob.get_challenge(second["id"])
        accepted = bob.accept_challenge(second["id"])
        game = accepted["game"]
        assert accepted["challenge"]["status"] == "accepted"
        assert accepted["challenge"]["game_id"] == game["id"]
        for hears, seat in ((ann_hears, 0), (bob_hears, 1)):
            started = next_notice(hears, "game_started")
            assert (started.game_id, started.seat) == (game["id"], seat)
        turn = game["turn"]
        assert turn is not None
        to_act = (ann_hears, ann) if turn["player"] == 0 else (bob_hears, bob)
        yours = next_notice(to_act[0], "your_turn")
        assert yours.game_id == game["id"] and yours.seat == turn["player"]
        # Resigning ends it: both hear game_finished, with the winner.
        to_act[1].resign(game["id"])
        for hears in (ann_hears, bob_hears):
            over = next_notice(hears, "game_finished")
            assert over.game_id == game["id"] and over.winner == 1 - turn["player"]
    ann.close()
    bob.close()


def test_a_challenge_to_expert_is_accepted_at_once(server: str) -> None:
    ann, _ = person(server)
    with ann:
        sent = ann.challenge("expert")
        assert sent["status"] == "accepted" and sent["game_id"] is not None
        assert ann.game(sent["game_id"])["status"] == "in_progress"


def test_the_account_stream_resumes_after_a_cut(server: str) -> None:
    """The proxy cuts the stream after each notice it passes: the client reopens it with
    Last-Event-ID and gets every notice once, in order."""
    ann, _ = person(server)
    bob, bob_handle = person(server)
    sent = [ann.challenge(bob_handle)["id"] for _ in range(3)]
    port = int(server.rsplit(":", 1)[1])
    with FaultyProxy(port) as proxy, Client(proxy.url, bob.token) as via_proxy:
        proxy.arm(Fault("cut", lambda line: b"/v1/account/stream" in line, times=2, events=1))
        with via_proxy.account_stream(after=0) as stream:
            got = [next_notice(stream, "challenge") for _ in sent]
            assert stream.connections == 3
    assert [n.challenge["id"] for n in got if n.challenge is not None] == sent
    assert [n.id for n in got] == sorted({n.id for n in got})
    ann.close()
    bob.close()


def test_two_seeks_of_one_pool_are_paired_and_one_is_withdrawn(server: str) -> None:
    ann, ann_handle = person(server)
    bob, bob_handle = person(server)
    rules = {"columns_to_win": 3, "dice_faces": 6}
    with ann.account_stream(after=0) as ann_hears:
        mine = ann.seek(players=2, rules=rules)
        assert mine["status"] == "open" and mine["account"] == ann_handle
        bob.seek(players=2, rules=rules)
        started = next_notice(ann_hears, "game_started", timeout=10)  # within 2 s, said
        paired = ann.get_seek(mine["id"])
        assert paired["status"] == "paired" and paired["game_id"] == started.game_id
        assert started.game_id is not None
        players = {p.get("account") for p in ann.game(started.game_id)["players"]}
        assert players == {ann_handle, bob_handle}
    again = ann.seek(players=2, rules={"columns_to_win": 2})
    ann.withdraw_seek(again["id"])
    assert ann.get_seek(again["id"])["status"] == "withdrawn"
    ann.close()
    bob.close()
