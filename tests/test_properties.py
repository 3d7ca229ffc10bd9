"""Property-based tests: random play never breaks the rules' invariants; the events rebuild it all.

Games are played through the Game aggregate with manual dice drawn by hypothesis, random rules
(variants, solitaire modes, 6 or 8 faces, 1 to 5 players, lobby or not), and the player to act
picking at random among ``legal_actions`` (with the odd resignation by anyone still seated).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    UUIDAsHex,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import NewGame
from domain.errors import DomainError, GameOver, IllegalAction, InvalidDice, NotYourTurn
from domain.game import (
    AT_FORMAT,
    ZERO_HASH,
    Game,
    canonical_bytes,
    chain_hash,
    event_record,
    event_records,
    format_at,
    format_time,
    own_events_encoder,
    parse_at,
    position_map,
)
from domain.moves import UNCLAIMED
from domain.view import game_state, legal_actions
from service.application.aggregates import Vault
from service.application.store import GameEventMapper, ServiceTranscoder, canonical_json
from service.persistence.compact import COMPACT, DEFLATE_FROM, deflate

PROPERTY = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_COMMANDS = 200
ROLL = {"type": "roll"}
STOP = {"type": "stop"}

Command = Callable[[Game], None]


# ------------------------------------------------------------------------------------- setups
@dataclass(frozen=True)
class Setup:
    players: int
    rules: dict[str, Any]
    first_player: int
    lobby: bool

    @property
    def faces(self) -> int:
        return int(self.rules["dice_faces"])


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    players = draw(st.integers(1, 8))
    faces = draw(st.sampled_from([6, 8]))
    rules: dict[str, Any] = {"dice_faces": faces, "steep_hill": draw(st.booleans())}
    variant = draw(st.sampled_from([None, "jumping", "forced_move"]))  # never both
    if variant:
        rules[variant] = True
    if players == 1:
        rules["solitaire"] = draw(st.sampled_from(["easy", "advanced"]))
    else:
        # Up to every column but one: from 6 players at 3, or 2 players at 7, nobody may be
        # left able to win, and play goes on (every roll busting) until resignations end it.
        rules["columns_to_win"] = draw(
            st.one_of(st.sampled_from([1, 2, 3, "by_players"]), st.integers(4, 2 * faces - 1))
        )
    first_player = draw(st.integers(0, players - 1))
    lobby = players >= 2 and draw(st.booleans())
    return Setup(players, rules, first_player, lobby)


def start(setup: Setup) -> Game:
    names = [f"P{seat}" for seat in range(setup.players)]
    if not setup.lobby:
        return Game.start(
            uuid.uuid4(),
            NewGame(
                players=names, rules=setup.rules, dice="manual", first_player=setup.first_player
            ),
        )
    game = Game.start(
        uuid.uuid4(),
        NewGame(
            seats=setup.players, rules=setup.rules, dice="manual", first_player=setup.first_player
        ),
    )
    for name in names:
        game.join(name)
    return game


# --------------------------------------------------------------------------------- invariants
def shares_an_opponents_space(state: dict[str, Any]) -> bool:
    turn = state["turn"]
    return any(
        player["markers"].get(column) == at
        for column, at in turn["runners"].items()
        for player in state["players"]
        if player["seat"] != turn["player"]
    )


def check_invariants(state: dict[str, Any]) -> None:
    rules = state["rules"]
    height = {c["column"]: c["height"] for c in state["columns"]}
    owner = {c["column"]: c["claimed_by"] for c in state["columns"]}
    players = state["players"]

    for player in players:
        for column, at in player["markers"].items():
            assert 1 <= at <= height[int(column)], (player, column)
            if at == height[int(column)]:  # a marker on the top has claimed its column
                assert owner[int(column)] == player["seat"]
        assert player["claimed"] == sorted(c for c, s in owner.items() if s == player["seat"])
        if player["resigned"]:
            assert {int(c) for c in player["markers"]} <= set(player["claimed"])

    for column, seat in owner.items():
        if seat is None:
            continue
        assert players[seat]["markers"].get(str(column)) == height[column]
        others = [p for p in players if p["seat"] != seat and str(column) in p["markers"]]
        assert others == [], f"column {column} claimed by {seat} still holds {others}"

    if state["status"] == "in_progress":
        turn = state["turn"]
        assert turn is not None
        assert not players[turn["player"]]["resigned"]
        assert state["legal_actions"], "nothing to do in a game in progress"
        assert len(turn["runners"]) <= 3
        for column, at in turn["runners"].items():
            assert 1 <= at <= height[int(column)]
            assert owner[int(column)] is None
        assert (turn["dice"] is not None) == (turn["phase"] == "move")
        if turn["phase"] == "roll_or_stop":
            forced = rules["forced_move"] and shares_an_opponents_space(state)
            assert state["legal_actions"] == ([ROLL] if forced else [ROLL, STOP])
        for player in players:
            assert len(player["claimed"]) < rules["columns_to_win"]
    elif state["status"] == "finished":
        assert state["turn"] is None
        assert state["legal_actions"] == []
        if state["finish_reason"] == "columns":
            assert len(players[state["winner"]]["claimed"]) >= rules["columns_to_win"]
        elif state["finish_reason"] == "last_player":
            assert [p["seat"] for p in players if not p["resigned"]] == [state["winner"]]
        else:
            assert state["finish_reason"] == "resigned"
            assert state["winner"] is None
            assert state["solitaire"]["rating"] is None


# ------------------------------------------------------------------------------- random play
@dataclass
class Played:
    game: Game
    live: dict[int, dict[str, Any]] = field(default_factory=dict)  # version → state it had
    commands: list[Command] = field(default_factory=list)
    after: list[int] = field(default_factory=list)  # the version after each command


def roll(seat: int, dice: list[int]) -> Command:
    return lambda game: game.roll(seat, dice=dice)


def move(seat: int, sums: list[int]) -> Command:
    return lambda game: game.move(seat, sums)


def stop(seat: int) -> Command:
    return lambda game: game.stop(seat)


def resign(seat: int) -> Command:
    return lambda game: game.resign(seat)


def legal_command(data: st.DataObject, state: dict[str, Any], faces: int) -> Command:
    """A command picked among what the game lists as legal (now and then a resignation).

    Few draws per command keep long games fast: one pick, and one number for the four dice.
    """
    pick = data.draw(st.integers(0, 2**16 - 1), label="pick")
    if pick % 200 == 37:  # about one command in 200
        seated = [p["seat"] for p in state["players"] if not p["resigned"]]
        return resign(seated[(pick // 200) % len(seated)])
    seat = state["turn"]["player"]
    action = state["legal_actions"][(pick // 200) % len(state["legal_actions"])]
    if action["type"] == "roll":
        code = data.draw(st.integers(0, faces**4 - 1), label="dice")
        return roll(seat, [code // faces**i % faces + 1 for i in range(4)])
    if action["type"] == "move":
        sums = list(action["sums"])
        return move(seat, sums[::-1] if pick % 2 else sums)  # sums in any order
    return stop(seat)


def fuzz_command(
    data: st.DataObject, state: dict[str, Any], faces: int
) -> tuple[Command, type | None]:
    """Any command by any seat, and what the rulings and the contract's check order expect of it:
    None when it must be accepted, else the error it must be refused with."""
    seats = len(state["players"])
    seat = data.draw(st.integers(0, seats), label="any seat")  # seat ``seats`` does not exist
    kind = data.draw(st.sampled_from(["roll", "move", "stop"] * 3 + ["resign"]), label="any kind")
    in_progress = state["status"] == "in_progress"
    if not in_progress:
        expected: type | None = GameOver
    elif kind == "resign":
        if seat >= seats:
            expected = NotYourTurn
        else:
            expected = IllegalAction if state["players"][seat]["resigned"] else None
        return resign(seat), expected
    elif seat != state["turn"]["player"]:
        expected = NotYourTurn
    else:
        expected = None
    if kind == "roll":
        dice = data.draw(st.lists(st.integers(0, faces + 1), min_size=3, max_size=5), label="dice")
        if expected is None and ROLL not in state["legal_actions"]:
            expected = IllegalAction
        elif expected is None and not (len(dice) == 4 and all(1 <= d <= faces for d in dice)):
            expected = InvalidDice
        return roll(seat, dice), expected
    if kind == "move":
        sums = data.draw(
            st.lists(st.integers(2, 2 * faces), min_size=1, max_size=2), label="any sums"
        )
        legal = [a["sums"] for a in state["legal_actions"] if a["type"] == "move"]
        if expected is None and sorted(sums) not in legal:
            expected = IllegalAction
        return move(seat, sums), expected
    if kind == "stop" and expected is None and STOP not in state["legal_actions"]:
        expected = IllegalAction
    return stop(seat) if kind == "stop" else resign(seat), expected


def play(data: st.DataObject, setup: Setup, *, fuzz: bool = False) -> Played:
    """Play at random, checking the invariants after every command and recording the live state
    at every version the aggregate goes through (several per command when a roll busts, …)."""
    game = start(setup)
    played = Played(game)
    played.live[game.version] = game_state(game)
    recorded = Game.trigger_event

    def trigger_and_record(event_class: type[Any], **kwargs: Any) -> None:
        recorded(game, event_class, **kwargs)
        played.live[game.version] = game_state(game)

    game.trigger_event = trigger_and_record  # type: ignore[method-assign]
    try:
        state = played.live[game.version]
        turn_number = game.turn_number
        check_invariants(state)
        for _ in range(MAX_COMMANDS):
            if state["status"] == "finished":
                break
            expected: type | None = None
            if fuzz and data.draw(st.booleans(), label="fuzz?"):
                command, expected = fuzz_command(data, state, setup.faces)
            else:
                command = legal_command(data, state, setup.faces)
            version = game.version
            try:
                command(game)
            except DomainError as error:
                assert expected is not None, f"refused a command the rules allow: {error}"
                assert type(error) is expected, (error, expected)
                assert game.version == version, "a refusal recorded events"
                assert game_state(game) == state
                continue
            assert expected is None, f"accepted a command the rules refuse ({expected.__name__})"
            assert game.version > version
            played.commands.append(command)
            played.after.append(game.version)
            state = played.live[game.version]
            check_invariants(state)
            assert game.turn_number >= turn_number, "the turn number went back"
            turn_number = game.turn_number
    finally:
        del game.trigger_event
    return played


# ------------------------------------------------------------------------------- the properties
@PROPERTY
@given(setup=setups(), data=st.data())
def test_random_legal_play_keeps_every_invariant(setup: Setup, data: st.DataObject) -> None:
    played = play(data, setup)
    assert played.game.version == max(played.live)


@PROPERTY
@given(setup=setups(), data=st.data())
def test_the_engine_accepts_exactly_the_listed_legal_actions(
    setup: Setup, data: st.DataObject
) -> None:
    play(data, setup, fuzz=True)


@PROPERTY
@given(setup=setups(), data=st.data())
def test_replaying_the_events_gives_the_live_state_at_every_version(
    setup: Setup, data: st.DataObject
) -> None:
    played = play(data, setup)
    events: list[Any] = list(played.game.pending_events)
    assert [e.originator_version for e in events] == list(range(1, len(events) + 1))
    replayed: Game = events[0].mutate(None)
    for event in events[1:]:
        replayed = event.mutate(replayed)
        if event.originator_version in played.live:
            assert game_state(replayed) == played.live[event.originator_version]
    assert set(played.live) <= set(range(1, len(events) + 1))
    assert game_state(replayed) == game_state(played.game)
    assert replayed.last_hash == events[-1].hash


def reference_state(game: Game, game_id: str | None = None) -> dict[str, Any]:
    """The state view as ``domain.view.game_state`` built it before it shared its parts between
    views (seats, positions, legal moves): every part built afresh, nothing shared."""
    rules = game.rules_obj
    claimed = tuple(game.claimed)
    turn = None
    if game.status == "in_progress" and game.current is not None:
        turn = {
            "number": game.turn_number,
            "player": game.current,
            "phase": game.phase,
            "dice": list(game.dice) if game.phase == "move" and game.dice else None,
            "runners": position_map(game.runners),
            "deadline": format_at(deadline) if (deadline := game.deadline) else None,
        }
    solitaire = None
    if rules.solitaire:
        solitaire = {
            "mode": rules.solitaire,
            "turns": game.turns_completed,
            "target": game.solitaire_target,
            "rating": game.rating,
        }
    columns = rules.columns
    players = [
        {
            "seat": seat,
            "name": game.names[seat],
            "markers": position_map(game.markers[seat]),
            "claimed": [c for c in columns if claimed[c] == seat] if seat in claimed else [],
            "resigned": game.resigned[seat],
            "bot": game.bots.get(str(seat)),
            "account": game.accounts[seat],
            "timeouts_in_a_row": game.timeouts_of(seat),
        }
        for seat in range(game.seats)
    ]
    return {
        "id": game_id,
        "version": game.version,
        "status": game.status,
        "rules": rules.to_dict(),
        "dice": game.dice_mode,
        "columns": [
            {
                "column": c,
                "height": rules.heights[c],
                "claimed_by": None if claimed[c] == UNCLAIMED else claimed[c],
            }
            for c in columns
        ],
        "players": players,
        "turn": turn,
        "legal_actions": legal_actions(game),
        "winner": game.winner,
        "finish_reason": game.finish_reason,
        "first_player": game.first_player if game.status != "waiting" else None,
        "solitaire": solitaire,
        "clock": {"turn_seconds": game.clock_seconds} if game.clock_seconds else None,
        "rematch_of": game.rematch_of,
        "rated": game.rated,
        "fairness": {
            "seed_commitment": game.seed_commitment,
            "client_seed": game.client_seed,
            "server_seed": game.server_seed,
        },
    }


@PROPERTY
@given(setup=setups(), data=st.data())
def test_the_view_with_shared_parts_is_the_view_built_afresh(
    setup: Setup, data: st.DataObject
) -> None:
    """``game_state`` shares the parts that many versions have alike (docs/performance.md): at
    every version of random games it is the view built afresh, to the byte as JSON, and the
    views built before it are unchanged (sharing never lets one view change another's)."""
    played = play(data, setup)
    events: list[Any] = list(played.game.pending_events)
    replayed: Game = events[0].mutate(None)
    built: list[tuple[dict[str, Any], bytes]] = []
    for event in events[1:]:
        replayed = event.mutate(replayed)
        view = game_state(replayed, "g")
        assert view == reference_state(replayed, "g")
        built.append((view, json.dumps(view).encode()))
        assert json.dumps(view) == json.dumps(reference_state(replayed, "g"))
    for view, text in built:
        assert json.dumps(view).encode() == text


@PROPERTY
@given(setup=setups(), data=st.data())
def test_snapshots_and_stored_events_restore_the_state_and_play_on_identically(
    setup: Setup, data: st.DataObject
) -> None:
    played = play(data, setup)
    game = played.game
    final = game.version
    final_state = game_state(game)
    app: Application[uuid.UUID] = Application(env={"IS_SNAPSHOTTING_ENABLED": "y"})
    app.save(game)

    # Snapshots at random versions, and always at the last command that left a move to choose
    # (tuples in the state come back as lists from a snapshot: the move must still be accepted).
    in_move = [v for v in played.after if played.live[v]["turn"] and played.live[v]["turn"]["dice"]]
    snapshots = set(
        data.draw(st.lists(st.integers(1, final), max_size=4, unique=True), label="snapshots")
    )
    snapshots.update(in_move[-1:])
    for version in sorted(snapshots):
        app.take_snapshot(game.id, version=version)

    checked = set(data.draw(st.lists(st.integers(1, final), max_size=4), label="versions"))
    checked |= snapshots | {v + 1 for v in snapshots if v < final} | {final}
    for version in sorted(checked):
        restored: Game = app.repository.get(game.id, version=version)
        assert restored.version == version
        if version in played.live:
            assert game_state(restored) == played.live[version]

    # A game restored at a command boundary (from a snapshot where one was taken) plays on
    # exactly like the live one did.
    boundaries = [i for i, v in enumerate(played.after) if v in snapshots]
    for index in boundaries:
        restored = app.repository.get(game.id, version=played.after[index])
        for command in played.commands[index + 1 :]:
            command(restored)
        assert game_state(restored) == final_state


@pytest.mark.parametrize("mode", ["easy", "advanced"])
def test_a_game_restored_from_a_snapshot_in_the_move_phase_accepts_the_move(mode: str) -> None:
    game = Game.start(
        uuid.uuid4(), NewGame(players=["Sol"], rules={"solitaire": mode}, dice="manual")
    )
    game.roll(0, dice=[1, 5, 4, 6])
    app: Application[uuid.UUID] = Application(env={"IS_SNAPSHOTTING_ENABLED": "y"})
    app.save(game)
    app.take_snapshot(game.id, version=game.version)
    restored: Game = app.repository.get(game.id)
    assert game_state(restored) == game_state(game)
    restored.move(0, [10, 6])
    assert game_state(restored)["turn"]["runners"] == {"6": 1, "10": 1}


# --------------------------------------------------------------------- stored as the library would
def library_transcoder() -> JSONTranscoder:
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return transcoder


def service_transcoder() -> ServiceTranscoder:
    """The service's transcoder, with the transcodings the application registers."""
    transcoder = ServiceTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return transcoder


NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12).filter(
    lambda name: bool(name.strip()) and name.strip().isprintable()
)


