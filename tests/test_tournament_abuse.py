"""Tournament abuse: a stream read from the start again and again, and pausing for ever.

- ``GET /v1/tournaments/{id}/stream?after=0`` needs no account. Each standings-changing event
  of a page carried the standings of every player: a page of a 512-entrant arena cost ~1 s of
  CPU and ~15 MB, for anyone who opened the stream and hung up. Now, of each page, only the
  last standings-changing record carries them (the earlier ones' are superseded by it), as
  they stood at its version; a live event, the last of its page, still carries them.
- An arena's entrant pauses at most ``MAX_PAUSES`` times: one more is 409 ``too_many_pauses``
  and records nothing (each pause had saved an event, moved the view and every open page, and
  at ``MAX_LINES`` events the export no longer audited); resuming is always allowed. Counted by
  the ``Paused`` events, so a replay counts the same; a tournament stored before the bound, with
  more pauses, still loads and audits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.errors import TooManyPauses, TournamentNotReady
from domain.tournament import (
    MAX_PAUSES,
    STANDINGS_CHANGE,
    Tournament,
    audit_tournament,
    parse_tournament_export,
    replayed,
)
from tests.support.http import bearer, refused
from tests.support.rated import sign_up
from tests.support.sse import frame_fields

Json = dict[str, Any]
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
LAST_HASH = "f" * 64


@pytest.fixture(autouse=True)
def fast_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams that write a keep-alive often and poll the store often (before the app)."""
    monkeypatch.setenv("CANTSTOP_STREAM_KEEPALIVE", "0.2")
    monkeypatch.setenv("CANTSTOP_STREAM_POLL", "0.05")


# ------------------------------------------------------------------------------ helpers
def arena(*handles: str) -> Tournament:
    tournament = Tournament.create(
        name="Abuse arena", kind="arena", rules={}, players_per_table=2, minutes=600,
        clock={"turn_seconds": 30}, creator="host", at=T0,
    )  # fmt: skip
    for index, handle in enumerate(handles):
        tournament.register(handle, 20.0 + index % 10, at=T0)
    tournament.start(at=T0)
    return tournament


def record(tournament: Tournament, game_id: str, seconds: int) -> None:
    """The table's first player wins."""
    table = tournament.table_of(game_id)
    assert table is not None
    first, second = table["players"]
    at = T0 + timedelta(seconds=seconds)
    tournament.record_result(game_id, {first: 0, second: 1}, LAST_HASH, at, at=at)


def arena_with_results(entrants: int, results: int) -> Tournament:
    """An arena of ``entrants`` all seated at tables of two, ``results`` of them played."""
    tournament = arena(*(f"e{i}" for i in range(entrants)))
    tables = []
    while (table := tournament.seat_next_table(at=T0)) is not None:
        tables.append(table["game_id"])
    for index, game_id in enumerate(tables[:results]):
        record(tournament, game_id, index + 1)
    return tournament


class Reader:
    """A stream's frames as they come (each read returns within the keep-alive interval)."""

    def __init__(self, response: Any) -> None:
        self.frames: Iterator[bytes] = iter(cast(Iterable[bytes], response.response))
        self.events: list[Json] = []
        self.bytes = 0
        self._rest = ""

    def up_to(self, version: int, timeout: float = 10) -> list[Json]:
        deadline = time.monotonic() + timeout
        while not self.events or self.events[-1]["version"] < version:
            assert time.monotonic() < deadline, f"timed out at {len(self.events)} events"
            chunk = next(self.frames)
            self.bytes += len(chunk)
            *frames, self._rest = (self._rest + chunk.decode("utf-8")).split("\n\n")
            for frame in frames:
                fields = frame_fields(frame, [])
                if "data" in fields:
                    self.events.append(json.loads(fields["data"]))
        return self.events


def carrying(page: list[Json]) -> list[int]:
    """The versions of the page's records that carry the standings."""
    return [r["version"] for r in page if "standings" in r]


def last_change(page: list[Json]) -> list[int]:
    """The version of the page's last standings-changing record (none: an empty list)."""
    changes = [r["version"] for r in page if r["type"] in STANDINGS_CHANGE]
    return changes[-1:]


