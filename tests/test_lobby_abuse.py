"""Lobby abuse: seats taken and given back for ever, and rated games of built-in bots only.

- Once a game has recorded ``MAX_SEAT_CHANGES`` seat changes (``SeatJoined``, ``SeatLeft``: a
  person's or an account's seat, a bot's seat added or removed), giving a seat back is 409
  ``too_many_seat_changes`` and records nothing; a seat is still taken, so the lobby fills and
  starts (nobody freezes another's lobby), and nobody grows a lobby's history without end, or a
  rated game's past what its analysis reads (``MAX_VERSIONS``). Counted by the events, so a
  replay counts the same; games stored with more still load, replay and audit.
- A rated game seats at least one person's account: built-in bots alone are 422
  ``invalid_request`` (anyone could otherwise move the bots' ratings, everyone's baseline).
"""

from __future__ import annotations

import functools
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from domain import fairness
from domain.audit import audit_records
from domain.commands import NewGame
from domain.errors import DomainError, InvalidRequest, TooManySeatChanges
from domain.game import MAX_SEAT_CHANGES, Game, event_records
from service.application.aggregates import Vault, new_token, token_hash
from tests.support.games import history
from tests.support.http import bearer, ok, refused
from tests.support.rated import CLOCK, sign_up

Json = dict[str, Any]
SEED = "7" * 64
SEAT_EVENTS = ("SeatJoined", "SeatLeft")
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------ helpers
def seat_events(client: FlaskClient, game_id: str) -> int:
    return sum(1 for e in history(client, game_id) if e["type"] in SEAT_EVENTS)


def lobby_game(seats: int = 3, *, rated: bool = False) -> Game:
    """A server-dice lobby of the domain, no store."""
    setup = NewGame(seats=seats, rated=rated, clock=CLOCK if rated else None)
    return Game.start(uuid.uuid4(), setup, server_seed=SEED)


def dice(game: Game) -> Any:
    return functools.partial(fairness.draw, SEED, game.client_seed or "")


def replayed(game: Game) -> Game:
    """The game rebuilt from every event it has recorded (``game`` must keep its events)."""
    rebuilt: Any = None
    for recorded in game.pending_events:
        rebuilt = recorded.mutate(rebuilt)
    assert isinstance(rebuilt, Game)
    return rebuilt


# ------------------------------------------------------------------ the count, in the domain
OPS = st.lists(
    st.sampled_from(["join", "bot", "leave"]),
    min_size=MAX_SEAT_CHANGES - 20,
    max_size=MAX_SEAT_CHANGES + 30,
)


@PROPERTY
@given(ops=OPS, seats=st.integers(2, 8), where=st.lists(st.integers(0, 7), min_size=1))
def test_the_count_is_the_seat_events_and_stops_at_the_cap(
    ops: list[str], seats: int, where: list[int]
) -> None:
    """Whatever joins, bots and leaves are asked, in any order (a join that would fill the lobby
    gives a seat back instead, until the end): the count is the number of seat events recorded,
    a replay of them counts the same; at the cap giving a seat back is refused, recording
    nothing, and below it nothing is refused for the count; a join is never refused for it, so
    the count stays within the cap plus the seats (every seat may be open at the cap, the last
    leave taken just below it), and the last seats then start the game."""
    game = lobby_game(seats)
    draw = dice(game)

    def change(step: int, op: str) -> None:
        before = game.version
        at_cap = game.seat_changes >= MAX_SEAT_CHANGES
        try:
            if op == "leave":
                game.leave(where[step % len(where)] % seats)
            else:
                game.join(f"P{step}", draw=draw, bot="random" if op == "bot" else None)
        except TooManySeatChanges:
            assert op == "leave" and at_cap and game.version == before
            return
        except DomainError:  # a seat not taken: refused as before the rule
            assert game.version == before
            return
        assert op != "leave" or not at_cap, "a seat was given back past the cap"
        recorded = [type(e).__name__ for e in game.pending_events]
        assert game.seat_changes == sum(1 for kind in recorded if kind in SEAT_EVENTS)
        assert game.seat_changes <= MAX_SEAT_CHANGES + seats

    for step, op in enumerate(ops):
        if op != "leave" and game.names.count(None) == 1:
            op = "leave"  # the lobby stays a lobby
        change(step, op)
    assert game.status == "waiting"
    assert replayed(game).seat_changes == game.seat_changes
    event("the cap reached" if game.seat_changes >= MAX_SEAT_CHANGES else "below the cap")
    while game.status == "waiting" and game.version < 1000:
        change(len(ops), "join")
    assert game.status == "in_progress"
    assert game.seat_changes <= MAX_SEAT_CHANGES + seats


