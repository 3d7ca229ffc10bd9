"""Record sheets (any game, any version, any seat) and the solitaire leaderboard."""

from __future__ import annotations

from flask import Blueprint, Response, request

from service.application.games.projections import RuleSet
from service.application.games.use_cases import parse_game_id
from service.http.core import (
    BadRequest,
    NotAcceptable,
    accepted,
    asked_sheet,
    int_arg,
    json_response,
    runtime,
    version_arg,
)
from service.render.sheet import render_csv, render_json, render_pdf, render_text

sheets_api = Blueprint("sheets", __name__)

SHEET_TYPES = ["text/plain", "text/csv", "application/json", "application/pdf"]


@sheets_api.get("/v1/games/<game_id>/record-sheet")
def sheet(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    accept = accepted()
    chosen = accept.best_match(SHEET_TYPES) if accept else "text/plain"
    if chosen is None:
        raise NotAcceptable(f"the record sheet is served as {', '.join(SHEET_TYPES)}")
    data, filename = asked_sheet(gid, version_arg())
    if chosen == "application/json":
        response = json_response(render_json(data))
    elif chosen == "application/pdf":
        response = Response(
            render_pdf(data),
            mimetype="application/pdf",
            headers={"Content-Disposition": f'inline; filename="{filename}.pdf"'},
        )
    elif chosen == "text/csv":
        response = Response(
            render_csv(data),
            mimetype="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{filename}.csv"'},
        )
    else:
        response = Response(render_text(data), mimetype="text/plain")
    response.vary.add("Accept")  # one URL, a body per media type: caches must tell them apart
    return response


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = request.args.get(name, default)
    if value not in choices:
        raise BadRequest(f"{name} must be {' or '.join(choices)}")
    return value


@sheets_api.get("/v1/solitaire/leaderboard")
def leaderboard() -> Response:
    """The best results within one rule set (contract 1.1: Honest leaderboard)."""
    rules = RuleSet(
        mode=_choice("mode", "easy", ("easy", "advanced")),
        dice_faces=int(_choice("dice_faces", "6", ("6", "8"))),
        steep_hill=_choice("steep_hill", "false", ("true", "false")) == "true",
    )
    limit = int_arg("limit", 20, 1, 100)
    rt = runtime()
    return json_response(
        {
            "mode": rules.mode,
            "dice_faces": rules.dice_faces,
            "steep_hill": rules.steep_hill,
            "results": rt.leaderboard.best(rt.views, rules, limit),
        }
    )
