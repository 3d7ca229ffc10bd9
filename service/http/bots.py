"""Computer players: the list of bots, and advice for the player to act (contract 1.1)."""

from __future__ import annotations

from flask import Blueprint, Response

from domain import strategies
from service.application.games.use_cases import parse_game_id
from service.http.core import json_response, runtime, version_arg

bots_api = Blueprint("bots", __name__)


@bots_api.get("/v1/bots")
def list_bots() -> Response:
    return json_response(
        {
            "bots": [
                {"id": s.id, "name": s.name, "description": s.description, "version": s.version}
                for s in strategies.list()
            ]
        }
    )


@bots_api.get("/v1/games/<game_id>/advice")
def advice(game_id: str) -> Response:
    """For the player to act; closed to everyone while a rated game is played (contract 1.3)."""
    gid = parse_game_id(game_id)
    runtime().games.refuse_rated_in_progress(gid)
    answer = runtime().advisor.advice(gid, version_arg())
    return json_response(answer, headers={"ETag": f'"{answer["version"]}"'})
