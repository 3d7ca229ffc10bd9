"""The base of every refusal the service answers with a stable problem code, at the bottom of
the layers: the application and the persistence package both raise them, and the HTTP layer maps
codes to statuses."""

from __future__ import annotations

from typing import Any

MAX_REASON = 200


def describe(exc: BaseException) -> str:
    """An exception in one short line, for logs and audit details."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


class ApplicationError(Exception):
    """A refused request, with a stable snake_case ``code`` and extra problem fields."""

    code = "application_error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