def test_past_the_cap_no_seat_is_given_back_and_the_lobby_still_fills() -> None:
    game = lobby_game(4)
    draw = dice(game)
    game.join("Ann", draw=draw)
    while game.seat_changes < MAX_SEAT_CHANGES - 1:
        game.leave(game.join("Robo", draw=draw, bot="random"))
    bob = game.join("Bob", draw=draw)  # the 100th change
    robo = game.join("Robo", draw=draw, bot="expert")  # a seat is still taken past the cap
    assert game.seat_changes == MAX_SEAT_CHANGES + 1 and game.status == "waiting"
    version, names = game.version, list(game.names)
    leaves: list[Callable[[], None]] = [
        lambda: game.leave(bob),
        lambda: game.leave(robo),  # a bot's seat removed
        lambda: game.check_leave(0),
    ]
    for change in leaves:
        with pytest.raises(TooManySeatChanges) as caught:
            change()
        assert caught.value.code == "too_many_seat_changes"
    assert (game.version, game.names) == (version, names)
    # The rules' own refusals come first, as before: a seat that is not taken is not taken.
    with pytest.raises(DomainError) as not_taken:
        game.leave(3)
    assert not_taken.value.code == "illegal_action"
    # A closing account's seat is given back all the same (once per account).
    game.leave(0, closing=True)
    assert game.names[0] is None and game.seat_changes == MAX_SEAT_CHANGES + 2
    game.join("Cy", draw=draw)
    game.join("Dee", draw=draw)  # the lobby fills, and the game starts
    assert game.status == "in_progress"


def test_a_snapshot_from_before_the_count_counts_a_lobbys_events() -> None:
    """A game restored from a snapshot that has no count (taken before it existed) counts
    every event after its creation while it waits: a lobby records seat changes only."""
    game = lobby_game(3)
    draw = dice(game)
    for _ in range(30):
        game.leave(game.join("Ann", draw=draw))
    game.join("Ann", draw=draw)
    counted = game.seat_changes
    del game.__dict__["_seat_changes"]
    assert game.seat_changes == counted == game.version - 1
    game.join("Bob", draw=draw)
    assert game.seat_changes == counted + 1


def test_a_history_past_the_cap_replays_and_audits() -> None:
    """The audit replays what was recorded: a game stored before the rule, with more seat
    changes than the cap, is valid, and so is a closing account's seat given back past it."""
    game = lobby_game(3)
    draw = dice(game)
    game.join("Ann", draw=draw)
    for _ in range(MAX_SEAT_CHANGES):
        game.trigger_event(Game.SeatJoined, seat=1, name="Bob", bot=None, account=None)
        game.trigger_event(Game.SeatLeft, seat=1)
    with pytest.raises(TooManySeatChanges):
        game.leave(0)
    game.leave(0, closing=True)
    records = event_records(game.pending_events)
    assert replayed(game).seat_changes == 2 * MAX_SEAT_CHANGES + 2
    verdict = audit_records(records)
    assert verdict["valid"] is True, verdict


# ------------------------------------------------------------------- rated games, in the domain
@PROPERTY
@given(bot_seats=st.lists(st.booleans(), min_size=2, max_size=4))
def test_a_rated_game_needs_a_persons_account(bot_seats: list[bool]) -> None:
    players: list[Any] = [
        {"name": f"bot{seat}", "bot": f"bot{seat}"} if bot else f"p{seat}"
        for seat, bot in enumerate(bot_seats)
    ]
    accounts = [None if bot else f"acct{seat}" for seat, bot in enumerate(bot_seats)]
    setup = NewGame(players=players, accounts=accounts, rated=True, clock=CLOCK)
    draw = functools.partial(fairness.draw, SEED, "check")
    if all(bot_seats):
        with pytest.raises(InvalidRequest):
            Game.start(uuid.uuid4(), setup, server_seed=SEED, draw=draw)
    else:
        game = Game.start(uuid.uuid4(), setup, server_seed=SEED, draw=draw)
        assert game.rated and game.status == "in_progress"


