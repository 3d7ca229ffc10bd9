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


# ------------------------------------------------------------------ tournaments (issue #45)
class AlreadyRegistered(DomainError):
    """An account registers in a tournament once (409)."""

    code = "already_registered"


class TournamentStarted(DomainError):
    """A Swiss tournament takes no registration once it has started (409)."""

    code = "tournament_started"


class TournamentFinished(DomainError):
    """A finished tournament (or an arena whose window closed) changes no more (409)."""

    code = "tournament_finished"


class NotRegistered(DomainError):
    """The account is not a player of the tournament (404)."""

    code = "not_registered"


class TournamentFull(DomainError):
    """The tournament holds its most players already (409)."""

    code = "tournament_full"


class TournamentNotReady(DomainError):
    """The tournament cannot do that now: not started, a round still under way, no such open
    table, or not over yet (409). Its detail says which."""

    code = "tournament_not_ready"


class TooManySeatChanges(DomainError):
    """A lobby whose seats changed ``domain.game.MAX_SEAT_CHANGES`` times gives no seat back
    (409); its open seats are still taken: joining and leaving for ever would grow its history
    without end."""

    code = "too_many_seat_changes"


class TooManyPauses(DomainError):
    """An arena's entrant who paused ``domain.tournament.MAX_PAUSES`` times pauses no more (409);
    resuming stays allowed: pausing and resuming for ever would grow the tournament's history
    past what its audit reads."""

    code = "too_many_pauses"
