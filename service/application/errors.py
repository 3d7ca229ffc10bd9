"""The application's refusals, each with a stable problem code (the HTTP layer maps codes to
statuses). Domain refusals (``domain.errors``) pass through as they are."""

from __future__ import annotations

from service.errors import ApplicationError, describe

__all__ = [
    "ApplicationError",
    "describe",
]  # at the bottom layer (service.errors); here for the application


class NotFound(ApplicationError):
    code = "not_found"


class Unauthorized(ApplicationError):
    code = "unauthorized"


class VersionConflict(ApplicationError):
    code = "version_conflict"


class ConcurrentAction(ApplicationError):
    code = "concurrent_action"


class RecordedRefusal(ApplicationError):
    """The first answer to an Idempotency-Key was a refusal: every repeat is refused alike."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class TurnMovedOn(ApplicationError):
    """The game's turn began after the request arrived: it was not decided on this turn."""

    code = "turn_moved_on"


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


class NotWitnessed(ApplicationError):
    """An imported game: this server did not see it played, so it signs nothing of it."""

    code = "imported_game"


class RatedNeedsClock(ApplicationError):
    """A rated game without a turn clock: a losing player could stall it for ever (1.3)."""

    code = "rated_needs_clock"


class RatedGameInProgress(ApplicationError):
    """The expert's advice and analysis are closed while a rated game is played (1.3)."""

    code = "rated_game_in_progress"


class GameTooLong(ApplicationError):
    """A history longer than the work asked of it takes: the analysis's ``MAX_VERSIONS``, an
    import's ``MAX_IMPORT_EVENTS``."""

    code = "game_too_long"
