"""Audits, exports and imports of games, read from and written to the event store directly.

The audit does not trust the ``Game`` aggregate: it reads the stored rows through the recorder and
decodes each one on its own, so an altered or undecodable row is reported at its version instead of
failing the request. Imported games are re-recorded event by event under a new id, with the same
times and data (so the same hashes), and marked read-only by an ``ImportedGame`` aggregate.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import get_topic

from domain.audit import (
    MalformedExport,
    audit_records,
    export_header,
    parse_at,
    parse_export,
)
from domain.game import Game, event_record
from domain.transcript import MalformedTranscript, apply_action, verify
from service.games import Games, NotFound, ServiceError, Vault

log = logging.getLogger("cantstop.audit")

IMPORT_NAMESPACE = uuid.UUID("0b7d2f4e-5c1a-4e8b-9a36-7c2d1e9f4a58")
GAME_EVENT_CLASSES: dict[str, type[Game.Event]] = {
    cls.__name__: cls
    for cls in vars(Game).values()
    if isinstance(cls, type) and issubclass(cls, Game.Event) and cls is not Game.Event
}
GAME_TOPICS = frozenset(get_topic(cls) for cls in GAME_EVENT_CLASSES.values())
MAX_DETAIL = 200


class ImportInvalid(ServiceError):
    """An import whose history or transcript does not verify; the verdict goes with it."""

    status, code = 422, "import_invalid"


class ImportMalformed(ServiceError):
    status, code = 422, "invalid_request"


class ImportedGame(Aggregate):
    """Marks an imported game: read-only, and where it came from. Never served as a game."""

    @staticmethod
    def create_id(game_id: uuid.UUID) -> uuid.UUID:
        return imported_marker_id(game_id)

    @event("Recorded")
    def __init__(self, game_id: uuid.UUID, source: str, source_game_id: str | None) -> None:
        self.game_id = game_id
        self.source = source
        self.source_game_id = source_game_id


def imported_marker_id(game_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(IMPORT_NAMESPACE, str(game_id))


def is_imported(games: Games, game_id: uuid.UUID) -> bool:
    """The marker is saved with the imported game's events, so the answer never changes."""
    known = games.imported_cache.get(game_id)
    if known is None:
        known = bool(games.recorder.select_events(imported_marker_id(game_id), limit=1))
        if len(games.imported_cache) >= games.SECRETS_CACHE:
            games.imported_cache.clear()
        games.imported_cache[game_id] = known
    return known


def _reason(exc: Exception) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


# ------------------------------------------------------------------------------ reading
def stored_records(
    games: Games, game_id: uuid.UUID, up_to: int | None = None
) -> list[dict[str, Any]]:
    """The game's events as served (up to version ``up_to``), decoded row by row from the store.

    A row that cannot be decoded becomes ``{"version": v, "unreadable": reason}``; an id whose rows
    are not a game's (no such id, or another aggregate such as a vault) is NotFound.
    """
    rows = games.recorder.select_events(game_id, lte=up_to)
    if not any(row.topic in GAME_TOPICS for row in rows):
        raise NotFound(f"no game {game_id}")
    records: list[dict[str, Any]] = []
    for row in rows:
        version = row.originator_version
        if row.topic not in GAME_TOPICS:
            records.append({"version": version, "unreadable": "not an event of a game"})
            continue
        try:
            decoded = games.mapper.to_domain_event(row)
            if not isinstance(decoded, Game.Event):
                raise TypeError("not an event of a game")
            record = event_record(decoded)
            json.dumps(record)  # everything served must be plain JSON
        except Exception as exc:  # an altered row: reported by the audit, never raised
            records.append({"version": version, "unreadable": _reason(exc)})
            continue
        records.append(record)
    return records


def audit(games: Games, game_id: uuid.UUID) -> dict[str, Any]:
    """The contract's ``/audit`` verdict: the stored rows against the rules and the live game.

    The live game is read first and the rows up to its version after, so an action recorded in
    between is not mistaken for a difference.
    """
    live_state: dict[str, Any] | None = None
    live_error: str | None = None
    try:
        live_state = games.state(game_id)
    except Exception as exc:  # the live game cannot even be loaded: that is the finding
        live_error = _reason(exc)
    up_to = live_state["version"] if live_state is not None else None
    records = stored_records(games, game_id, up_to)
    verdict = audit_records(records, live_state=live_state, live_error=live_error)
    log.info(
        "audited game %s: valid=%s first_bad_version=%s",
        game_id,
        verdict["valid"],
        verdict["first_bad_version"],
    )
    return verdict


def export_lines(games: Games, game_id: uuid.UUID) -> str:
    """The export: a header line, then each event as ``/events`` serves it, one per line."""
    records = stored_records(games, game_id)
    lines = [export_header(str(game_id)), *records]
    log.info("exported game %s: %d events", game_id, len(records))
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


# ------------------------------------------------------------------------------ importing
def _event(game_id: uuid.UUID, record: Mapping[str, Any]) -> Game.Event:
    """A recorded event again, under ``game_id``: same version, time, hashes and data."""
    cls: Any = GAME_EVENT_CLASSES[record["type"]]  # its fields are the data's keys (audited)
    fields: dict[str, Any] = dict(record["data"])
    if cls is Game.GameCreated:
        fields["originator_topic"] = get_topic(Game)
    recorded = cls(
        originator_id=game_id,
        originator_version=record["version"],
        timestamp=parse_at(record["at"]),
        prev_hash=record["prev_hash"],
        hash=record["hash"],
        **fields,
    )
    assert isinstance(recorded, Game.Event)
    return recorded


def import_export(games: Games, body: bytes) -> tuple[uuid.UUID, str | None]:
    """Audit an export offline; store it as a new read-only game when it verifies."""
    try:
        header, records = parse_export(body)
    except MalformedExport as exc:
        raise ImportMalformed(f"not a game export: {exc}") from None
    verdict = audit_records(records)
    if not verdict["valid"]:
        raise ImportInvalid("the export does not verify", verdict=verdict)
    game_id = uuid.uuid4()
    source = header["game_id"]
    events = [_event(game_id, record) for record in records]
    games.save(
        *events,
        Vault(game_id=game_id, server_seed=None),
        ImportedGame(game_id=game_id, source="export", source_game_id=source),
    )
    log.info("imported game %s from the export of game %s: %d events", game_id, source, len(events))
    return game_id, source


def import_transcript(games: Games, transcript: Any) -> uuid.UUID:
    """Verify a transcript; store the game it describes as a new read-only game when valid."""
    try:
        verdict = verify(transcript)
    except MalformedTranscript as exc:
        raise ImportMalformed(f"not a transcript: {exc}") from None
    if not verdict["valid"]:
        raise ImportInvalid("the transcript does not verify", verdict=verdict)
    game_id = uuid.uuid4()
    game = Game.start(
        game_id,
        players=transcript["players"],
        rules=transcript.get("rules"),
        dice="manual",
        first_player=transcript.get("first_player"),
    )
    for action in transcript.get("actions", []):
        apply_action(game, action)
    games.save(
        game,
        Vault(game_id=game_id, server_seed=None),
        ImportedGame(game_id=game_id, source="transcript", source_game_id=None),
    )
    log.info("imported game %s from a transcript: %d events", game_id, game.version)
    return game_id
