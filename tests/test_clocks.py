"""Clocks and abandoned games (contract 1.1): the rules in the domain, with the time passed in,
then through the API with a real scheduler and real waits (polled with a bound, never slept)."""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain import fairness
from domain.audit import audit_records
from domain.commands import NewGame
from domain.errors import GameOver, IllegalAction, InvalidRequest, NotYourTurn, TimedOut
from domain.game import Game, chain_hash, event_records, format_at, parse_at
from domain.record_sheet import record_sheet
from service.application.games.scheduler import RETRY, RETRY_BUG, Scheduler
from service.config import Settings
from service.http.app import create_app
from service.persistence.errors import StoreUnavailable
from service.persistence.tables import Sql
from tests.support.clocks import clocked_game, roll
from tests.support.games import history
from tests.support.http import send
from tests.support.polling import poll, wait_until
from tests.support.servers import free_port, run_scheduler, serving

Json = dict[str, Any]
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def clocked(seconds: int = 30, players: int = 2) -> Game:
    setup = NewGame(
        players=[f"P{i}" for i in range(players)], dice="manual", clock={"turn_seconds": seconds}
    )
    return Game.start(uuid.uuid4(), setup)


# ------------------------------------------------------------------------------ the domain
def test_the_deadline_is_the_turns_start_plus_the_clock() -> None:
    game = clocked(30)
    started = game.turn_started_at
    assert started is not None
    assert game.deadline == started + timedelta(seconds=30)
    game.roll(0, dice=[1, 2, 3, 4])  # acting within a turn does not move its deadline
    assert game.deadline == started + timedelta(seconds=30)
    game.move(0, [3, 7])
    game.stop(0)  # the next turn starts when this one ends
    assert game.turn_started_at is not None and game.turn_started_at > started
    assert game.deadline == game.turn_started_at + timedelta(seconds=30)


def test_a_timeout_ends_the_turn_as_a_bust_would() -> None:
    game = clocked(30)
    game.roll(0, dice=[1, 2, 3, 4])
    game.move(0, [3, 7])
    deadline = game.deadline
    assert deadline is not None
    with pytest.raises(IllegalAction):
        game.time_out(deadline - timedelta(microseconds=1))  # not yet
    before = game.turns_completed
    game.time_out(deadline)
    timed_out = game.pending_events[-1]
    assert type(timed_out).__name__ == "TurnTimedOut"
    assert event_records([timed_out])[0]["data"] == {
        "seat": 0,
        "deadline": format_at(deadline),
        "lost": {"3": 1, "7": 1},
        "in_a_row": 1,
        "next_player": 1,
    }
    assert game.current == 1 and game.phase == "roll" and not any(game.runners)
    assert game.turns_completed == before + 1
    assert game.markers[0][3] == 0  # the runners were lost, not kept


def test_three_timeouts_in_a_row_resign_the_player_for_inactivity() -> None:
    game = clocked(5, players=3)
    now = T0
    for _ in range(2):  # seats 0, 1, 2 time out twice each
        for _seat in range(3):
            now = max(now, game.deadline or now)
            game.time_out(now)
    assert game.timeouts == [2, 2, 2]
    # Seat 0 plays a turn itself this time: its count starts again.
    game.roll(0, dice=[1, 2, 3, 4])
    game.move(0, [3, 7])
    game.stop(0)
    assert game.timeouts == [0, 2, 2]
    game.time_out(max(now, game.deadline or now))  # seat 1's third in a row
    types = [type(e).__name__ for e in game.pending_events[-2:]]
    assert types == ["TurnTimedOut", "PlayerResigned"]
    assert event_records(game.pending_events)[-1]["data"]["reason"] == "inactivity"
    assert game.resigned == [False, True, False] and game.current == 2


