"""``GET /v1/games/{id}/analysis``: luck and skill in a game, by the expert (contracts 1.2 and
1.3; service/application/analysis/analyst.py, jobs.py, domain/analysis.py). The kept answer is
200; otherwise the job's state is 202 with Retry-After, and a worker process works it out."""

from __future__ import annotations

from flask import Blueprint, Response, request

from service.application.analysis.analyst import Kept
from service.application.errors import ApplicationError
from service.application.games.use_cases import parse_game_id
from service.http.core import address_key, bearer_token, json_response, runtime, version_arg

analysis_api = Blueprint("analysis", __name__)


@analysis_api.get("/v1/games/<game_id>/analysis")
def analysis(game_id: str) -> Response:
    runtime().games.refuse_rated_in_progress(parse_game_id(game_id))  # contract 1.3
    answer = runtime().analyst.analysis(parse_game_id(game_id), version_arg(), asker())
    if isinstance(answer, Kept):
        # an answer never changes for its version (and a finished game's never changes at all)
        response = Response(answer.text, 200, content_type="application/json")
        response.headers["ETag"] = f'"{answer.version}"'
        return response
    body = {"status": answer.status, "progress": round(answer.progress, 3)}
    return json_response(body, 202, headers={"Retry-After": str(answer.retry_after)})


def asker() -> str:
    """Who asks, for the per-client cap on unfinished jobs: the account of a personal token,
    else the address (a seat token, or any other, is no account)."""
    token = bearer_token()
    if token is not None:
        try:
            return f"u:{runtime().accounts.authenticate(token).handle.lower()}"
        except ApplicationError:
            pass
    return address_key(request.remote_addr)
