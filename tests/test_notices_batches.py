"""The notices view writes the same notices whether it reads a game's events one batch at a time
or all in one: it reads its rows of the games once a batch and keeps them as it changes them
(service/application/notify/notices.py, ``NoticesView._games``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.persistence.tables import Sql
from tests.support.http import bearer
from tests.support.rated import act, play_a_turn, rated_pair, seat_tokens

Json = dict[str, Any]
PASSWORD = "correct horse battery"
TURN_ENDS = {"TurnStopped", "TurnBusted", "TurnTimedOut"}


def sign_up(client: FlaskClient, handle: str) -> str:
    reply = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def expected(events: list[Json], accounts: dict[int, str]) -> dict[str, list[tuple[Any, ...]]]:
    """The notices each account should have of the game, from its events (the contract's
    list: game_started to each seat and your_turn to the first, your_turn at each turn's end to
    the next, game_finished to each seat)."""
    out: dict[str, list[tuple[Any, ...]]] = {handle: [] for handle in accounts.values()}
    for event in events:
        kind, version, data = event["type"], event["version"], event["data"]
        if kind == "TurnOrderDecided":
            for seat, handle in accounts.items():
                out[handle].append(("game_started", version, seat))
            first = data["first_player"]
            out[accounts[first]].append(("your_turn", version, first))
        elif kind in TURN_ENDS or kind == "PlayerResigned":
            following = data["next_player"]
            if following is not None:
                out[accounts[following]].append(("your_turn", version, following))
        elif kind == "GameFinished":
            for seat, handle in accounts.items():
                out[handle].append(("game_finished", version, seat))
    return out


def notices_of(app: Flask, handle: str, game_id: str) -> list[tuple[Any, ...]]:
    notices = app.extensions["cantstop"].notices
    notices.latest(handle)  # the view caught up (``after`` reads it as it stands)
    found = notices.after(handle, 0, 10_000)
    return [
        (n.type, n.data["version"], n.data["seat"])
        for n in found
        if n.data.get("game_id") == game_id
    ]


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "event-by-event"])
def test_a_games_notices_are_the_same_in_one_batch_as_event_by_event(
    app: Flask, client: FlaskClient, one_batch: bool
) -> None:
    tokens = {"ann": sign_up(client, "ann"), "bob": sign_up(client, "bob")}
    notices = app.extensions["cantstop"].notices

    def caught_up() -> None:
        if not one_batch:  # the view moved on after each action: a batch or two of events
            notices.latest("ann")

    game = rated_pair(client, tokens, "ann", "bob")  # a creation, then a seat joined
    caught_up()
    by_seat = seat_tokens(game, tokens)
    for _ in range(5):
        game = play_a_turn(client, game, by_seat)
        caught_up()
    game = act(client, game["id"], by_seat[game["turn"]["player"]], {"type": "resign"})
    assert game["status"] == "finished"
    events = client.get(f"/v1/games/{game['id']}/events").get_json()["events"]
    want = expected(events, {seat: handle for handle, seat in _seats(game).items()})
    assert sum(len(v) for v in want.values()) >= 8  # started x2, turns, finished x2
    for handle in ("ann", "bob"):
        assert notices_of(app, handle, game["id"]) == want[handle]


def _seats(game: Json) -> dict[str, int]:
    return {p["account"]: p["seat"] for p in game["players"]}


def test_a_resignation_out_of_turn_tells_no_one_whose_turn_it_was_already(
    app: Flask, client: FlaskClient
) -> None:
    """The view caught up while the first seat was to act; then, in one batch, that seat ends
    its turn and resigns out of turn: the view's row of the game, read at the batch's start,
    said it was that seat's turn, and the batch moved it on, so nobody is told again."""
    tokens = {h: sign_up(client, h) for h in ("ann", "bob", "cid")}
    lobby = client.post("/v1/games", json={"seats": 3}, headers=bearer(tokens["ann"]))
    assert lobby.status_code == 201, lobby.get_json()
    game_id = lobby.get_json()["game"]["id"]
    for handle in ("bob", "cid"):
        joined = client.post(
            f"/v1/games/{game_id}/players", json={}, headers=bearer(tokens[handle])
        )
        assert joined.status_code == 201, joined.get_json()
        game = joined.get_json()["game"]
    app.extensions["cantstop"].notices.latest("ann")  # the view: the first seat is to act
    by_seat = seat_tokens(game, tokens)
    first = game["turn"]["player"]
    game = play_a_turn(client, game, by_seat)
    to_act = game["turn"]["player"]
    assert to_act != first
    game = act(client, game_id, by_seat[first], {"type": "resign"})
    assert game["status"] == "in_progress" and game["turn"]["player"] == to_act
    events = client.get(f"/v1/games/{game_id}/events").get_json()["events"]
    seats = {seat: handle for handle, seat in _seats(game).items()}
    want = expected(events, seats)
    # The resignation out of turn names the same next player: the view tells no one again.
    resigned = next(e for e in events if e["type"] == "PlayerResigned")
    assert resigned["data"]["next_player"] == to_act
    want[seats[to_act]].remove(("your_turn", resigned["version"], to_act))
    for handle in seats.values():
        assert notices_of(app, handle, game_id) == want[handle]