def test_a_seat_whose_turn_timed_out_is_refused_as_late_until_it_plays_again() -> None:
    """Its action came after that turn's deadline, whoever recorded the timeout first: 409
    turn_timed_out, not 403 not_your_turn (api-contract: clocks)."""
    game = clocked(5, players=3)
    assert game.deadline is not None
    game.time_out(game.deadline)  # seat 0's turn times out: seat 1 to act
    recorded = len(game.pending_events)
    with pytest.raises(TimedOut) as late:
        game.roll(0, dice=[1, 2, 3, 4])
    assert late.value.code == "turn_timed_out"
    with pytest.raises(NotYourTurn):  # seat 2 never timed out: simply not its turn
        game.roll(2, dice=[1, 2, 3, 4])
    assert len(game.pending_events) == recorded  # refused: nothing recorded
    for seat in (1, 2, 0):  # each plays a turn; seat 0's ends in time
        game.roll(seat, dice=[1, 2, 3, 4])
        game.move(seat, [3, 7])
        game.stop(seat)
    with pytest.raises(NotYourTurn):  # its last turn ended in time
        game.roll(0, dice=[1, 2, 3, 4])


def test_a_timeout_that_leaves_one_player_finishes_the_game() -> None:
    game = clocked(5)
    now = T0
    for _ in range(5):  # 0, 1, 0, 1, 0: seat 0 times out a third time
        now = max(now, game.deadline or now)
        game.time_out(now)
    assert game.status == "finished" and game.winner == 1 and game.finish_reason == "last_player"


def test_clocks_are_for_people_and_for_two_or_more_players() -> None:
    setup = NewGame(players=["Ann", {"name": "Robo", "bot": "random"}], clock={"turn_seconds": 5})
    seed = "ab" * 32
    game = Game.start(
        uuid.uuid4(), setup, server_seed=seed, draw=functools.partial(fairness.draw, seed, "c")
    )
    if game.current == 1:  # the bot's turn has no deadline
        assert game.deadline is None
    else:
        assert game.deadline is not None
    for bad, why in (
        ({"turn_seconds": 4}, "from 5 to 604800"),
        ({"turn_seconds": 604_801}, "from 5 to 604800"),
        ({"turn_seconds": "30"}, "integer"),
        ({"seconds": 30}, "turn_seconds"),
    ):
        with pytest.raises(InvalidRequest, match=why):
            Game.start(uuid.uuid4(), NewGame(players=["A", "B"], dice="manual", clock=bad))
    with pytest.raises(InvalidRequest, match="two or more"):
        Game.start(uuid.uuid4(), NewGame(players=["Sol"], dice="manual", clock={"turn_seconds": 9}))


def test_a_game_idle_long_enough_is_abandoned_without_a_winner() -> None:
    game = clocked(30)
    idle = game.idle_since()
    with pytest.raises(IllegalAction):
        game.abandon(idle + timedelta(seconds=59), after=60)
    game.abandon(idle + timedelta(seconds=60), after=60)
    kinds = [type(e).__name__ for e in game.pending_events[-2:]]
    assert kinds == ["GameAbandoned", "GameFinished"]
    assert game.status == "finished" and game.winner is None
    assert game.finish_reason == "abandoned"
    with pytest.raises(GameOver):
        game.abandon(idle + timedelta(days=1), after=60)


def test_a_timed_out_turn_is_a_T_on_the_record_sheet() -> None:
    game = clocked(5)
    game.time_out(game.deadline or T0)
    records = event_records(game.pending_events)
    sheet = record_sheet(records, 0)
    assert [(r["result"], r["text"]) for r in sheet["rows"]] == [("timeout", "T")]


def test_the_audit_rederives_timeouts_from_the_recorded_times() -> None:
    game = clocked(5)
    game.time_out(game.deadline or T0)
    game.time_out(game.deadline or T0)
    records = event_records(game.pending_events)
    assert audit_records(records)["valid"] is True
    # A timeout recorded before its deadline is refused by the rules (hash recomputed).
    early = [dict(r) for r in records]
    at = parse_at(early[2]["at"]) - timedelta(seconds=1)
    early[2]["at"] = format_at(at)
    previous = early[1]["hash"]
    for record in early[2:]:
        record["prev_hash"] = previous
        record["hash"] = chain_hash(
            previous, record["version"], record["type"], record["at"], record["data"]
        )
        previous = record["hash"]
    verdict = audit_records(early)
    assert verdict["valid"] is False and verdict["first_bad_version"] == 3


