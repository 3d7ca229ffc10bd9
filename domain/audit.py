"""Audit a game's recorded history (contract: Fairness, Auditing). Pure: stdlib and domain only.

``audit_records(records)`` takes the events as ``/events`` serves them (or as an export holds them)
and runs five checks, each of which may blame a version:

- ``chain``: versions 1..n in order; every ``prev_hash`` is the previous event's ``hash`` (zeros for
  version 1); every ``hash`` recomputed from the served fields equals the stored one; no event is
  dated before the one it follows.
- ``rules``: the game is rebuilt from the GameCreated data and every action is re-derived from the
  events and replayed through the rules; the replay must produce the recorded events, type by type
  and field by field (derived events such as TurnBusted or GameFinished included).
- ``dice``: every server draw (any object in an event's data that carries a ``nonce``) uses the next
  nonce and, once the seed is revealed, equals the HMAC draw from it; the revealed seed must hash to
  the published commitment. Before the reveal the draws are "pending", which is not a failure.
- ``final_state``: the replay ends in the live state (when one is given: the server's audit).
- ``deadlines``: no action (a roll, move, stop or resignation) is dated at or after the deadline
  of the turn it was recorded in (clocked games; bots have no clock): the service refuses one
  and records the timeout instead. Judged on the ``rules`` replay, as far as it goes.

A record that is not even well formed (missing keys, wrong types, or a service-side
``{"version": v, "unreadable": "reason"}`` marker for a stored row that could not be decoded) is
reported by ``chain`` at its version; nothing here raises on bad input.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain import fairness, jsondoc
from domain.commands import NewGame, visible_ascii
from domain.commands import is_int as _is_int
from domain.errors import DomainError
from domain.game import (
    CANONICAL_JSON,
    ZERO_HASH,
    Game,
    chain_hash,
    event_data,
    event_type,
    format_at,
    parse_at,
    shown,
)
from domain.rules import DICE_FACES
from domain.view import game_state

EXPORT_FORMAT = "cantstop-game"
EXPORT_FORMAT_VERSION = 1
HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_RECORDS = 100_000
MAX_DEPTH = 16
MAX_GAME_ID = 200
COMMANDS = frozenset(
    {
        "SeatJoined",
        "SeatLeft",
        "DiceRolled",
        "MovePlayed",
        "TurnStopped",
        "TurnTimedOut",
        "PlayerResigned",
        "GameAbandoned",
        "SeedRevealed",
    }
)
DERIVED = frozenset({"GameCreated", "TurnOrderDecided", "TurnBusted", "GameFinished"})
# A player's actions: refused at or after the turn's deadline (contract 1.1, clocks).
ACTIONS = frozenset({"DiceRolled", "MovePlayed", "TurnStopped", "PlayerResigned"})
EVENT_TYPES = COMMANDS | DERIVED

# The replay cannot re-derive a commitment without its seed: it starts the game with this stand-in
# and keeps the recorded commitment, which the dice check and the seed reveal test instead.
_STAND_IN_SEED = "0" * 64
_REPLAY_ID = uuid.UUID(int=0)


class MalformedExport(ValueError):
    """Not a game export at all (no or bad header line): the reason is one line."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    version: int | None = None
    """The version this check blames, if any."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "version": self.version}


# ------------------------------------------------------------------------------ helpers
_canonical = CANONICAL_JSON.encode


def record_problem(record: Any) -> str | None:
    """Why ``record`` is not an event as served, or None when it is well formed."""
    if not isinstance(record, Mapping):
        return "not a JSON object"
    if "unreadable" in record:
        return f"unreadable: {record['unreadable']}"
    missing = [k for k in ("version", "type", "at", "data", "prev_hash", "hash") if k not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    if not _is_int(record["version"]):
        return "version is not an integer"
    if not isinstance(record["type"], str):
        return "type is not a string"
    if not isinstance(record["data"], Mapping):
        return "data is not an object"
    if jsondoc.depth(record["data"], MAX_DEPTH) > MAX_DEPTH:
        return f"data is nested more than {MAX_DEPTH} levels deep"
    for key in ("prev_hash", "hash"):
        if not isinstance(record[key], str) or not HEX64.fullmatch(record[key]):
            return f"{key} is not 64 lowercase hex digits"
    if not isinstance(record["at"], str):
        return "at is not a string"
    try:
        parse_at(record["at"])
    except ValueError as exc:
        return str(exc)
    return None


def _draws(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every object inside ``value`` that carries a (non-null) ``nonce``, in document order."""
    if isinstance(value, Mapping):
        if value.get("nonce") is not None:
            yield value
        for item in value.values():
            yield from _draws(item)
    elif isinstance(value, list):
        for item in value:
            yield from _draws(item)