def test_a_rated_lobby_is_not_filled_by_bots_alone() -> None:
    game = lobby_game(2, rated=True)
    draw = dice(game)
    game.join("random", draw=draw, bot="random")
    with pytest.raises(InvalidRequest):
        game.join("expert", draw=draw, bot="expert")
    assert game.status == "waiting" and game.version == 2
    game.join("ann", draw=draw, account="ann")
    assert game.status == "in_progress"


def test_a_rated_game_of_bots_recorded_before_the_rule_still_audits() -> None:
    """The rule is for games made from now on: a replay (the audit) creates what was recorded."""
    setup = NewGame(
        players=[{"name": "random", "bot": "random"}, {"name": "expert", "bot": "expert"}],
        rated=True,
        clock=CLOCK,
        client_seed="old",
    )
    stamp = datetime.now(UTC)
    draw = functools.partial(fairness.draw, SEED, "old")
    with pytest.raises(InvalidRequest):  # made now: refused
        Game.start(uuid.uuid4(), setup, server_seed=SEED, draw=draw)
    game = Game.start(
        uuid.uuid4(),
        setup,
        server_seed=SEED,
        draw=draw,
        times=deque([stamp, stamp]),
    )
    verdict = audit_records(event_records(game.collect_events()))
    assert verdict["valid"] is True, verdict


# ------------------------------------------------------------------------ through the API
def churn(client: FlaskClient, game_id: str, keep: str, kind: str, upto: int) -> Json:
    """Seat 1 taken and given back (a person's seat, or a bot's with ``keep``'s token) until
    the lobby has recorded ``upto`` seat changes, the last a join that stays seated."""
    while True:
        changes = ok(client.get(f"/v1/games/{game_id}"))["version"] - 1  # a lobby's: all seats
        if kind == "bot":
            body, headers = {"bot": "random"}, bearer(keep)
        else:
            body, headers = {"name": "Bob"}, {}
        joined: Json = ok(
            client.post(f"/v1/games/{game_id}/players", json=body, headers=headers), 201
        )
        assert joined["seat"] == 1
        if changes + 1 == upto:
            return joined
        assert changes + 1 < upto, "upto has the other parity: seat 0 is taken first"
        token = keep if kind == "bot" else joined["token"]
        ok(client.delete(f"/v1/games/{game_id}/players/1", headers=bearer(token)))


@pytest.mark.parametrize("kind", ["person", "bot"])
def test_the_cap_refuses_leaves_records_nothing_and_the_lobby_fills(
    client: FlaskClient, kind: str
) -> None:
    created = ok(client.post("/v1/games", json={"seats": 3}), 201)
    game_id = created["game"]["id"]
    ann = ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Ann"}), 201)["token"]
    last = churn(client, game_id, ann, kind, MAX_SEAT_CHANGES)
    state = ok(client.get(f"/v1/games/{game_id}"))
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES == state["version"] - 1
    assert state["status"] == "waiting"
    leaver = ann if kind == "bot" else last["token"]
    attempts = [
        client.delete(f"/v1/games/{game_id}/players/{last['seat']}", headers=bearer(leaver)),
        client.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann)),
    ]
    for attempt in attempts:
        refused(attempt, 409, "too_many_seat_changes")
    assert ok(client.get(f"/v1/games/{game_id}")) == state  # nothing recorded
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES
    if kind == "person":  # the seat refused to be given back is still held by its token
        seat = ok(client.get(f"/v1/games/{game_id}/seat", headers=bearer(last["token"])))
        assert seat == {"seat": last["seat"]}
    # Its last seat is still taken: nobody freezes the lobby, it fills and starts.
    joined = ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Cy"}), 201)
    assert joined["game"]["status"] == "in_progress"
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES + 1


