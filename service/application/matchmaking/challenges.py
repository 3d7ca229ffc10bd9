"""Direct challenges between accounts (contract 1.2): one account asks another to play; the other
accepts (a game starts with both seats bound), declines, or lets it expire; the challenger may
cancel it while it is pending. A built-in bot accepts every valid challenge at once.

Each challenge is an aggregate in the event store, so its life is in the log like a game's (the
account stream's notices and the listing of pending challenges are views of it), and acceptance
is race-free across workers and hosts: accepting saves the challenge's ``Accepted`` and the new
game (its id derived from the challenge's) in one transaction, so of two acceptances, or an
acceptance and a cancellation, exactly one is recorded and the other is told the challenge is
no longer pending.

A pending challenge expires ``TTL`` after it was issued: from then on it is served as
``expired`` and can no longer be accepted, and the scheduler records its ``Expired`` (any number
of schedulers: the store takes one, as it takes one of two answers), which announces it to both
accounts (``challenge_expired``) and takes it off the pending list.

At most ``MAX_PENDING_OUT`` pending challenges per challenger, counted by slots
(``persistence.slots``): taken by a conditional write before the challenge is recorded, given
back when it is answered or expired, so that the cap holds under any race and only live
challenges count.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import get_topic, strtobool

from domain.commands import NewGame
from domain.errors import InvalidRequest
from domain.game import format_at, parse_at
from domain.rules import normalize_rules
from service.application.aggregates import moved_topics
from service.application.errors import ApplicationError, NotFound
from service.application.games.use_cases import Games
from service.application.players.accounts import BOTS, Accounts, Principal
from service.application.store import Store
from service.persistence.slots import Slots
from service.persistence.views import Sql, View, Views

TTL = timedelta(minutes=10)
MAX_PENDING_OUT = 20  # pending challenges one account may have issued at a time
CHALLENGE_GAME_NAMESPACE = uuid.UUID("8b1f3c55-2d7e-4a90-9e61-5c0a7d3b2f14")
EXPIRE_BATCH = 100  # expired challenges recorded per poll


class ChallengeNotPending(ApplicationError):
    """Accepting, declining or cancelling a challenge that was already answered or expired."""

    code = "challenge_not_pending"


class TooManyChallenges(ApplicationError):
    code = "too_many_challenges"


def slots_of(store: Store) -> Slots:
    """The caps' slots, in the store's database (created unless the store's tables are not)."""
    recorder: Any = store.recorder
    dialect = recorder.dialect
    slots = Slots(recorder.datastore, dialect)
    if strtobool(store.env.get("CREATE_TABLE") or "yes"):
        slots.create_table()
    return slots


def challenge_game_id(challenge_id: uuid.UUID) -> uuid.UUID:
    """The game a challenge makes: one per challenge, whoever accepts it how many times."""
    return uuid.uuid5(CHALLENGE_GAME_NAMESPACE, str(challenge_id))


class Challenge(Aggregate):
    """One account's challenge to another (handles as registered)."""

    @event("Issued")
    def __init__(
        self,
        challenger: str,
        challenged: str,
        rules: dict[str, Any],
        rated: bool,
        clock: dict[str, Any] | None,
        expires_at: str,
    ) -> None:
        self.challenger = challenger
        self.challenged = challenged
        self.rules = rules
        self.rated = rated
        self.clock = clock
        self.expires_at = expires_at
        self.status = "pending"
        self.game_id: str | None = None

    @event("Accepted")
    def accept(self, game_id: str) -> None:
        self.status = "accepted"
        self.game_id = game_id

    @event("Declined")
    def decline(self) -> None:
        self.status = "declined"

    @event("Canceled")
    def cancel(self) -> None:
        self.status = "canceled"

    @event("Expired")
    def expire(self) -> None:
        self.status = "expired"

    def status_at(self, now: datetime) -> str:
        if self.status == "pending" and parse_at(self.expires_at) <= now:
            return "expired"
        return str(self.status)

    def concerns(self, handle: str) -> bool:
        return handle.lower() in (self.challenger.lower(), self.challenged.lower())

    def as_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "status": self.status_at(now or datetime.now(UTC)),
            "from": self.challenger,
            "to": self.challenged,
            "rules": self.rules,
            "rated": self.rated,
            "clock": self.clock,
            "created_at": format_at(self.created_on),
            "expires_at": self.expires_at,
            "game_id": self.game_id,
        }


_EVENTS: tuple[type[Any], ...] = (
    Challenge.Issued,  # type: ignore[attr-defined]
    Challenge.Accepted,  # type: ignore[attr-defined]
    Challenge.Declined,  # type: ignore[attr-defined]
    Challenge.Canceled,  # type: ignore[attr-defined]
    Challenge.Expired,  # type: ignore[attr-defined]
)
# Stored rows name their classes by topic: Challenge lived in service.application.challenges
# before, and the rows it stored there keep that topic (read as this class, followed by views).
OLD_TOPICS = moved_topics("service.application.challenges", Challenge, _EVENTS)
CHALLENGE_TOPICS = (*(get_topic(cls) for cls in _EVENTS), *OLD_TOPICS)


