"""openapi.yaml and the code agree: every route is documented and every documented operation exists.

(Every /v1/ response the suite sees is also validated against the file: tests/conftest.py.)
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.errors import InvalidRequest
from domain.game import check_name
from service.config import Settings
from service.http.app import create_app
from service.http.core import HTTP_CODES, STATUS
from tests.support.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
UNDOCUMENTED = {"/", "/docs/", "/docs/<path:path>", "/static/<path:filename>"}
PAGES = (
    "/games/",
    "/assets/",
    "/account",
    "/players/",
    "/leaderboards/",
    "/tournaments",
)  # web pages, not the API
METHODS = {"get", "post", "put", "patch", "delete"}


def documented() -> set[tuple[str, str]]:
    spec = load_spec()
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    }


def routed(app: Flask) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.rule in UNDOCUMENTED or rule.rule.startswith(PAGES):
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in rule.methods or ():
            if method.lower() in METHODS:
                found.add((method, path))
    return found


def test_every_route_is_documented_and_every_operation_exists(tmp_path: Path) -> None:
    # With metrics on, so that GET /metrics (off by default: a 404 then) is among the routes.
    with_metrics = Settings(database_url=f"sqlite:///{tmp_path / 'routes.sqlite'}", metrics=True)
    app = create_app(with_metrics, create_tables=True)
    try:
        assert routed(app) == documented()
    finally:
        app.extensions["cantstop"].close()


def test_the_served_document_is_the_file(client: FlaskClient) -> None:
    response = client.get("/openapi.yaml")
    assert response.status_code == 200
    assert response.get_data(as_text=True) == (ROOT / "openapi.yaml").read_text(encoding="utf-8")


def test_interactive_docs_are_served_without_a_cdn(client: FlaskClient) -> None:
    page = client.get("/docs/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "/openapi.yaml" in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and not [a for a in assets if a.startswith(("http://", "https://", "//"))]
    for asset in assets:
        with client.get(asset) as response:  # file responses hold the file open until closed
            assert response.status_code == 200, asset


def test_health_reports_the_database(client: FlaskClient) -> None:
    body = client.get("/healthz").get_json()
    assert body["status"] == "ok"
    assert body["checks"] == {
        "database": "ok",
        "writes": "ok",
        "redis": "not configured",
        "views": "ok",
    }


# ------------------------------------------------------------------------------ player names
Ranges = list[tuple[int, int]]


def _ranges(keep: Any) -> Ranges:
    found: Ranges = []
    for code in range(sys.maxunicode + 1):
        if keep(chr(code)):
            if found and found[-1][1] == code - 1:
                found[-1] = (found[-1][0], code)
            else:
                found.append((code, code))
    return found


@functools.cache
def name_classes() -> tuple[Ranges, Ranges]:
    """What ``check_name`` trims (``str.isspace``) and what a name may hold besides the space
    (``str.isprintable``: Unicode categories L, M, N, P, S), as code point ranges."""
    return _ranges(str.isspace), _ranges(lambda c: c.isprintable() and not c.isspace())


def name_pattern() -> str:
    """openapi.yaml's PlayerName pattern, with literal characters: trimmed whitespace around
    visible characters, single or runs of spaces between them."""

    def klass(ranges: Ranges) -> str:
        spans = (
            chr(a) if a == b else f"{chr(a)}{'-' if b > a + 1 else ''}{chr(b)}" for a, b in ranges
        )
        return "[" + "".join(spans) + "]"

    space, visible = name_classes()
    return f"^{klass(space)}*(?: *{klass(visible)})+{klass(space)}*$"


def name_pattern_yaml() -> str:
    """The pattern as openapi.yaml writes it: YAML escapes, lines of about 90 characters. To
    update the document: ``python -c "from tests.test_openapi import name_pattern_yaml as y;
    print(y())"``."""

    def char(code: int) -> str:
        if 0x21 <= code <= 0x7E and chr(code) not in '"\\':
            return chr(code)
        return (
            f"\\x{code:02x}"
            if code <= 0xFF
            else f"\\u{code:04x}"
            if code <= 0xFFFF
            else f"\\U{code:08x}"
        )

    def items(ranges: Ranges) -> list[str]:
        return [
            char(a) + ("" if a == b else ("-" if b > a + 1 else "") + char(b)) for a, b in ranges
        ]

    space, visible = name_classes()
    trim = "[" + "".join(items(space)) + "]"
    lines, line = [], ""
    for piece in ["^" + trim + "*(?: *[", *items(visible), "])+" + trim + "*$"]:
        if len(line) + len(piece) > 90:
            lines.append(line)
            line = ""
        line += piece
    indent = " " * 6
    return indent + 'pattern: "' + ("\\\n" + indent + "  ").join([*lines, line]) + '"'


def test_the_player_name_pattern_is_what_the_domain_accepts() -> None:
    """The pattern spells out its classes range by range (the tools do not agree on \\p{...}),
    rebuilt here from this Python's Unicode database: a Python with a newer Unicode fails here
    rather than let the document drift; ``name_pattern()`` gives the new classes."""
    pattern = load_spec()["components"]["schemas"]["PlayerName"]["pattern"]
    assert pattern == name_pattern()
    assert name_pattern_yaml() in (ROOT / "openapi.yaml").read_text(encoding="utf-8")


def _accepted(name: str) -> bool:
    try:
        check_name(name)
    except InvalidRequest:
        return False
    return True


@pytest.mark.parametrize(
    "name",
    [
        "Ann",
        " Ann ",
        "\tAnn\n",
        "Zoë",
        "Zoe\u0308",
        "李小龙",
        "हिन्दी",
        "O'Brien-Smith",
        "Ann  Bob",
        "👍",
        "\u00a0Ann\u3000",
        "",
        " ",
        "\t\n",
        "\u00a0",
        "A\tB",
        "A\u00a0B",
        "A\u200bB",
        "\u00adA",
        "A\x7f",
        "A\x85",
        "\x85A",
        "A\ue000",
        "A\U000e0001",
        "A\u0378",
        "A\u2028B",
    ],
)
def test_the_pattern_and_the_domain_agree_on_names(name: str) -> None:
    pattern = re.compile(load_spec()["components"]["schemas"]["PlayerName"]["pattern"])
    assert bool(pattern.search(name)) == _accepted(name), ascii(name)


def test_the_pattern_and_the_domain_agree_at_every_edge_of_a_class() -> None:
    """Where a class of characters starts or ends, on both sides, alone and inside a name."""
    pattern = re.compile(name_pattern())
    space, visible = name_classes()
    edges = {code + step for a, b in space + visible for code in (a, b) for step in (-1, 0, 1)}
    for code in sorted(edges & set(range(sys.maxunicode + 1))):
        c = chr(code)
        for name in (c, f"A{c}", f"{c}A", f"A{c}B"):
            assert bool(pattern.search(name)) == _accepted(name), ascii(name)


def test_every_problem_code_the_service_answers_is_listed() -> None:
    """A client generated from the document, or a person reading it, sees every stable code:
    each one the HTTP layer maps to a status is among Problem.code's examples."""
    listed = set(load_spec()["components"]["schemas"]["Problem"]["properties"]["code"]["examples"])
    assert set(STATUS) | set(HTTP_CODES.values()) <= listed
