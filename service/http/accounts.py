"""Accounts, personal tokens, profiles, histories and rated leaderboards (contract 1.2)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, request

from service.application.errors import NotFound
from service.application.games.auditing import export_lines
from service.application.players.accounts import BOTS, Issued
from service.application.players.standings import LEDGER_LIMIT
from service.http import schemas
from service.http.core import (
    BadRequest,
    download,
    int_arg,
    json_body,
    json_response,
    limit_count,
    load,
    me,
    runtime,
    spend,
)
from service.http.idempotent import creates

accounts_api = Blueprint("accounts", __name__)

SIGN_UP = schemas.SignUpSchema()
SIGN_IN = schemas.SignInSchema()
NO_STORE = {"Cache-Control": "no-store"}  # answers that carry a token, or an account's own data


def account_json(handle: str) -> dict[str, Any]:
    rt = runtime()
    account = rt.accounts.account(handle)
    return {
        "handle": account.handle,
        "bot": account.bot,
        "builtin": account.handle.lower() in BOTS,  # the server's own bot, not a registered one
        "created_at": account.created_on.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "closed": account.closed,
        "excluded": account.excluded,  # from the ratings, by an operator (docs/ratings.md)
    }


def token_json(issued: Issued) -> dict[str, Any]:
    return {
        "id": issued.id,
        "token": issued.token,
        "scopes": list(issued.scopes),
        "description": issued.description,
        "created_at": issued.created_at,
    }


@accounts_api.post("/v1/accounts")
@creates
def sign_up() -> Response:
    data = load(SIGN_UP, json_body())
    issued = runtime().accounts.sign_up(data["handle"], data.get("password"), bot=data["bot"])
    body = {"account": account_json(data["handle"]), "token": issued.token, "token_id": issued.id}
    headers = {"Location": f"/v1/accounts/{data['handle']}", **NO_STORE}
    return json_response(body, 201, headers)


@accounts_api.post("/v1/tokens")
def sign_in() -> Response:
    data = load(SIGN_IN, json_body())
    issued = runtime().accounts.sign_in(
        data["handle"], data["password"], data["scopes"], data["description"]
    )
    return json_response(token_json(issued), 201, NO_STORE)


@accounts_api.get("/v1/account")
def my_account() -> Response:
    principal = me()
    rt = runtime()
    body = account_json(principal.handle)
    body["ratings"] = rt.ratings.of_account(rt.views, principal.handle)
    body["scopes"] = list(principal.scopes)
    return json_response(body, headers=NO_STORE)


@accounts_api.get("/v1/account/tokens")
def my_tokens() -> Response:
    principal = me("account")
    rows = runtime().accounts.tokens(principal)
    tokens = [
        {
            "id": row.id,
            "scopes": list(row.scopes),
            "description": row.description,
            "created_at": row.created_at,
            "current": row.id == principal.token_id,
        }
        for row in rows
    ]
    return json_response({"tokens": tokens}, headers=NO_STORE)


TOKEN_ID = re.compile(r"[0-9a-f]{16}")
POOL = re.compile(r"[0-9]{1,2}p-[0-9a-f]{10}")


@accounts_api.delete("/v1/account/tokens/<token_id>")
def revoke_token(token_id: str) -> Response:
    principal = me("account")
    if not TOKEN_ID.fullmatch(token_id):
        raise NotFound(f"no token {token_id[:40]!r} of this account")
    runtime().accounts.revoke(principal, token_id)
    return Response(status=204)


@accounts_api.delete("/v1/account")
def close_account() -> Response:
    """Close the account (service/application/closing.py): its challenges answered, seeks
    withdrawn, lobby seats given back and games under way resigned, whatever the token's other
    scopes, so that no seat token of it plays on; its credentials erased; its webhooks
    deleted."""
    principal = me("account")
    rt = runtime()
    rt.closing.close(principal)
    rt.webhooks.forget(principal.handle)  # nothing more is sent anywhere for it
    return Response(status=204)


@accounts_api.get("/v1/accounts/<handle>")
def profile(handle: str) -> Response:
    rt = runtime()
    body = account_json(handle)
    body["ratings"] = rt.ratings.of_account(rt.views, handle)
    body["counts"] = rt.account_games.counts(rt.views, handle)
    body["rating_history"] = rt.ratings.history(rt.views, handle)
    return json_response(body)


def _bool_arg(name: str) -> bool | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise BadRequest(f"{name} must be true or false")
    return raw == "true"


@accounts_api.get("/v1/accounts/<handle>/games")
def account_games(handle: str) -> Response:
    rt = runtime()
    rt.accounts.account(handle)  # 404 for an unknown account
    status = request.args.get("status")
    if status is not None and status not in ("waiting", "in_progress", "finished"):
        raise BadRequest("status must be waiting, in_progress or finished")
    limit = int_arg("limit", 50, 1, 200)
    raw_cursor = request.args.get("cursor")
    cursor = None
    if raw_cursor is not None:
        if not raw_cursor.isascii() or not raw_cursor.isdigit() or len(raw_cursor) > 18:
            raise BadRequest("cursor must be the next_cursor of a page before")
        cursor = int(raw_cursor)
    page, next_cursor = rt.account_games.page(
        rt.views, handle, status=status, rated=_bool_arg("rated"), limit=limit, cursor=cursor
    )
    return json_response(
        {"games": page, "next_cursor": None if next_cursor is None else str(next_cursor)}
    )


@accounts_api.get("/v1/accounts/<handle>/games/export")
def export_account_games(handle: str) -> Response:
    """A page of the exports of the account's finished games, one after another, each with its
    header, in the order they finished: at most ``limit`` games (100 by default, at most 200,
    as a page of the account's games listing), and a ``Link`` to the next page (``after`` the
    view's number of this page's last finish) while more had finished. Work through whole
    histories, which anyone may ask for: each game counted against the ``audit`` rate limit per
    client address, as a game's export is (service/http/limits.py, ``SCOPES``): ~15 ms of CPU a
    typical game (the bots' accounts sit in every game against the computer)."""
    rt = runtime()
    rt.accounts.account(handle)
    # A page counts a game's export each against the ``audit`` limit, as the games' own exports
    # are counted: one address exports some 120 games a minute however it pages, not 120 pages
    # of 200 (~6 minutes of CPU). So a page holds no more than that limit's count, else it could
    # never be answered.
    limit = min(int_arg("limit", 100, 1, 200), limit_count("audit") or 200)
    after = int_arg("after", 0, 0)
    ids, next_after = rt.account_games.finished_page(rt.views, handle, after=after, limit=limit)
    spend("audit", len(ids) - 1)  # (the request itself counted one)
    headers = {"Content-Disposition": f'attachment; filename="{handle}-games.ndjson"'}
    if next_after is not None:  # the handle is a checked one (letters, digits, _ and -)
        query = urlencode({"limit": limit, "after": next_after})
        headers["Link"] = f'</v1/accounts/{handle}/games/export?{query}>; rel="next"'

    def lines() -> Any:
        for game_id in ids:
            yield export_lines(rt.games, game_id).encode("utf-8")

    return download(lines(), "application/x-ndjson", headers)


@accounts_api.get("/v1/ratings/ledger")
def ratings_ledger() -> Response:
    """The ratings ledger (contract 1.3), one JSON line per entry in the order the ratings fold
    them; public, as ratings are. A full page links the next (``after`` its last seq)."""
    rt = runtime()
    pool = request.args.get("pool")
    if pool is not None and not POOL.fullmatch(pool):
        raise BadRequest("pool must be a pool's id, such as 2p-0123456789")
    after = int_arg("after", 0, 0)
    default, most = LEDGER_LIMIT
    limit = int_arg("limit", default, 1, most)
    lines = rt.ratings.ledger(rt.views, pool=pool, after=after, limit=limit)
    headers = {}
    if len(lines) == limit:
        query = {"after": lines[-1]["seq"], "limit": limit} | ({"pool": pool} if pool else {})
        headers["Link"] = f'</v1/ratings/ledger?{urlencode(query)}>; rel="next"'
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return download(body, "application/x-ndjson", headers)


@accounts_api.get("/v1/leaderboards/<pool>")
def pool_leaderboard(pool: str) -> Response:
    rt = runtime()
    limit = int_arg("limit", 50, 1, 200)
    if not POOL.fullmatch(pool):
        raise NotFound(f"no pool {pool[:40]!r}: a pool's id reads like 2p-0123456789")
    board = rt.ratings.leaderboard(rt.views, pool, limit)
    if board is None:
        raise NotFound(f"no rated games in pool {pool!r}")
    return json_response(board)
