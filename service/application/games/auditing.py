"""Audits, exports and imports of games, read from and written to the event store directly.

The audit does not trust the ``Game`` aggregate: it reads the stored rows through the recorder and
decodes each one on its own, so an altered or undecodable row is reported at its version instead of
failing the request. Imported games are re-recorded event by event under a new id, with the same
times and data (so the same hashes), and marked read-only by an ``ImportedGame`` aggregate.
"""

from __future__ import annotations

import json
import logging
import unicodedata
import uuid
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any, cast

from eventsourcing.utils import get_topic

from domain.audit import (
    Check,
    MalformedExport,
    audit_records,
    export_header,
    parse_export,
)
from domain.commands import NewGame
from domain.errors import InvalidRequest
from domain.game import Game, event_record, parse_at
from domain.transcript import MalformedTranscript, apply_action, verify
from domain.view import game_state
from service.application.aggregates import ImportedGame, Vault
from service.application.errors import GameTooLong, ImportInvalid, NotFound, describe
from service.application.games.use_cases import Games
from service.application.store import GAME_EVENT_CLASSES, GAME_TOPICS

log = logging.getLogger("cantstop.audit")

MAX_IMPORT_EVENTS = 8_000
"""The most events an import may hold; more is 422 ``game_too_long``. An export's 2 MiB holds
~7,000 events, and 256 KiB of transcript ~8,000 actions; but a transcript of busts records two
events an action (DiceRolled, TurnBusted), so 256 KiB of it expanded to 15,881 events, whose
import and every later audit each cost seconds of CPU (docs/auditing.md, "Sizes";
tests/test_import_limits.py)."""


def _no_charge(events: int) -> None:
    """The default ``charge`` of an import: nothing counted (the HTTP view passes its own)."""


def _within_limit(events: int, what: str) -> None:
    if events > MAX_IMPORT_EVENTS:
        raise GameTooLong(f"an import holds at most {MAX_IMPORT_EVENTS} events: {what} {events}")


# ------------------------------------------------------------------------------ reading
def stored_records(
    games: Games, game_id: uuid.UUID, up_to: int | None = None
) -> list[dict[str, Any]]:
    """The game's events as served (up to version ``up_to``), decoded row by row from the store.

    A row that cannot be decoded becomes ``{"version": v, "unreadable": reason}``; an id whose rows
    are not a game's (no such id, or another aggregate such as a vault) is NotFound.
    """
    rows = games.store.recorder.select_events(game_id, lte=up_to)
    if not any(row.topic in GAME_TOPICS for row in rows):
        raise NotFound(f"no game {game_id}")
    records: list[dict[str, Any]] = []
    for row in rows:
        version = row.originator_version
        if row.topic not in GAME_TOPICS:
            records.append({"version": version, "unreadable": "not an event of a game"})
            continue
        try:
            decoded = games.store.mapper.to_domain_event(row)
            if not isinstance(decoded, Game.Event):
                raise TypeError("not an event of a game")
            record = event_record(decoded)
            json.dumps(record)  # everything served must be plain JSON
        except Exception as exc:  # an altered row: reported by the audit, never raised
            records.append({"version": version, "unreadable": describe(exc)})
            continue
        records.append(record)
    return records


