"""Domain errors, each with a stable code that the API and the transcript verifier report as is."""

from __future__ import annotations


class DomainError(Exception):
    """A refused command. Nothing was recorded."""

    code = "domain_error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(DomainError):
    """A request that is not well formed (bad rules, bad player list): a 422, not a refused move."""

    code = "invalid_request"


class IllegalAction(DomainError):
    code = "illegal_action"


class NotYourTurn(DomainError):
    code = "not_your_turn"


class InvalidDice(DomainError):
    code = "invalid_dice"


class GameOver(DomainError):
    code = "game_over"


class TimedOut(DomainError):
    """An action for a turn whose deadline had passed: nothing but the timeout is recorded."""

    code = "turn_timed_out"


class AlreadySeated(DomainError):
    """An account holds at most one seat of a game (contract 1.2)."""

    code = "already_seated"