def _readable_prefix(
    records: Sequence[Any], problems: Sequence[str | None]
) -> list[Mapping[str, Any]]:
    """The records up to (not including) the first malformed one."""
    prefix: list[Mapping[str, Any]] = []
    for record, problem in zip(records, problems, strict=True):
        if problem is not None:
            break
        prefix.append(record)
    return prefix


# ------------------------------------------------------------------------------ chain
def check_chain(records: Sequence[Any], problems: Sequence[str | None]) -> Check:
    """``problems``: each record's ``record_problem``, worked out once for every check."""
    if not records:
        return Check("chain", False, "the history is empty: version 1 is missing", 1)
    previous = ZERO_HASH
    for position, record in enumerate(records):
        expected = position + 1
        claimed = record.get("version") if isinstance(record, Mapping) else None
        if _is_int(claimed) and claimed != expected:
            if claimed > expected:
                detail = f"version {expected} is missing: version {claimed} follows {expected - 1}"
            else:
                detail = f"version {claimed} appears again, where version {expected} belongs"
            return Check("chain", False, detail, expected)
        problem = problems[position]
        if problem is not None:
            return Check("chain", False, f"version {expected} is malformed: {problem}", expected)
        if record["prev_hash"] != previous:
            what = "the zero hash" if expected == 1 else f"the hash of version {expected - 1}"
            return Check("chain", False, f"version {expected}: prev_hash is not {what}", expected)
        try:
            digest = chain_hash(
                record["prev_hash"], expected, record["type"], record["at"], record["data"]
            )
        except (TypeError, ValueError) as exc:
            return Check("chain", False, f"version {expected} cannot be hashed: {exc}", expected)
        if digest != record["hash"]:
            return Check(
                "chain",
                False,
                f"version {expected}: the hash does not match the event's contents",
                expected,
            )
        if position and record["at"] < records[position - 1]["at"]:
            # Times as served have one width, so their text sorts as they do. The service
            # never records an event before the one it follows (Game._timestamp).
            detail = (
                f"version {expected} is dated {record['at']}, before version {expected - 1} "
                f"({records[position - 1]['at']})"
            )
            return Check("chain", False, detail, expected)
        previous = record["hash"]
    return Check("chain", True, f"{len(records)} events in time order, every hash verified")


