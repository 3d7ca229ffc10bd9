"""A stream's resume point (``Last-Event-ID`` or ``?after``) of thousands of digits is a bad
resume point (422 invalid_request), as any other: ``int()`` refuses strings of over 4,300
digits with a ValueError, which was a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.http.app import create_app

LONG = "1" * 4301


@pytest.fixture
def client(tmp_path: Path) -> Iterator[FlaskClient]:
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}"), create_tables=True
    )
    yield app.test_client()
    app.extensions["cantstop"].hub.close()
    app.extensions["cantstop"].close()


def game_of(client: FlaskClient) -> str:
    response = client.post("/v1/games", json={"players": ["Ann", "Bob"]})
    assert response.status_code == 201
    game_id: str = response.get_json()["game"]["id"]
    return game_id


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        (f"?after={LONG}", {}),
        ("", {"Last-Event-ID": LONG}),
        ("", {"Last-Event-ID": "9" * 10_000}),
        (f"?after={'0' * 4000}{'1' * 301}", {}),  # leading zeros or not: too many digits
    ],
)
def test_a_resume_point_of_thousands_of_digits_is_a_bad_request(
    client: FlaskClient, query: str, headers: dict[str, str]
) -> None:
    game_id = game_of(client)
    response = client.get(f"/v1/games/{game_id}/stream{query}", headers=headers)
    assert response.status_code == 422
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["code"] == "invalid_request"


def test_leading_zeros_are_no_digits_of_a_resume_point(client: FlaskClient) -> None:
    # HEAD: the answer's head only, no stream opened; 0…01 is version 1, however many zeros.
    game_id = game_of(client)
    for resume in ("0" * 5000 + "1", "01"):
        assert client.head(f"/v1/games/{game_id}/stream?after={resume}").status_code == 200
        headers = {"Last-Event-ID": resume}
        assert client.head(f"/v1/games/{game_id}/stream", headers=headers).status_code == 200