def same_fields(one: Any, other: Any) -> bool:
    """Two events with the same fields, values and types, in the same order (the order a
    record's data is served in)."""
    pairs = [(k, v, type(v)) for k, v in vars(one).items()]
    return pairs == [(k, v, type(v)) for k, v in vars(other).items()]


@PROPERTY
@given(setup=setups(), data=st.data(), names=st.lists(NAMES, min_size=2, max_size=2))
def test_game_events_are_stored_compact_and_read_back_as_the_librarys_form_reads(
    setup: Setup, data: st.DataObject, names: list[str]
) -> None:
    """GameEventMapper stores every event of a game in the compact form, which reads back as
    the very fields (values, types, order) the library's JSON form reads back as, and so the
    same records, byte for byte; and a row in the library's form, as a store written before
    the compact form holds, reads back alike (a reader of both forms)."""
    played = play(data, setup)
    named = Game.start(uuid.uuid4(), NewGame(players=names, dice="manual"))
    fast = GameEventMapper(transcoder=service_transcoder())
    library: Mapper[uuid.UUID] = Mapper(transcoder=library_transcoder())
    for event in [*played.game.pending_events, *named.pending_events]:
        stored = fast.to_stored_event(event)
        old = library.to_stored_event(event)
        assert stored.state[0] == COMPACT and len(stored.state) < len(old.state)
        assert (stored.topic, stored.originator_version) == (old.topic, old.originator_version)
        compact, json_form = fast.to_domain_event(stored), fast.to_domain_event(old)
        assert same_fields(compact, library.to_domain_event(old))
        assert same_fields(json_form, library.to_domain_event(old))
        assert compact == event
        assert isinstance(compact, Game.Event) and isinstance(event, Game.Event)
        assert orjson.dumps(event_record(compact)) == orjson.dumps(event_record(event))


