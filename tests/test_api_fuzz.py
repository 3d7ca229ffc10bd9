"""Schema-driven fuzzing (schemathesis): whatever a client sends, the API answers as documented.

Every documented operation gets generated requests, valid and invalid; then the state machine
follows the document's links (create a game, then read, join, act on, audit and export it). Each
answer must not be a 500, must have a documented status, content type, headers and body, must
refuse invalid data, must accept valid data, and must honour authentication.

Every check runs, with one narrow exception: ``positive_data_acceptance`` where a schema-valid
request is refused because of what the server holds, which no schema can know
(``refused_by_state``).

JSON Schema counts ``2.0`` as an integer; the service reads integers written as integers (as the
document says). Generated bodies are therefore sent with ``2.0`` written ``2``.
"""

from __future__ import annotations

import json
import random
import secrets
import tempfile
import uuid
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import positive_data_acceptance

from service.config import Settings
from service.http.app import create_app

Case = schemathesis.Case[Any]

# Built at import: schemathesis parametrizes from the schema at collection time (its
# fixture-based loader does not work under pytest 9). The store is a throwaway SQLite file.
_STORE = tempfile.TemporaryDirectory(prefix="cantstop-fuzz-")
# Metrics on: GET /metrics is documented, and answers as documented only when it is served.
app = create_app(
    Settings(database_url=f"sqlite:///{_STORE.name}/fuzz.sqlite", metrics=True), create_tables=True
)
schema = schemathesis.openapi.from_wsgi("/openapi.yaml", app)


# A player's name (openapi.yaml, PlayerName): its pattern spells out ~280,000 code points, which
# Hypothesis would expand one by one each time it builds a strategy (tens of seconds). The same
# names are drawn here from the Unicode categories the pattern lists; the pattern still filters.
_TRIMMED = st.text(st.sampled_from([chr(c) for c in range(0x3001) if chr(c).isspace()]), max_size=3)
_VISIBLE = st.characters(categories=["L", "M", "N", "P", "S"])
_WORDS = st.text(st.one_of(_VISIBLE, st.just(" ")), min_size=1, max_size=34).map(str.strip)
schemathesis.openapi.format(
    "player-name",
    st.tuples(_TRIMMED, _WORDS.filter(bool), _TRIMMED).map("".join),
)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    """An export body: text as it is, anything else as one JSON line."""
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8")


def whole_numbers(value: Any) -> Any:
    """``value`` with every integral float (``2.0``) written as the integer it is (``2``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    return value


def _json(response: Response, media_type: str) -> dict[str, Any]:
    """The response's JSON object when it is of ``media_type``, else ``{}``."""
    if response.headers.get("content-type", [""])[0].startswith(media_type):
        body = json.loads(response.content)
        if isinstance(body, dict):
            return body
    return {}


CREATING = frozenset(
    {"createGame", "rematch", "signUp", "createChallenge", "createSeek", "createWebhook"}
)


def refused_by_state(case: Case, response: Response) -> bool:
    """Whether a refusal of schema-valid data depends on what the server holds. Each one here is
    documented in openapi.yaml; the document cannot say it in a schema:

    - createGame: a ``seed_commitment`` the server never gave, or already used (422); a rated
      game whose seats are not all accounts (422: who is an account depends on the token);
    - act: ``If-Match`` naming another version (412 version_conflict); an Idempotency-Key already
      used for another action (422 idempotency_key_reused); a roll that does not fit the game's
      dice: dice or entropy its dice mode refuses (422 invalid_request), dice beyond its faces
      (422 invalid_dice);
    - joinGame: a computer player for a lobby with manual dice (422); a rated lobby joined
      without an account (422); joinGame and leaveGame:
      ``If-Match`` naming another version (412 version_conflict), as for act;
    - a creating POST (CREATING) with an Idempotency-Key: one used already for another request
      (422 idempotency_key_reused), or one under 16 characters sent without credentials (422);
    - getRecordSheet: a seat the game does not have, or none for a multiplayer game (422);
    - importGame: an export or transcript that does not verify (422 import_invalid: the hash
      chain and the rules judge it), or an NDJSON body that is no export (no schema describes an
      export's lines).
    """
    operation = case.operation.definition.raw.get("operationId")
    problem = _json(response, "application/problem+json")
    code, detail = problem.get("code"), str(problem.get("detail", ""))
    body = case.body if isinstance(case.body, dict) else {}
    if operation in CREATING and (
        code == "idempotency_key_reused"
        or (code == "invalid_request" and detail.startswith("without credentials, an Idempotency"))
    ):
        return True
    if operation == "createGame":
        if code == "invalid_request" and "rated game" in detail:
            return True
        return code == "invalid_request" and detail.startswith("unknown, expired or already used")
    if operation == "act":
        if response.status_code == 412:
            return code == "version_conflict"
        if code in ("idempotency_key_reused", "invalid_dice"):
            return True
        # "this game uses server dice: send {"type": "roll"} without dice", or "entropy is for
        # server dice: a manual roll carries its dice".
        return code == "invalid_request" and body.get("type") == "roll" and "server dice" in detail
    if operation in ("joinGame", "leaveGame") and response.status_code == 412:
        return code == "version_conflict"
    if operation == "joinGame":
        if code == "invalid_request" and "rated game" in detail:
            return True
        return code == "invalid_request" and detail.startswith("computer players play server-dice")
    if operation == "getRecordSheet":
        return code == "invalid_request" and "seat" in detail
    if operation == "importGame":
        ndjson = (case.media_type or "").startswith("application/x-ndjson")
        return code == "import_invalid" or (ndjson and code == "invalid_request")
    return False


