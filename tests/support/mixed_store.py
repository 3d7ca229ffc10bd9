"""A store of every kind of game the views tell apart, played by a simple policy, and every
row of a view's tables: what the rebuild and archive tests compare views by."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

from flask.testing import FlaskClient

from domain import strategies
from domain.commands import NewGame, Resign, parse_action
from domain.position import Position
from service.persistence.views import Sql, View, Views
from service.runtime import Runtime
from tests.support.rated import finished_rated_game, rated_pair, sign_up

EXPERT = strategies.get("expert")
# The notices' batch counter and each account's last batch number the batches, which a rebuild
# makes fewer of (so do the live view's small batches, many): every notice is the same.
BATCH_NUMBERS = {"batches": None, "heads": "stamp"}


def play(rt: Runtime, state: dict[str, Any], rng: random.Random, limit: int) -> dict[str, Any]:
    """Up to ``limit`` actions by the simple policy (a computer player's turn through the
    timekeeper), the expert's in solitaire: a game in progress, or over."""
    game_id = uuid.UUID(state["id"])
    for _ in range(limit):
        if state["status"] != "in_progress":
            break
        seat = state["turn"]["player"]
        if state["players"][seat]["bot"] is not None:
            rt.timekeeper.tick(game_id, datetime.now(UTC))
            state = rt.games.state(game_id)
            continue
        choice: Any
        if len(state["players"]) == 1:
            choice = EXPERT.choose(Position.from_game(rt.games.game(game_id)), rng)
        else:
            legal = state["legal_actions"]
            choice = parse_action(
                {"type": "stop"} if {"type": "stop"} in legal else rng.choice(legal)
            )
        state = rt.games.act(game_id, seat, choice).state
    return state


def a_mixed_store(rt: Runtime, client: FlaskClient) -> None:
    """Games of every kind the views tell apart: finished, in progress, lobbies waiting (empty
    or half full), with a clock, against a computer player, solitaire played to its end, rated
    games between accounts finished and under way, an account's seat left and taken again
    (by the account, by a guest) before the game is played."""
    rng = random.Random(7)
    tokens = {handle: sign_up(client, handle) for handle in ("ann", "bob")}
    finished_rated_game(client, tokens)
    rated_pair(client, tokens, "bob", "ann")
    again = uuid.UUID(rt.games.create(NewGame(seats=3))[0]["id"])
    left = rt.lobby.join(again, "ann", token=tokens["ann"]).seat
    rt.lobby.leave(again, left.seat, left.token)
    rt.lobby.join(again, "ann", token=tokens["ann"])
    rt.lobby.join(again, "Lee")
    play(rt, rt.lobby.join(again, "Max").state, rng, 30)
    gone = uuid.UUID(rt.games.create(NewGame(seats=2))[0]["id"])
    left = rt.lobby.join(gone, "bob", token=tokens["bob"]).seat
    rt.lobby.leave(gone, left.seat, left.token)
    rt.lobby.join(gone, "Ned")
    play(rt, rt.lobby.join(gone, "Oz").state, rng, 30)
    for _ in range(3):
        rt.games.create(NewGame(seats=2))
    half = uuid.UUID(rt.games.create(NewGame(seats=3))[0]["id"])
    rt.lobby.join(half, "Cleo")
    full = uuid.UUID(rt.games.create(NewGame(seats=2))[0]["id"])
    rt.lobby.join(full, "Dev")
    play(rt, rt.lobby.join(full, "Eve").state, rng, 12)
    for limit in (0, 9, 40):
        play(rt, rt.games.create(NewGame(players=["Finn", "Gus"]))[0], rng, limit)
    play(
        rt,
        rt.games.create(NewGame(players=["Hana", "Ivo"], clock={"turn_seconds": 60}))[0],
        rng,
        10,
    )
    bot = {"name": "Expert", "bot": "expert"}
    play(rt, rt.games.create(NewGame(players=["Jun", bot]))[0], rng, 15)
    resigned = rt.games.create(NewGame(players=["Ann", "Bob"]))[0]
    rt.games.act(uuid.UUID(resigned["id"]), 0, Resign())
    solo = play(
        rt, rt.games.create(NewGame(players=["Kim"], rules={"solitaire": "easy"}))[0], rng, 2000
    )
    assert solo["status"] == "finished"
    export = client.get(f"/v1/games/{solo['id']}/export").get_data()
    imported = client.post("/v1/games/import", data=export, content_type="application/x-ndjson")
    assert imported.status_code == 201


def tables(views: Views, view: View) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the view, in order, but the notices' batch numbers."""
    found = {}
    for short in view.tables:
        if view.name == "notices" and BATCH_NUMBERS.get(short, "") is None:
            continue
        skip = BATCH_NUMBERS.get(short) if view.name == "notices" else None

        def everything(sql: Sql, short: str = short) -> list[Any]:
            return sql.all(f"SELECT * FROM {{{short}}}")

        rows = views.read(view, everything, fresh=False)
        found[short] = sorted(
            tuple(sorted((k, v) for k, v in dict(row).items() if k != skip)) for row in rows
        )
    return found