# ------------------------------------------------------------------------------ dice
def check_dice(records: Sequence[Any], problems: Sequence[str | None]) -> Check:
    readable = [r for r, problem in zip(records, problems, strict=True) if problem is None]
    created = readable[0] if readable and readable[0]["version"] == 1 else None
    if created is None or created["type"] != "GameCreated":
        return Check("dice", False, "no readable GameCreated event at version 1", 1)
    setup = created["data"]
    mode = setup.get("dice")
    rules = setup.get("rules")
    faces = rules.get("dice_faces") if isinstance(rules, Mapping) else None
    client_seed = setup.get("client_seed")
    promised = setup.get("seed_commitment")
    draws = [(r["version"], d) for r in readable for d in _draws(r["data"])]
    reveals = [r for r in readable if r["type"] == "SeedRevealed"]
    if mode == "manual":
        if draws:
            return Check("dice", False, "a manual-dice game records a server draw", draws[0][0])
        if reveals:
            return Check("dice", False, "a manual-dice game reveals a seed", reveals[0]["version"])
        return Check("dice", True, "manual dice: no server draws to check")
    if mode != "server":
        return Check("dice", False, f"unknown dice mode {shown(mode)}", 1)
    if not _is_int(faces) or faces not in DICE_FACES or not isinstance(client_seed, str):
        return Check("dice", False, "GameCreated lacks the dice faces or the client seed", 1)
    if not isinstance(promised, str) or not HEX64.fullmatch(promised):
        return Check("dice", False, "GameCreated lacks a seed commitment", 1)
    for expected_nonce, (version, entry) in enumerate(draws):
        nonce, dice = entry.get("nonce"), entry.get("dice")
        if not _is_int(nonce) or nonce != expected_nonce:
            detail = f"version {version}: draw nonce {shown(nonce)} where {expected_nonce} is next"
            return Check("dice", False, detail, version)
        if (
            not isinstance(dice, list)
            or not dice
            or not all(_is_int(d) and 1 <= d <= faces for d in dice)
        ):
            detail = f"version {version}: draw {nonce} records no dice of 1..{faces}"
            return Check("dice", False, detail, version)
        entropy = entry.get("entropy")
        if entropy is not None and not visible_ascii(entropy):
            detail = (
                f"version {version}: draw {nonce} records an entropy that is not 1 to 64 "
                "visible ASCII characters"
            )
            return Check("dice", False, detail, version)
    if len(reveals) > 1:
        return Check("dice", False, "the seed is revealed twice", reveals[1]["version"])
    if not reveals:
        finished = [r["version"] for r in readable if r["type"] == "GameFinished"]
        if finished:
            detail = f"the game finished at version {finished[0]} but its seed was never revealed"
            return Check("dice", False, detail, finished[0] + 1)
        detail = (
            f"pending: {len(draws)} draws recorded; the server seed is revealed when the game "
            "is finished"
        )
        return Check("dice", True, detail)
    reveal = reveals[0]
    seed = reveal["data"].get("server_seed")
    if not isinstance(seed, str) or not HEX64.fullmatch(seed):
        detail = (
            f"version {reveal['version']}: the revealed seed is not 64 lowercase hex characters"
        )
        return Check("dice", False, detail, reveal["version"])
    if fairness.commitment(seed) != promised:
        detail = f"version {reveal['version']}: the revealed seed does not hash to the commitment"
        return Check("dice", False, detail, reveal["version"])
    mixed = 0
    for version, entry in draws:
        nonce, dice, entropy = entry["nonce"], entry["dice"], entry.get("entropy")
        drawn = fairness.draw(seed, client_seed, nonce, len(dice), faces, entropy)
        if drawn != dice:
            detail = f"version {version}: draw {nonce} records {dice}, the seed gives {drawn}"
            return Check("dice", False, detail, version)
        mixed += entropy is not None
    detail = f"{len(draws)} draws match the revealed seed"
    if mixed:
        detail += f" ({mixed} with the player's entropy mixed in)"
    return Check("dice", True, detail)


# ------------------------------------------------------------------------------ rules
class _Refused(Exception):
    """The replay stops: ``position`` is the 0-based index of the record to blame."""

    def __init__(self, position: int, detail: str) -> None:
        super().__init__(detail)
        self.position = position
        self.detail = detail


