"""Record sheets (any game, any version, any seat) and the solitaire leaderboard."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from domain.record_sheet import record_sheet
from service.api import BadRequest, _int_arg, _version_arg
from service.app import runtime
from service.games import ServiceError, parse_game_id
from service.sheet_render import render_csv, render_json, render_pdf, render_text

solitaire_api = Blueprint("solitaire_api", __name__)

SHEET_TYPES = ["text/plain", "text/csv", "application/json", "application/pdf"]


class NotAcceptable(ServiceError):
    status, code = 406, "not_acceptable"


@solitaire_api.get("/v1/games/<game_id>/record-sheet")
def sheet(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    accept = request.accept_mimetypes
    chosen = accept.best_match(SHEET_TYPES) if accept else "text/plain"
    if chosen is None:
        raise NotAcceptable(f"the record sheet is served as {', '.join(SHEET_TYPES)}")
    version = _version_arg()
    games = runtime().games
    game = games.game(gid, version)  # 404 for an unknown game or version
    seat = request.args.get("seat")
    if seat is None:
        if game.seats > 1:
            raise BadRequest("a multiplayer game has one sheet per player: add ?seat=S")
        seat_no = 0
    else:
        seat_no = _int_arg("seat", 0, 0, game.seats - 1)
    events = games.history(gid, after=0, limit=game.version)
    data = record_sheet(events, seat_no, game_id=str(gid))
    filename = f"cantstop-{gid}-seat{seat_no}-v{game.version}"
    if chosen == "application/json":
        return jsonify(render_json(data))
    if chosen == "application/pdf":
        return Response(
            render_pdf(data),
            mimetype="application/pdf",
            headers={"Content-Disposition": f'inline; filename="{filename}.pdf"'},
        )
    if chosen == "text/csv":
        return Response(
            render_csv(data),
            mimetype="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{filename}.csv"'},
        )
    return Response(render_text(data), mimetype="text/plain")


@solitaire_api.get("/v1/solitaire/leaderboard")
def leaderboard() -> Response:
    mode = request.args.get("mode", "easy")
    if mode not in ("easy", "advanced"):
        raise BadRequest("mode must be easy or advanced")
    limit = _int_arg("limit", 20, 1, 100)
    rt = runtime()
    rt.leaderboard.catch_up(rt.games)
    return jsonify({"mode": mode, "results": rt.leaderboard.best(mode, limit)})
