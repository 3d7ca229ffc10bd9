"""Verify a transcript: a whole game with the dice written in (contract: Transcripts).

``verify(doc)`` replays every action through the Game aggregate (manual dice) and returns the
verdict; ``Verification`` does it step by step, for a trace streamed as it is made.
A document that is not even well formed raises MalformedTranscript (API 422, CLI exit 2).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from domain.commands import NewGame, parse_action
from domain.errors import DomainError, InvalidRequest
from domain.game import Game
from domain.view import game_state

TOP_LEVEL = {"players", "rules", "first_player", "actions"}
ACTION_FIELDS = {
    "roll": {"type", "seat", "dice"},
    "move": {"type", "seat", "sums"},
    "stop": {"type", "seat"},
    "resign": {"type", "seat"},
}
MAX_ACTIONS = 100_000


class MalformedTranscript(ValueError):
    """Not a transcript at all: the reason is one line."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_transcript(doc: Any, *, extra: frozenset[str] = frozenset()) -> None:
    """Structural checks only: the rules themselves are judged while replaying."""
    if not isinstance(doc, Mapping):
        raise MalformedTranscript("a transcript is a JSON object")
    unknown = sorted(set(doc) - TOP_LEVEL - extra)
    if unknown:
        raise MalformedTranscript(f"unknown field(s): {', '.join(unknown)}")
    players = doc.get("players")
    if not isinstance(players, list) or not players:
        raise MalformedTranscript("players must be a non-empty list of names")
    actions = doc.get("actions", [])
    if not isinstance(actions, list):
        raise MalformedTranscript("actions must be a list")
    if len(actions) > MAX_ACTIONS:
        raise MalformedTranscript(f"at most {MAX_ACTIONS} actions")
    for index, action in enumerate(actions):
        where = f"actions[{index}]"
        if not isinstance(action, Mapping):
            raise MalformedTranscript(f"{where} is not an object")
        kind = action.get("type")
        if not isinstance(kind, str) or kind not in ACTION_FIELDS:
            raise MalformedTranscript(f"{where}.type must be one of roll, move, stop, resign")
        unknown = sorted(set(action) - ACTION_FIELDS[kind])
        if unknown:
            raise MalformedTranscript(f"{where} has unknown field(s): {', '.join(unknown)}")
        if "seat" in action and not _is_int(action["seat"]):
            raise MalformedTranscript(f"{where}.seat must be an integer")
        if kind == "resign" and "seat" not in action:
            raise MalformedTranscript(f"{where}: resign needs the seat that resigns")
        if kind == "move":
            sums = action.get("sums")
            if not isinstance(sums, list) or not sums or not all(_is_int(s) for s in sums):
                raise MalformedTranscript(f"{where}.sums must be a non-empty list of integers")


def apply_action(game: Game, action: Mapping[str, Any]) -> None:
    """One action by the player to act (or the asserted ``seat``), in the contract's check order."""
    if action["type"] == "resign":
        seat = action["seat"]
    else:
        seat = action.get("seat", game.current if game.current is not None else 0)
    game.act(seat, parse_action(action))


class Verification:
    """A transcript replayed action by action: ``states`` applies them (yielding the state
    after each one applied, when traced), then ``verdict`` says how it went. Raises
    MalformedTranscript when made from a document that is not even well formed. The API streams
    a trace from it, each state encoded as it comes, so that a long transcript's trace (~1.2 KB
    a state) is never held whole (service/http/transcripts.py)."""

    def __init__(self, doc: Any, *, extra: frozenset[str] = frozenset()) -> None:
        check_transcript(doc, extra=extra)
        try:
            self.game = Game.start(
                uuid.uuid4(),
                NewGame(
                    players=doc["players"],
                    rules=doc.get("rules"),
                    dice="manual",
                    first_player=doc.get("first_player"),
                ),
            )
        except InvalidRequest as exc:
            raise MalformedTranscript(exc.detail) from None
        self.actions: list[Any] = doc.get("actions", [])
        self.applied = 0
        self.error: dict[str, Any] | None = None

    def states(self, *, trace: bool = True) -> Iterator[dict[str, Any]]:
        """Apply the actions up to the first refused one, yielding the state after each applied
        one (nothing without ``trace``). Once only."""
        game = self.game
        for index, action in enumerate(self.actions):
            try:
                apply_action(game, action)
            except DomainError as exc:
                self.error = {"index": index, "code": exc.code, "detail": exc.detail}
                return
            self.applied += 1
            game.collect_events()  # nothing keeps them: a long transcript's would pile up
            if trace:
                yield game_state(game)

    def verdict(self) -> dict[str, Any]:
        """How the replay went, once ``states`` is exhausted."""
        return {
            "valid": self.error is None,
            "applied": self.applied,
            "error": self.error,
            "game": game_state(self.game),
        }


def verify(doc: Any, *, trace: bool = False, extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    verification = Verification(doc, extra=extra)
    states = list(verification.states(trace=trace))
    verdict = verification.verdict()
    if trace:
        verdict["trace"] = states
    return verdict
