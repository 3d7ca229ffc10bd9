"""The compact stored form (service/persistence/compact.py): every event of a game has a schema,
the schemas never change, a store written in the JSON form before it existed is read as it was
(and games in it go on, in both forms at once), and a damaged compact row is reported like any
damaged row, never a 500."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
import zlib
from typing import Any

import orjson
import pytest
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    Mapper,
    MapperDeserialisationError,
    Notification,
    UUIDAsHex,
)
from flask import Flask
from flask.testing import FlaskClient

from domain.audit import audit_records, parse_export
from domain.commands import NewGame
from domain.game import Game
from service.application.notify.notices import TURN_ENDS, Seating, TurnEnd, seating, turn_end
from service.application.store import GAME_EVENT_CLASSES, GameEventMapper, ServiceTranscoder
from service.persistence import compact
from tests.support.games import (
    choose,
    create_game,
    export_text,
    play_manual,
    play_to_the_end,
)
from tests.support.http import bearer, ok
from tests.support.played import play_game
from tests.support.stored import StoredRows, answers, served

# The schemas' text as first released: a stored row names its schema by index, so an index
# that changed meaning would misread every row written with it. New schemas are appended.
RELEASED = 13
RELEASED_DIGEST = "cee6e274a925d014a4d352b35b082364"


def schemas_digest(count: int) -> str:
    return hashlib.sha256(repr(compact.SCHEMAS[:count]).encode()).hexdigest()[:32]


def test_every_event_of_a_game_has_a_schema_and_released_schemas_never_change() -> None:
    for name, cls in GAME_EVENT_CLASSES.items():
        if name == "Created":  # the library's base class: never an event of a game
            continue
        fields = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in ("originator_id", "originator_version")
        )
        assert fields in compact.SCHEMA_IDS, f"{name}: append a schema for {fields}"
    assert len(compact.SCHEMAS) >= RELEASED
    assert schemas_digest(RELEASED) == RELEASED_DIGEST


def test_a_store_written_in_the_json_form_reads_as_it_did_and_its_games_go_on(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Games stored by the code before the compact form (its JSON and its snapshots as they
    were: the encoder switched off) read back byte for byte as that code served them; a game
    begun then is played on in the compact form, and its rows of both forms verify."""
    with monkeypatch.context() as before:
        before.setattr("service.application.store.encode_event", lambda state: None)
        before.setattr("service.application.store.deflate", lambda data: data)
        with served(database_url) as old:
            finished, tokens = create_game(old, players=["Ann", "Bob"])
            play_to_the_end(old, finished, tokens)
            going_on, going_on_tokens = create_game(old, players=["Cy", "Di"])
            for _ in range(12):
                game = ok(old.get(f"/v1/games/{going_on}"))
                token = bearer(going_on_tokens[game["turn"]["player"]])
                ok(old.post(f"/v1/games/{going_on}/actions", json=choose(game), headers=token))
            then = answers(old, finished)
            rows = StoredRows(old.application, database_url)
            first = rows.read(finished, 1)[1]
            assert first.startswith(b"{") and compact.COMPACT not in first[:1]
    with served(database_url) as new:
        assert answers(new, finished) == then
        state = play_to_the_end(new, going_on, going_on_tokens)
        assert state["status"] == "finished"
        rows = StoredRows(new.application, database_url)
        forms = {rows.read(going_on, v)[1][:1] for v in range(1, state["version"] + 1)}
        assert forms == {b"{", bytes((compact.COMPACT,))}  # both forms in one game
        verdict = ok(new.get(f"/v1/games/{going_on}/audit"))
        assert verdict["valid"] is True
        assert audit_records(parse_export(export_text(new, going_on).encode())[1])["valid"]
    with served(database_url) as again:  # the same answers, read afresh
        assert answers(again, finished) == then


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda state: state[:5], id="cut-short"),
        pytest.param(lambda state: state[:1] + bytes((250,)) + state[2:], id="no-such-schema"),
        pytest.param(lambda state: state[:-1] + b",1]", id="a-field-too-many"),
        pytest.param(lambda state: state[:20] + bytes((state[20] ^ 1,)) + state[21:], id="hash"),
    ],
)
def test_a_damaged_compact_row_is_found_by_the_audit_and_marked_in_the_export(
    app: Flask, client: FlaskClient, database_url: str, damage: Any
) -> None:
    game_id, _ = play_manual(client)
    rows = StoredRows(app, database_url)
    topic, state = rows.read(game_id, 6)
    assert state[0] == compact.COMPACT
    rows.write(game_id, 6, topic, damage(state))
    with served(database_url) as fresh:
        verdict = ok(fresh.get(f"/v1/games/{game_id}/audit"))
        assert verdict["valid"] is False and verdict["first_bad_version"] == 6
        lines = export_text(fresh, game_id).splitlines()
        assert len(lines) == 1 + 11  # the header, then every version, the damaged one marked
        events = fresh.get(f"/v1/games/{game_id}/events")
        assert events.status_code in (200, 409)  # a hash changed reads; a cut row is corrupt
        if events.status_code == 409:
            assert events.get_json()["code"] == "corrupt_game"


def test_only_large_json_is_deflated_and_every_form_reads_back() -> None:
    small = b'{"a":1}'
    large = b'{"a":"' + b"x" * compact.DEFLATE_FROM + b'"}'
    assert compact.deflate(small) == small
    deflated = compact.deflate(large)
    assert deflated[0] == compact.DEFLATED and len(deflated) < len(large)
    assert compact.inflate(deflated) == large
    # Rows deflated before at zlib's defaults (level 6, 32 KiB window) read as they did.
    assert compact.inflate(bytes((compact.DEFLATED,)) + zlib.compress(large, 6)) == large


