"""The eventsourcing Application: games and their secrets, persisted in SQLite or PostgreSQL.

Each game is a ``Game`` aggregate; its secrets (the server seed, the seats' token hashes and the
idempotency keys used) live in a separate ``Vault`` aggregate that is saved in the same transaction
and never served. Build one ``Games`` per process, after gunicorn forks.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError

from domain import fairness
from domain.game import Draw, Game, event_record
from domain.view import game_state

TOKEN_BYTES = 24  # 192 bits
IDEMPOTENCY_TTL = timedelta(hours=48)
VAULT_NAMESPACE = uuid.UUID("6f1c9e0e-3a57-4d7b-9f43-2f0f3e1c7a11")


class ServiceError(Exception):
    """An error with an HTTP status and a stable problem code."""

    status = 400
    code = "bad_request"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class NotFound(ServiceError):
    status, code = 404, "not_found"


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class VersionConflict(ServiceError):
    status, code = 412, "version_conflict"


class ConcurrentAction(ServiceError):
    status, code = 409, "concurrent_action"


class IdempotencyKeyReused(ServiceError):
    status, code = 422, "idempotency_key_reused"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def match_token(token_hashes: Mapping[str, str], token: str) -> int | None:
    """The seat whose stored hash is the token's; every hash is compared, each in constant time."""
    digest = token_hash(token)
    found = None
    for seat, stored in token_hashes.items():
        if hmac.compare_digest(digest, stored):
            found = int(seat)
    return found


