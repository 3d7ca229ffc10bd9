"""Challenges and seeks (contract 1.2): how two accounts come to play without sharing a lobby's
address (service/application/matchmaking/challenges.py, seeks.py)."""

from __future__ import annotations

import uuid

from flask import Blueprint, Response

from service.application.errors import NotFound
from service.http import schemas
from service.http.core import json_body, json_response, load, me, runtime
from service.http.idempotent import creates_signed_in

matchmaking_api = Blueprint("matchmaking", __name__)

CHALLENGE = schemas.ChallengeRequestSchema()
SEEK = schemas.SeekRequestSchema()
PRIVATE = {"Cache-Control": "no-store"}  # one account's own data


def _id(raw: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound(f"no {what} {raw!r}") from None


@matchmaking_api.post("/v1/challenges")
@creates_signed_in
def challenge() -> Response:
    data = load(CHALLENGE, json_body())
    principal = me("play")
    found = runtime().challenges.issue(
        principal, data["to"], data.get("rules"), data["rated"], data.get("clock")
    )
    headers = {"Location": f"/v1/challenges/{found['id']}", **PRIVATE}
    return json_response(found, 201, headers)


@matchmaking_api.get("/v1/challenges")
def challenges() -> Response:
    return json_response(runtime().challenges.listing(me("play")), headers=PRIVATE)


@matchmaking_api.get("/v1/challenges/<challenge_id>")
def get_challenge(challenge_id: str) -> Response:
    found = runtime().challenges.get(me("play"), _id(challenge_id, "challenge"))
    return json_response(found.as_json(), headers=PRIVATE)


@matchmaking_api.post("/v1/challenges/<challenge_id>/accept")
def accept_challenge(challenge_id: str) -> Response:
    done = runtime().challenges.accept(me("play"), _id(challenge_id, "challenge"))
    body = {"challenge": done.challenge, "game": done.game}
    return json_response(body, 201, {"Location": f"/v1/games/{done.game['id']}", **PRIVATE})


@matchmaking_api.post("/v1/challenges/<challenge_id>/decline")
def decline_challenge(challenge_id: str) -> Response:
    found = runtime().challenges.decline(me("play"), _id(challenge_id, "challenge"))
    return json_response(found, headers=PRIVATE)


@matchmaking_api.post("/v1/challenges/<challenge_id>/cancel")
def cancel_challenge(challenge_id: str) -> Response:
    found = runtime().challenges.cancel(me("play"), _id(challenge_id, "challenge"))
    return json_response(found, headers=PRIVATE)


@matchmaking_api.post("/v1/seeks")
@creates_signed_in
def seek() -> Response:
    data = load(SEEK, json_body())
    principal = me("play")
    found = runtime().seeks.place(
        principal, data.get("rules"), data["players"], data["rated"], data.get("clock")
    )
    return json_response(found, 201, {"Location": f"/v1/seeks/{found['id']}", **PRIVATE})


@matchmaking_api.get("/v1/seeks/<seek_id>")
def get_seek(seek_id: str) -> Response:
    found = runtime().seeks.get(me("play"), _id(seek_id, "seek"))
    return json_response(found.as_json(), headers=PRIVATE)


@matchmaking_api.delete("/v1/seeks/<seek_id>")
def withdraw_seek(seek_id: str) -> Response:
    runtime().seeks.withdraw(me("play"), _id(seek_id, "seek"))
    response = Response(status=204)
    del response.headers["Content-Type"]
    return response
