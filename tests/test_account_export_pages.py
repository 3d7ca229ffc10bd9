"""An account's bulk export (``GET /v1/accounts/{handle}/games/export``) in pages: at most
``limit`` games a request, in the order they finished, each page linking the next
(``Link: <…?limit=N&after=F>; rel="next"``, ``F`` the account-games view's number of the page's
last finish) while more had finished. One request once streamed every game the account ever
finished (a built-in bot's: the server's whole history against the computer)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cantstop_client import Client
from flask import Flask
from flask.testing import FlaskClient

from service.cli import main as cantstop
from service.persistence.tables import Sql
from tests.support.rated import act, export_text, rated_pair, sign_up

Json = dict[str, Any]
NEXT = re.compile(r'^</v1/accounts/ann/games/export\?limit=(\d+)&after=(\d+)>; rel="next"$')


@pytest.fixture
def tokens(client: FlaskClient) -> dict[str, str]:
    return {handle: sign_up(client, handle) for handle in ("ann", "bob")}


def started(client: FlaskClient, tokens: dict[str, str]) -> Json:
    """A rated game of ann and bob, under way."""
    return rated_pair(client, tokens, "ann", "bob")


def finish(client: FlaskClient, tokens: dict[str, str], game: Json) -> str:
    """The seat to act resigns (before any turn: aborted, finished): the game's id."""
    by_seat = {p["seat"]: tokens[p["account"]] for p in game["players"]}
    ended = act(client, game["id"], by_seat[game["turn"]["player"]], {"type": "resign"})
    assert ended["status"] == "finished"
    return str(ended["id"])


def finished_game(client: FlaskClient, tokens: dict[str, str]) -> str:
    return finish(client, tokens, started(client, tokens))


def games_of(body: str) -> list[str]:
    """The game ids of an export's header lines, in order."""
    lines = [json.loads(line) for line in body.splitlines()]
    return [line["game_id"] for line in lines if line.get("format") == "cantstop-game"]


def page(client: FlaskClient, url: str) -> tuple[list[str], str | None, str]:
    """One page: its games, its next link's URL (None on the last page), its body."""
    reply = client.get(url)
    assert reply.status_code == 200 and reply.mimetype == "application/x-ndjson"
    body = reply.get_data(as_text=True)
    link = reply.headers.get("Link")
    if link is None:
        return games_of(body), None, body
    found = NEXT.fullmatch(link)
    assert found is not None, link
    return games_of(body), link[1 : link.index(">")], body


