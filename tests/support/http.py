"""HTTP: requests to a real server on this host (one per fresh connection) and their checks;
the test client's requests and their checks."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"
Json = dict[str, Any]


def call(
    port: int,
    method: str,
    path: str,
    body: Json | None = None,
    token: str | None = None,
    timeout: float = 20,
) -> tuple[int, Json]:
    """One HTTP request; a generous timeout, so a starved server fails the test, not hangs it."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        conn.close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes
    seconds: float

    def json(self) -> Json:
        value = json.loads(self.body)
        assert isinstance(value, dict), value
        return value

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()


def send(
    port: int,
    method: str,
    path: str,
    body: Json | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Reply:
    """One HTTP request on a fresh connection; the timeout only keeps a broken server from
    hanging the test (tests bound the time themselves, with ``Reply.seconds``)."""
    all_headers = {"Content-Type": "application/json"} if body is not None else {}
    all_headers.update(headers or {})
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request(
            method, path, body=None if body is None else json.dumps(body), headers=all_headers
        )
        response = conn.getresponse()
        raw = response.read()
        return Reply(
            response.status,
            {name.lower(): value for name, value in response.getheaders()},
            raw,
            time.monotonic() - started,
        )
    finally:
        conn.close()


def problem(reply: Reply, status: int, code: str) -> Json:
    assert reply.status == status, (reply.status, reply.body[:500])
    assert reply.content_type == "application/problem+json", reply.headers
    body = reply.json()
    assert body["code"] == code and body["status"] == status, body
    assert {"type", "title", "detail"} <= body.keys()
    return body


# ------------------------------------------------------------------------- the test client
def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def refused(response: Any, status: int, code: str) -> Json:
    """The test client's problem answer, checked: its status and stable ``code``."""
    assert response.status_code == status, response.get_data(as_text=True)
    body: Json = response.get_json()
    assert body["code"] == code, body
    return body