def check_snapshots(games: Games, game_id: uuid.UUID, up_to: int | None) -> Check:
    """Every stored snapshot of the game against the state its events replay to at its version.

    Reads trust snapshots (they are not re-checked on every request); this is where a snapshot
    that was altered, or that cannot be decoded, is found."""
    store = games.store.snapshots
    if store is None:
        return Check("snapshots", True, "snapshots are not kept")
    rows = store.recorder.select_events(game_id, lte=up_to)
    if not rows:
        return Check("snapshots", True, "no snapshot stored")
    wanted = {row.originator_version: row for row in rows}
    game: Any = None
    checked = 0
    for row in games.store.recorder.select_events(game_id, lte=max(wanted)):
        try:
            game = cast(Any, games.store.mapper.to_domain_event(row)).mutate(game)
        except Exception as exc:  # the events themselves are judged by the other checks
            detail = f"not compared past version {row.originator_version}: {describe(exc)}"
            return Check("snapshots", False, detail, row.originator_version)
        snapshot_row = wanted.get(row.originator_version)
        if snapshot_row is None:
            continue
        version = row.originator_version
        try:
            snapshot = cast(Any, games.store.mapper.to_domain_event(snapshot_row)).mutate(None)
            stored = game_state(snapshot)
        except Exception as exc:  # an undecodable snapshot: reads rebuild without it
            return Check(
                "snapshots",
                False,
                f"the snapshot at version {version} cannot be read: {describe(exc)}",
                version,
            )
        if stored != game_state(game):
            keys = sorted(k for k in stored if stored[k] != game_state(game).get(k))
            detail = (
                f"the snapshot at version {version} differs from its events in: {', '.join(keys)}"
            )
            return Check("snapshots", False, detail, version)
        checked += 1
    return Check("snapshots", True, f"{checked} snapshot(s) match the state their events give")


def audit(games: Games, game_id: uuid.UUID) -> dict[str, Any]:
    """The contract's ``/audit`` verdict: the stored rows against the rules and the live game.

    The live game is read first and the rows up to its version after, so an action recorded in
    between is not mistaken for a difference.
    """
    live_state: dict[str, Any] | None = None
    live_error: str | None = None
    try:
        live_state = games.view(game_id)
    except Exception as exc:  # the live game cannot even be loaded: that is the finding
        live_error = describe(exc)
    up_to = live_state["version"] if live_state is not None else None
    records = stored_records(games, game_id, up_to)
    verdict = audit_records(
        records,
        live_state=live_state,
        live_error=live_error,
        extra=[check_snapshots(games, game_id, up_to)],
    )
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


def import_export(
    games: Games, body: bytes, charge: Callable[[int], None] = _no_charge
) -> tuple[uuid.UUID, str | None]:
    """Audit an export offline; store it as a new read-only game when it verifies. ``charge``
    is told the number of events before they are audited (the view counts them against the
    ``audit`` rate limit); more than ``MAX_IMPORT_EVENTS`` is refused before that."""
    try:
        header, records = parse_export(body)
    except MalformedExport as exc:
        raise InvalidRequest(f"not a game export: {exc}") from None
    _within_limit(len(records), "the export has")
    source = header["game_id"]
    _canonical_if_uuid(source)
    charge(len(records))
    origin = _origin(games, source, records)
    verdict = audit_records(records, extra=[] if origin is None else [origin])
    if not verdict["valid"]:
        raise ImportInvalid("the export does not verify", verdict=verdict)
    game_id = uuid.uuid4()
    events = [_event(game_id, record) for record in records]
    # The marker first: whatever follows the log sees the game as imported before its events.
    games.store.save(
        ImportedGame(game_id=game_id, source="export", source_game_id=source),
        Vault(game_id=game_id, server_seed=None),
        *events,
    )
    # the source's id is the exporter's words (any text): quoted, so no line of it is forged
    log.info("imported game %s from the export of game %r: %d events", game_id, source, len(events))
    return game_id, source