# ------------------------------------------------------------------------------ the stream
def test_a_stream_page_carries_the_standings_once_with_its_last_change(app: Flask) -> None:
    """Registrations, tables and results read from the start: of each page only the last
    standings-changing record carries the standings, those of the tournament at its version
    (here a result, then a pause that moves none); a page of one live event carries them."""
    runtime = app.extensions["cantstop"]
    store, tournaments = runtime.store, runtime.tournaments
    tournament = arena_with_results(60, 20)
    tournament.pause("e0", at=T0 + timedelta(seconds=30))
    store.save(tournament)
    tid, version = tournament.id, tournament.version

    page = tournaments.records(tid, 0, 500)
    assert [r["version"] for r in page] == list(range(1, version + 1))
    assert page[-1]["type"] == "Paused" and page[-2]["type"] == "ResultRecorded"
    assert carrying(page) == last_change(page) == [version - 1]
    assert page[-2]["standings"] == tournament.standings()
    for after, limit in [(0, 30), (10, 45), (61, 25), (90, 40), (version - 1, 500)]:
        part = tournaments.records(tid, after, limit)
        assert [{k: v for k, v in r.items() if k != "standings"} for r in part] == [
            {k: v for k, v in r.items() if k != "standings"} for r in page[after : after + limit]
        ]
        assert carrying(part) == last_change(part), (after, limit)
        for at in carrying(part):
            stood = store.repository.get(tid, version=at).standings()
            assert next(r for r in part if r["version"] == at)["standings"] == stood

    record(tournament, tournament.open_tables()[0], 60)  # live: the next result, alone
    store.save(tournament)
    live = tournaments.records(tid, version, 500)
    assert [r["type"] for r in live] == ["ResultRecorded"]
    assert live[0]["standings"] == tournament.standings()


def test_a_catch_up_page_of_200_entrants_is_small_and_a_live_event_carries_the_standings(
    app: Flask,
) -> None:
    """An anonymous stream from the start of a 200-entrant arena with results: its catch-up
    page is the events' lines and one standings, not one per event (4.8 MB before); then
    a live result comes with the standings."""
    runtime = app.extensions["cantstop"]
    store = runtime.store
    tournament = arena_with_results(200, 60)
    store.save(tournament)
    tid, version = tournament.id, tournament.version
    lines = sum(len(json.dumps(r)) for r in runtime.tournaments.export(tid)[1:])
    one_standings = len(json.dumps(tournament.standings()))

    plain = FlaskClient(app, app.response_class)
    response = plain.get(f"/v1/tournaments/{tid}/stream?after=0", buffered=False)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    try:
        reader = Reader(response)
        sent = reader.up_to(version)
        assert [e["version"] for e in sent] == list(range(1, version + 1))
        assert carrying(sent) == [version]
        assert sent[-1]["standings"] == tournament.standings()
        # The lines (~60 KB), one standings (~40 KB), and each frame's id and event lines.
        assert reader.bytes < lines + one_standings + 60 * version, reader.bytes
        assert reader.bytes < 200_000, reader.bytes

        record(tournament, tournament.open_tables()[0], 300)
        store.save(tournament)
        live = reader.up_to(version + 1)[-1]
        assert live["type"] == "ResultRecorded" and live["version"] == version + 1
        assert live["standings"] == tournament.standings()
    finally:
        response.close()


# ------------------------------------------------------------------------------ pausing
def test_the_domain_counts_pauses_by_their_events() -> None:
    """``MAX_PAUSES`` pauses, then one more is refused with nothing recorded; resuming still
    works; another entrant's pauses are their own; a replay counts the same."""
    tournament = arena("ann", "bob", "cid")
    for _ in range(MAX_PAUSES):
        tournament.pause("ann", at=T0)
        tournament.resume("ann", at=T0)
    version = tournament.version
    with pytest.raises(TooManyPauses) as refusal:
        tournament.pause("ANN", at=T0)
    assert refusal.value.code == "too_many_pauses"
    assert tournament.version == version and tournament.pauses("ann") == MAX_PAUSES
    tournament.pause("bob", at=T0)  # one pause of bob's
    events = tournament.collect_events()
    rebuilt = replayed(events)
    assert rebuilt is not None
    assert (rebuilt.pauses("ann"), rebuilt.pauses("bob")) == (MAX_PAUSES, 1)
    with pytest.raises(TooManyPauses):
        rebuilt.pause("ann", at=T0)
    rebuilt.resume("bob", at=T0)
    with pytest.raises(TournamentNotReady):  # paused already: the old answer, first
        tournament.pause("bob", at=T0)

    # A tournament restored from a snapshot taken before the count (no ``pause_counts``)
    # still loads and pauses; its count starts from there.
    rebuilt.__dict__.pop("pause_counts")
    assert rebuilt.pauses("ann") == 0
    rebuilt.pause("ann", at=T0)
    assert rebuilt.pauses("ann") == 1