def test_what_orjson_would_write_otherwise_takes_the_librarys_way() -> None:
    """Not a game event (a UUID inside: orjson would write it as a plain string), or a value
    orjson refuses (an integer beyond 64 bits): the library's encoder (its JSON deflated when
    large), and the value back."""
    fast = GameEventMapper(transcoder=service_transcoder())
    library: Mapper[uuid.UUID] = Mapper(transcoder=library_transcoder())
    vault = Vault(uuid.uuid4(), server_seed="00" * 32)
    created = vault.pending_events[0]
    assert fast.to_stored_event(created) == library.to_stored_event(created)
    assert fast.to_domain_event(fast.to_stored_event(created)) == created
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann"], dice="manual"))
    first: Any = game.pending_events[0]
    huge = dataclasses.replace(first, hash=str(2**70), prev_hash=2**70)
    stored, old = fast.to_stored_event(huge), library.to_stored_event(huge)
    assert len(old.state) >= DEFLATE_FROM and stored.state == deflate(old.state) != old.state
    assert fast.to_domain_event(fast.to_stored_event(huge)) == huge


@given(
    when=st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30)),
    offset_minutes=st.integers(min_value=-23 * 60, max_value=23 * 60),
)
def test_a_time_is_served_in_utc_whatever_its_zone(when: datetime, offset_minutes: int) -> None:
    """In UTC already or in another zone: the same instant, the same text, read back alike;
    kept or not (``format_at``, ``format_time``), on the second or not."""
    utc = when.replace(tzinfo=UTC)
    elsewhere = utc.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = format_at(utc)
    assert text == utc.strftime(AT_FORMAT) == format_at(elsewhere) == format_time(elsewhere)
    assert format_time(utc) == text
    assert parse_at(text) == utc
    on_the_second = utc.replace(microsecond=0)
    assert format_time(on_the_second) == on_the_second.strftime(AT_FORMAT)


