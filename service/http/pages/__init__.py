"""The web pages (contract 1.1, Web pages): the lobby at ``/``, a game at ``/games/{id}``, its
replay and audit at ``/games/{id}/replay``, and printable record sheets behind plain links; and
(contract 1.2) the account page at ``/account`` (sign up, sign in, sign out), a player's profile
at ``/players/{handle}`` (each pool's rating, a chart of its history) and a pool's leaderboard at
``/leaderboards/{pool}``.

The pages are Jinja templates (autoescaped: every name is escaped on the server) and a few small
ES modules under ``static/`` that talk to the JSON API (``/v1``) like any other client: no build
step, no asset from outside the machine. A seat's token, and an account's personal token, travel
only in the ``Authorization`` header of the API calls those modules make; no page route reads or
takes a token. The profile and leaderboard pages show public figures only, rendered here.

``/`` is negotiated: the lobby page to a browser (``Accept`` preferring ``text/html``), the JSON
index to everyone else, with ``Vary: Accept``. Every HTML answer (pages, and the error pages that
``service.http.core`` renders for browsers) carries a Content-Security-Policy without
``unsafe-inline`` (``core.html_policy``), except the API viewer at ``/docs``, which keeps its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Response, render_template

from domain.ratings import pool as pool_of
from domain.rules import normalize_rules
from service.application.errors import ApplicationError, NotFound
from service.application.games.use_cases import parse_game_id
from service.application.players.accounts import BOTS
from service.application.players.ratings import initial
from service.http.core import (
    BadRequest,
    asked_sheet,
    html_policy,
    json_response,
    runtime,
    wants_page,
)
from service.http.pages.charts import Chart, rating_chart
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
RECENT_GAMES = 10  # on a profile
LEADERBOARD_ROWS = 100
RULE_NAMES = (("jumping", "jumping"), ("forced_move", "forced move"), ("steep_hill", "steep hill"))
# The pools the lobby links to: the standard rules for 2, 3 and 4 players, as their games rate
# in them (``domain.ratings.pool`` of the rules a game records).
STANDARD_POOLS = tuple(
    (pool_of(normalize_rules(None, n).to_dict(), n), normalize_rules(None, n).to_dict(), n)
    for n in (2, 3, 4)
)


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
        rated = [(pool, pool_text(rules, n)) for pool, rules, n in STANDARD_POOLS]
        response = Response(render_template("pages/lobby.html", rated=rated), mimetype="text/html")
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


def pool_text(rules: Mapping[str, Any], players: int) -> str:
    """A pool in words: "2 players · 3 columns to win · 6-sided dice · jumping"."""
    columns = rules.get("columns_to_win")
    parts = [f"{players} players"]
    if columns is not None:
        parts.append(f"{columns} {'column' if columns == 1 else 'columns'} to win")
    parts.append(f"{rules.get('dice_faces', 6)}-sided dice")
    parts.extend(name for key, name in RULE_NAMES if rules.get(key))
    return " · ".join(parts)


def game_summary(entry: Mapping[str, Any], state: Mapping[str, Any] | None) -> dict[str, Any]:
    """One of an account's games as its profile lists it: who played, how it stands, where to
    see it (``entry``: a row of ``/v1/accounts/{handle}/games``; ``state``: the game's, if read)."""
    game_id = entry["game_id"]
    status = state["status"] if state else entry["status"]
    names = [p["name"] or "open seat" for p in state["players"]] if state else []
    if state and state.get("solitaire"):
        title = f"Solitaire: {names[0]}"
    else:
        title = " vs ".join(names) or "A game"
    if status == "finished":
        winner = state.get("winner") if state else None
        if winner is not None and state:
            outcome = f"{names[winner]} won"
        elif state and state.get("finish_reason") in ("abandoned", "aborted"):
            outcome = str(state["finish_reason"])
        else:
            outcome = "finished"
    else:
        outcome = "in progress" if status == "in_progress" else "waiting for players"
    finished = status == "finished"
    kind = "Rated" if entry["rated"] else "Unrated"
    return {
        "title": title,
        "summary": " · ".join([kind, outcome, str(entry["created_at"])[:10]]),
        "href": f"/games/{game_id}/replay" if finished else f"/games/{game_id}",
        "action": "Replay" if finished else "Open",
    }


def _recent_games(handle: str) -> list[dict[str, Any]]:
    """The account's latest games, newest first."""
    rt = runtime()
    page, _ = rt.account_games.page(
        rt.views, handle, status=None, rated=None, limit=RECENT_GAMES, cursor=None
    )
    games = []
    for entry in page:
        state: dict[str, Any] | None
        try:
            state = rt.games.state(parse_game_id(entry["game_id"]))
        except ApplicationError:  # not readable now: listed without its players
            state = None
        games.append(game_summary(entry, state))
    return games


@pages.get("/players/<handle>")
def profile_page(handle: str) -> Response:
    """An account's public profile: its ratings, one chart per pool, its latest games."""
    rt = runtime()
    account = rt.accounts.account(handle)  # 404, as an HTML page, when unknown
    shown = account.handle
    ratings = rt.ratings.of_account(rt.views, shown)
    history = rt.ratings.history(rt.views, shown)
    start = initial().rating
    pools = []
    for rating in ratings:
        steps = [h for h in history if h["pool"] == rating["pool"]]
        chart: Chart = rating_chart(start, steps)
        pools.append(
            {
                **rating,
                "text": pool_text(rating["rules"], rating["players"]),
                "history": steps,
                "chart": chart,
            }
        )
    return _html(
        "pages/profile.html",
        account=account,
        builtin=shown.lower() in BOTS,  # the server's own bot, not a registered bot account
        handle=shown,
        joined=account.created_on.strftime("%Y-%m-%d"),
        pools=pools,
        counts=rt.account_games.counts(rt.views, shown),
        games=_recent_games(shown),
        start=start,
    )


@pages.get("/leaderboards/<pool>")
def leaderboard_page(pool: str) -> Response:
    """A pool's ranking: its accounts that are no longer provisional, by rating."""
    rt = runtime()
    board = rt.ratings.leaderboard(rt.views, pool, LEADERBOARD_ROWS)
    if board is None:
        standard = next((s for s in STANDARD_POOLS if s[0] == pool), None)
        if standard is None:
            raise NotFound(f"no rated games in pool {pool!r}")
        # A pool the lobby links to, before its first rated game: an empty ranking, not a 404.
        board = {"pool": pool, "rules": standard[1], "players": standard[2], "ranking": []}
    return _html(
        "pages/leaderboard.html",
        board=board,
        text=pool_text(board["rules"], board["players"]),
    )


# ---------------------------------------------------------------------------- tournaments
TOURNAMENT_SECTIONS = (
    ("started", "Under way", "No tournament is under way."),
    ("created", "Upcoming", "No tournament is open for registration."),
    ("finished", "Finished", "No tournament has finished yet."),
)
TOURNAMENTS_LISTED = 50  # per section


def tournament_text(t: Mapping[str, Any]) -> str:
    """A tournament in words: "Swiss · 3 rounds · tables of 3 · standard rules … · rated · 60 s
    a turn" (its page), or what a listing row holds: "Arena · 6 players · starts …"."""
    if t.get("kind") == "swiss":
        rounds = t.get("rounds_planned")
        parts = ["Swiss"] + ([f"{rounds} {'round' if rounds == 1 else 'rounds'}"] if rounds else [])
    else:
        minutes = t.get("minutes")
        parts = ["Arena"] + ([f"{minutes:g} minutes"] if isinstance(minutes, int | float) else [])
    per_table = t.get("players_per_table")
    rules = t.get("rules")
    if isinstance(per_table, int) and isinstance(rules, Mapping):
        parts.append(f"tables of {per_table}")
        parts.append(pool_text(rules, per_table).split(" · ", 1)[-1])
    players = t.get("players")
    count = len(players) if isinstance(players, list) else players
    if isinstance(count, int):
        parts.append(f"{count} {'player' if count == 1 else 'players'}")
    if "rated" in t:
        parts.append("rated" if t["rated"] else "unrated")
    clock = t.get("clock")
    if isinstance(clock, Mapping) and clock.get("turn_seconds"):
        parts.append(f"{clock['turn_seconds']} s a turn")
    if t.get("status") == "created" and t.get("starts_at"):
        parts.append(f"starts {str(t['starts_at'])[:16].replace('T', ' ')} UTC")
    return " · ".join(parts)


@pages.get("/tournaments")
def tournaments_page() -> Response:
    """Every tournament, upcoming, under way and finished: links to their pages."""
    rt = runtime()
    listed = {}
    for status, _, _ in TOURNAMENT_SECTIONS:
        found = rt.tournaments.list(status, TOURNAMENTS_LISTED)["tournaments"]
        listed[status] = [{**t, "summary": tournament_text(t)} for t in found]
    return _html("pages/tournaments.html", sections=TOURNAMENT_SECTIONS, listed=listed)


@pages.get("/tournaments/<tournament_id>")
def tournament_page(tournament_id: str) -> Response:
    """One tournament: its standings (live), its rounds' tables linked to their games, its
    players, and register / withdraw for the signed-in account (static/js/tournament.js)."""
    try:
        found = uuid.UUID(tournament_id)
    except ValueError:
        raise NotFound(f"no tournament {tournament_id!r}") from None
    t = runtime().tournaments.read(found)  # 404, as an HTML page, when unknown
    status_text = {"created": "upcoming", "started": "under way"}.get(t["status"], t["status"])
    return _html(
        "pages/tournament.html",
        t=t,
        # Without the count of players: the page's script redraws its players and standings
        # as they change, not this line, where the count stayed as the page was first served.
        summary=tournament_text({**t, "players": None}),
        status_text=status_text,
        groups=table_groups(t),
    )


def table_outcome(table: Mapping[str, Any]) -> str:
    """How a table stands: "under way", "aborted", or its winner(s)."""
    result = table.get("result")
    if not result:
        return "under way"
    if result.get("aborted"):
        return "aborted: no points"
    places = result.get("places") or {}
    first = [handle for handle, place in places.items() if place == 0]
    return f"{' and '.join(first)} won" if first else "finished"


def table_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tables as the page lists them: a Swiss's by round, an arena's newest first
    (static/js/tournament.js draws the same from the API's answer)."""

    def shown(tables: list[Any]) -> list[dict[str, Any]]:
        return [{**table, "outcome": table_outcome(table)} for table in tables]

    if t.get("kind") == "swiss":
        return [
            {"title": f"Round {r['number']}", "tables": shown(r["tables"]), "byes": r.get("byes")}
            for r in t.get("rounds") or []
        ]
    tables = list(reversed(t.get("tables") or []))
    return [{"title": "Games, newest first", "tables": shown(tables), "byes": []}] if tables else []