def test_pausing_past_the_most_is_refused_and_resuming_still_works(
    app: Flask, client: FlaskClient
) -> None:
    """Through the API: the ``MAX_PAUSES``th pause is taken and resumed; one more is 409
    ``too_many_pauses`` with the tournament's version unchanged."""
    token = sign_up(client, "pauser")
    store = app.extensions["cantstop"].store
    tournament = arena("pauser", "other1", "other2")
    for _ in range(MAX_PAUSES - 1):
        tournament.pause("pauser", at=T0)
        tournament.resume("pauser", at=T0)
    store.save(tournament)
    tid = tournament.id
    path = f"/v1/tournaments/{tid}/players/pauser/pause"
    assert client.post(path, headers=bearer(token)).status_code == 204  # the last allowed
    assert client.delete(path, headers=bearer(token)).status_code == 204  # resumed at the most
    before = client.get(f"/v1/tournaments/{tid}").get_json()["version"]
    assert before == tournament.version + 2
    body = refused(client.post(path, headers=bearer(token)), 409, "too_many_pauses")
    assert str(MAX_PAUSES) in body["detail"]
    assert client.get(f"/v1/tournaments/{tid}").get_json()["version"] == before
    assert [e.originator_version for e in store.events.get(tid, gt=before - 1)] == [before]
    assert store.repository.get(tid).pauses("pauser") == MAX_PAUSES  # from its snapshot
    assert list(store.snapshots.get(tid))


def test_an_old_tournament_with_more_pauses_loads_and_audits(
    app: Flask, client: FlaskClient
) -> None:
    """A tournament stored before the bound, its ``Paused`` events built directly (more than
    ``MAX_PAUSES`` of one entrant, between tables and results, the last not resumed): it
    loads, counts them as its events say, and its export audits; the entrant resumes, and
    pauses no more."""
    token = sign_up(client, "veteran")
    store = app.extensions["cantstop"].store
    tournament = arena("veteran", "x1", "x2", "x3")
    seconds = 0
    extra = MAX_PAUSES + 10
    for cycle in range(extra):
        if cycle % 20 == 0:  # the players waiting seated, then their tables played
            tables = []
            while (seated := tournament.seat_next_table(at=T0)) is not None:
                tables.append(seated["game_id"])
            for game_id in tables:
                seconds += 1
                record(tournament, game_id, seconds)
        seconds += 1
        at = T0 + timedelta(seconds=seconds)
        tournament.trigger_event(Tournament.Paused, timestamp=at, handle="veteran")
        if cycle < extra - 1:
            tournament.trigger_event(Tournament.Resumed, timestamp=at, handle="veteran")
    store.save(tournament)
    tid = tournament.id

    served = client.get(f"/v1/tournaments/{tid}")
    assert served.status_code == 200 and served.get_json()["version"] == tournament.version
    assert store.repository.get(tid).pauses("veteran") == extra  # from its snapshot on
    rebuilt = replayed(store.events.get(tid))
    assert rebuilt is not None and rebuilt.pauses("veteran") == extra

    raw = client.get(f"/v1/tournaments/{tid}/export").get_data()
    header, records = parse_tournament_export(raw)
    assert sum(1 for r in records if r["type"] == "Paused") == extra
    verdict = audit_tournament(header, records)
    assert verdict["valid"], verdict
    assert verdict["standings"] == served.get_json()["standings"]

    path = f"/v1/tournaments/{tid}/players/veteran/pause"
    assert client.delete(path, headers=bearer(token)).status_code == 204  # resumed
    refused(client.post(path, headers=bearer(token)), 409, "too_many_pauses")
    assert client.get(f"/v1/tournaments/{tid}").get_json()["version"] == tournament.version + 1


# ------------------------------------------------------------------------------ the view
def test_the_view_writes_a_batchs_tables_and_moved_standings_only(app: Flask) -> None:
    """The tournaments view's batch writes the tables its events seated, and the standings only
    when one of its events may move them: a batch of pauses and resumptions writes neither (it
    had rewritten every table and every standing, O(tables) statements a batch in an arena)."""
    rt = app.extensions["cantstop"]
    store, view, views = rt.store, rt.tournaments.view, rt.views
    tournament = arena("ann", "bob", "cyd", "dee", "eve")
    seated = [tournament.seat_next_table(at=T0), tournament.seat_next_table(at=T0)]
    tournament.pause("eve", at=T0)
    tournament.resume("eve", at=T0)
    tournament.pause("eve", at=T0)
    events = list(tournament.pending_events)
    store.save(tournament)

    def prepared(batch: list[Any]) -> Json:
        items = [(index + 1, event_) for index, event_ in enumerate(batch)]
        rows = views.read(view, lambda sql: view.prepare(items, sql), fresh=False)["rows"]
        assert [row["id"] for row in rows] == [str(tournament.id)]
        return cast(Json, rows[0])

    pauses = prepared(events[-3:])
    assert pauses["tables"] == [] and pauses["standings"] is None
    tables = prepared(events[-5:-3])  # two TableSeated: the two tables, no standings moved
    assert tables["tables"] == [t["game_id"] for t in seated if t is not None]
    assert tables["standings"] is None
    everything = prepared(events)
    assert everything["tables"] == tables["tables"]
    assert [s["handle"] for s in everything["standings"]] == [
        s["handle"] for s in tournament.standings()
    ]
