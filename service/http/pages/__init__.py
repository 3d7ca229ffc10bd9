"""The web pages (contract 1.1, Web pages): the lobby at ``/``, a game at ``/games/{id}``, its
replay and audit at ``/games/{id}/replay``, and printable record sheets behind plain links; and
(contract 1.2) the account page at ``/account`` (sign up, sign in, sign out).

The pages are Jinja templates (autoescaped: every name is escaped on the server) and a few small
ES modules under ``static/`` that talk to the JSON API (``/v1``) like any other client: no build
step, no asset from outside the machine. A seat's token, and an account's personal token, travel
only in the ``Authorization`` header of the API calls those modules make; no page route reads or
takes a token.

``/`` is negotiated: the lobby page to a browser (``Accept`` preferring ``text/html``), the JSON
index to everyone else, with ``Vary: Accept``. Every HTML answer (pages, and the error pages that
``service.http.core`` renders for browsers) carries a Content-Security-Policy without
``unsafe-inline`` (``core.html_policy``), except the API viewer at ``/docs``, which keeps its own.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, render_template

from service.application.games import parse_game_id
from service.http.core import (
    BadRequest,
    asked_sheet,
    html_policy,
    json_response,
    runtime,
    wants_page,
)
from service.render.sheet import render_csv, render_pdf, render_text

pages = Blueprint(
    "pages",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/assets",
)

SHEETS = {
    "txt": ("text/plain", "inline"),
    "csv": ("text/csv", "attachment"),
    "pdf": ("application/pdf", "attachment"),
}
INDEX = {
    "name": "Can't Stop game service",
    "api": "/v1",
    "docs": "/docs",
    "openapi": "/openapi.yaml",
    "health": "/healthz",
}


@pages.after_request
def _page_headers(response: Response) -> Response:
    """The pages' HTML answers carry the strict policy (their error pages get it where they
    are made, ``service.http.core.problem``; API answers never pass here)."""
    if response.mimetype == "text/html":
        html_policy(response)
    return response


@pages.get("/")
def root() -> Response:
    """The lobby to a browser; the JSON index (as before) to an API client."""
    if wants_page():
        response = Response(render_template("pages/lobby.html"), mimetype="text/html")
    else:
        response = json_response(INDEX)
    response.vary.add("Accept")
    return response


def _page(template: str, game_id: str, **extra: Any) -> Response:
    state = runtime().games.state(parse_game_id(game_id))  # 404, as an HTML page, when unknown
    names = [p["name"] or f"open seat {p['seat']}" for p in state["players"]]
    html = render_template(template, state=state, names=names, **extra)
    return Response(html, mimetype="text/html", headers={"Cache-Control": "no-cache"})


@pages.get("/games/<game_id>")
def game_page(game_id: str) -> Response:
    return _page("pages/game.html", game_id)


@pages.get("/games/<game_id>/replay")
def replay_page(game_id: str) -> Response:
    return _page("pages/replay.html", game_id)


@pages.get("/games/<game_id>/record-sheet.<kind>")
def record_sheet_file(game_id: str, kind: str) -> Response:
    """A record sheet behind a plain link (``/v1/…/record-sheet`` picks its format by
    ``Accept``, which a link cannot set): ``.txt``, ``.csv`` or ``.pdf``, ``?seat=S``."""
    if kind not in SHEETS:
        raise BadRequest("a record sheet is .txt, .csv or .pdf")
    sheet, filename = asked_sheet(parse_game_id(game_id))
    mimetype, disposition = SHEETS[kind]
    body: str | bytes
    if kind == "pdf":
        body = render_pdf(sheet)
    elif kind == "csv":
        body = render_csv(sheet)
    else:
        body = render_text(sheet)
    return Response(
        body,
        mimetype=mimetype,
        headers={"Content-Disposition": f'{disposition}; filename="{filename}.{kind}"'},
    )


# ------------------------------------------------------------------------------ accounts
def _html(template: str, **context: Any) -> Response:
    html = render_template(template, **context)
    return Response(html, mimetype="text/html", headers={"Cache-Control": "no-cache"})


@pages.get("/account")
def account_page() -> Response:
    """Sign up, sign in and out: the page's script does it all with the API, and keeps the
    personal token in this browser's storage (static/js/api.js); the server sends the same page
    to everyone."""
    return _html("pages/account.html")
