"""A rebuild (``cantstop projections rebuild``) leaves every view as building it event by event,
batch by batch, does: the scratch build copied in bulk, and the due-index's plans of only the
games not finished (service/persistence/views.py, ``Views.rebuild``; scheduler.py,
``DueIndex.summary``)."""

from __future__ import annotations

import gc
import random
import sqlite3
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.commands import NewGame, Resign
from service import collector
from service.application.games.scheduler import DueIndex
from service.application.notify import notices as notices_module
from service.persistence import views as views_module
from service.persistence.views import Sql, View, Views
from service.runtime import Runtime
from tests.support.mixed_store import a_mixed_store, play, tables
from tests.support.polling import wait_until
from tests.support.rated import (
    finished_rated_game,
    play_a_turn,
    rated_pair,
    seat_tokens,
    sign_up,
)

# The modules whose objects a rebuild makes (its events, rows, notices, ratings).
OURS = ("service", "domain", "eventsourcing", "openskill", "sqlite3", "psycopg")


def test_every_view_rebuilt_is_as_built_event_by_event(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt: Runtime = app.extensions["cantstop"]
    a_mixed_store(rt, client)
    monkeypatch.setattr(views_module, "BATCH", 7)  # many batches, as a live view meets them
    monkeypatch.setattr(views_module, "PAGE", 50)  # the scratch build in several pages
    for view in rt.all_views():
        with monkeypatch.context() as scope:  # the rebuild before: every event, batch by batch
            scope.setattr(Views, "_build", lambda *args: 0)
            rt.views.rebuild(view)
        by_event = tables(rt.views, view)
        before = rt.views.tracking(view)
        rt.views.rebuild(view)
        after = rt.views.tracking(view)
        assert after.generation > before.generation and after.position >= before.position
        assert tables(rt.views, view) == by_event, view.name
        if view.name == "due":
            assert by_event["due"], "the mix has games with something due"


def test_the_due_index_rebuilt_plans_only_the_games_not_finished(app: Flask) -> None:
    rt: Runtime = app.extensions["cantstop"]
    rng = random.Random(3)
    for _ in range(6):
        state = rt.games.create(NewGame(players=["Ann", "Bob"]))[0]
        rt.games.act(uuid.UUID(state["id"]), 0, Resign())
    waiting = [rt.games.create(NewGame(seats=2))[0]["id"] for _ in range(2)]
    playing = play(rt, rt.games.create(NewGame(players=["Cleo", "Dev"]))[0], rng, 5)["id"]
    index = next(view for view in rt.all_views() if isinstance(view, DueIndex))
    planned = []
    original = index.plan

    def counted(game_id: uuid.UUID, **kwargs: Any) -> Any:
        planned.append(str(game_id))
        return original(game_id, **kwargs)

    index.plan = counted  # type: ignore[method-assign]
    rt.views.rebuild(index)
    assert sorted(planned) == sorted([*waiting, playing])
    rows = rt.views.read(index, lambda sql: sql.all("SELECT game_id FROM {due}"), fresh=False)
    assert sorted(row["game_id"] for row in rows) == sorted([*waiting, playing])


def test_a_batch_of_the_due_index_drops_the_games_ended_and_plans_the_new(app: Flask) -> None:
    """One batch of the live index (``DueIndex.apply``): a game that ends leaves it and the
    games created join it, in the batch's two statements."""
    rt: Runtime = app.extensions["cantstop"]
    index = next(view for view in rt.all_views() if isinstance(view, DueIndex))

    def indexed() -> list[str]:
        rt.views.catch_up(index)
        rows = rt.views.read(index, lambda sql: sql.all("SELECT game_id FROM {due}"))
        return sorted(row["game_id"] for row in rows)

    first = [rt.games.create(NewGame(seats=2))[0]["id"] for _ in range(2)]
    ending = rt.games.create(NewGame(players=["Ann", "Bob"]))[0]["id"]
    assert indexed() == sorted([*first, ending])
    rt.games.act(uuid.UUID(ending), 0, Resign())
    later = [rt.games.create(NewGame(seats=3))[0]["id"] for _ in range(2)]
    assert indexed() == sorted([*first, *later])


def test_the_games_among_many_are_as_each_says_it_is(app: Flask, client: FlaskClient) -> None:
    rt: Runtime = app.extensions["cantstop"]
    a_mixed_store(rt, client)
    games = rt.games.store
    rows = rt.views.read(
        next(view for view in rt.all_views() if view.name == "games"),
        lambda sql: sql.all("SELECT game_id, imported FROM {games}"),
    )
    ids = [uuid.UUID(row["game_id"]) for row in rows]
    marked = {uuid.UUID(row["game_id"]) for row in rows if row["imported"]}
    assert len(marked) == 1
    games.imported_cache.clear()
    assert games.imported([*ids, uuid.uuid4()]) == marked
    games.imported_cache.clear()
    assert {game_id for game_id in ids if games.is_imported(game_id)} == marked
    created = games.creations([*ids, uuid.uuid4()])
    assert sorted(created) == sorted(ids)
    for game_id, game in created.items():
        alone = games.at_creation(game_id)
        assert (game.version, game.rated, game.seats, game.names, game.accounts) == (
            alone.version,
            alone.rated,
            alone.seats,
            alone.names,
            alone.accounts,
        )


def test_a_rebuild_copies_no_notice_the_prune_would_delete(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notices rebuilt are the live view's after its prune: none older than the retention
    (here 2 s), but each account's newest, whatever its age (its number goes on from it). The
    rebuild makes no notice past the retention but the last of each account in each page of
    the log (one of which is its newest): the others are numbered, never made nor written."""
    monkeypatch.setattr(notices_module, "RETAIN", timedelta(seconds=2))
    rt: Runtime = app.extensions["cantstop"]
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    for _ in range(3):
        game = play_a_turn(client, game, by_seat)
    rt.notices.latest("ann")
    aged = time.monotonic() + 2.5
    wait_until(lambda: time.monotonic() > aged, 10, "the first notices to pass the retention")
    game = play_a_turn(client, game, by_seat)  # one account told now; the other's newest is old
    view = rt.notices_view
    rt.views.catch_up(view)
    ever = sum(rt.notices.latest(h) for h in tokens)
    rt.notices.prune()  # as the scheduler's hourly chore would now
    live = tables(rt.views, view)
    assert 2 <= len(live["notices"]) < ever  # some pruned, each account's newest kept
    assert {row[0][1] for row in live["notices"]} == set(tokens)
    made = count_notices_written(monkeypatch)
    rt.views.rebuild(view)  # the log in one page: only the notices kept are made
    assert tables(rt.views, view) == live
    assert made == [len(live["notices"])]
    made.clear()
    monkeypatch.setattr(views_module, "PAGE", 3)  # in several: an account's last of each too
    rt.views.rebuild(view)
    assert tables(rt.views, view) == live
    assert len(made) == 1 and len(live["notices"]) <= made[0] < ever


def test_a_rebuild_keeps_each_accounts_newest_notices_as_the_prune_does(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each account keeps at most its newest ``keep`` notices, whatever their age (``KEEP``:
    10,000); the prune drops the older ones, and a rebuild never makes them, in one page of
    the log or many, the numbers going on as they were. A stream resumes from the oldest
    kept."""
    rt: Runtime = app.extensions["cantstop"]
    view = rt.notices_view
    monkeypatch.setattr(view, "keep", 3)
    tokens = {h: sign_up(client, h) for h in ("ann", "bob", "cyd", "dee")}
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    for _ in range(6):
        game = play_a_turn(client, game, by_seat)
    rated_pair(client, tokens, "cyd", "dee")  # a notice or two each: fewer than keep
    rt.views.catch_up(view)
    latest = {h: rt.notices.latest(h) for h in tokens}
    assert latest["ann"] > 3 and latest["bob"] > 3 and latest["cyd"] <= 3, latest
    rt.notices.prune()  # as the scheduler's hourly chore would now
    for handle, newest in latest.items():
        kept = [n.seq for n in rt.notices.after(handle, 0, 100)]
        assert kept == list(range(max(1, newest - 2), newest + 1)), handle
        assert rt.notices.first_kept(handle) == kept[0]
    live = tables(rt.views, view)
    made = count_notices_written(monkeypatch)
    for page in (10_000, 4, 1):
        monkeypatch.setattr(views_module, "PAGE", page)
        rt.views.rebuild(view)
        assert tables(rt.views, view) == live, page
    # In one page, only the notices kept are made; in pages, also each account's notices up
    # to its ``keep``-th, before it is known to have more.
    assert made[0] == len(live["notices"]) == sum(min(3, n) for n in latest.values())
    assert all(n <= len(live["notices"]) + 2 * len(tokens) for n in made[1:]), made


def test_a_rebuild_sends_nothing_for_an_imported_game_of_accounts(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An imported game sends no notice (contract 1.3), though its history names the accounts
    seated in the game it copies: the rebuild knows it by its marker, read in its first pass,
    as the live view knows it by a query."""
    rt: Runtime = app.extensions["cantstop"]
    view = rt.notices_view
    tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
    game = finished_rated_game(client, tokens)
    export = client.get(f"/v1/games/{game['id']}/export")
    assert export.status_code == 200 and b'"ann"' in export.data
    rt.views.catch_up(view)
    latest = {h: rt.notices.latest(h) for h in tokens}
    imported = client.post(
        "/v1/games/import", data=export.data, content_type="application/x-ndjson"
    )
    assert imported.status_code == 201
    rt.views.catch_up(view)
    assert {h: rt.notices.latest(h) for h in tokens} == latest
    live = tables(rt.views, view)
    for page in (10_000, 2):
        monkeypatch.setattr(views_module, "PAGE", page)
        rt.views.rebuild(view)
        assert tables(rt.views, view) == live, page


def count_notices_written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many notices each rebuild of the notices from now on writes into its scratch."""
    made: list[int] = []
    original = notices_module.NoticesView.settle

    def counted(view: notices_module.NoticesView, sql: Sql) -> None:
        original(view, sql)
        made.append(sql.carried[view.name].written)

    monkeypatch.setattr(notices_module.NoticesView, "settle", counted)
    return made


def test_a_rebuild_reads_the_log_with_the_cyclic_collector_paused_and_leaves_it_no_garbage(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scratch build (reading, decoding and applying the log) runs with the cyclic collector
    paused (service/collector.py), and sweeps what the pages left for it (the ratings' library
    makes a few cycles a rated game): with the collector off for a whole rebuild of each view
    of the mixed store, read in pages of 50 events, it finds nothing left after it; and it is
    on again after each rebuild."""
    rt: Runtime = app.extensions["cantstop"]
    a_mixed_store(rt, client)
    monkeypatch.setattr(views_module, "PAGE", 50)  # several pages
    during: list[bool] = []
    fill = Views._fill

    def watched(self: Views, *args: Any) -> Any:
        during.append(gc.isenabled())
        return fill(self, *args)

    monkeypatch.setattr(Views, "_fill", watched)
    for view in rt.all_views():
        during.clear()
        rt.views.rebuild(view)
        assert during == [False], view.name
        assert gc.isenabled()
        found = cycles_left(rt, view)
        assert not found, (view.name, found[:5])


def cycles_left(rt: Runtime, view: View) -> list[Any]:
    """What a rebuild of ``view`` with the collector off leaves for it: the objects of the code
    a rebuild runs that a whole collection afterwards finds unreachable."""
    gc.collect()
    gc.disable()
    try:
        rt.views.rebuild(view)
        gc.set_debug(gc.DEBUG_SAVEALL)  # what it finds now is kept in gc.garbage, to name
        gc.collect()
        # Other tests' leftovers in this process (their pools' threads) may drop garbage of
        # their own meanwhile: only objects of the code a rebuild runs count.
        return [o for o in gc.garbage if type(o).__module__.startswith(OURS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_a_view_that_says_it_leaves_no_cycles_leaves_none(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild sweeps the collector every few pages only for a view that says it leaves
    cycles (``View.leaves_cycles``), else after each pass: with the collector off and no sweep
    at all, a rebuild of each view of the mixed store leaves cycles of the code it runs exactly
    when the view says it does (the ratings: openskill's)."""
    rt: Runtime = app.extensions["cantstop"]
    a_mixed_store(rt, client)
    monkeypatch.setattr(views_module, "PAGE", 50)
    monkeypatch.setattr(collector, "sweep", lambda: None)
    said = {view.name: (bool(cycles_left(rt, view)), view.leaves_cycles) for view in rt.all_views()}
    assert all(left == says for left, says in said.values()), said
    assert said["ratings"] == (True, True)


@pytest.mark.parametrize("cycles", [True, False])
def test_a_rebuild_sweeps_the_collector_every_few_pages_and_at_the_end(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch, cycles: bool
) -> None:
    """A sweep walks every young object still alive, on PostgreSQL the page read ahead too
    (~80,000 objects): a rebuild of a view that leaves cycles sweeps after every
    ``SWEEP_EVERY`` pages it applies and once after its last, not after each; of a view that
    leaves none, once after each pass (the notices: the games seating accounts, then their
    events)."""
    rt: Runtime = app.extensions["cantstop"]
    a_mixed_store(rt, client)
    monkeypatch.setattr(views_module, "PAGE", 3)  # many pages
    pages: list[int] = []
    swept: list[int] = []  # the pages read when each sweep ran
    read = Views._pages

    def counted(self: Views, source: Any, view: View) -> Any:
        for page in read(self, source, view):
            pages.append(len(page))
            yield page

    monkeypatch.setattr(Views, "_pages", counted)
    monkeypatch.setattr(collector, "sweep", lambda: swept.append(len(pages)))
    view = rt.notices_view
    monkeypatch.setattr(view, "leaves_cycles", cycles)
    rt.views.rebuild(view)
    every = views_module.SWEEP_EVERY
    assert len(pages) > 3 * every
    assert swept[-1] == len(pages)
    if not cycles:
        assert len(swept) == 2  # the first pass's end, the second's
        return
    assert len(swept) <= len(pages) // every + 2
    assert all(b - a <= every for a, b in zip([0, *swept], swept, strict=False))


ODD_ROWS = [
    ("plain", 1, None, None),
    ("back\\slash \\N \\t", -(2**62), "tab\there", None),
    ("new\nline and\r\nreturns", 0, "", None),
    ("\\", 7, "\\\\", None),
    ("naïve ✓ 🎲", 2**40, '{"a":"\\"q\\"","b":"\\u00e9"}', None),
    ("end\\", 3, None, None),
]


def test_a_rebuilds_copy_reads_back_every_value_as_it_was(app: Flask, tmp_path: Any) -> None:
    """A rebuild copies its scratch tables into the store in bulk (on PostgreSQL by ``COPY``,
    whose text format escapes): text with backslashes, tabs, newlines, returns, ``\\N``,
    JSON and any character, NULLs, empty text, large integers and floats read back from the
    store as they were."""
    rt: Runtime = app.extensions["cantstop"]
    rows = [(*row[:3], 0.1 + 0.2 if i % 2 else None) for i, row in enumerate(ODD_ROWS)]
    path = tmp_path / "scratch.sqlite"
    scratch = sqlite3.connect(path, isolation_level=None)
    make = "CREATE TABLE odd_copy (a TEXT NOT NULL, b BIGINT NOT NULL, c TEXT, d {})"
    scratch.execute(make.format("REAL"))
    scratch.executemany("INSERT INTO odd_copy VALUES (?, ?, ?, ?)", rows)
    with rt.views._writing() as cur:
        cur.execute(make.format("DOUBLE PRECISION"))
    with rt.views._writing(None if rt.views.postgres else path) as cur:
        rt.views._copy(cur, "odd_copy", list("abcd"), scratch)
    scratch.close()
    with rt.views._reading() as cur:
        cur.execute("SELECT a, b, c, d FROM odd_copy")
        found = [(row["a"], row["b"], row["c"], row["d"]) for row in cur]
    assert sorted(found, key=repr) == sorted(rows, key=repr)


def test_a_views_scratch_tables_have_its_tables_columns(app: Flask) -> None:
    """A view's own scratch tables (``View.scratch_tables``: keys and indexes left out) have
    the columns of its tables, in order: the copy into the store reads them by name."""
    rt: Runtime = app.extensions["cantstop"]
    declared = [view for view in rt.all_views() if view.scratch_tables]
    assert declared, "the notices declare theirs"
    for view in declared:
        for short, statements in view.scratch_tables.items():
            columns = []
            for made in (view.tables[short], statements):
                db = sqlite3.connect(":memory:")
                for statement in made:
                    db.execute(statement.replace("{" + short + "}", "t"))
                columns.append(db.execute("PRAGMA table_info(t)").fetchall())
                db.close()
            assert [c[1:4] for c in columns[0]] == [c[1:4] for c in columns[1]], (view.name, short)


def test_every_views_index_is_made_if_missing_and_known_as_one(app: Flask) -> None:
    """A rebuild makes its tables' indexes once their rows are in, and again when it resumes
    (``is_index``; each statement ``IF NOT EXISTS``); the tables' own statements are not."""
    rt: Runtime = app.extensions["cantstop"]
    for view in rt.all_views():
        for statements in view.tables.values():
            for statement in statements:
                if "INDEX" in statement.split("(")[0]:
                    assert views_module.is_index(statement), statement
                    assert "IF NOT EXISTS" in statement, statement
                else:
                    assert not views_module.is_index(statement), statement
    assert views_module.is_index("CREATE UNIQUE INDEX IF NOT EXISTS x ON t (a)")
