"""The web pages without a browser (Flask's test client): ``/`` negotiated between the lobby and
the JSON index, HTML error pages for pages and problem+json for the API, the Content-Security-
Policy, escaping, the record sheets behind plain links, and assets that are all on this machine.
The pages in a real browser: tests/test_pages_browser.py."""

from __future__ import annotations

import glob
import json
import re
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain import audit
from domain.tournament import Tournament
from service.config import Settings
from service.http.app import create_app
from tests.support.games import UNKNOWN

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "service" / "http" / "pages"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
EVIL = '<script>alert("x")</script>&<b>'


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'pages.sqlite'}", bot_pause=0),
        create_tables=True,
    )
    yield application
    application.extensions["cantstop"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def create(client: FlaskClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/games", json=body)
    assert response.status_code == 201, response.get_json()
    created = response.get_json()
    assert isinstance(created, dict)
    return created


def script_sources(policy: str) -> str:
    return next(d for d in policy.split(";") if d.strip().startswith("script-src"))


# ----------------------------------------------------------------------------- negotiation
@pytest.mark.parametrize(
    "accept",
    [BROWSER, "text/html", "text/html;q=0.9,application/json;q=0.5", "text/html;charset=utf-8"],
)
def test_the_root_is_the_lobby_page_for_browsers(client: FlaskClient, accept: str) -> None:
    response = client.get("/", headers={"Accept": accept})
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    assert "Accept" in response.headers["Vary"]
    html = response.get_data(as_text=True)
    assert "<h1>Can't Stop</h1>" in html
    assert 'src="/assets/js/lobby.js"' in html


@pytest.mark.parametrize(
    "accept", [None, "*/*", "application/json", "application/json,text/html;q=0.5", "text/plain"]
)
def test_the_root_is_the_json_index_for_everyone_else(
    client: FlaskClient, accept: str | None
) -> None:
    response = client.get("/", headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert "Accept" in response.headers["Vary"]
    assert response.get_json() == {
        "name": "Can't Stop game service",
        "api": "/v1",
        "docs": "/docs",
        "openapi": "/openapi.yaml",
        "health": "/healthz",
    }


# ---------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "path",
    [
        f"/games/{UNKNOWN}",
        "/games/not-a-game",
        f"/games/{UNKNOWN}/replay",
        "/nowhere",
    ],
)
def test_a_page_that_does_not_exist_is_an_html_page_for_a_browser(
    client: FlaskClient, path: str
) -> None:
    response = client.get(path, headers={"Accept": BROWSER})
    assert response.status_code == 404
    assert response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    assert "<h1>Not found</h1>" in html
    assert 'href="/"' in html  # back to the lobby
    assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
    assert "Accept" in response.headers["Vary"]  # outside /v1, an error is a page or JSON


@pytest.mark.parametrize("accept", [BROWSER, None, "*/*", "application/json"])
def test_the_api_keeps_problem_json_whatever_the_client_accepts(
    client: FlaskClient, accept: str | None
) -> None:
    headers = {"Accept": accept} if accept else {}
    response = client.get(f"/v1/games/{uuid.uuid4()}", headers=headers)
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["code"] == "not_found"
    assert "Vary" not in response.headers  # the API's errors are always problem+json


def test_an_unknown_path_is_problem_json_for_an_api_client(client: FlaskClient) -> None:
    response = client.get("/nowhere")
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"
    assert "Accept" in response.headers["Vary"]


def test_a_name_in_an_error_page_is_escaped(client: FlaskClient) -> None:
    response = client.get("/games/<script>alert(1)&", headers={"Accept": BROWSER})
    assert response.status_code == 404
    html = response.get_data(as_text=True)
    assert "<script>alert" not in html
    assert "no game &#39;&lt;script&gt;alert(1)&amp;&#39;" in html


# ------------------------------------------------------------------------------- the pages
def test_game_and_replay_pages_escape_every_name(client: FlaskClient) -> None:
    created = create(client, {"players": [EVIL, "Bob"]})
    game_id = created["game"]["id"]
    for path in (f"/games/{game_id}", f"/games/{game_id}/replay"):
        response = client.get(path, headers={"Accept": BROWSER})
        assert response.status_code == 200
        html = response.get_data(as_text=True)
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&lt;b&gt;" in html
        # The state handed to the page's script: JSON that cannot close its <script> element.
        data = re.search(
            r'<script type="application/json" id="initial-state">(.*?)</script>', html, re.S
        )
        assert data is not None
        assert "<" not in data.group(1)
        assert json.loads(data.group(1))["players"][0]["name"] == EVIL
        # Every script is a file of this server; none is inline.
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert 'type="module" src="/assets/js/' in tag or 'type="application/json"' in tag


def test_pages_carry_a_content_security_policy_without_inline_scripts(client: FlaskClient) -> None:
    game_id = create(client, {"players": ["Ann", "Bob"]})["game"]["id"]
    for path in ("/", f"/games/{game_id}", f"/games/{game_id}/replay"):
        response = client.get(path, headers={"Accept": BROWSER})
        policy = response.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert script_sources(policy).split() == ["script-src", "'self'"]
        assert "default-src 'self'" in policy and "object-src 'none'" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    # The API viewer keeps its inline scripts, so no script policy; but no one may frame it.
    viewer = client.get("/docs/").headers
    assert viewer["Content-Security-Policy"] == "frame-ancestors 'none'"
    assert viewer["X-Frame-Options"] == "DENY" and viewer["X-Content-Type-Options"] == "nosniff"


def test_a_page_never_takes_a_token_in_its_address(client: FlaskClient) -> None:
    """The token travels in the fragment, which no browser sends; the page asks for none."""
    created = create(client, {"players": ["Ann", "Bob"]})
    game_id = created["game"]["id"]
    html = client.get(f"/games/{game_id}", headers={"Accept": BROWSER}).get_data(as_text=True)
    token = created["seats"][0]["token"]
    assert token not in html
    api_js = (PAGES / "static" / "js" / "api.js").read_text(encoding="utf-8")
    assert "history.replaceState" in api_js and "Authorization" in api_js
    for script in (PAGES / "static" / "js").glob("*.js"):
        text = script.read_text(encoding="utf-8")
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, script.name
        assert "console.log" not in text, script.name
        assert not re.search(r"[?&]token=", text), script.name


def test_a_record_sheet_is_a_plain_link_in_each_format(client: FlaskClient) -> None:
    created = create(client, {"players": ["Sol"], "rules": {"solitaire": "easy"}, "dice": "manual"})
    game_id = created["game"]["id"]
    auth = {"Authorization": f"Bearer {created['seats'][0]['token']}"}
    for action in ({"type": "roll", "dice": [1, 1, 1, 1]}, {"type": "move", "sums": [2, 2]}):
        assert (
            client.post(f"/v1/games/{game_id}/actions", json=action, headers=auth).status_code
            == 200
        )
    assert (
        client.post(f"/v1/games/{game_id}/actions", json={"type": "stop"}, headers=auth).status_code
        == 200
    )
    pdf = client.get(f"/games/{game_id}/record-sheet.pdf")
    assert pdf.status_code == 200 and pdf.mimetype == "application/pdf"
    assert pdf.data.startswith(b"%PDF")
    assert pdf.headers["Content-Disposition"].startswith("attachment;")
    csv = client.get(f"/games/{game_id}/record-sheet.csv")
    assert csv.mimetype == "text/csv"
    assert csv.get_data(as_text=True).splitlines()[0] == (
        "turn,result,progress,wiped,captured,claimed_total"
    )
    text = client.get(f"/games/{game_id}/record-sheet.txt")
    assert text.mimetype == "text/plain"
    assert "1. 2×2" in text.get_data(as_text=True)
    assert text.get_data(as_text=True) == client.get(
        f"/v1/games/{game_id}/record-sheet", headers={"Accept": "text/plain"}
    ).get_data(as_text=True)
    assert client.get(f"/games/{game_id}/record-sheet.doc").status_code == 422


def test_a_multiplayer_record_sheet_link_names_the_seat(client: FlaskClient) -> None:
    game_id = create(client, {"players": ["Ann", "Bob"]})["game"]["id"]
    assert client.get(f"/games/{game_id}/record-sheet.txt?seat=1").status_code == 200
    assert client.get(f"/games/{game_id}/record-sheet.txt?seat=2").status_code == 422
    # Without the seat, as the API answers: not seat 0's sheet by default.
    unnamed = client.get(f"/games/{game_id}/record-sheet.txt")
    assert unnamed.status_code == 422 and "seat" in unnamed.get_json()["detail"]


# ------------------------------------------------------------------------------- the assets
def test_every_asset_a_page_names_is_served_from_this_machine(client: FlaskClient) -> None:
    game_id = create(client, {"players": ["Ann", "Bob"]})["game"]["id"]
    seen: set[str] = set()
    for path in ("/", f"/games/{game_id}", f"/games/{game_id}/replay"):
        html = client.get(path, headers={"Accept": BROWSER}).get_data(as_text=True)
        for url in re.findall(r'(?:src|href)="([^"]+)"', html):
            assert not re.match(r"^(?:[a-z]+:)?//", url), f"{path} names an outside asset: {url}"
            if url.startswith("/assets/"):
                seen.add(url)
    # Modules import one another by relative paths: follow them too.
    for script in (PAGES / "static" / "js").glob("*.js"):
        text = script.read_text(encoding="utf-8")
        for name in re.findall(r'from "\./([\w.]+)"', text):
            seen.add(f"/assets/js/{name}")
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), script.name
    css = (PAGES / "static" / "css" / "site.css").read_text(encoding="utf-8")
    assert "url(" not in css and "@import" not in css
    assert {"/assets/css/site.css", "/assets/js/game.js", "/assets/js/board.js"} <= seen
    for url in sorted(seen):
        with client.get(url) as response:
            assert response.status_code == 200, url
            if url.endswith(".js"):
                assert response.mimetype == "text/javascript", url


def test_vendored_files_carry_their_licences() -> None:
    vendor = PAGES / "static" / "vendor"
    for folder in (p for p in vendor.iterdir() if p.is_dir()):
        assert (folder / "LICENSE").is_file(), folder
        assert folder.name in (vendor / "README.md").read_text(encoding="utf-8")
    axe = (vendor / "axe-core" / "axe.min.js").read_text(encoding="utf-8")
    assert axe.startswith("/*! axe v4.14.1")


def test_an_installed_wheel_holds_every_template_and_asset() -> None:
    """setuptools expands ``[tool.setuptools.package-data]`` with recursive globs from the
    package's folder: every file of the pages must match one."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["service"]
    packaged = {
        Path(name).resolve()
        for pattern in patterns
        for name in glob.glob(str(ROOT / "service" / pattern), recursive=True)
    }
    files = [
        p
        for sub in ("templates", "static")
        for p in (PAGES / sub).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert files
    missing = [str(p.relative_to(ROOT)) for p in files if p.resolve() not in packaged]
    assert not missing, missing


def test_the_lobby_links_the_rated_leaderboards_of_the_standard_rules(client: FlaskClient) -> None:
    """Each link names the pool a game of those rules rates in, and opens before its first
    rated game as an empty ranking (any other unknown pool stays 404)."""
    from domain.ratings import pool

    page = client.get("/", headers={"Accept": "text/html"}).get_data(as_text=True)
    links = re.findall(r'href="/leaderboards/([0-9]p-[0-9a-f]{10})"', page)
    expected = []
    for players in (2, 3, 4):
        game = create(client, {"players": [f"P{n}" for n in range(players)]})["game"]
        expected.append(pool(game["rules"], players))
    assert links == expected
    for link in links:
        shown = client.get(f"/leaderboards/{link}", headers={"Accept": "text/html"})
        assert shown.status_code == 200
        assert "No account has played 10 rated games" in shown.get_data(as_text=True)
    assert client.get("/leaderboards/2p-0000000000").status_code == 404


def js_list(script: str, name: str) -> list[str]:
    """The strings of the array ``const NAME = [...]`` in a page script."""
    text = (PAGES / "static" / "js" / script).read_text(encoding="utf-8")
    found = re.search(rf"const {name} = \[(.*?)\];", text, re.S)
    assert found, f"{name} in {script}"
    return re.findall(r'"([A-Za-z]+)"', found.group(1))


def test_the_pages_listen_to_every_event_type_their_streams_name() -> None:
    """An EventSource hears a named event only if the page listens to that name: the pages'
    lists of them (copies, in JavaScript) must be the domain's own, or a new event type would
    pass the pages by."""
    game_types = js_list("api.js", "STREAM_EVENT_TYPES")
    assert len(game_types) == len(set(game_types))
    assert set(game_types) == {"message", *audit.EVENT_TYPES}
    assert js_list("tournament.js", "STREAM_TYPES") == list(Tournament.EVENT_TYPES)
