"""The application's refusals, each with a stable problem code (the HTTP layer maps codes to
statuses). Domain refusals (``domain.errors``) pass through as they are."""

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


class NotFound(ApplicationError):
    code = "not_found"


class Unauthorized(ApplicationError):
    code = "unauthorized"


class VersionConflict(ApplicationError):
    code = "version_conflict"


class ConcurrentAction(ApplicationError):
    code = "concurrent_action"


class IdempotencyKeyReused(ApplicationError):
    code = "idempotency_key_reused"


class ReadOnly(ApplicationError):
    """An imported game: it can be read and audited, not played."""

    code = "read_only"


class ImportInvalid(ApplicationError):
    """An import whose history or transcript does not verify; the verdict goes with it."""

    code = "import_invalid"


class NotYourSeat(ApplicationError):
    """A token that does not hold the seat it asks to give back."""

    code = "not_your_seat"