# ------------------------------------------------------------------------------ the service
@pytest.fixture
def clock_settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, bot_pause=0, abandon_after=3600)


@pytest.fixture
def served(clock_settings: Settings) -> Iterator[tuple[Flask, FlaskClient]]:
    app = create_app(clock_settings, create_tables=True)
    halt = run_scheduler(app)
    yield app, app.test_client()
    halt()
    app.extensions["cantstop"].close()


def draws_in(value: Any) -> Iterator[Json]:
    """Every object in an event's data that carries a nonce (a server draw)."""
    if isinstance(value, dict):
        if value.get("nonce") is not None:
            yield value
        for item in value.values():
            yield from draws_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from draws_in(item)


class FakeTime:
    """The scheduler's clock, moved by the test (the games' events keep the real time)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def moved_clock(clock_settings: Settings) -> Iterator[tuple[Flask, Scheduler, FakeTime]]:
    """An app, and a scheduler of its store whose clock the test moves."""
    app = create_app(clock_settings, create_tables=True)
    rt = app.extensions["cantstop"]
    time_ = FakeTime()
    yield app, Scheduler(rt.games, rt.timekeeper, rt.views, clock=time_), time_
    rt.close()


def test_a_plain_game_is_not_reread_per_event_yet_is_abandoned_on_time(
    moved_clock: tuple[Flask, Scheduler, FakeTime], clock_settings: Settings
) -> None:
    """A game of people without a clock keeps its first plan (early, never late): when it comes,
    the scheduler finds the game was played since and plans the true time, which then ends it."""
    app, scheduler, time_ = moved_clock
    client = app.test_client()
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    game = created["game"]
    assert scheduler.refresh() == 1
    first_plan = scheduler.next_due
    assert first_plan is not None
    token = created["seats"][game["turn"]["player"]]["token"]
    played = client.post(
        f"/v1/games/{game['id']}/actions",
        json={"type": "roll"},
        headers={"Authorization": f"Bearer {token}"},
    ).get_json()["events"][-1]
    assert scheduler.refresh() == 0  # not read again: its plan can only be early
    assert scheduler.next_due == first_plan
    time_.now = first_plan
    assert scheduler.run_due() == 1  # it looks, and finds the game played since
    assert client.get(f"/v1/games/{game['id']}").get_json()["status"] == "in_progress"
    true_time = parse_at(played["at"]) + timedelta(seconds=clock_settings.abandon_after)
    assert scheduler.next_due == true_time
    time_.now = true_time
    scheduler.run_due()
    state = client.get(f"/v1/games/{game['id']}").get_json()
    assert state["status"] == "finished" and state["finish_reason"] == "abandoned"
    scheduler.refresh()
    assert scheduler.next_due is None  # finished: nothing more is due


def test_a_pass_with_nothing_due_reads_the_index_once_and_waits_for_the_next_due(
    moved_clock: tuple[Flask, Scheduler, FakeTime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest a pass looks for what is due and learns from the same read when the next thing
    falls due (``Scheduler.upcoming``): one read of the index, not a second for ``next_due``;
    after a pass that did something, it reads the index again as it now stands."""
    app, scheduler, time_ = moved_clock
    assert scheduler.step() == scheduler.poll  # an empty index: nothing is ever due
    assert scheduler.upcoming == (None,)
    client = app.test_client()
    client.post("/v1/games", json={"players": ["Ann", "Bob"]})
    scheduler.refresh()
    due = scheduler.next_due
    assert due is not None
    reads: list[str] = []

    def counted(read: Callable[..., Any]) -> Callable[..., Any]:
        def counting(self: Sql, sql: str, params: Any = ()) -> Any:
            if "{due}" in sql:
                reads.append(sql)
            return read(self, sql, params)

        return counting

    monkeypatch.setattr(Sql, "all", counted(Sql.all))
    monkeypatch.setattr(Sql, "one", counted(Sql.one))
    time_.now = due - timedelta(seconds=0.05)
    wait = scheduler.step()
    assert len(reads) == 1, reads
    assert 0.04 <= wait <= 0.06  # until the game falls due, sooner than the poll
    reads.clear()
    time_.now = due
    wait = scheduler.step()  # what was due is done
    assert any("min(due_at)" in sql for sql in reads), reads  # the index read as it now stands
    after = scheduler.next_due  # planned again (its true time), or nothing more due
    left = scheduler.poll if after is None else (after - time_.now).total_seconds()
    assert wait == min(scheduler.poll, max(0.0, left))


