"""openapi.yaml types every event: each event type the domain defines has a schema for its
``data``, ``Event`` is a ``oneOf`` discriminated by ``type`` over them, and the events of real
recorded games of every kind (multiplayer, solitaire, variants, lobbies, bots, resignations,
timeouts, abandoned, imported, accounts and rated) validate against their own type's schema and
carry no field the schema does not name.

The validator is openapi-core's own (openapi-schema-validator, JSON Schema 2020-12 as OpenAPI 3.1
uses it), the one tests/conftest.py checks every response with.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.game import Game, parse_at
from service.config import Settings
from service.http.app import create_app
from tests.support.games import choose, history
from tests.support.http import bearer, ok
from tests.support.spec import load_spec, validator

Json = dict[str, Any]
SCHEMAS = "#/components/schemas/"
PASSWORD = "correct horse battery"


def domain_event_types() -> set[str]:
    """Every event the Game aggregate records: its event classes that say how they change a
    game (``update``). The library's ``Created``, which it derives for every aggregate, is
    never triggered (games start with ``GameCreated``)."""
    return {
        name
        for name, value in vars(Game).items()
        if isinstance(value, type)
        and issubclass(value, Game.Event)
        and value is not Game.Event
        and "update" in vars(value)
    }


def test_every_domain_event_type_has_a_schema_in_the_discriminated_union() -> None:
    spec = load_spec()
    schemas = spec["components"]["schemas"]
    event = schemas["Event"]
    mapping = event["discriminator"]["mapping"]
    assert event["discriminator"]["propertyName"] == "type"
    types = domain_event_types()
    assert len(types) >= 13
    assert set(mapping) == types
    assert sorted(v["$ref"] for v in event["oneOf"]) == sorted(mapping.values())
    for kind, ref in mapping.items():
        variant = schemas[ref.removeprefix(SCHEMAS)]
        assert variant["properties"]["type"] == {"type": "string", "const": kind}
        assert set(variant["required"]) == {"version", "type", "at", "data", "prev_hash", "hash"}
        data = variant["properties"]["data"]["$ref"].removeprefix(SCHEMAS)
        assert schemas[data]["type"] == "object" and schemas[data]["properties"], kind
        # Every field the event class declares is named by its data schema.
        declared = set(getattr(Game, kind).__annotations__)
        assert declared <= set(schemas[data]["properties"]), (kind, declared)


# ------------------------------------------------------------------------------ recorded games
class Recorder:
    """An app on a fresh SQLite store whose clock-driven work (bots' turns, timeouts,
    abandonment) the test runs by calling its timekeeper with the time it chooses."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.client: FlaskClient = app.test_client()
        self.rt = app.extensions["cantstop"]
        self.games: list[str] = []

    def create(self, body: Json, token: str | None = None) -> Json:
        headers = bearer(token) if token else {}
        created: Json = ok(self.client.post("/v1/games", json=body, headers=headers), 201)
        self.games.append(created["game"]["id"])
        return created

    def state(self, game_id: str) -> Json:
        state: Json = ok(self.client.get(f"/v1/games/{game_id}"))
        return state

    def act(self, game_id: str, token: str, action: Json) -> Json:
        path = f"/v1/games/{game_id}/actions"
        state: Json = ok(self.client.post(path, json=action, headers=bearer(token)))["game"]
        return state

    def tick(self, game_id: str, now: datetime) -> None:
        self.rt.timekeeper.tick(uuid.UUID(game_id), now)

    def play_out(
        self, game_id: str, tokens: dict[int, str], entropy: bool = False, turns: int = 0
    ) -> Json:
        """People play ``choose`` but stop only after three moves in a turn (a steep hill's
        first move in a column makes no progress), with entropy in rolls if asked; bots play
        when ticked. To the end, or for ``turns`` turns if given."""
        state = self.state(game_id)
        moved: dict[int, int] = {}  # turn number -> moves played in it
        for n in range(3000):
            if state["status"] == "finished" or (turns and state["turn"]["number"] > turns):
                return state
            seat = state["turn"]["player"]
            if seat in tokens:
                action = choose(state)
                number = state["turn"]["number"]
                if action["type"] == "stop" and moved.get(number, 0) < 3:
                    action = {"type": "roll"}
                moved[number] = moved.get(number, 0) + (action["type"] == "move")
                if entropy and action["type"] == "roll":
                    action = {**action, "entropy": f"coin-{n}"}
                state = self.act(game_id, tokens[seat], action)
            else:
                self.tick(game_id, datetime.now(UTC))
                state = self.state(game_id)
        raise AssertionError(f"game {game_id} did not finish")


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'events.sqlite'}", bot_pause=0, abandon_after=3600
    )
    app = create_app(settings, create_tables=True)
    yield Recorder(app)
    app.extensions["cantstop"].close()