class _RecordedDice:
    """The draw function of the replay: hands out the recorded draws, in order."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.queue = deque(
            (position, entry)
            for position, record in enumerate(records)
            for entry in _draws(record["data"])
        )
        self.position = 0

    def __call__(self, nonce: int, count: int, faces: int, entropy: str | None = None) -> list[int]:
        if not self.queue:
            raise _Refused(self.position, f"the rules call for draw {nonce}; none is recorded")
        position, entry = self.queue.popleft()
        dice = entry.get("dice")
        if (
            not isinstance(dice, list)
            or len(dice) != count
            or not all(_is_int(d) and 1 <= d <= faces for d in dice)
        ):
            detail = f"draw {nonce} should be {count} dice of 1..{faces}, not {shown(dice)}"
            raise _Refused(position, detail)
        # The nonce recorded with it is compared with the replay's along with the other fields.
        return list(dice)


def _int_field(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not _is_int(value):
        raise TypeError(f"{key} is not an integer")
    return value


def _perform(game: Game, record: Mapping[str, Any], draw: _RecordedDice) -> None:
    """The command that the recorded event says was given."""
    kind, data = record["type"], record["data"]
    server = game.dice_mode == "server"
    if kind == "SeatJoined":
        dice = draw if server else None
        if game.rematch_of is not None:
            game.claim(_int_field(data, "seat"), data.get("name"), draw=dice, bot=data.get("bot"))
        else:
            game.join(data.get("name"), draw=dice, bot=data.get("bot"), account=data.get("account"))
    elif kind == "SeatLeft":
        game.leave(_int_field(data, "seat"))
    elif kind == "TurnTimedOut":
        game.time_out(parse_at(record["at"]))  # the deadline is re-derived from the clock
    elif kind == "GameAbandoned":
        game.abandon(parse_at(record["at"]), _int_field(data, "after"))
    elif kind == "DiceRolled":
        seat = _int_field(data, "seat")
        if server:
            game.roll(seat, draw=draw, entropy=data.get("entropy"))
        else:
            game.roll(seat, dice=data.get("dice"))
    elif kind == "MovePlayed":
        game.move(_int_field(data, "seat"), data.get("sums"))
    elif kind == "TurnStopped":
        game.stop(_int_field(data, "seat"))
    elif kind == "PlayerResigned":
        game.resign(_int_field(data, "seat"))
    else:  # SeedRevealed
        seed = data.get("server_seed")
        if not isinstance(seed, str) or not seed.isascii():
            raise TypeError("server_seed is not ASCII text")
        game.reveal_seed(seed)


_ABSENT = object()


def _pairs(events: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The events' types and data, as JSON would carry them (tuples become lists)."""
    return [(event_type(e), json.loads(json.dumps(event_data(e)))) for e in events]


def _show(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, _ABSENT)
    return "(absent)" if value is _ABSENT else shown(value)


def _compare(
    produced: Sequence[tuple[str, Mapping[str, Any]]],
    records: Sequence[Mapping[str, Any]],
    at: int,
) -> None:
    """The events the replay produced against the records from position ``at`` on."""
    for offset, (kind, replayed) in enumerate(produced):
        position = at + offset
        if position >= len(records):
            raise _Refused(position, f"the rules produce {kind} here, but the history ends")
        record = records[position]
        if record["type"] != kind:
            raise _Refused(position, f"recorded {record['type']}, the rules produce {kind}")
        stored = record["data"]
        if _canonical(replayed) != _canonical(stored):
            diffs = [
                f"{key}: recorded {_show(stored, key)}, the rules give {_show(replayed, key)}"
                for key in sorted(set(replayed) | set(stored))
                if (key in stored) != (key in replayed)
                or _canonical(stored.get(key)) != _canonical(replayed.get(key))
            ]
            raise _Refused(position, f"{kind} differs from the replay: " + "; ".join(diffs))