@dataclass(frozen=True)
class Accepted:
    challenge: dict[str, Any]
    game: dict[str, Any]


class PendingChallenges(View):
    """The challenges still pending (not answered; perhaps expired), each account's incoming and
    outgoing: ``GET /v1/challenges`` and the cap on pending challenges one account issues."""

    name = "challenges"
    version = 1
    topics = CHALLENGE_TOPICS
    tables = {  # noqa: RUF012 (the View's declaration)
        "pending": [
            "CREATE TABLE IF NOT EXISTS {pending} (challenge_id TEXT PRIMARY KEY, "
            "challenger TEXT NOT NULL, challenged TEXT NOT NULL, expires_at TEXT NOT NULL, "
            "seq BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {pending}_from ON {pending} (challenger, seq)",
            "CREATE INDEX IF NOT EXISTS {pending}_to ON {pending} (challenged, seq)",
        ]
    }

    def apply(self, sql: Sql, prepared: list[tuple[int, Any]]) -> None:
        for seq, event_ in prepared:
            key = str(event_.originator_id)
            if isinstance(event_, Challenge.Issued):  # type: ignore[attr-defined]
                sql.execute(
                    "INSERT INTO {pending} (challenge_id, challenger, challenged, expires_at, "
                    "seq) VALUES (?, ?, ?, ?, ?) ON CONFLICT (challenge_id) DO NOTHING",
                    [
                        key,
                        event_.challenger.lower(),
                        event_.challenged.lower(),
                        event_.expires_at,
                        seq,
                    ],
                )
            else:  # answered: no longer pending
                sql.execute("DELETE FROM {pending} WHERE challenge_id = ?", [key])

    def of(self, views: Views, handle: str) -> tuple[list[str], list[str]]:
        """The ids of the account's pending challenges, (incoming, outgoing), oldest first."""
        key = handle.lower()

        def run(sql: Sql) -> tuple[list[str], list[str]]:
            incoming = sql.all(
                "SELECT challenge_id FROM {pending} WHERE challenged = ? ORDER BY seq", [key]
            )
            outgoing = sql.all(
                "SELECT challenge_id FROM {pending} WHERE challenger = ? ORDER BY seq", [key]
            )
            return [r["challenge_id"] for r in incoming], [r["challenge_id"] for r in outgoing]

        result: tuple[list[str], list[str]] = views.read(self, run)
        return result