def _canonical_if_uuid(source: str) -> None:
    """An export's ``game_id`` that holds a UUID (its 32 hex digits) must be written as this
    server writes it, ``str(uuid.UUID(...))``: else invalid_request. ``_origin`` compares only
    under that spelling, so a look-alike (a trailing space, U+200B zero-width space, U+2011
    non-breaking hyphens) let a rewrite of a game played here import as "from" it, judged as
    another server's game (tests/test_import_limits.py). Other ids (any text) still are."""
    # Any form uuid.UUID reads, once look-alikes are undone: compatibility forms folded (NFKC),
    # invisible and space characters dropped, every dash a hyphen. (Not any 32 hex digits in
    # the text: an id of words may hold as many of a-f.)
    folded = unicodedata.normalize("NFKC", source)
    cleaned = "".join(
        "-" if unicodedata.category(c) == "Pd" else c
        for c in folded
        if not c.isspace() and unicodedata.category(c) not in ("Cf", "Cc", "Zs")
    )
    try:
        canonical: str | None = str(uuid.UUID(cleaned))
    except ValueError:
        canonical = None
    if canonical is not None and source != canonical:
        raise InvalidRequest(
            f"the export's game_id {source!r} is not a UUID as written here: {canonical}"
        )
    # Letters of other scripts that look like hex digits (Cyrillic а, е, с; Greek ο) are no
    # compatibility forms: an id that reads as a UUID once each non-ASCII character is taken
    # for a digit is a UUID in disguise, refused alike (no table of look-alikes needed).
    if canonical is None and not cleaned.isascii():
        with suppress(ValueError):
            uuid.UUID("".join(c if c.isascii() else "0" for c in cleaned))
            raise InvalidRequest(
                f"the export's game_id {source!r} reads as a UUID written with look-alike "
                "letters: a UUID is written in ASCII hex digits here"
            )


def _origin(games: Games, source: Any, records: list[Any]) -> Check | None:
    """An export that names a game of this server must hold what this server recorded of it
    (the same hashes, version by version; fewer versions are a cut export, as anywhere). Once a
    game is finished its seed is public, so anyone can rewrite its history after version 1 into
    one that verifies on its own: only the server that played it can tell. None for a game this
    server does not have."""
    try:
        source_id = uuid.UUID(str(source))
    except ValueError:
        return None
    try:
        mine = games.history(source_id, limit=len(records) + 1)
    except NotFound:
        return None
    if not mine:
        return None
    for record, kept in zip(records, mine, strict=False):
        if not isinstance(record, Mapping) or record.get("hash") != kept["hash"]:
            version = kept["version"]
            detail = f"this server recorded game {source_id} otherwise from version {version} on"
            return Check("origin", False, detail, version)
    if len(records) > len(mine):
        detail = (
            f"this server recorded {len(mine)} events of game {source_id}; the export has "
            f"{len(records)}"
        )
        return Check("origin", False, detail, len(mine) + 1)
    return Check("origin", True, f"the events this server recorded of game {source_id}")


def import_transcript(
    games: Games, transcript: Any, charge: Callable[[int], None] = _no_charge
) -> uuid.UUID:
    """Verify a transcript; store the game it describes as a new read-only game when valid.
    ``charge`` is told the number of events before each replay: first the fewest the actions
    can record (one each, and GameCreated), then how many they did. More than
    ``MAX_IMPORT_EVENTS`` is refused, before any replay when there are that many actions."""
    actions = transcript.get("actions") if isinstance(transcript, Mapping) else None
    fewest = 1 + (len(actions) if isinstance(actions, list) else 0)
    _within_limit(fewest, "the transcript records at least")
    charge(fewest)
    try:
        verdict = verify(transcript)
    except MalformedTranscript as exc:
        raise InvalidRequest(f"not a transcript: {exc}") from None
    if not verdict["valid"]:
        raise ImportInvalid("the transcript does not verify", verdict=verdict)
    events = verdict["game"]["version"]
    _within_limit(events, "the transcript records")  # before it is replayed again and stored
    charge(events)
    game_id = uuid.uuid4()
    game = Game.start(
        game_id,
        NewGame(
            players=transcript["players"],
            rules=transcript.get("rules"),
            dice="manual",
            first_player=transcript.get("first_player"),
        ),
    )
    for action in transcript.get("actions", []):
        apply_action(game, action)
    games.store.save(
        ImportedGame(game_id=game_id, source="transcript", source_game_id=None),
        Vault(game_id=game_id, server_seed=None),
        game,
    )
    log.info("imported game %s from a transcript: %d events", game_id, game.version)
    return game_id