def _start(
    records: Sequence[Mapping[str, Any]], draw: _RecordedDice, times: deque[datetime]
) -> Game:
    """Create the game from the GameCreated data, as the service would have."""
    created = records[0]
    if created["type"] != "GameCreated":
        raise _Refused(0, f"the history starts with {created['type']}, not GameCreated")
    setup = created["data"]
    server = setup.get("dice") == "server"
    promised = setup.get("seed_commitment")
    if server and (not isinstance(promised, str) or not HEX64.fullmatch(promised)):
        raise _Refused(0, "a server-dice game needs a seed commitment of 64 hex digits")
    players = setup.get("players")
    bots = setup.get("bots") or {}
    if isinstance(players, list) and isinstance(bots, Mapping):
        players = [
            {"name": name, "bot": bots[str(seat)]} if str(seat) in bots else name
            for seat, name in enumerate(players)
        ]
    game = Game.start(
        _REPLAY_ID,
        NewGame(
            players=players,
            seats=None if players is not None else setup.get("seats"),
            rules=setup.get("rules"),
            dice=setup.get("dice"),
            first_player=setup.get("first_player"),
            client_seed=setup.get("client_seed"),
            clock=setup.get("clock"),
            accounts=setup.get("accounts"),
            rated=setup.get("rated", False),
            abortable=setup.get("abortable", False),
        ),
        server_seed=_STAND_IN_SEED if server else None,
        seed_committed_at=setup.get("seed_committed_at"),
        rematch_of=setup.get("rematch_of"),
        draw=draw if server else None,
        times=times,
    )
    produced = _pairs(game.collect_events())
    if server:
        # The rest of GameCreated is compared; the commitment is the recorded one from here on.
        produced[0][1]["seed_commitment"] = promised
        game.seed_commitment = promised
    _compare(produced, records, 0)
    return game


class ReplayRefused(Exception):
    """The rules refuse a history: ``version`` is the one the ``rules`` check blames."""

    def __init__(self, version: int, detail: str) -> None:
        super().__init__(detail)
        self.version = version
        self.detail = detail