class Challenges:
    def __init__(self, store: Store, games: Games, accounts: Accounts, views: Views) -> None:
        self.store = store
        self.games = games
        self.accounts = accounts
        self.views = views
        self.pending = PendingChallenges()
        self.slots = slots_of(store)

    def get(self, principal: Principal, challenge_id: uuid.UUID) -> Challenge:
        """The challenge, to one of its two accounts (anyone else: 404, as for no challenge)."""
        try:
            found: Any = self.store.repository.get(challenge_id)
        except AggregateNotFoundError:
            found = None
        if not isinstance(found, Challenge) or not found.concerns(principal.handle):
            raise NotFound(f"no challenge {challenge_id} of yours")
        return found

    def issue(
        self,
        principal: Principal,
        to: str,
        rules: dict[str, Any] | None,
        rated: bool,
        clock: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """A new challenge, judged as the game it would make (422 if that game could not start);
        to a built-in bot, accepted at once."""
        if to.lower() == principal.handle.lower():
            raise InvalidRequest("an account cannot challenge itself")
        try:
            target = self.accounts.account(to)
        except NotFound:
            raise InvalidRequest(f"no account {to!r} to challenge") from None
        if target.closed:
            raise InvalidRequest(f"the account {to!r} is closed")
        normalized = normalize_rules(rules, 2).to_dict()
        setup = self._setup(principal.handle, target.handle, normalized, rated, clock)
        self.games.judge(setup)
        now = datetime.now(UTC)
        expires = format_at(now + TTL)
        challenge = Challenge(principal.handle, target.handle, normalized, rated, clock, expires)
        if target.handle.lower() in BOTS:  # a built-in bot accepts at once, in the same save
            return self._accept(challenge).challenge
        holder = str(challenge.id)
        refused = self.slots.take(
            principal.handle.lower(),
            holder,
            (now + TTL).timestamp(),
            now.timestamp(),
            [("challenge", [str(i) for i in range(MAX_PENDING_OUT)])],
        )
        if refused is not None:
            raise TooManyChallenges(
                f"you have {MAX_PENDING_OUT} pending challenges: cancel one, or wait for answers"
            )
        try:
            self.store.save(challenge)
        except BaseException:
            self.slots.release([holder])  # nothing recorded: nothing held
            raise
        return challenge.as_json()

    def accept(self, principal: Principal, challenge_id: uuid.UUID) -> Accepted:
        return self._accept(self._answerable(principal, challenge_id, by_challenger=False))

    def _accept(self, challenge: Challenge) -> Accepted:
        if self.accounts.account(challenge.challenger).closed:
            raise ChallengeNotPending(f"challenge {challenge.id}'s challenger closed the account")
        game_id = challenge_game_id(challenge.id)
        challenge.accept(str(game_id))
        setup = self._setup(
            challenge.challenger,
            challenge.challenged,
            challenge.rules,
            challenge.rated,
            challenge.clock,
        )
        try:
            state, _ = self.games.create(setup, game_id=game_id, also=[challenge])
        except IntegrityError:  # answered (or cancelled) by another request first
            raise ChallengeNotPending(
                f"challenge {challenge.id} was answered meanwhile: it is no longer pending"
            ) from None
        self.slots.release([str(challenge.id)])
        return Accepted(challenge.as_json(), state)

    def decline(self, principal: Principal, challenge_id: uuid.UUID) -> dict[str, Any]:
        challenge = self._answerable(principal, challenge_id, by_challenger=False)
        challenge.decline()
        return self._save(challenge)

    def cancel(self, principal: Principal, challenge_id: uuid.UUID) -> dict[str, Any]:
        challenge = self._answerable(principal, challenge_id, by_challenger=True)
        challenge.cancel()
        return self._save(challenge)

    def _answerable(
        self, principal: Principal, challenge_id: uuid.UUID, *, by_challenger: bool
    ) -> Challenge:
        """The pending challenge the account may answer: accept or decline one to it, cancel
        one from it (the other party: 404, as for no challenge)."""
        challenge = self.get(principal, challenge_id)
        party = challenge.challenger if by_challenger else challenge.challenged
        if party.lower() != principal.handle.lower():
            side = "from" if by_challenger else "to"
            raise NotFound(f"no challenge {challenge_id} {side} you")
        status = challenge.status_at(datetime.now(UTC))
        if status != "pending":
            raise ChallengeNotPending(f"challenge {challenge.id} is {status}, not pending")
        return challenge

    def withdraw_all(self, principal: Principal) -> None:
        """An account closing: its pending challenges are answered, the incoming declined and
        the outgoing cancelled (each best effort: one answered meanwhile is left as it is)."""
        incoming, outgoing = self.pending.of(self.views, principal.handle)
        for ids, by_challenger in ((incoming, False), (outgoing, True)):
            for raw in ids:
                with contextlib.suppress(ApplicationError):
                    challenge = self._answerable(
                        principal, uuid.UUID(raw), by_challenger=by_challenger
                    )
                    if by_challenger:
                        challenge.cancel()
                    else:
                        challenge.decline()
                    self._save(challenge)

    def listing(self, principal: Principal) -> dict[str, list[dict[str, Any]]]:
        """The account's challenges still pending (expired ones left out), both ways."""
        now = datetime.now(UTC)
        incoming, outgoing = self.pending.of(self.views, principal.handle)
        out: dict[str, list[dict[str, Any]]] = {"incoming": [], "outgoing": []}
        for side, ids in (("incoming", incoming), ("outgoing", outgoing)):
            for raw in ids:
                try:
                    found = self.get(principal, uuid.UUID(raw))
                except NotFound:
                    continue
                if found.status_at(now) == "pending":
                    out[side].append(found.as_json(now))
        return out

    def _save(self, challenge: Challenge) -> dict[str, Any]:
        try:
            self.store.save(challenge)
        except IntegrityError:
            raise ChallengeNotPending(
                f"challenge {challenge.id} was answered meanwhile: it is no longer pending"
            ) from None
        self.slots.release([str(challenge.id)])
        return challenge.as_json()

    def expire_due(self) -> int:
        """Record ``Expired`` on pending challenges whose time is up (the scheduler, at each
        poll): how many this process recorded. Racing schedulers, or an answer at the same
        moment, are refused by the store: each challenge gets one ending."""
        now = datetime.now(UTC)

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT challenge_id FROM {pending} WHERE expires_at <= ? ORDER BY seq LIMIT ?",
                [format_at(now), EXPIRE_BATCH],
            )

        expired = 0
        for row in self.views.read(self.pending, run, fresh=False):
            try:
                found: Any = self.store.repository.get(uuid.UUID(row["challenge_id"]))
            except AggregateNotFoundError:
                continue
            if not isinstance(found, Challenge) or found.status_at(now) != "expired":
                continue
            if found.status != "pending":
                continue  # recorded already; the view is behind
            found.expire()
            try:
                self.store.save(found)
            except IntegrityError:
                continue  # expired by another scheduler, or answered, first
            self.slots.release([str(found.id)])
            expired += 1
        return expired

    @staticmethod
    def _setup(
        challenger: str,
        challenged: str,
        rules: dict[str, Any],
        rated: bool,
        clock: dict[str, Any] | None,
    ) -> NewGame:
        """The game a challenge makes: the challenger in seat 0, the challenged in seat 1 (a
        built-in bot plays as its own account); who starts is drawn as in every game."""
        other: str | dict[str, Any] = challenged
        if challenged.lower() in BOTS:
            other = {"name": challenged.lower(), "bot": challenged.lower()}
        return NewGame(
            players=[challenger, other],
            rules=rules,
            clock=clock,
            accounts=[challenger, None if isinstance(other, dict) else challenged],
            rated=rated,
        )