def record_games_of_every_kind(r: Recorder) -> None:
    client = r.client
    short = {"columns_to_win": 1}

    # Multiplayer, server dice, a seed committed beforehand and entropy in every roll.
    commitment = ok(client.post("/v1/seed-commitments"), 201)["seed_commitment"]
    created = r.create(
        {
            "players": ["Ann", "Bob", "Cy"],
            "rules": short,
            "seed_commitment": commitment,
            "client_seed": "ann-42",
        }
    )
    r.play_out(created["game"]["id"], dict(enumerate(s["token"] for s in created["seats"])), True)

    # Solitaire: easy, with table dice chosen to climb one column a turn, to the end (won);
    # advanced (a bust wipes markers), with server dice, for a few turns.
    created = r.create({"players": ["Sol"], "dice": "manual"})
    game_id, token = created["game"]["id"], created["seats"][0]["token"]
    for column in range(2, 13):
        low = max(1, column - 6)
        state = r.state(game_id)
        height = state["columns"][column - 2]["height"]
        while state["turn"]["runners"].get(str(column), 0) < height:
            state = r.act(game_id, token, {"type": "roll", "dice": [low, column - low] * 2})
            climbs = [a for a in state["legal_actions"] if set(a["sums"]) == {column}]
            state = r.act(game_id, token, max(climbs, key=lambda a: len(a["sums"])))
        r.act(game_id, token, {"type": "stop"})
    assert r.state(game_id)["winner"] == 0
    created = r.create({"players": ["Sol"], "rules": {"solitaire": "advanced"}})
    r.play_out(created["game"]["id"], {0: created["seats"][0]["token"]}, turns=8)

    # Variants: 8-sided dice, steep hill, jumping; and the forced move with manual dice.
    created = r.create(
        {"players": ["Ann", "Bob"], "rules": {**short, "dice_faces": 8, "steep_hill": True}}
    )
    r.play_out(created["game"]["id"], dict(enumerate(s["token"] for s in created["seats"])))
    created = r.create({"players": ["Ann", "Bob"], "rules": {**short, "jumping": True}})
    r.play_out(created["game"]["id"], dict(enumerate(s["token"] for s in created["seats"])))
    created = r.create(
        {"players": ["Ann", "Bob"], "dice": "manual", "rules": {"forced_move": True}}
    )
    game_id, tokens = created["game"]["id"], [s["token"] for s in created["seats"]]
    for dice in ([3, 4, 2, 6], [1, 1, 1, 1], [1, 5, 4, 6]):
        seat = r.state(game_id)["turn"]["player"]
        state = r.act(game_id, tokens[seat], {"type": "roll", "dice": dice})
        if state["turn"]["phase"] == "move":
            state = r.act(game_id, tokens[state["turn"]["player"]], state["legal_actions"][0])
            r.act(game_id, tokens[state["turn"]["player"]], {"type": "stop"})

    # Bots: a person against two computer players, played by the timekeeper.
    created = r.create(
        {
            "players": ["Ann", {"name": "Robo", "bot": "random"}, {"name": "Ex", "bot": "expert"}],
            "rules": short,
        }
    )
    r.play_out(created["game"]["id"], {0: created["seats"][0]["token"]})

    # Resignations: one mid-game, then the last but one (the last player wins).
    created = r.create({"players": ["Ann", "Bob", "Cy"]})
    game_id, tokens = created["game"]["id"], [s["token"] for s in created["seats"]]
    first = created["game"]["turn"]["player"]
    r.act(game_id, tokens[first], {"type": "resign"})
    r.act(game_id, tokens[(first + 1) % 3], {"type": "resign"})

    # Timeouts: a clocked game whose players never act; the third in a row resigns a seat.
    created = r.create({"players": ["Ann", "Bob"], "dice": "manual", "clock": {"turn_seconds": 5}})
    game_id = created["game"]["id"]
    for _ in range(10):
        state = r.state(game_id)
        if state["status"] == "finished":
            break
        r.tick(game_id, parse_at(state["turn"]["deadline"]))
    assert r.state(game_id)["finish_reason"] == "last_player"

    # Accounts: a rated game against a bot; a lobby joined, left, given a bot, then resigned.
    ann = ok(client.post("/v1/accounts", json={"handle": "ann", "password": PASSWORD}), 201)
    bob = ok(client.post("/v1/accounts", json={"handle": "bob", "password": PASSWORD}), 201)
    created = r.create(
        {
            "players": [{"account": "ann"}, {"name": "Robo", "bot": "random"}],
            "rated": True,
            "clock": {"turn_seconds": 3600},
            "rules": short,
        },
        ann["token"],
    )
    r.play_out(created["game"]["id"], {0: ann["token"]})
    created = r.create({"seats": 3}, ann["token"])
    game_id = created["game"]["id"]
    ok(client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(bob["token"])), 201)
    ok(client.delete(f"/v1/games/{game_id}/players/1", headers=bearer(bob["token"])))
    ok(client.post(f"/v1/games/{game_id}/players", json={"name": "Cy"}), 201)
    bot = {"name": "Robo", "bot": "rule-of-28"}
    ok(client.post(f"/v1/games/{game_id}/players", json=bot, headers=bearer(ann["token"])), 201)
    assert r.state(game_id)["status"] == "in_progress"
    r.act(game_id, ann["token"], {"type": "resign"})

    # Imported: the first game's export, and a transcript.
    export = client.get(f"/v1/games/{r.games[0]}/export").get_data()
    imported = client.post(
        "/v1/games/import", data=export, headers={"Content-Type": "application/x-ndjson"}
    )
    r.games.append(ok(imported, 201)["game"]["id"])
    transcript = {
        "players": ["Ann", "Bob"],
        "actions": [{"type": "roll", "dice": [3, 4, 2, 6]}, {"type": "resign", "seat": 1}],
    }
    imported = client.post("/v1/games/import", json={"transcript": transcript})
    r.games.append(ok(imported, 201)["game"]["id"])

    # Abandoned, last (the time moved on ends every game still open): a game in progress.
    created = r.create({"players": ["Ann", "Bob"]})
    r.tick(created["game"]["id"], datetime.now(UTC) + timedelta(hours=2))


def test_served_events_of_every_kind_of_game_validate_against_their_own_schema(
    recorder: Recorder,
) -> None:
    record_games_of_every_kind(recorder)
    spec = load_spec()
    schemas = spec["components"]["schemas"]
    mapping = schemas["Event"]["discriminator"]["mapping"]
    union = validator(spec, "Event")
    own = {kind: validator(spec, ref.removeprefix(SCHEMAS)) for kind, ref in mapping.items()}
    seen: dict[str, int] = {}
    for game_id in recorder.games:
        events = history(recorder.client, game_id)
        assert events and events[-1]["version"] == len(events)
        for event in events:
            kind = event["type"]
            assert kind in mapping, kind
            own[kind].validate(event)
            union.validate(event)
            variant = schemas[mapping[kind].removeprefix(SCHEMAS)]
            data_schema = schemas[variant["properties"]["data"]["$ref"].removeprefix(SCHEMAS)]
            undocumented = set(event["data"]) - set(data_schema["properties"])
            assert not undocumented, (kind, undocumented)
            seen[kind] = seen.get(kind, 0) + 1
    # The games above record every type the domain defines, so each schema met a real event.
    assert set(seen) == domain_event_types(), seen