class Replay:
    """The ``rules`` check's replay, one command at a time, that can go on as the history grows
    (a game in progress): ``next_record`` is the next command's record, ``perform`` replays it
    through the rules into ``game`` (one object throughout), and ``extend`` adds the events
    recorded since. The records must be well formed (``record_problem``); a history the rules
    refuse raises ReplayRefused at the version the ``rules`` check blames, with its detail."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        if not records:
            raise ReplayRefused(1, "no readable GameCreated event at version 1")
        self.records: list[Mapping[str, Any]] = list(records)
        self.position = 0  # the index of the next record to replay
        try:
            self._draw = _RecordedDice(self.records)
            self._times = deque(parse_at(r["at"]) for r in self.records)
            self.game = _start(self.records, self._draw, self._times)
        except Exception as exc:
            raise self._refusal(exc) from None
        self.position = self.game.version

    def extend(self, records: Sequence[Mapping[str, Any]]) -> None:
        """The events recorded after the ones the replay has."""
        for record in records:
            position = len(self.records)
            self.records.append(record)
            self._draw.queue.extend((position, entry) for entry in _draws(record["data"]))
            self._times.append(parse_at(record["at"]))

    def next_record(self) -> Mapping[str, Any] | None:
        """The record of the next command, or None where the history (so far) ends."""
        if self.position >= len(self.records):
            return None
        kind = self.records[self.position]["type"]
        if kind not in EVENT_TYPES:
            raise self._refusal(
                _Refused(self.position, f"{shown(kind)} is not an event of this game")
            )
        if kind in DERIVED:
            detail = f"{kind} does not follow from the events before it"
            raise self._refusal(_Refused(self.position, detail))
        return self.records[self.position]

    def perform(self) -> None:
        """Replays the next command (``next_record``, read first) through the rules."""
        self._draw.position = self.position
        try:
            before = self.game.version
            _perform(self.game, self.records[self.position], self._draw)
            _compare(_pairs(self.game.collect_events()), self.records, before)
        except Exception as exc:
            raise self._refusal(exc) from None
        self.position = self.game.version

    def _refusal(self, exc: Exception) -> ReplayRefused:
        if isinstance(exc, _Refused):
            version = exc.position + 1
            return ReplayRefused(version, f"version {version}: {exc.detail}")
        version = self.position + 1
        if isinstance(exc, DomainError):
            detail = f"version {version}: the rules refuse it ({exc.code}): {exc.detail}"
            return ReplayRefused(version, detail)
        # malformed data reaching the rules: reported, never raised
        detail = f"version {version}: malformed event data ({type(exc).__name__}: {exc})"
        return ReplayRefused(version, detail)


def replay_steps(
    records: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Game, Mapping[str, Any] | None]]:
    """The replay of the ``rules`` check, one command at a time, for readers that follow a game
    through its history: before each command, the game as it stands and the command's record;
    at the end, ``(game, None)``. The game is one object that each step changes: read it before
    asking for the next. ``records`` must be well formed (``record_problem``); a history the
    rules refuse raises ReplayRefused at the version the ``rules`` check blames, with its
    detail. (``Replay`` is the same, and goes on as a history grows.)"""
    replay = Replay(records)
    while (record := replay.next_record()) is not None:
        yield replay.game, record
        replay.perform()
    yield replay.game, None


def _late(game: Game, record: Mapping[str, Any]) -> str | None:
    """Why ``record``, the next command, is an action recorded at or after its turn's deadline
    (the service refuses such an action and records the timeout), or None."""
    if record["type"] not in ACTIONS:
        return None
    deadline = game.deadline  # None without a clock, or with a bot to act: bots have no clock
    if deadline is None or not game.timed_out(parse_at(record["at"])):
        return None
    seat = shown(record["data"].get("seat"))
    return (
        f"version {record['version']}: {record['type']} by seat {seat} is dated {record['at']}, "
        f"at or after the deadline of seat {game.current}'s turn ({format_at(deadline)})"
    )


def _replay(
    records: Sequence[Any], problems: Sequence[str | None]
) -> tuple[Check, Check, Game | None]:
    """The ``rules`` check, the ``deadlines`` check (judged on the same replay) and the game
    at the end of the replay."""
    readable = _readable_prefix(records, problems)
    if not readable:
        rules = Check("rules", False, "no readable GameCreated event at version 1", 1)
        return rules, Check("deadlines", True, "no action to check"), None
    game: Game | None = None
    late: Check | None = None
    try:
        for game, record in replay_steps(readable):  # one object throughout
            if record is None:
                break
            why = _late(game, record) if late is None else None
            if why is not None:
                late = Check("deadlines", False, why, record["version"])
    except ReplayRefused as exc:
        rules = Check("rules", False, exc.detail, exc.version)
        detail = f"no late action before version {exc.version}, where the replay stopped"
        return rules, late or Check("deadlines", True, detail), None
    deadlines = late or Check("deadlines", True, "no action at or after its turn's deadline")
    if len(readable) < len(records):
        # The replay stopped where the records stop being readable; the chain check blames it.
        version = len(readable) + 1
        detail = f"replayed versions 1 to {len(readable)}; version {version} is unreadable"
        return Check("rules", False, detail, version), deadlines, None
    rules = Check("rules", True, f"{len(readable)} events replayed through the rules")
    return rules, deadlines, game


# ------------------------------------------------------------------------------ final state
def _check_final(
    game: Game | None, live_state: Mapping[str, Any] | None, live_error: str | None
) -> Check:
    if live_error is not None:
        return Check("final_state", False, f"the live game cannot be loaded: {live_error}")
    if live_state is None:
        return Check("final_state", True, "skipped: no live state to compare (offline audit)")
    if game is None:
        return Check("final_state", False, "not compared: the replay did not reach the end")
    replayed = {k: v for k, v in game_state(game).items() if k != "id"}
    live = {k: v for k, v in live_state.items() if k != "id"}
    if _canonical(replayed) == _canonical(live):
        return Check(
            "final_state", True, f"the replay ends in the live state (version {game.version})"
        )
    keys = sorted(
        k
        for k in set(replayed) | set(live)
        if _canonical(replayed.get(k)) != _canonical(live.get(k))
    )
    live_version = live.get("version")
    if _is_int(live_version) and live_version != game.version:
        blamed = min(live_version, game.version) + 1
        detail = f"the live game is at version {live_version}, the history at {game.version}"
    else:
        blamed = game.version
        detail = f"the live game differs from the replay in: {', '.join(keys)}"
    return Check("final_state", False, detail, blamed)


# ------------------------------------------------------------------------------ the audit
def audit_records(
    records: Sequence[Any],
    *,
    live_state: Mapping[str, Any] | None = None,
    live_error: str | None = None,
    extra: Sequence[Check] = (),
) -> dict[str, Any]:
    """The verdict of the contract's ``/audit``: valid, the checks, the first version blamed.

    ``live_state`` is the live game's state (``game_state``), compared with the replay's end;
    ``live_error`` says why the live game could not be loaded at all (reported, never raised);
    ``extra`` are checks only the server can make (its stored snapshots).
    """
    if len(records) > MAX_RECORDS:
        checks = [Check("chain", False, f"more than {MAX_RECORDS} events", MAX_RECORDS + 1)]
    else:
        problems = [record_problem(record) for record in records]
        rules, deadlines, game = _replay(records, problems)
        checks = [
            check_chain(records, problems),
            rules,
            check_dice(records, problems),
            _check_final(game, live_state, live_error),
            deadlines,
            *extra,
        ]
    blamed = [c.version for c in checks if c.version is not None]
    return {
        "valid": all(c.ok for c in checks),
        "checks": [c.to_dict() for c in checks],
        "first_bad_version": min(blamed) if blamed else None,
    }


def replayed(records: Sequence[Any]) -> Game | None:
    """The game at the end of a history that the rules accept (every action re-derived from the
    one before, as the audit's ``rules`` check does), or None."""
    problems = [record_problem(record) for record in records]
    check, _, game = _replay(records, problems)
    return game if check.ok else None


# ------------------------------------------------------------------------------ exports
def export_header(game_id: str) -> dict[str, Any]:
    return {"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION, "game_id": game_id}


def split_exports(data: bytes) -> list[bytes]:
    """A file of exports one after another (an account's bulk export) as each game's export:
    each begins at a header line (``{"format": …}``)."""
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    games: list[list[bytes]] = []
    marker = f'"format": "{EXPORT_FORMAT}"'.encode()
    compact = f'"format":"{EXPORT_FORMAT}"'.encode()
    for line in lines:
        if marker in line or compact in line or not games:
            games.append([])
        games[-1].append(line)
    parts = []
    for game in games:
        while game and not game[-1].strip():  # blank lines between games
            game.pop()
        if game:
            parts.append(b"\n".join(game))
    return parts


def parse_export(data: bytes) -> tuple[dict[str, Any], list[Any]]:
    """An export's header and records. A bad header is MalformedExport; a bad event line becomes
    an ``{"version": <its line>, "unreadable": …}`` record, which the audit blames."""
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a UTF-8 BOM, as editors write
    while lines and not lines[-1].strip():  # blank lines at the end, as editors leave them
        lines.pop()
    if not lines:
        raise MalformedExport("the file is empty")
    try:
        header = jsondoc.loads(lines[0])
    except jsondoc.MalformedJson as exc:
        raise MalformedExport(f"the first line is not a JSON header ({exc})") from None
    if (
        not isinstance(header, dict)
        or header.get("format") != EXPORT_FORMAT
        or not _is_int(header.get("format_version"))
        or header.get("format_version") != EXPORT_FORMAT_VERSION
        or not isinstance(header.get("game_id"), str)
        or not 0 < len(header["game_id"]) <= MAX_GAME_ID
    ):
        raise MalformedExport(
            f'the first line is not {{"format": "{EXPORT_FORMAT}", '
            f'"format_version": {EXPORT_FORMAT_VERSION}, "game_id": "…"}}'
        )
    if len(lines) - 1 > MAX_RECORDS:
        raise MalformedExport(f"more than {MAX_RECORDS} events")
    records: list[Any] = []
    for number, line in enumerate(lines[1:], start=1):
        try:
            records.append(jsondoc.loads(line))
        except jsondoc.MalformedJson as exc:
            records.append({"version": number, "unreadable": f"line {number + 1}: {exc}"})
    return header, records
