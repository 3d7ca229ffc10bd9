"""The audit of a tournament's export (issue #45): each pairing recomputed by the rule, each result
against its table and its game, the standings recomputed; forged exports fail at the first bad
version and never crash the audit.

docs/tournaments.md names these tests beside the promises they hold."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.audit import MalformedExport
from domain.tournament import (
    MAX_LINES,
    audit_tournament,
    export_lines,
    is_tournament_export,
    parse_tournament_export,
)
from tests.support.tournaments import finished_arena, finished_swiss

Export = tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]


@functools.cache
def swiss_data() -> Export:
    """One finished Swiss of nine bots, its export and its games (built once; copied by each
    test that changes it)."""
    tournament, games = finished_swiss()
    lines = export_lines(tournament.id, tournament.collect_events())
    return lines[0], lines[1:], games


@pytest.fixture
def swiss_export() -> Export:
    return swiss_data()


def encoded(header: dict[str, Any], records: list[Any]) -> bytes:
    return "\n".join(json.dumps(x) for x in [header, *records]).encode() + b"\n"


def check(verdict: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in verdict["checks"] if c["name"] == name)


# ------------------------------------------------------------------------------ valid ones
def test_a_swiss_of_nine_bots_at_tables_of_three_audits_with_its_games(
    swiss_export: Export,
) -> None:
    header, records, games = swiss_export
    data = encoded(header, records)
    assert is_tournament_export(data)
    header2, records2 = parse_tournament_export(data)
    verdict = audit_tournament(header2, records2, games)
    assert verdict["valid"], verdict
    names = [c["name"] for c in verdict["checks"]]
    assert names == [
        "format", "events", "registrations", "pairings", "results", "standings", "games",
    ]  # fmt: skip
    assert verdict["first_bad_version"] is None
    assert verdict["standings"] == header["standings"]
    assert len(games) == 9


def test_an_arena_audits_with_its_games() -> None:
    tournament, games = finished_arena()
    assert tournament.finish_reason == "completed" and len(games) >= 4
    lines = export_lines(tournament.id, tournament.collect_events())
    verdict = audit_tournament(lines[0], lines[1:], games)
    assert verdict["valid"], verdict


def test_export_lines_of_served_lines_give_the_same_export(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    again = export_lines(header["tournament_id"], records)
    assert again[0] == header and again[1:] == records


# ------------------------------------------------------------------------------ forgeries
def forged(records: list[dict[str, Any]], version: int) -> dict[str, Any]:
    return records[version - 1]


def first(records: list[dict[str, Any]], kind: str) -> int:
    return next(int(r["version"]) for r in records if r["type"] == kind)


def test_a_forged_pairing_fails_at_its_version(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    records = copy.deepcopy(records)
    version = [r["version"] for r in records if r["type"] == "RoundPaired"][1]
    tables = forged(records, version)["data"]["tables"]
    tables[0]["players"][0], tables[1]["players"][0] = (
        tables[1]["players"][0],
        tables[0]["players"][0],
    )
    verdict = audit_tournament(header, records)
    assert not verdict["valid"] and verdict["first_bad_version"] == version
    assert not check(verdict, "pairings")["ok"]


def test_a_double_registration_fails_registrations(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    records = copy.deepcopy(records)
    records.insert(2, copy.deepcopy(records[1]))  # Registered twice
    for i, record in enumerate(records, start=1):
        record["version"] = i
    verdict = audit_tournament(header, records)
    assert check(verdict, "registrations")["version"] == 3
    assert "already_registered" in check(verdict, "registrations")["detail"]


def test_a_registration_in_a_started_swiss_fails(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    records = copy.deepcopy(records)
    start = first(records, "Started")
    late = {"version": 0, "type": "Registered", "at": records[start - 1]["at"]}
    late["data"] = {"handle": "latecomer", "rating": 25.0}
    records.insert(start, late)
    for i, record in enumerate(records, start=1):
        record["version"] = i
    verdict = audit_tournament(header, records)
    assert verdict["first_bad_version"] == start + 1
    assert "tournament_started" in check(verdict, "registrations")["detail"]


def test_a_result_for_someone_not_at_the_table_fails_results(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    records = copy.deepcopy(records)
    version = first(records, "ResultRecorded")
    places = forged(records, version)["data"]["places"]
    handle = next(iter(places))
    places["stranger"] = places.pop(handle)
    verdict = audit_tournament(header, records)
    assert verdict["first_bad_version"] == version and not check(verdict, "results")["ok"]


def test_a_second_result_for_a_table_fails_results(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    records = copy.deepcopy(records)
    version = first(records, "ResultRecorded")
    records.insert(version, copy.deepcopy(records[version - 1]))
    for i, record in enumerate(records, start=1):
        record["version"] = i
    verdict = audit_tournament(header, records)
    assert verdict["first_bad_version"] == version + 1 and not check(verdict, "results")["ok"]


def test_forged_standings_fail_the_standings_check(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    header = copy.deepcopy(header)
    header["standings"][0]["points"] += 1
    verdict = audit_tournament(header, records)
    assert not verdict["valid"] and not check(verdict, "standings")["ok"]
    assert check(verdict, "pairings")["ok"]


def test_a_result_that_is_not_its_games_fails_the_games_check(swiss_export: Export) -> None:
    header, records, games = swiss_export
    records = copy.deepcopy(records)
    version = [r["version"] for r in records if r["type"] == "ResultRecorded"][-1]
    result = forged(records, version)["data"]
    game_id = result["game_id"]
    # Swap the first two places: still valid ranks, and the tournament's rules accept it.
    a, b = sorted(result["places"], key=result["places"].get)[:2]
    result["places"][a], result["places"][b] = result["places"][b], result["places"][a]
    header = export_lines(header["tournament_id"], records)[0]  # standings that agree
    verdict = audit_tournament(header, records, games)
    assert [c["name"] for c in verdict["checks"] if not c["ok"]] == ["games"]
    assert verdict["first_bad_version"] == version
    assert game_id in check(verdict, "games")["detail"]
    wrong_hash = copy.deepcopy(records)
    forged(wrong_hash, version)["data"]["last_hash"] = "0" * 64
    verdict = audit_tournament(
        export_lines(header["tournament_id"], wrong_hash)[0], wrong_hash, games
    )
    assert "last hash" in check(verdict, "games")["detail"]
    missing = {k: v for k, v in games.items() if k != game_id}
    assert "no game export" in check(audit_tournament(header, records, missing), "games")["detail"]


def test_a_missing_derived_finish_or_a_gap_fails_events(swiss_export: Export) -> None:
    header, records, _ = swiss_export
    assert records[-1]["type"] == "Finished"
    verdict = audit_tournament(header, records[:-1])
    assert verdict["first_bad_version"] == records[-2]["version"]
    gap = copy.deepcopy(records)
    del gap[3]
    verdict = audit_tournament(header, gap)
    assert verdict["first_bad_version"] == 4 and not check(verdict, "events")["ok"]
    back = copy.deepcopy(records)
    back[5]["at"] = "2020-01-01T00:00:00.000000Z"
    assert audit_tournament(header, back)["first_bad_version"] == 6
    unknown = copy.deepcopy(records)
    unknown[4]["type"] = "Forfeited"
    assert audit_tournament(header, unknown)["first_bad_version"] == 5


def test_bad_headers_and_too_many_lines_are_refused_cleanly() -> None:
    with pytest.raises(MalformedExport):
        parse_tournament_export(b"")
    with pytest.raises(MalformedExport):
        parse_tournament_export(b'{"format": "cantstop-game", "format_version": 1}\n')
    with pytest.raises(MalformedExport):
        parse_tournament_export(
            b'{"format": "cantstop-tournament", "format_version": 1, "tournament_id": "x"}\n'
        )
    header = b'{"format":"cantstop-tournament","format_version":1,"tournament_id":"%s"}\n' % (
        str(uuid.uuid4()).encode()
    )
    with pytest.raises(MalformedExport, match="more than"):
        parse_tournament_export(header + b"{}\n" * (MAX_LINES + 1))
    verdict = audit_tournament({"format": "x"}, [])
    assert not verdict["valid"] and not check(verdict, "format")["ok"]
    too_many = audit_tournament(json.loads(header), [{}] * (MAX_LINES + 1))
    assert not too_many["valid"] and too_many["first_bad_version"] == MAX_LINES + 1


# ------------------------------------------------------------------------------ fuzz
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(
    index=st.integers(0, 10_000),
    where=st.sampled_from(["record", "version", "type", "at", "data", "inside"]),
    pick=st.integers(0, 20),
    value=JSON,
)
def test_forged_exports_never_crash_the_audit(
    index: int, where: str, pick: int, value: Any
) -> None:
    header, records, games = swiss_data()
    records = copy.deepcopy(records)
    index %= len(records)
    record = records[index]
    if where == "record":
        records[index] = value
    elif where != "inside":
        record[where] = value
    else:
        keys = sorted(record["data"])
        record["data"][keys[pick % len(keys)]] = value
    verdict = audit_tournament(header, records, games)
    assert set(verdict) == {"valid", "checks", "first_bad_version", "standings"}
    assert all(c["version"] is None or c["version"] >= 1 for c in verdict["checks"])
    if where != "inside" and not verdict["valid"]:  # a bad line is blamed at its version
        assert verdict["first_bad_version"] in (None, index + 1)
    parsed = parse_tournament_export(encoded(header, records))  # and through the parser
    alone = audit_tournament(header, records)  # without the games, as parsed
    assert audit_tournament(*parsed)["first_bad_version"] == alone["first_bad_version"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(JSON, max_size=4))
def test_any_bytes_parse_or_are_refused_as_malformed(data: bytes, lines: list[Any]) -> None:
    """Random bytes, and a good header followed by random JSON lines: the parser answers or
    refuses (MalformedExport), and the audit gives a verdict; neither raises anything else."""
    with contextlib.suppress(MalformedExport):
        parse_tournament_export(data)
    header = {"format": "cantstop-tournament", "format_version": 1}
    header["tournament_id"] = str(uuid.UUID(int=7))
    text = "\n".join(json.dumps(x) for x in [header, *lines]).encode() + b"\n" + data
    with contextlib.suppress(MalformedExport):
        parsed = parse_tournament_export(text)
        verdict = audit_tournament(*parsed)
        assert verdict["valid"] is False
    assert export_lines(header["tournament_id"], [])[0]["tournament_id"] == header["tournament_id"]