# Any text (lone surrogates too), integers of any size, keys of either kind: what an event holds
# and what it never should.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=())),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=4), inner, max_size=5)
        | st.dictionaries(st.integers(-3, 3) | st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=30,
)


def encoded(encode: Callable[[Any], bytes], value: Any) -> bytes | type:
    try:
        return encode(value)
    except (TypeError, ValueError) as refused:  # UnicodeEncodeError is a ValueError
        return type(refused)


@given(JSON_VALUES)
def test_orjson_writes_the_contracts_canonical_json_of_every_value_an_event_holds(
    value: Any,
) -> None:
    """The service's encoder of a game's new events (orjson) writes the bytes of the contract's
    definition (the standard library's, sorted keys), or refuses as it does: a lone surrogate,
    keys of two kinds; an integer beyond 64 bits and keys that are integers go its way."""
    assert encoded(canonical_json, value) == encoded(canonical_bytes, value)


@PROPERTY
@given(setup=setups(), data=st.data(), names=st.lists(NAMES, min_size=2, max_size=2))
def test_a_game_hashed_by_the_services_encoder_hashes_as_the_contract_says(
    setup: Setup, data: st.DataObject, names: list[str]
) -> None:
    """Games played with the service's encoder of their own events: every event's hash is the
    contract's, as an audit computes it."""
    before = own_events_encoder(canonical_json)
    try:
        games = [
            play(data, setup).game,
            Game.start(uuid.uuid4(), NewGame(players=names, dice="manual")),
        ]
    finally:
        own_events_encoder(before)
    for game in games:
        previous = ZERO_HASH
        for record in event_records(game.pending_events):
            digest = chain_hash(
                previous, record["version"], record["type"], record["at"], record["data"]
            )
            assert record["prev_hash"] == previous and record["hash"] == digest
            previous = digest
