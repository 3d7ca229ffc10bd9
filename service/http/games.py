"""Games: create, list, read (any version), join, act, and the history (contract: Games)."""

from __future__ import annotations

import uuid
from typing import Any

import flask
from flask import Blueprint, Response, request

from domain.commands import Command, NewGame, Roll, parse_action
from domain.errors import IllegalAction
from domain.game import format_at
from service.application.errors import RecordedRefusal, Unauthorized
from service.application.games.use_cases import Seat, parse_game_id
from service.application.players.accounts import is_personal
from service.http import schemas
from service.http.core import (
    DIGITS,
    IDEMPOTENCY_KEY,
    BadRequest,
    bearer_token,
    error_problem,
    has_body,
    int_arg,
    json_body,
    json_bytes,
    json_response,
    load,
    not_modified,
    parse_json,
    required_versions,
    runtime,
    this_request,
    version_arg,
)
from service.http.idempotent import creates, creates_signed_in

games_api = Blueprint("games", __name__)

MAX_EVENTS_PAGE = 1000
MAX_GAMES_PAGE = 200
# Request schemas are stateless once built: build each once, not per request. Responses are the
# application's views, encoded as they are (openapi.yaml describes them; the tests check it).
ACTION = schemas.ActionSchema()
CREATE_GAME = schemas.CreateGameSchema()
JOIN = schemas.JoinSchema()
REMATCH = schemas.RematchSchema()
# Action bodies already parsed, by their bytes: clients send the same few bodies again and again
# ({"type":"roll"}, a move's sums), and parsing one is a pure function of its bytes, so each
# distinct body goes through orjson, marshmallow and parse_action once (docs/performance.md).
# Bounded: short bodies only, and the table is emptied when full.
PARSED_ACTIONS: dict[bytes, Command] = {}
PARSED_ACTIONS_MAX = 4096
PARSED_BODY_MAX = 128


def etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def seat_json(seat: Seat) -> dict[str, Any]:
    return {"seat": seat.seat, "name": seat.name, "token": seat.token, "bot": seat.bot}


def seated(state: dict[str, Any], seat: Seat) -> Response:
    """The answer to taking a seat: the seat (its token shown this once) and the game."""
    return json_response(
        {**seat_json(seat), "game": state},
        201,
        {"Location": f"/v1/games/{state['id']}", **etag(state["version"])},
    )


@games_api.post("/v1/seed-commitments")
def commit_seed() -> Response:
    """A seed drawn before the game that will use it: only its commitment is answered."""
    made = runtime().games.secrets.commit_seed()
    payload = {"seed_commitment": made.seed_commitment, "expires_at": format_at(made.expires_at)}
    return json_response(payload, 201)


@games_api.post("/v1/games")
@creates
def create_game() -> Response:
    fields = load(CREATE_GAME, json_body())
    commitment = fields.pop("seed_commitment", None)
    rt = runtime()
    token = bearer_token()
    principal = rt.accounts.authenticate(token, "play") if is_personal(token) else None
    fields = with_accounts(fields, principal.handle if principal else None)
    state, seats = rt.games.create(NewGame(**fields), seed_commitment=commitment)
    if principal is not None and "seats" in fields:  # the caller takes seat 0 of the lobby
        done = rt.lobby.join(uuid.UUID(state["id"]), principal.handle, token=token)
        state = done.state
        seats = [done.seat]
    payload = {"game": state, "seats": [seat_json(s) for s in seats]}
    headers = {"Location": f"/v1/games/{state['id']}", **etag(state["version"])}
    return json_response(payload, 201, headers)


def with_accounts(fields: dict[str, Any], caller: str | None) -> dict[str, Any]:
    """The creation's players with each ``{"account": …}`` entry as the caller's seat: only
    the caller's own handle may be named (others join by lobby seat or challenge)."""
    players = fields.get("players")
    if players is None or not any(isinstance(p, dict) and "account" in p for p in players):
        return fields
    if caller is None:
        raise Unauthorized("a player named by account needs that account's personal token")
    accounts: list[str | None] = []
    named: list[Any] = []
    for player in players:
        if isinstance(player, dict) and "account" in player:
            if player["account"].lower() != caller.lower():
                raise BadRequest(
                    "a game seats only the caller's own account at creation: others join"
                )
            accounts.append(caller)
            named.append(caller)
        else:
            accounts.append(None)
            named.append(player)
    return {**fields, "players": named, "accounts": accounts}


@games_api.get("/v1/games")
def list_games() -> Response:
    status = request.args.get("status")
    if status is not None and status not in ("waiting", "in_progress", "finished"):
        raise BadRequest("status must be waiting, in_progress or finished")
    open_raw = request.args.get("open", "false")
    if open_raw not in ("true", "false"):
        raise BadRequest("open must be true or false")
    limit = int_arg("limit", 50, 1, MAX_GAMES_PAGE)
    offset = int_arg("offset", 0, 0)
    rt = runtime()
    page, total = rt.game_list.query(
        rt.views, status=status, open_only=open_raw == "true", offset=offset, limit=limit
    )
    next_offset = offset + limit if offset + limit < total else None
    return json_response({"games": page, "total": total, "next_offset": next_offset})


@games_api.get("/v1/games/<game:game_id>")  # not "import" (core.GameIdConverter)
def get_game(game_id: str) -> Response:
    state = runtime().games.state(parse_game_id(game_id), version_arg())
    if not_modified(str(state["version"])):
        return Response(status=304, headers=etag(state["version"]))
    return json_response(state, headers=etag(state["version"]))