def excluded_checks(case: Case, response: Response) -> list[Any]:
    excluded: list[Any] = []
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and response.status_code >= 400 and refused_by_state(case, response):
        excluded.append(positive_data_acceptance)
    return excluded


def call_and_validate(case: Case) -> Response:
    if isinstance(case.body, dict | list | float):
        case.body = whole_numbers(case.body)
    response = case.call()
    case.validate_response(response, excluded_checks=excluded_checks(case, response))
    return response


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case: Case) -> None:
    call_and_validate(case)


# ------------------------------------------------------------------------------ workflows
# Seat tokens the workflows were given (create and join answers), and whose turn it is, by game.
TOKENS: dict[str, dict[int, str]] = {}
TO_ACT: dict[str, int] = {}


class SeatToken:
    """In a game the workflows created or joined, an action is sent with the token of the seat
    to act, a seat is given back with its own token, and the seat a token holds is asked with
    one of the game's tokens: then the answer is the game's, and the
    auth checks send the request again without the token, and with a wrong one, to see it
    refused. Elsewhere the generated token stays (401)."""

    def get(self, case: Case, ctx: object) -> str | None:
        path = case.path_parameters or {}
        game = str(path.get("game_id"))
        seats = TOKENS.get(game, {})
        seat = path["seat"] if "seat" in path else TO_ACT.get(game, 0)
        return seats.get(seat) or next(iter(seats.values()), None)

    def set(self, case: Case, token: str, ctx: object) -> None:
        case.headers["Authorization"] = f"Bearer {token}"


schema.auth(refresh_interval=None).apply_to(operation_id=["act", "leaveGame", "whichSeat"])(
    SeatToken
)


def remember(case: Case, response: Response) -> None:
    """Keep the tokens a create or join answer gives (and forget one given back), and whose turn
    it is after any answer."""
    body = _json(response, "application/json") if response.status_code in (200, 201) else {}
    operation = case.operation.definition.raw.get("operationId")
    game = body if operation == "leaveGame" else body.get("game")
    if not isinstance(game, dict) or not isinstance(game.get("id"), str):
        return
    if operation == "leaveGame":
        TOKENS.get(game["id"], {}).pop(case.path_parameters["seat"], None)
    elif operation == "createGame":
        # A computer player's seat has no token.
        TOKENS[game["id"]] = {s["seat"]: s["token"] for s in body["seats"] if s["token"]}
    elif operation == "joinGame" and body["token"]:
        TOKENS.setdefault(game["id"], {})[body["seat"]] = body["token"]
    if isinstance(game.get("turn"), dict):
        TO_ACT[game["id"]] = game["turn"]["player"]


# The workflows follow the document's links only (no links inferred from names), and leave the
# stream out: a game's stream stays open until the game ends.
schema.config.phases.stateful.inference.algorithms = []


class Draws:
    """What the server draws at random that decides its answers (game ids, from which a game's
    client seed defaults, and server seeds, from which its dice come), from one generator that
    each workflow starts again. Seat tokens stay random: they decide nothing but who may act."""

    def __init__(self) -> None:
        self.random = random.Random(0)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.random.randbytes(16), version=4)

    def token_hex(self, nbytes: int | None = None) -> str:
        return self.random.randbytes(32 if nbytes is None else nbytes).hex()


DRAWS = Draws()


class Workflows(schema.exclude(operation_id="streamEvents").as_state_machine()):  # type: ignore[misc]
    """Each workflow runs on a server of its own (a fresh store) whose random draws start from
    the same seed: the same requests get the same answers. Hypothesis requires that: which rule
    it may pick next depends on the answers so far (a link is followed only from an answer with
    its status), and when it replays a prefix of its choices on a server whose answers differ
    (other dice after a roll, a store holding the last workflow's games), it stops with
    FlakyStrategyDefinition, which is no finding about the service."""

    # Scenarios start by creating things: an action or a join on a random id is the stateless
    # test's 404, not a workflow.
    RANDOM__POST_v1_games_game_id_actions = None
    RANDOM__POST_v1_games_game_id_players = None

    def setup(self) -> None:
        DRAWS.random.seed(0)
        TOKENS.clear()
        TO_ACT.clear()
        self.store = tempfile.TemporaryDirectory(prefix="cantstop-fuzz-")
        self.app: Flask = create_app(
            Settings(database_url=f"sqlite:///{self.store.name}/workflow.sqlite"),
            create_tables=True,
        )

    def teardown(self) -> None:
        self.app.extensions["cantstop"].close()
        self.store.cleanup()

    def get_call_kwargs(self, case: Case) -> dict[str, Any]:
        return {"app": self.app}

    def before_call(self, case: Case) -> None:
        if isinstance(case.body, dict | list | float):
            case.body = whole_numbers(case.body)

    def after_call(self, response: Response, case: Case) -> None:
        super().after_call(response, case)
        remember(case, response)

    def validate_response(
        self,
        response: Response,
        case: Case,
        additional_checks: list[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        case.validate_response(
            response,
            additional_checks=additional_checks,
            excluded_checks=excluded_checks(case, response),
            transport_kwargs=kwargs or None,
            recorder=self.recorder,
        )


def test_workflows_along_the_documents_links_answer_as_documented(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uuid, "uuid4", DRAWS.uuid4)
    monkeypatch.setattr(secrets, "token_hex", DRAWS.token_hex)
    Workflows.run(
        settings=settings(
            max_examples=50,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )
