"""What the client raises: the server's refusals (problem+json) and an unreachable server."""

from __future__ import annotations

import json
from typing import Any

import httpx


class CantStopError(Exception):
    """The base of everything this package raises."""


class ApiError(CantStopError):
    """The server refused the request: an RFC 9457 problem with the service's stable ``code``.

    ``status`` is the HTTP status, ``code`` the snake_case code (``not_your_turn``,
    ``illegal_action``, ``rate_limited``, …; ``http_<status>`` when the body was not a problem),
    ``detail`` the server's explanation, ``problem`` the whole body (``legal_actions`` comes with
    ``illegal_action``, ``version`` with ``version_conflict``), ``retry_after`` the seconds the
    server asked to wait (429, 503), when it said.
    """

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem: dict[str, Any] = problem or {}
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        problem: dict[str, Any] = {}
        try:
            body = json.loads(response.content) if response.content else None
        except ValueError:
            body = None
        if isinstance(body, dict):
            problem = body
        code = problem.get("code")
        detail = problem.get("detail")
        return cls(
            response.status_code,
            code if isinstance(code, str) else f"http_{response.status_code}",
            detail if isinstance(detail, str) else response.reason_phrase or "",
            problem,
            retry_after(response),
        )


class TransportError(CantStopError):
    """The server could not be reached, or the connection broke, and retrying did not help (or
    was not safe: a request that changes something and carries no idempotency key is not sent
    twice unless it certainly never arrived)."""


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (only the delay form: the service sends no date)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