@pytest.mark.parametrize("kind", ["person", "bot"])
def test_a_lobby_filled_by_its_last_allowed_change_starts_and_plays(
    client: FlaskClient, kind: str
) -> None:
    created = ok(client.post("/v1/games", json={"seats": 4}), 201)
    game_id = created["game"]["id"]
    ann = ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Ann"}), 201)["token"]
    second = churn(client, game_id, ann, kind, MAX_SEAT_CHANGES - 2)
    cy = ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Cy"}), 201)
    dee = ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Dee"}), 201)
    game = dee["game"]
    assert game["status"] == "in_progress", game
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES
    tokens = {0: ann, 2: cy["token"], 3: dee["token"]}
    if kind == "person":
        tokens[1] = second["token"]

    def act(seat: int, action: Json) -> Json:
        reply = client.post(
            f"/v1/games/{game_id}/actions", json=action, headers=bearer(tokens[seat])
        )
        state: Json = ok(reply)["game"]
        return state

    for _ in range(4):  # people's turns: roll, move, stop (or bust); a bot's, the scheduler's
        seat = game["turn"]["player"]
        if seat not in tokens:
            break
        game = act(seat, {"type": "roll"})
        moves = [a for a in game["legal_actions"] if a["type"] == "move"]
        if moves and game["turn"]["player"] == seat:
            act(seat, {"type": "move", "sums": moves[0]["sums"]})
            game = act(seat, {"type": "stop"})
    act(0, {"type": "resign"})
    act(2, {"type": "resign"})
    game = act(3, {"type": "resign"})
    assert game["status"] == "finished" and game["winner"] == 1
    assert ok(client.get(f"/v1/games/{game_id}/audit"))["valid"] is True


def test_a_rated_lobbys_creator_cannot_leave_and_rejoin_for_ever(client: FlaskClient) -> None:
    """The reported case: the creator of a rated lobby leaves and takes their seat again."""
    ann = sign_up(client, "ann")
    created = client.post(
        "/v1/games", json={"seats": 2, "rated": True, "clock": CLOCK}, headers=bearer(ann)
    )
    game_id = ok(created, 201)["game"]["id"]
    for _ in range((MAX_SEAT_CHANGES - 1) // 2):
        ok(client.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann)))
        ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(ann)), 201)
    ok(client.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann)))
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES
    ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(ann)), 201)
    refused(  # seated for good: the game starts when its other seat is taken
        client.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann)),
        409,
        "too_many_seat_changes",
    )
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES + 1


def test_a_closing_account_gives_its_seat_back_past_the_cap(client: FlaskClient) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    created = client.post("/v1/games", json={"seats": 3}, headers=bearer(ann))
    game_id = ok(created, 201)["game"]["id"]
    churn_by = bearer(bob)
    for _ in range((MAX_SEAT_CHANGES - 1) // 2):
        ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=churn_by), 201)
        ok(client.delete(f"/v1/games/{game_id}/players/1", headers=churn_by))
    ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=churn_by), 201)
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES
    for token in (ann, bob):
        refused(
            client.delete(f"/v1/games/{game_id}/players/{token == bob:d}", headers=bearer(token)),
            409,
            "too_many_seat_changes",
        )
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    left = ok(client.get(f"/v1/games/{game_id}"))
    assert left["players"][0]["account"] is None and left["status"] == "waiting"
    assert left["players"][1]["account"] == "bob"
    assert seat_events(client, game_id) == MAX_SEAT_CHANGES + 1
    carl = sign_up(client, "carl")
    taken = ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(carl)), 201)
    assert taken["seat"] == 0  # the lobby still takes its open seats
    refused(
        client.delete(f"/v1/games/{game_id}/players/0", headers=bearer(carl)),
        409,
        "too_many_seat_changes",
    )
    assert ok(client.get(f"/v1/games/{game_id}/audit"))["valid"] is True