@games_api.post("/v1/games/<game_id>/players")
def join_game(game_id: str) -> Response:
    """A person takes a seat; or a seated player seats a computer player (``bot``)."""
    gid = parse_game_id(game_id)
    data = load(JOIN, json_body())
    rt = runtime()
    token = bearer_token()
    name = data.get("name")
    if name is None and "bot" in data:  # a computer player is called by its id
        name = data["bot"]
    if name is None:  # with a personal token, the seat takes the account's handle
        if not is_personal(token):
            raise Unauthorized("send a name, or your personal token to join as your account")
        name = rt.accounts.authenticate(token, "play").handle
    done = rt.lobby.join(gid, name, bot=data.get("bot"), token=token, if_match=required_versions())
    return seated(done.state, done.seat)


@games_api.delete("/v1/games/<game_id>/players/<seat>")
def leave_game(game_id: str, seat: str) -> Response:
    """Give a lobby seat back before the game starts (a bot's seat: any seated player)."""
    gid = parse_game_id(game_id)
    if not DIGITS.fullmatch(seat) or int(seat) > 7:
        raise BadRequest("seat must be a seat number from 0 to 7")
    state = runtime().lobby.leave(gid, int(seat), bearer_token(), required_versions())
    return json_response(state, headers=etag(state["version"]))


@games_api.get("/v1/games/<game_id>/seat")
def which_seat(game_id: str) -> Response:
    """The seat that the token sent holds in this game: for a client given only a token (a
    ``#token=`` link, a bot's configuration). It answers what the token's holder may know
    already, and nothing about anyone else's seat."""
    seat = runtime().games.seats.authenticate(parse_game_id(game_id), bearer_token())
    return json_response({"seat": seat}, headers={"Cache-Control": "no-store"})


@games_api.post("/v1/games/<game_id>/rematch")
@creates_signed_in
def rematch(game_id: str) -> Response:
    """Claim your seat in the one rematch of a finished game, with your token of it; the claim
    that creates it may bring a client seed and a seed commitment (no body: neither)."""
    gid = parse_game_id(game_id)
    token = bearer_token()
    req = this_request()
    sent = json_bytes(req) if has_body(req) else b""
    seeds = load(REMATCH, parse_json(sent)) if sent else {}  # an empty body is no body
    done = runtime().lobby.rematch(gid, token, **seeds)
    return seated(done.state, done.seat)


@games_api.post("/v1/games/<game_id>/actions")
def act(game_id: str) -> Response:
    req = this_request()  # each read of ``flask.request`` is a context lookup
    environ = req.environ
    gid = parse_game_id(game_id)
    rt = runtime()
    games = rt.games
    seat = games.seats.authenticate(gid, bearer_token(environ))
    command = action_command(req)
    if_match = required_versions(environ)
    key = environ.get("HTTP_IDEMPOTENCY_KEY")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise BadRequest("Idempotency-Key must be 1 to 200 visible ASCII characters")
    try:
        result = games.act(gid, seat, command, if_match=if_match, idempotency_key=key)
    except IllegalAction as exc:
        return error_problem(exc, legal_actions=games.state(gid)["legal_actions"])
    except RecordedRefusal as exc:  # the key's first answer was this refusal
        extra = {}
        if exc.code == "illegal_action":
            extra["legal_actions"] = games.state(gid)["legal_actions"]
        refused = error_problem(exc, **extra)
        refused.headers["Idempotent-Replayed"] = "true"
        return refused
    headers = etag(result.version)
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    last = result.events[-1]
    receipt = rt.receipts.sign(result.state["id"], last["version"], last["hash"], last["at"])
    body = {"game": result.state, "events": result.events, "receipt": receipt}
    return json_response(body, headers=headers)


@games_api.get("/v1/games/<game_id>/receipt")
def receipt(game_id: str) -> Response:
    """The signed receipt of the game's current version (contract 1.2); none of an imported
    game (409 imported_game, contract 1.3)."""
    gid = parse_game_id(game_id)
    games = runtime().games
    version = games.state(gid)["version"]
    games.refuse_unwitnessed(gid)
    [last] = games.history(gid, after=version - 1, limit=1)
    signed = runtime().receipts.sign(str(gid), last["version"], last["hash"], last["at"])
    return json_response(signed, headers=etag(last["version"]))


def action_command(req: flask.Request) -> Command:
    """The request's action as a command: parsed once per distinct body (``PARSED_ACTIONS``)."""
    body = json_bytes(req)
    command = PARSED_ACTIONS.get(body)
    if command is None:
        command = parse_action(load(ACTION, parse_json(body)))
        if len(body) <= PARSED_BODY_MAX and shareable(command):
            if len(PARSED_ACTIONS) >= PARSED_ACTIONS_MAX:
                PARSED_ACTIONS.clear()
            PARSED_ACTIONS[body] = command
    return command


def shareable(command: Command) -> bool:
    """Immutable all the way down (manual dice are kept as sent, whatever was sent: only a
    tuple of plain integers is)."""
    return (
        not isinstance(command, Roll)
        or command.dice is None
        or (isinstance(command.dice, tuple) and all(type(die) is int for die in command.dice))
    )


@games_api.get("/v1/games/<game_id>/events")
def events(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    after = int_arg("after", 0, 0)
    limit = int_arg("limit", 100, 1, MAX_EVENTS_PAGE)
    records = runtime().games.history(gid, after=after, limit=limit + 1)
    next_after = None
    if len(records) > limit:
        records = records[:limit]
        next_after = records[-1]["version"]
    return json_response({"events": records, "next_after": next_after})
