"""``GET /v1/accounts/{handle}/fair-play`` (contract 1.3): how close an account's play in its
finished rated games came to the expert's, beside its pool's distribution. Public, as profiles
are (service/application/analysis/fairplay.py)."""

from __future__ import annotations

from flask import Blueprint, Response

from service.http.core import json_response, runtime

fair_play_api = Blueprint("fair_play", __name__)


@fair_play_api.get("/v1/accounts/<handle>/fair-play")
def fair_play(handle: str) -> Response:
    return json_response(runtime().fair_play.figures(handle))  # 404 for an unknown account