def test_a_batch_writes_its_notices_in_a_few_statements_however_many_turns_it_holds(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's notices, the accounts' newest numbers and whose turn it is are gathered as
    its events are read and written at its end (``Changes``): on PostgreSQL each statement of
    the worker's was a round trip, four a turn where accounts sit; and a rebuild where they
    sit in most games writes a notice for most turns."""
    tokens = {"ann": sign_up(client, "ann"), "bob": sign_up(client, "bob")}
    notices = app.extensions["cantstop"].notices
    game = rated_pair(client, tokens, "ann", "bob")
    notices.latest("ann")
    by_seat = seat_tokens(game, tokens)
    for _ in range(8):
        game = play_a_turn(client, game, by_seat)
    statements: list[str] = []
    execute, many = Sql.execute, Sql.many

    def counted_execute(self: Sql, sql: str, params: Any = ()) -> None:
        if "{" in sql:  # the view's own tables (not the tracking rows)
            statements.append(sql)
        execute(self, sql, params)

    def counted_many(self: Sql, sql: str, rows: Any) -> None:
        if rows:  # (none: nothing is sent)
            statements.append(sql)
        many(self, sql, rows)

    monkeypatch.setattr(Sql, "execute", counted_execute)
    monkeypatch.setattr(Sql, "many", counted_many)
    notices.latest("ann")  # the eight turns' ends, in one batch
    monkeypatch.undo()
    events = client.get(f"/v1/games/{game['id']}/events").get_json()["events"]
    want = expected(events, {seat: handle for handle, seat in _seats(game).items()})
    for handle in ("ann", "bob"):
        assert notices_of(app, handle, game["id"]) == want[handle]
    assert sum(len(v) for v in want.values()) >= 10
    # the batch's number, the games' rows, a head per account, and four writes at the end
    assert len(statements) <= 10, statements


def _games_rows(app: Flask) -> list[tuple[Any, ...]]:
    rt = app.extensions["cantstop"]
    rt.notices.latest("ann")  # the view caught up

    def rows(sql: Sql) -> list[tuple[Any, ...]]:
        query = "SELECT game_id, seats, rated, accounts, current FROM {games} ORDER BY game_id"
        columns = ("game_id", "seats", "rated", "accounts", "current")
        return [tuple(row[c] for c in columns) for row in sql.all(query)]

    found: list[tuple[Any, ...]] = rt.views.read(rt.notices_view, rows)
    return found


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "event-by-event"])
def test_the_games_rows_are_as_the_games_stand_whether_read_in_one_batch_or_not(
    app: Flask, client: FlaskClient, one_batch: bool
) -> None:
    """The view's rows of the games not finished (who sits where, whose turn it is) are
    written at a batch's end (``Changes.write``), not an event at a time: a game created,
    joined, left, played and finished within one batch ends as it does event by event."""
    tokens = {h: sign_up(client, h) for h in ("ann", "bob", "cid")}
    notices = app.extensions["cantstop"].notices

    def caught_up() -> None:
        if not one_batch:
            notices.latest("ann")

    lobby = client.post("/v1/games", json={"seats": 3}, headers=bearer(tokens["ann"]))
    assert lobby.status_code == 201, lobby.get_json()
    waiting = lobby.get_json()["game"]["id"]
    caught_up()
    joined = client.post(f"/v1/games/{waiting}/players", json={}, headers=bearer(tokens["bob"]))
    assert joined.status_code == 201, joined.get_json()
    caught_up()
    left = client.delete(f"/v1/games/{waiting}/players/1", headers=bearer(tokens["bob"]))
    assert left.status_code == 200, left.get_json()
    caught_up()
    playing = rated_pair(client, tokens, "ann", "cid")
    caught_up()
    by_seat = seat_tokens(playing, tokens)
    for _ in range(3):
        playing = play_a_turn(client, playing, by_seat)
        caught_up()
    ended = rated_pair(client, tokens, "bob", "cid")
    caught_up()
    ended = act(client, ended["id"], seat_tokens(ended, tokens)[0], {"type": "resign"})
    assert ended["status"] == "finished"
    guests = client.post("/v1/games", json={"players": ["Ann", "Bob"]})
    assert guests.status_code == 201, guests.get_json()
    rows = _games_rows(app)
    assert rows == sorted(
        [
            (waiting, 3, 0, json.dumps(["ann", None, None]), None),
            (playing["id"], 2, 1, json.dumps(_accounts(playing)), playing["turn"]["player"]),
            (guests.get_json()["game"]["id"], 2, 0, json.dumps([None, None]), None),
        ]
    )


def _accounts(game: Json) -> list[str | None]:
    return [p["account"] for p in sorted(game["players"], key=lambda p: p["seat"])]