def test_a_game_stored_past_the_cap_loads_replays_and_refuses_more(
    client: FlaskClient, app: Flask
) -> None:
    """A lobby stored before the rule with 2 x 120 + 1 seat changes (its events built
    directly): it loads, its events and audit read, and it gives no seat back (but takes one)."""
    rt = app.extensions["cantstop"]
    game_id = uuid.uuid4()
    game = Game.start(game_id, NewGame(seats=3), server_seed=SEED)
    game.trigger_event(Game.SeatJoined, seat=0, name="Ann", bot=None, account=None)
    for _ in range(120):
        game.trigger_event(Game.SeatJoined, seat=1, name="Bob", bot=None, account=None)
        game.trigger_event(Game.SeatLeft, seat=1)
    del game.__dict__["_seat_changes"]  # as an aggregate of the code before the count
    vault = Vault(game_id=game_id, server_seed=SEED)
    ann = new_token()
    vault.issue(0, token_hash(ann))
    rt.games.store.save(game, vault)
    gid = str(game_id)
    state = ok(client.get(f"/v1/games/{gid}"))
    assert state["status"] == "waiting" and state["version"] == 242
    assert seat_events(client, gid) == 241
    assert ok(client.get(f"/v1/games/{gid}/audit"))["valid"] is True
    refused(
        client.delete(f"/v1/games/{gid}/players/0", headers=bearer(ann)),
        409,
        "too_many_seat_changes",
    )
    assert ok(client.get(f"/v1/games/{gid}"))["version"] == 242
    assert rt.games.game(game_id).seat_changes == 241
    ok(client.post(f"/v1/games/{gid}/players", json={"name": "Cy"}), 201)
    assert rt.games.game(game_id).seat_changes == 242


# ------------------------------------------------------------------ rated games, through the API
BOTS_ONLY = [{"name": "Randy", "bot": "random"}, {"name": "Xavier", "bot": "expert"}]


def test_an_anonymous_rated_game_of_built_in_bots_is_refused(client: FlaskClient) -> None:
    before = ok(client.get("/v1/games"))["total"]
    body = {"players": BOTS_ONLY, "rated": True, "clock": {"turn_seconds": 60}}
    answer = refused(client.post("/v1/games", json=body), 422, "invalid_request")
    assert "person's account" in answer["detail"], answer  # this rule, not another
    ann = sign_up(client, "ann")  # signed in, still no person seated: refused all the same
    refused(client.post("/v1/games", json=body, headers=bearer(ann)), 422, "invalid_request")
    assert ok(client.get("/v1/games"))["total"] == before
    unrated = ok(client.post("/v1/games", json={"players": BOTS_ONLY}), 201)  # as before
    assert unrated["game"]["rated"] is False


def test_rated_games_with_a_person_and_a_bot_are_made_as_before(client: FlaskClient) -> None:
    ann = sign_up(client, "ann")
    made = client.post(
        "/v1/games",
        json={
            "players": [{"account": "ann"}, {"name": "R", "bot": "random"}],
            "rated": True,
            "clock": CLOCK,
        },
        headers=bearer(ann),
    )
    created = ok(made, 201)
    game = created["game"]
    assert game["rated"] is True
    assert [p["account"] for p in game["players"]] == ["ann", "random"]
    # Its rematch (a finished game's, its bot seated at once) still starts.
    seat_token = created["seats"][0]["token"]
    resign = {"type": "resign"}
    ok(client.post(f"/v1/games/{game['id']}/actions", json=resign, headers=bearer(seat_token)))
    rematch = ok(client.post(f"/v1/games/{game['id']}/rematch", headers=bearer(seat_token)), 201)
    assert rematch["game"]["status"] == "in_progress"
    assert rematch["game"]["players"][1]["bot"] == "random"
    # A challenge to a built-in bot makes a rated game with the challenger's account seated.
    challenge = client.post(
        "/v1/challenges", json={"to": "expert", "rated": True, "clock": CLOCK}, headers=bearer(ann)
    )
    made_by = ok(challenge, 201)
    assert made_by["status"] == "accepted"
    played = ok(client.get(f"/v1/games/{made_by['game_id']}"))
    assert played["rated"] is True
    assert [p["account"] for p in played["players"]] == ["ann", "expert"]
