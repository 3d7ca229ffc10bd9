"""The account stream's notices: what concerns an account, one typed object each."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from cantstop_client.sse import ServerSentEvent
from cantstop_client.types import Challenge, Seek

# The types the service sends today; a newer server may add others, which come through with
# their ``type`` and ``data`` as sent (a bot should skip what it does not know).
CHALLENGE = "challenge"  # a challenge to you (data: challenge)
CHALLENGE_ACCEPTED = "challenge_accepted"
CHALLENGE_DECLINED = "challenge_declined"
CHALLENGE_CANCELED = "challenge_canceled"
CHALLENGE_EXPIRED = "challenge_expired"  # to both accounts: it expired unanswered (challenge)
SEEK_EXPIRED = "seek_expired"  # your seek found no game in time (data: seek)
GAME_STARTED = "game_started"  # game_id, version, seat, rated, players
YOUR_TURN = "your_turn"  # game_id, version, seat
GAME_FINISHED = "game_finished"  # game_id, version, seat, winner, status


@dataclass(frozen=True)
class Notice:
    """One message of ``GET /v1/account/stream``.

    ``id`` is the account's own sequence number (what ``Last-Event-ID`` resumes after), ``type``
    one of the constants above, ``data`` the message's JSON whole. The properties read the fields
    each type carries, and are None where a type has no such field.
    """

    id: int
    type: str
    at: str | None
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def from_sse(cls, message: ServerSentEvent) -> Notice | None:
        try:
            data = json.loads(message.data)
        except ValueError:
            return None  # not JSON: not a notice of this service; skipped
        if not isinstance(data, dict):
            return None
        sequence = data.get("id", message.id)
        number = sequence if isinstance(sequence, int) else 0
        if isinstance(sequence, str) and sequence.isdigit():
            number = int(sequence)
        kind = data.get("type") if isinstance(data.get("type"), str) else message.event
        at = data.get("at")
        return cls(number, str(kind), at if isinstance(at, str) else None, data)

    def _get(self, key: str) -> Any:
        return self.data.get(key)

    @property
    def game_id(self) -> str | None:
        """The game: of a game notice, or the game an accepted challenge made."""
        value = self._get("game_id")
        if value is None and self.challenge is not None:
            value = self.challenge.get("game_id")
        return value if isinstance(value, str) else None

    @property
    def version(self) -> int | None:
        """The game's version when the notice was written (your_turn: the version to act on)."""
        value = self._get("version")
        return value if isinstance(value, int) else None

    @property
    def seat(self) -> int | None:
        """Your seat in the game."""
        value = self._get("seat")
        return value if isinstance(value, int) else None

    @property
    def winner(self) -> int | None:
        value = self._get("winner")
        return value if isinstance(value, int) else None

    @property
    def status(self) -> str | None:
        value = self._get("status")
        return value if isinstance(value, str) else None

    @property
    def rated(self) -> bool | None:
        value = self._get("rated")
        return value if isinstance(value, bool) else None

    @property
    def players(self) -> list[Any] | None:
        value = self._get("players")
        return value if isinstance(value, list) else None

    @property
    def challenge(self) -> Challenge | None:
        value = self._get("challenge")
        return cast(Challenge, value) if isinstance(value, dict) else None

    @property
    def seek(self) -> Seek | None:
        value = self._get("seek")
        return cast(Seek, value) if isinstance(value, dict) else None
