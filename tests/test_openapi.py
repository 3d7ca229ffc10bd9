"""openapi.yaml and the code agree: every route is documented and every documented operation exists.

(Every /v1/ response the suite sees is also validated against the file: tests/conftest.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from flask import Flask
from flask.testing import FlaskClient

ROOT = Path(__file__).resolve().parent.parent
UNDOCUMENTED = {"/", "/docs/", "/docs/<path:path>", "/static/<path:filename>"}
METHODS = {"get", "post", "put", "patch", "delete"}


def documented() -> set[tuple[str, str]]:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    }


def routed(app: Flask) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.rule in UNDOCUMENTED:
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in rule.methods or ():
            if method.lower() in METHODS:
                found.add((method, path))
    return found


def test_every_route_is_documented_and_every_operation_exists(app: Flask) -> None:
    assert routed(app) == documented()


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
    assert body["checks"] == {"database": "ok", "redis": "not configured"}