def test_pages_hold_limit_games_and_following_them_yields_each_game_once_in_order(
    client: FlaskClient, tokens: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Also the game that finishes between two pages, though it began before every other: the
    order is the finishes', not the creations', so a cursor misses and repeats nothing."""
    late = started(client, tokens)  # created first, finished last
    first_three = [finished_game(client, tokens) for _ in range(3)]
    games, link, body = page(client, "/v1/accounts/ann/games/export?limit=2")
    assert games == first_three[:2] and link is not None
    # A page is the games' own exports one after another, so `cantstop audit` reads it.
    assert body == "".join(export_text(client, game_id) for game_id in games)
    saved = tmp_path / "page.ndjson"
    saved.write_text(body)
    assert cantstop(["audit", str(saved)]) == 0
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(v["game_id"], v["valid"]) for v in verdicts] == [(g, True) for g in games]

    finished_late = finish(client, tokens, late)  # between the pages
    seen = list(games)
    while link is not None:
        games, link, _ = page(client, link)
        assert 0 < len(games) <= 2
        seen += games
    assert seen == [*first_three, finished_late]  # each once, in the order they finished
    # bob's export holds the same games (his seats in them), on one page by default.
    assert games_of(client.get("/v1/accounts/bob/games/export").get_data(as_text=True)) == seen


def test_the_last_page_links_nothing_even_when_full(
    client: FlaskClient, tokens: dict[str, str]
) -> None:
    two = [finished_game(client, tokens) for _ in range(2)]
    started(client, tokens)  # under way: in no export
    games, link, _ = page(client, "/v1/accounts/ann/games/export?limit=2")
    assert (games, link) == (two, None)
    games, link, _ = page(client, "/v1/accounts/ann/games/export")
    assert (games, link) == (two, None)
    one, link, _ = page(client, "/v1/accounts/ann/games/export?limit=1")
    assert one == two[:1] and link is not None
    rest, last, _ = page(client, link)
    assert (rest, last) == (two[1:], None)
    # Past the end, and for an account with no finished game: an empty page (the checking
    # client's validator takes no body for none).
    unchecked = client.application.test_client()
    after = int(parse_qs(urlsplit(link).query)["after"][0])
    empty = unchecked.get(f"/v1/accounts/ann/games/export?after={after + 1000}")
    assert (empty.status_code, empty.data, empty.headers.get("Link")) == (200, b"", None)
    sign_up(client, "cy")
    assert unchecked.get("/v1/accounts/cy/games/export").data == b""
    assert client.get("/v1/accounts/nobody/games/export").status_code == 404


def test_a_page_reads_at_most_limit_and_one_rows(
    client: FlaskClient, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is the query's (LIMIT), not a slice of every finished game read."""
    for _ in range(3):
        finished_game(client, tokens)
    read: list[tuple[str, int]] = []
    all_rows = Sql.all

    def counted(self: Sql, sql: str, params: Any = ()) -> list[Any]:
        rows = all_rows(self, sql, params)
        read.append((sql, len(rows)))
        return rows

    monkeypatch.setattr(Sql, "all", counted)
    games, _, _ = page(client, "/v1/accounts/ann/games/export?limit=1")
    assert len(games) == 1
    [(sql, rows)] = [(s, n) for s, n in read if "{seats}" in s]
    assert "LIMIT" in sql and rows == 2


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=201", "limit=x", "limit=-1", "after=-1", "after=x", "after=1234567890123"],
)
def test_a_bad_limit_or_cursor_is_refused_as_the_other_pages_refuse_them(
    client: FlaskClient, tokens: dict[str, str], query: str
) -> None:
    refused = client.get(f"/v1/accounts/ann/games/export?{query}")
    assert refused.status_code == 422 and refused.mimetype == "application/problem+json"
    assert refused.get_json()["code"] == "invalid_request"


def test_the_client_package_follows_the_links_to_every_game(
    app: Flask, client: FlaskClient, tokens: dict[str, str]
) -> None:
    games = [finished_game(client, tokens) for _ in range(3)]
    whole = "".join(export_text(client, game_id) for game_id in games)
    transport = httpx.WSGITransport(app=app)
    with Client(
        "http://localhost", http=httpx.Client(transport=transport, base_url="http://localhost")
    ) as c:
        assert c.account_export("ann", limit=2) == whole
        assert c.account_export("ann") == whole


def test_a_store_built_before_the_pages_serves_its_listing_and_exports_once_rebuilt(
    app: Flask, client: FlaskClient, tokens: dict[str, str]
) -> None:
    """An upgraded host over a version-2 account-games view (no finishes numbered): its
    listing answers as before, its export is 503 until ``projections rebuild account_games``,
    which numbers the finishes as the live view did (a saved link still leads on)."""
    rt = app.extensions["cantstop"]
    games = [finished_game(client, tokens) for _ in range(3)]
    first, link, _ = page(client, "/v1/accounts/ann/games/export?limit=2")
    generation = rt.views.tracking(rt.account_games).generation
    seats = f"cantstop_view_account_games_seats_g{generation}"
    with rt.games.store.recorder.datastore.transaction(commit=True) as cursor:
        cursor.execute("UPDATE cantstop_views SET version = 2 WHERE name = 'account_games'")
        cursor.execute(f"DROP INDEX {seats}_finished")
        cursor.execute(f"ALTER TABLE {seats} DROP COLUMN finished")
        cursor.execute(f"DROP TABLE cantstop_view_account_games_finishes_g{generation}")
    listed = client.get("/v1/accounts/ann/games").get_json()["games"]
    assert [g["game_id"] for g in listed] == games[::-1]
    refused = client.get("/v1/accounts/ann/games/export")
    assert (refused.status_code, refused.get_json()["code"]) == (503, "store_unavailable")
    assert "projections rebuild account_games" in refused.get_json()["detail"]
    rt.views.rebuild(rt.account_games)
    assert page(client, "/v1/accounts/ann/games/export?limit=2")[:2] == (first, link)
    assert link is not None and page(client, link)[:2] == (games[2:], None)