def test_a_compact_event_reads_into_its_class_as_the_librarys_way_reads_it() -> None:
    """The mapper reads a compact game event straight into its class: the same fields, in the
    same order, as the library's ``to_domain_event`` gives, whatever the type of the row's id
    (a UUID, or its text); a damaged row the library's way, with the library's error."""
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    game.roll(0, dice=[1, 2, 3, 4])
    transcoder = ServiceTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    mapper = GameEventMapper(transcoder=transcoder)
    for event in game.pending_events:
        stored = mapper.to_stored_event(event)
        assert stored.state[0] == compact.COMPACT
        for originator_id in (stored.originator_id, str(stored.originator_id)):
            row = dataclasses.replace(stored, originator_id=originator_id)
            fast, slow = mapper.to_domain_event(row), Mapper.to_domain_event(mapper, row)
            assert type(fast) is type(slow) is type(event)
            assert list(vars(fast).items()) == list(vars(slow).items())
            assert fast == event
        damaged = dataclasses.replace(stored, state=stored.state[:-1] + b",1]")
        with pytest.raises(MapperDeserialisationError, match="originator_version"):
            mapper.to_domain_event(damaged)


def test_a_turns_end_read_narrow_for_the_notices_is_the_event_read_whole() -> None:
    """The notices read a turn's end by its time and next player alone (``turn_end``, from the
    compact row): the same as the event decoded whole says, for every turn's end of a game
    (stops and busts), from the compact form and from the library's JSON form (a store
    written before it); a mapper with a compressor reads no row the narrow way."""
    transcoder = ServiceTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    mapper = GameEventMapper(transcoder=transcoder)
    library: Mapper[uuid.UUID] = Mapper(transcoder=transcoder)
    squeezed = GameEventMapper(transcoder=transcoder, compressor=ZlibCompressor())
    game = play_game(["rule-of-28", "rule-of-28"], seed=7)
    ends = [event for event in game.pending_events if isinstance(event, TURN_ENDS)]
    assert {type(event) for event in ends} == {Game.TurnStopped, Game.TurnBusted}
    for event in ends:
        whole = TurnEnd(
            event.originator_id,
            event.originator_version,
            compact.micros_of(event.timestamp),
            event.next_player,
        )
        for stored in (mapper.to_stored_event(event), library.to_stored_event(event)):
            row = Notification(**vars(stored), id=1)
            assert turn_end(row, mapper) == whole
            assert turn_end(row, mapper).timestamp == event.timestamp
        compact_row = mapper.to_stored_event(event)
        assert compact_row.state[0] == compact.COMPACT
        assert squeezed.micros_and_field(compact_row, "next_player") is None


def test_creations_and_seats_read_narrow_for_a_rebuilds_first_pass_are_the_events_read_whole() -> (
    None
):
    """A rebuild of the notices first finds the games that seat an account (``seating``, from
    the compact row): the same as the event decoded whole says, for creations with and without
    accounts and seats taken by an account or a guest, from both forms."""
    transcoder = ServiceTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    mapper = GameEventMapper(transcoder=transcoder)
    library: Mapper[uuid.UUID] = Mapper(transcoder=transcoder)
    lobby = Game.start(uuid.uuid4(), NewGame(seats=3, dice="manual"))
    lobby.join("Ann", account="ann")
    lobby.join("Bob")
    seated = Game.start(
        uuid.uuid4(), NewGame(players=["Ann", "Bob"], accounts=["ann", None], dice="manual")
    )
    guests = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    read = []
    for game in (lobby, seated, guests):
        for event in game.pending_events:
            if not isinstance(event, Game.GameCreated | Game.SeatJoined):
                continue
            whole = (
                any(event.accounts or ())
                if isinstance(event, Game.GameCreated)
                else (event.account is not None)
            )
            for stored in (mapper.to_stored_event(event), library.to_stored_event(event)):
                row = Notification(**vars(stored), id=1)
                assert seating(row, mapper) == Seating(event.originator_id, whole)
            read.append((type(event).__name__, whole))
    assert sorted(read) == [
        ("GameCreated", False),
        ("GameCreated", False),
        ("GameCreated", True),
        ("SeatJoined", False),
        ("SeatJoined", True),
    ]


@pytest.mark.parametrize("value", [None, 0, 1, 3, 9, 10, 123, -1, "ann", [1], {"a": 1}])
def test_a_last_field_read_from_the_rows_tail_is_the_field_parsed_whole(value: Any) -> None:
    """``micros_and_field`` reads a schema's last field from the text's tail when it is a digit
    or null, else parses the whole: the same value either way; and a row whose fields are not
    its schema's is refused (but one damaged only before its last field, ``[,2]``, reads as
    its time and that field say: the trade the docstring states)."""
    events = play_game(["rule-of-28", "rule-of-28"], seed=7).pending_events
    stopped = next(e for e in events if isinstance(e, Game.TurnStopped))
    written = GameEventMapper(transcoder=ServiceTranscoder()).to_stored_event(stopped).state
    assert written[0] == compact.COMPACT
    others = orjson.loads(written[compact.HEAD.size :])
    data = written[: compact.HEAD.size] + orjson.dumps([*others[:-1], value])
    micros, found = compact.micros_and_field(data, "next_player")
    assert found == value and type(found) is type(value)
    assert micros == compact.micros_of(stopped.timestamp)
    assert compact.time_of(micros) == stopped.timestamp
    assert compact.micros_and_field(data, "seat")[1] == stopped.seat
    head = data[: compact.HEAD.size]
    for damaged in (head + b"[1]", head + b"[1,2", head + b"{}", head + b"[1,02]"):
        with pytest.raises(ValueError):
            compact.micros_and_field(damaged, "next_player")
    assert compact.micros_and_field(head + b"[,2]", "next_player") == (micros, 2)
