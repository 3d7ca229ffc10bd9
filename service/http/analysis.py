"""``GET /v1/games/{id}/analysis``: luck and skill in a game, by the expert (contract 1.2;
service/application/analyst.py, domain/analysis.py)."""

from __future__ import annotations

from flask import Blueprint, Response

from service.application.games import parse_game_id
from service.http.core import json_response, runtime, version_arg

analysis_api = Blueprint("analysis", __name__)


@analysis_api.get("/v1/games/<game_id>/analysis")
def analysis(game_id: str) -> Response:
    answer = runtime().analyst.analysis(parse_game_id(game_id), version_arg())
    # an answer never changes for its version (and a finished game's never changes at all)
    return json_response(answer, headers={"ETag": f'"{answer["version"]}"'})
