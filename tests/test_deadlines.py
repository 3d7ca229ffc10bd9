"""Deadlines judged where the event is stamped (issue #43): an action is judged against its
turn's deadline at the one instant its events carry, taken under the game's lock, so no action
is ever recorded at or after its deadline; and the audit fails a history that holds one."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from domain import fairness
from domain.audit import audit_records
from domain.commands import Move as MoveCommand
from domain.commands import NewGame, Resign, Roll, Stop
from domain.errors import TimedOut
from domain.game import Game, chain_hash, event_records, format_at, parse_at
from tests.support.clocks import clocked_game, roll
from tests.support.games import history
from tests.support.polling import wait_until
from tests.support.racing import arrivals

Json = dict[str, Any]
SEED = "5" * 64


def clocked(seconds: int = 30) -> Game:
    setup = NewGame(players=["Ann", "Bob"], dice="manual", clock={"turn_seconds": seconds})
    return Game.start(uuid.uuid4(), setup)


def failing(verdict: Json) -> dict[str, int | None]:
    return {c["name"]: c["version"] for c in verdict["checks"] if not c["ok"]}


def rechained(records: list[Json], start: int) -> list[Json]:
    """The records with every hash from index ``start`` on computed again (a forger's work)."""
    previous = records[start - 1]["hash"]
    for record in records[start:]:
        record["prev_hash"] = previous
        record["hash"] = chain_hash(
            previous, record["version"], record["type"], record["at"], record["data"]
        )
        previous = record["hash"]
    return records


# ------------------------------------------------------------------------------ the domain
@pytest.mark.parametrize("late_by", [timedelta(0), timedelta(milliseconds=54)])
def test_an_action_stamped_at_or_after_its_deadline_is_refused_and_the_timeout_recorded(
    late_by: timedelta,
) -> None:
    game = clocked(30)
    seat, deadline = game.current, game.deadline
    assert seat is not None and deadline is not None
    game.act(seat, Roll(dice=[1, 2, 3, 4]), at=deadline - timedelta(seconds=5))
    game.act(seat, MoveCommand(sums=(3, 7)), at=deadline - timedelta(seconds=1))
    recorded = len(game.pending_events)
    with pytest.raises(TimedOut) as late:
        game.act(seat, Stop(), at=deadline + late_by)
    assert late.value.code == "turn_timed_out"
    added = event_records(game.pending_events[recorded:])
    assert [e["type"] for e in added] == ["TurnTimedOut"]  # the stop is not recorded
    assert added[0]["at"] == format_at(deadline + late_by)
    assert added[0]["data"]["lost"] == {"3": 1, "7": 1}  # the runners were lost, not kept
    assert game.current != seat and game.markers[seat][3] == 0
    assert audit_records(event_records(game.collect_events()))["valid"] is True


def test_every_event_of_an_action_carries_its_one_instant() -> None:
    """A command that records several events (a resignation that ends the game) stamps them
    all with the instant it was judged at, not each with the moment it was built."""
    game = clocked(30)
    seat, deadline = game.current, game.deadline
    assert seat is not None and deadline is not None
    at = deadline - timedelta(microseconds=1)
    recorded = len(game.pending_events)
    game.act(seat, Resign(), at=at)
    added = event_records(game.pending_events[recorded:])
    assert [e["type"] for e in added] == ["PlayerResigned", "GameFinished"]
    assert {e["at"] for e in added} == {format_at(at)}


def test_an_instant_before_the_last_event_is_judged_at_the_last_events_time() -> None:
    """A host whose clock is a little behind stamps the last event's time (never earlier); that
    time, not its own, is judged against the deadline."""
    game = clocked(30)
    seat = game.current
    assert seat is not None
    last = game.modified_on
    game.act(seat, Roll(dice=[1, 2, 3, 4]), at=last - timedelta(seconds=3))
    assert game.pending_events[-1].timestamp == last


# ------------------------------------------------------------------------------ the audit
def test_the_audit_fails_a_history_with_an_action_past_its_deadline() -> None:
    """The field fault: a TurnStopped stored 54 ms after its turn's deadline, with no timeout.
    Forged here (its time moved, the chain computed again): the rules accept the stop itself,
    the ``deadlines`` check blames its version."""
    game = clocked(5)
    seat, deadline = game.current, game.deadline
    assert seat is not None and deadline is not None
    game.act(seat, Roll(dice=[1, 2, 3, 4]), at=deadline - timedelta(seconds=2))
    game.act(seat, MoveCommand(sums=(3, 7)), at=deadline - timedelta(seconds=1))
    game.act(seat, Stop(), at=deadline - timedelta(milliseconds=1))
    records = event_records(game.collect_events())
    verdict = audit_records(records)
    assert verdict["valid"] is True
    deadlines = next(c for c in verdict["checks"] if c["name"] == "deadlines")
    assert deadlines["ok"] is True and deadlines["version"] is None
    forged = [dict(r, data=dict(r["data"])) for r in records]
    stopped = next(i for i, r in enumerate(forged) if r["type"] == "TurnStopped")
    forged[stopped]["at"] = format_at(deadline + timedelta(milliseconds=54))
    verdict = audit_records(rechained(forged, stopped))
    version = forged[stopped]["version"]
    assert verdict["valid"] is False and verdict["first_bad_version"] == version
    assert failing(verdict) == {"deadlines": version}
    detail = next(c["detail"] for c in verdict["checks"] if c["name"] == "deadlines")
    assert "TurnStopped" in detail and format_at(deadline) in detail


def test_a_computer_players_action_has_no_deadline_to_miss() -> None:
    """Bots have no clock: a bot's action an hour into its turn audits clean."""

    def draw(nonce: int, count: int, faces: int, entropy: str | None = None) -> list[int]:
        return fairness.draw(SEED, "c", nonce, count, faces, entropy)

    setup = NewGame(
        players=["Ann", {"name": "Robo", "bot": "random"}],
        clock={"turn_seconds": 5},
        client_seed="c",
    )
    game = Game.start(uuid.uuid4(), setup, server_seed=SEED, draw=draw)
    while game.current == 0:  # Ann's turn, in time: roll, move, stop (or bust)
        if game.phase == "roll":
            game.act(0, Roll(), draw=draw)
        elif game.phase == "move":
            game.act(0, MoveCommand(sums=tuple(game.options[0])))
        else:
            game.act(0, Stop())
    assert game.current == 1 and game.deadline is None
    game.act(1, Roll(), draw=draw, at=game.modified_on + timedelta(hours=1))
    verdict = audit_records(event_records(game.collect_events()))
    assert verdict["valid"] is True, verdict


# ------------------------------------------------------------------------------ the service
def test_an_action_written_after_the_deadline_is_refused_and_records_only_the_timeout(
    client: FlaskClient,
) -> None:
    """The request arrives seconds before the deadline but waits on the game's lock (held here,
    as a slow write ahead of it would) until after it: it is judged when its event would be
    stamped, so it gets 409 ``turn_timed_out`` and only the timeout is recorded."""
    rt = client.application.extensions["cantstop"]
    game, token, deadline = clocked_game(client)
    answers: list[TestResponse] = []
    with rt.games.store.owned(uuid.UUID(game["id"])), arrivals(rt.games.store) as arrived:
        request = threading.Thread(target=lambda: answers.append(roll(client, game["id"], token)))
        request.start()
        wait_until(arrived.is_set, 10, "the roll to wait for the game's lock")
        in_hand = datetime.now(UTC)  # its arrival time was taken before this
        wait_until(lambda: datetime.now(UTC) > deadline, 10, "the turn's deadline to pass")
    request.join(30)
    assert in_hand < deadline - timedelta(seconds=1)  # it arrived well within the turn
    [answer] = answers
    assert answer.status_code == 409, answer.get_json()
    assert answer.get_json()["code"] == "turn_timed_out"
    events = history(client, game["id"])
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "TurnTimedOut" and "DiceRolled" not in kinds
    assert parse_at(events[-1]["at"]) >= deadline
    audit = client.get(f"/v1/games/{game['id']}/audit").get_json()
    assert audit["valid"] is True, audit


def test_an_action_racing_its_deadline_is_stamped_before_it_or_refused(
    client: FlaskClient,
) -> None:
    """Sent a few milliseconds before the deadline: recorded with a time before it, or refused
    as late with the timeout recorded; either way the audit's ``deadlines`` check passes."""
    game, token, deadline = clocked_game(client)
    wait_until(
        lambda: datetime.now(UTC) >= deadline - timedelta(milliseconds=5), 10, "the deadline"
    )
    answer = roll(client, game["id"], token)
    events = history(client, game["id"])
    if answer.status_code == 200:
        rolled = next(e for e in events if e["type"] == "DiceRolled")
        assert parse_at(rolled["at"]) < deadline
    else:
        assert answer.get_json()["code"] == "turn_timed_out"
        assert [e["type"] for e in events][-1] == "TurnTimedOut"
    audit = client.get(f"/v1/games/{game['id']}/audit").get_json()
    assert audit["valid"] is True, audit
    assert any(c["name"] == "deadlines" and c["ok"] for c in audit["checks"])