def test_a_step_that_fails_keeps_its_deadline_and_is_tried_again(
    moved_clock: tuple[Flask, Scheduler, FakeTime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick that fails (the store did not answer; a bug) leaves the game in the due-index, due
    again a little later, so its timeout is recorded once the trouble passes; it was dropped, and
    the deadline forgotten until someone acted in the game."""
    app, scheduler, time_ = moved_clock
    client = app.test_client()
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "clock": {"turn_seconds": 30}}
    ).get_json()
    game_id = uuid.UUID(created["game"]["id"])
    scheduler.refresh()
    deadline = scheduler.next_due
    assert deadline is not None
    tick = scheduler.timekeeper.tick
    for failure, retry in (
        (StoreUnavailable("no answer"), RETRY),
        (RuntimeError("bug"), RETRY_BUG),
    ):
        monkeypatch.setattr(scheduler.timekeeper, "tick", functools.partial(fail, failure))
        time_.now = scheduler.next_due or deadline
        assert scheduler.run_due() == 1
        assert scheduler.planned(game_id) == (time_.now + timedelta(seconds=retry), False)
        kinds = [e["type"] for e in history(client, str(game_id))]
        assert "TurnTimedOut" not in kinds
    monkeypatch.setattr(scheduler.timekeeper, "tick", tick)
    time_.now = scheduler.next_due or deadline
    assert scheduler.run_due() == 1
    kinds = [e["type"] for e in history(client, str(game_id))]
    assert kinds.count("TurnTimedOut") == 1


def fail(failure: Exception, *_: Any) -> None:
    raise failure


def test_a_new_game_is_planned_from_its_creation_unless_it_has_a_clock(
    moved_clock: tuple[Flask, Scheduler, FakeTime], clock_settings: Settings
) -> None:
    """Games played before the scheduler first reads them: a plain one is planned from its first
    event (early, never late: the rest of it is not read); one with a clock, truly."""
    app, scheduler, _ = moved_clock
    rt = app.extensions["cantstop"]
    client = app.test_client()
    plans = {}
    for name, extra in (("plain", {}), ("clocked", {"clock": {"turn_seconds": 30}})):
        created = client.post("/v1/games", json={"players": ["Ann", "Bob"], **extra}).get_json()
        game_id = created["game"]["id"]
        token = created["seats"][created["game"]["turn"]["player"]]["token"]
        reply = client.post(
            f"/v1/games/{game_id}/actions",
            json={"type": "roll"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert reply.status_code == 200, reply.get_json()
        plans[name] = uuid.UUID(game_id)
    assert scheduler.refresh() == 2
    events = history(client, str(plans["plain"]))
    assert len(events) >= 2
    early = parse_at(events[0]["at"]) + timedelta(seconds=clock_settings.abandon_after)
    assert scheduler.planned(plans["plain"]) == (early, True)  # from the creation, not the last
    with rt.games.store.owned(plans["clocked"]) as clocked:
        truth = rt.timekeeper.due_at(clocked)
    assert truth is not None and scheduler.planned(plans["clocked"]) == (truth, False)


def test_a_computer_player_seated_in_a_planned_lobby_plays_without_waiting(
    moved_clock: tuple[Flask, Scheduler, FakeTime], clock_settings: Settings
) -> None:
    app, scheduler, _ = moved_clock
    rt = app.extensions["cantstop"]
    client = app.test_client()
    lobby = client.post("/v1/games", json={"seats": 2}).get_json()["game"]
    scheduler.refresh()
    abandon_plan = scheduler.next_due
    assert abandon_plan is not None
    ann = client.post(f"/v1/games/{lobby['id']}/players", json={"name": "Ann"}).get_json()
    scheduler.refresh()
    client.post(
        f"/v1/games/{lobby['id']}/players",
        json={"name": "Robo", "bot": "rule-of-28"},
        headers={"Authorization": f"Bearer {ann['token']}"},
    )
    game = client.get(f"/v1/games/{lobby['id']}").get_json()
    assert game["status"] == "in_progress"
    scheduler.refresh()  # a seat taken by a computer player: planned again, truly
    with rt.games.store.owned(uuid.UUID(lobby["id"])) as latest:
        truth = rt.timekeeper.due_at(latest)
        bot_to_act = latest.is_bot(latest.current)
    assert truth is not None and scheduler.next_due == truth
    assert (truth < abandon_plan) == bot_to_act  # the bot plays at once (pause 0)


def test_a_timeout_is_recorded_without_any_request(served: tuple[Flask, FlaskClient]) -> None:
    _, client = served
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "clock": {"turn_seconds": 5}}
    ).get_json()
    game = created["game"]
    assert game["clock"] == {"turn_seconds": 5}
    deadline = game["turn"]["deadline"]
    assert deadline is not None
    timed_out = poll(
        lambda: [e for e in history(client, game["id"]) if e["type"] == "TurnTimedOut"], 12
    )
    event = timed_out[0]
    assert event["data"]["deadline"] == deadline
    lateness = (
        datetime.strptime(event["at"], "%Y-%m-%dT%H:%M:%S.%fZ")
        - datetime.strptime(deadline, "%Y-%m-%dT%H:%M:%S.%fZ")
    ).total_seconds()
    assert 0 <= lateness < 3  # within 3 s of the deadline (the contract)
    state = client.get(f"/v1/games/{game['id']}").get_json()
    assert state["turn"]["player"] != game["turn"]["player"]


def test_two_schedulers_record_one_timeout_per_deadline(clock_settings: Settings) -> None:
    apps = [create_app(clock_settings, create_tables=True), create_app(clock_settings)]
    halts = [run_scheduler(app) for app in apps]
    try:
        client = apps[0].test_client()
        created = client.post(
            "/v1/games", json={"players": ["Ann", "Bob"], "clock": {"turn_seconds": 5}}
        ).get_json()
        game_id = created["game"]["id"]
        two = poll(
            lambda: (
                found
                if len(
                    found := [e for e in history(client, game_id) if e["type"] == "TurnTimedOut"]
                )
                >= 2
                else None
            ),
            20,
        )
        deadlines = [e["data"]["deadline"] for e in two]
        assert len(deadlines) == len(set(deadlines))  # never two for one deadline
    finally:
        for halt in halts:
            halt()
        for app in apps:
            app.extensions["cantstop"].close()


def test_an_action_at_the_deadline_either_wins_or_is_refused_cleanly(
    served: tuple[Flask, FlaskClient],
) -> None:
    _, client = served
    game, token, deadline = clocked_game(client)
    while datetime.now(UTC) < deadline - timedelta(milliseconds=20):
        time.sleep(0.005)
    answer = roll(client, game["id"], token)

    def timed_out() -> list[Json] | None:
        found = history(client, game["id"])
        return found if any(e["type"] == "TurnTimedOut" for e in found) else None

    events = poll(timed_out, 10)
    kinds = [e["type"] for e in events]
    rolled = "DiceRolled" in kinds
    if answer.status_code == 200:
        assert rolled and kinds.index("DiceRolled") < kinds.index("TurnTimedOut")
    else:
        assert answer.status_code == 409
        assert answer.get_json()["code"] == "turn_timed_out"
        assert not rolled  # refused: nothing but the timeout recorded


def test_a_late_action_after_the_scheduler_recorded_the_timeout_is_refused_as_late(
    moved_clock: tuple[Flask, Scheduler, FakeTime],
) -> None:
    """The same answer as when the action finds the deadline passed itself (below): the
    scheduler recording the timeout first does not turn it into not_your_turn."""
    app, scheduler, time_ = moved_clock
    client = app.test_client()
    game, token, deadline = clocked_game(client)
    scheduler.refresh()
    time_.now = deadline
    assert scheduler.run_due() == 1
    before = history(client, game["id"])
    assert before[-1]["type"] == "TurnTimedOut"
    late = roll(client, game["id"], token)
    assert late.status_code == 409 and late.get_json()["code"] == "turn_timed_out"
    assert history(client, game["id"]) == before  # nothing recorded


def test_a_late_action_records_the_timeout_and_is_refused(clock_settings: Settings) -> None:
    app = create_app(clock_settings, create_tables=True)  # no scheduler: the action finds it
    try:
        client = app.test_client()
        game, token, deadline = clocked_game(client)
        poll(lambda: datetime.now(UTC) > deadline, 10)
        late = roll(client, game["id"], token)
        assert late.status_code == 409 and late.get_json()["code"] == "turn_timed_out"
        kinds = [e["type"] for e in history(client, game["id"])]
        assert kinds[-1] == "TurnTimedOut" and "DiceRolled" not in kinds
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.parametrize(
    "clock", [{"turn_seconds": 4}, {"turn_seconds": 604_801}, {"turn_seconds": "9"}, {}]
)
def test_a_bad_clock_is_refused_and_records_nothing(client: FlaskClient, clock: Json) -> None:
    before = client.get("/v1/games").get_json()["total"]
    response = client.post("/v1/games", json={"players": ["Ann", "Bob"], "clock": clock})
    assert response.status_code == 422
    assert response.get_json()["code"] == "invalid_request"
    assert client.get("/v1/games").get_json()["total"] == before


def test_an_abandoned_game_reveals_a_seed_that_recomputes_every_die(database_url: str) -> None:
    settings = Settings(database_url=database_url, bot_pause=0, abandon_after=2)
    app = create_app(settings, create_tables=True)
    halt = run_scheduler(app)
    try:
        client = app.test_client()
        created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
        game = created["game"]
        token = created["seats"][game["turn"]["player"]]["token"]
        client.post(
            f"/v1/games/{game['id']}/actions",
            json={"type": "roll", "entropy": "before-leaving"},
            headers={"Authorization": f"Bearer {token}"},
        )
        lobby = client.post("/v1/games", json={"seats": 3}).get_json()["game"]
        finished = poll(
            lambda: (
                s
                if (s := client.get(f"/v1/games/{game['id']}").get_json())["status"] == "finished"
                else None
            ),
            15,
        )
        assert finished["finish_reason"] == "abandoned" and finished["winner"] is None
        seed = finished["fairness"]["server_seed"]
        assert fairness.commitment(seed) == finished["fairness"]["seed_commitment"]
        draws = [d for e in history(client, game["id"]) for d in draws_in(e["data"])]
        assert len(draws) >= 3  # the opening roll (two players) and the roll
        for draw in draws:
            assert draw["dice"] == fairness.draw(
                seed,
                finished["fairness"]["client_seed"],
                draw["nonce"],
                len(draw["dice"]),
                6,
                draw.get("entropy"),
            )
        assert client.get(f"/v1/games/{game['id']}/audit").get_json()["valid"] is True
        lobby_state = poll(
            lambda: (
                s
                if (s := client.get(f"/v1/games/{lobby['id']}").get_json())["status"] == "finished"
                else None
            ),
            15,
        )
        assert lobby_state["finish_reason"] == "abandoned"
    finally:
        halt()
        app.extensions["cantstop"].close()


@pytest.mark.slow
def test_a_scheduler_killed_while_a_timeout_is_due_loses_nothing(tmp_path: Path) -> None:
    """A real ``cantstop serve``: its scheduling process is killed with SIGKILL before the
    deadline; the process group starts it again, and the timeout is still recorded."""
    port = free_port()
    with serving(
        tmp_path, "--port", str(port), "--workers", "1", env={}, ready_port=port
    ) as server:
        created = send(
            port, "POST", "/v1/games", {"players": ["Ann", "Bob"], "clock": {"turn_seconds": 5}}
        ).json()
        game_id = created["game"]["id"]
        group = psutil_children(server.process.pid)
        workers = [
            pid for pid, command in group if command.split()[2:4] == ["service.cli", "worker"]
        ]
        assert len(workers) == 1, group
        os.kill(workers[0], signal.SIGKILL)

        def timed_out() -> bool:
            events = send(port, "GET", f"/v1/games/{game_id}/events").json()["events"]
            return any(e["type"] == "TurnTimedOut" for e in events)

        wait_until(timed_out, 20, "the timeout after the scheduler was killed")
        restarted = [
            pid for pid, command in psutil_children(server.process.pid) if "worker" in command
        ]
        assert restarted and restarted != workers


def psutil_children(pid: int) -> list[tuple[int, str]]:
    """The direct children of ``pid`` with their command lines (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat_fields[1]) == pid:
            found.append((int(entry.name), command))
    return found


@pytest.mark.slow
def test_a_real_server_plays_a_game_of_bots_to_the_end_in_its_worker(tmp_path: Path) -> None:
    """``cantstop serve`` with no client acting: its ``cantstop worker`` (at a lower CPU
    priority than the HTTP workers) plays every turn of a game of two bots, and the seed is
    revealed at the end."""
    port = free_port()
    with serving(
        tmp_path, "--port", str(port), env={"CANTSTOP_BOT_PAUSE": "0"}, ready_port=port
    ) as server:
        bots = [{"name": "Robo", "bot": "rule-of-28"}, {"name": "Keller", "bot": "rule-of-28"}]
        created = send(port, "POST", "/v1/games", {"players": bots})
        game_id = created.json()["game"]["id"]

        def finished() -> bool:
            return bool(send(port, "GET", f"/v1/games/{game_id}").json()["status"] == "finished")

        wait_until(finished, 60, "the bots' game to end")
        events = send(port, "GET", f"/v1/games/{game_id}/events?limit=1000").json()["events"]
        assert events[-1]["type"] == "SeedRevealed"
        assert sum(e["type"] == "DiceRolled" for e in events) >= 1
        group = psutil_children(server.process.pid)
        http = [pid for pid, command in group if "--http-only" in command]
        worker = [
            pid for pid, command in group if command.split()[2:4] == ["service.cli", "worker"]
        ]
        assert len(http) == 1 and len(worker) == 1, group
        assert niceness(worker[0]) > niceness(http[0])


def niceness(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[16])


def test_an_abandoned_lobby_is_closed_to_joins_leaves_and_rematches(
    moved_clock: tuple[Flask, Scheduler, FakeTime], clock_settings: Settings
) -> None:
    """A lobby abandoned before its seats were filled: joining or leaving it is game_over (it
    is finished), it is no open game in the listing, and it has no rematch (that lobby would keep
    a seat for a player who never existed, and never start)."""
    app, scheduler, time_ = moved_clock
    client = app.test_client()
    lobby = client.post("/v1/games", json={"seats": 3}).get_json()["game"]
    ann = client.post(f"/v1/games/{lobby['id']}/players", json={"name": "Ann"}).get_json()
    token = {"Authorization": f"Bearer {ann['token']}"}
    scheduler.refresh()
    time_.now = parse_at(lobby_created_at(client, lobby["id"])) + timedelta(
        seconds=clock_settings.abandon_after
    )
    scheduler.run_due()
    state = client.get(f"/v1/games/{lobby['id']}").get_json()
    assert (state["status"], state["finish_reason"]) == ("finished", "abandoned")
    version = state["version"]

    def code(response: Any, status: int) -> str:
        assert response.status_code == status, response.get_json()
        found: str = response.get_json()["code"]
        return found

    joined = client.post(f"/v1/games/{lobby['id']}/players", json={"name": "Bob"})
    assert code(joined, 409) == "game_over"
    left = client.delete(f"/v1/games/{lobby['id']}/players/0", headers=token)
    assert code(left, 409) == "game_over"
    rematch = client.post(f"/v1/games/{lobby['id']}/rematch", headers=token)
    assert code(rematch, 409) == "illegal_action"
    assert "never started" in rematch.get_json()["detail"]
    assert client.get(f"/v1/games/{lobby['id']}").get_json()["version"] == version  # nothing
    rows = client.get("/v1/games?status=finished").get_json()["games"]
    assert [r["open_seats"] for r in rows if r["id"] == lobby["id"]] == [0]
    opened = client.get("/v1/games?open=true").get_json()["games"]
    assert lobby["id"] not in {r["id"] for r in opened}


def lobby_created_at(client: Any, game_id: str) -> str:
    events = client.get(f"/v1/games/{game_id}/events").get_json()["events"]
    at: str = events[-1]["at"]  # the last event: Ann's seat
    return at


def test_a_computer_player_that_cannot_win_any_more_resigns(
    moved_clock: tuple[Flask, Scheduler, FakeTime],
) -> None:
    """Two computer players to 7, split 5 to 5 with one column left: neither can win, and every
    roll would bust for ever, an event every pause. The one to act resigns instead (resigning
    is any player's right), and the other is left to win."""
    app, _, time_ = moved_clock
    rt = app.extensions["cantstop"]
    client = app.test_client()
    bots = [{"name": "R1", "bot": "rule-of-28"}, {"name": "R2", "bot": "rule-of-28"}]
    created = client.post("/v1/games", json={"players": bots, "rules": {"columns_to_win": 7}})
    assert created.status_code == 201, created.get_json()
    gid = uuid.UUID(created.get_json()["game"]["id"])
    queued: list[list[int]] = []

    def scripted(*_: Any) -> list[int]:  # the test's dice, in place of the server's
        return queued.pop(0)

    with rt.games.store.owned(gid) as game:
        for column in (2, 3, 4, 5, 6, 8, 9, 10, 11, 12):  # turn about: 5 columns each
            seat = game.current
            low = max(1, column - 6)
            while column not in {c for c, at in enumerate(game.claimed) if at == seat}:
                queued.append([low, column - low, low, column - low])
                game.roll(seat, draw=scripted)
                twice = (column, column) in {tuple(m) for m in game.options}
                game.move(seat, [column, column] if twice else [column])
                if game.runners[column] == game.rules_obj.heights[column]:
                    game.stop(seat)
        assert not game.can_still_win(0) and not game.can_still_win(1)
        to_act = game.current
        rt.games.store.save_changes(game)
    assert to_act is not None
    assert rt.timekeeper.tick(gid, time_.now + timedelta(seconds=1)) is None  # finished
    state = client.get(f"/v1/games/{gid}").get_json()
    assert (state["status"], state["finish_reason"], state["winner"]) == (
        "finished",
        "last_player",
        1 - to_act,
    )
    last = history(client, str(gid))[-3:]
    assert [e["type"] for e in last] == ["PlayerResigned", "GameFinished", "SeedRevealed"]
    assert last[0]["data"]["seat"] == to_act