def vault_id(game_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(VAULT_NAMESPACE, str(game_id))


class Vault(Aggregate):
    """A game's secrets. Its events are stored but never served."""

    @staticmethod
    def create_id(game_id: uuid.UUID) -> uuid.UUID:
        return vault_id(game_id)

    @event("Opened")
    def __init__(self, game_id: uuid.UUID, server_seed: str | None) -> None:
        self.game_id = game_id
        self.server_seed = server_seed
        self.token_hashes: dict[str, str] = {}
        self.keys: dict[str, dict[str, Any]] = {}

    @event("TokenIssued")
    def issue(self, seat: int, digest: str) -> None:
        self.token_hashes[str(seat)] = digest

    @event("KeyUsed")
    def remember(self, scoped_key: str, fingerprint: str, first: int, last: int, at: str) -> None:
        self.keys[scoped_key] = {"fingerprint": fingerprint, "first": first, "last": last, "at": at}

    def seat_for(self, token: str) -> int | None:
        """The seat holding ``token``."""
        return match_token(self.token_hashes, token)

    def recall(self, scoped_key: str, now: datetime) -> dict[str, Any] | None:
        record = self.keys.get(scoped_key)
        if record is None or datetime.fromisoformat(record["at"]) + IDEMPOTENCY_TTL < now:
            return None
        return record


@dataclass(frozen=True)
class Secrets:
    """What a worker keeps of a game's vault: neither ever changes, tokens are only added."""

    server_seed: str | None
    token_hashes: dict[str, str]


@dataclass(frozen=True)
class Seat:
    seat: int
    name: str | None
    token: str


@dataclass(frozen=True)
class ActionResult:
    game: dict[str, Any]
    events: list[dict[str, Any]]
    replayed: bool = False


def parse_game_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except (ValueError, TypeError):
        raise NotFound(f"no game {raw!r}") from None


def _dicer(server_seed: str, client_seed: str) -> Draw:
    return functools.partial(fairness.draw, server_seed, client_seed)


class Games(Application[uuid.UUID]):
    """Commands and queries on games; the HTTP layer adapts this to the contract."""

    name = "cantstop"
    snapshotting_intervals = {Game: 50, Vault: 50}  # noqa: RUF012 (eventsourcing's own API)

    SECRETS_CACHE = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per worker: each game's seed and token hashes (so most actions never read the vault),
        # and whether a game was imported (read-only). Both only ever grow.
        self.secrets_cache: dict[uuid.UUID, Secrets] = {}
        self.imported_cache: dict[uuid.UUID, bool] = {}

    on_recorded: Callable[[uuid.UUID, list[dict[str, Any]]], None] | None = None
    """Called after every successful save with each game's new events as served (service.live)."""

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        if self.on_recorded is not None:
            new: dict[uuid.UUID, list[dict[str, Any]]] = {}
            for recording in recordings:
                if isinstance(recording.domain_event, Game.Event):
                    game_event = recording.domain_event
                    new.setdefault(game_event.originator_id, []).append(event_record(game_event))
            for game_id, records in new.items():
                try:
                    self.on_recorded(game_id, records)
                except Exception:  # the events are stored: a failed notice must not undo that
                    logging.getLogger("cantstop").exception("on_recorded failed for %s", game_id)
        return recordings

    # -------------------------------------------------------------------------------- reads
    def game(self, game_id: uuid.UUID, version: int | None = None) -> Game:
        try:
            latest: Aggregate = self.repository.get(game_id)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None
        if not isinstance(latest, Game):
            raise NotFound(f"no game {game_id}")
        if version is None or version == latest.version:
            return latest
        if not 1 <= version <= latest.version:
            raise NotFound(f"game {game_id} has versions 1 to {latest.version}, not {version}")
        past: Aggregate = self.repository.get(game_id, version=version)
        assert isinstance(past, Game)
        return past

    def state(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        return game_state(self.game(game_id, version), str(game_id))

    def history(
        self, game_id: uuid.UUID, after: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]:
        stored = self.repository.event_store.get(game_id, gt=after or None, limit=limit)
        records = []
        for stored_event in stored:
            if not isinstance(stored_event, Game.Event):
                raise NotFound(f"no game {game_id}")  # another aggregate's id, e.g. a vault's
            records.append(event_record(stored_event))
        if not records:
            self.game(game_id)  # 404 for an unknown game; else simply nothing after ``after``
        return records

    def _vault(self, game_id: uuid.UUID) -> Vault:
        vault: Aggregate = self.repository.get(vault_id(game_id))
        assert isinstance(vault, Vault)
        if len(self.secrets_cache) >= self.SECRETS_CACHE:
            self.secrets_cache.clear()
        self.secrets_cache[game_id] = Secrets(vault.server_seed, dict(vault.token_hashes))
        return vault

    def _secrets(self, game_id: uuid.UUID) -> Secrets:
        known = self.secrets_cache.get(game_id)
        if known is None:
            self._vault(game_id)
            known = self.secrets_cache[game_id]
        return known

    # ----------------------------------------------------------------------------- commands
    def create(
        self,
        *,
        players: Sequence[str] | None = None,
        seats: int | None = None,
        rules: Mapping[str, Any] | None = None,
        dice: str = "server",
        first_player: int | None = None,
        client_seed: str | None = None,
    ) -> tuple[Game, list[Seat]]:
        game_id = uuid.uuid4()
        server_seed = secrets.token_hex(32) if dice == "server" else None
        draw = None
        if server_seed is not None:
            draw = _dicer(server_seed, str(game_id) if client_seed is None else client_seed)
        game = Game.start(
            game_id,
            players=players,
            seats=seats,
            rules=rules,
            dice=dice,
            first_player=first_player,
            client_seed=client_seed,
            server_seed=server_seed,
            draw=draw,
        )
        vault = Vault(game_id=game_id, server_seed=server_seed)
        issued = []
        if players is not None:
            for seat, name in enumerate(game.names):
                token = secrets.token_urlsafe(TOKEN_BYTES)
                vault.issue(seat, token_hash(token))
                issued.append(Seat(seat, name, token))
        self.save(game, vault)
        return game, issued

    def join(self, game_id: uuid.UUID, name: str) -> tuple[Game, Seat]:
        game = self.game(game_id)
        vault = self._vault(game_id)
        draw = _dicer(vault.server_seed, game.client_seed or "") if vault.server_seed else None
        seat = game.join(name, draw=draw)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        vault.issue(seat, token_hash(token))
        self._save_or_conflict(game, vault)
        self.secrets_cache.pop(game_id, None)  # a new token: read the vault afresh next time
        return game, Seat(seat, game.names[seat], token)

    def authenticate(self, game_id: uuid.UUID, token: str | None) -> tuple[Game, int]:
        game = self.game(game_id)
        if not token:
            raise Unauthorized("send the seat's token: Authorization: Bearer <token>")
        seat = match_token(self._secrets(game_id).token_hashes, token)
        if seat is None:  # perhaps a seat joined through another worker: ask the vault itself
            seat = self._vault(game_id).seat_for(token)
        if seat is None:
            raise Unauthorized("unknown token for this game")
        return game, seat

    def act(
        self,
        game: Game,
        seat: int,
        action: Mapping[str, Any],
        *,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> ActionResult:
        """Apply one action by ``seat`` (already authenticated); record nothing if refused."""
        now = datetime.now(UTC)
        seed = self._secrets(game.id).server_seed
        # The vault is read only when the action carries a key to look up or remember.
        vault: Vault | None = None
        scoped = fingerprint = ""
        if idempotency_key is not None:
            vault = self._vault(game.id)
            scoped = f"{seat}:{idempotency_key}"
            canonical = json.dumps(action, sort_keys=True, separators=(",", ":"))
            fingerprint = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
            record = vault.recall(scoped, now)
            if record is not None:
                if record["fingerprint"] != fingerprint:
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key was used for a different action"
                    )
                return self._replay(game.id, record["first"], record["last"])
        if if_match is not None and if_match != game.version:
            raise VersionConflict(
                f"the game is at version {game.version}, not {if_match}", version=game.version
            )
        first = game.version + 1
        game.act(seat, action, draw=_dicer(seed, game.client_seed or "") if seed else None)
        if game.status == "finished" and seed and game.server_seed is None:
            game.reveal_seed(seed)
        new_events = [event_record(cast(Game.Event, e)) for e in game.pending_events]
        if vault is not None:
            vault.remember(scoped, fingerprint, first, game.version, now.isoformat())
        self._save_or_conflict(game, *([vault] if vault is not None else []))
        return ActionResult(game_state(game, str(game.id)), new_events)

    def _replay(self, game_id: uuid.UUID, first: int, last: int) -> ActionResult:
        events = self.history(game_id, after=first - 1, limit=last - first + 1)
        return ActionResult(self.state(game_id, last), events, replayed=True)

    def _save_or_conflict(self, *aggregates: Aggregate) -> None:
        try:
            self.save(*aggregates)
        except IntegrityError:
            raise ConcurrentAction(
                "another action on this game was recorded at the same moment; "
                "fetch the game and try again"
            ) from None


__all__ = [
    "ActionResult",
    "ConcurrentAction",
    "Games",
    "IdempotencyKeyReused",
    "NotFound",
    "Seat",
    "ServiceError",
    "Unauthorized",
    "Vault",
    "VersionConflict",
    "parse_game_id",
]
