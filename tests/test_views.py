"""Views across games kept in the store (service/persistence/views.py): a restart reads no history,
a client reads its own writes on any worker, each event is applied exactly once whatever crashes
or races, damage is passed over, and rebuilds switch only when they are done."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.utils import get_topic

from domain.commands import NewGame
from domain.game import Game
from service.application.games.projections import GameList
from service.config import Settings
from service.persistence import guard
from service.persistence import views as views_module
from service.persistence.errors import StoreUnavailable
from service.persistence.log import LogReader
from service.persistence.views import Sql, Tracking, View, Views
from service.runtime import Runtime
from tests.support.racing import race_cleanly

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def runtime(database_url: str) -> Iterator[Runtime]:
    rt = Runtime(Settings(database_url=database_url), create_tables=True)
    yield rt
    rt.close()


def another_worker(database_url: str) -> Runtime:
    """A second process's runtime on the same store (its own connections, no shared memory)."""
    return Runtime(Settings(database_url=database_url), create_tables=False)


def lobbies(rt: Runtime, count: int) -> list[str]:
    """``count`` new lobbies of two seats, created through the application."""
    return [rt.games.create(NewGame(seats=2, dice="manual"))[0]["id"] for _ in range(count)]


def listing(rt: Runtime, **filters: Any) -> tuple[list[dict[str, Any]], int]:
    return rt.game_list.query(rt.views, limit=100, **filters)


class Counter(View):
    """Counts the events applied to each game: any event applied twice shows as a surplus."""

    name = "counter"
    topics = tuple(sorted(get_topic(c) for c in (Game.GameCreated, Game.SeatJoined)))
    heads_only = True
    tables = {  # noqa: RUF012
        "counts": ["CREATE TABLE IF NOT EXISTS {counts} (game_id TEXT PRIMARY KEY, n INTEGER)"]
    }
    fail_after: int | None = None

    def apply(self, sql: Sql, prepared: list[Any]) -> None:
        for done, head in enumerate(prepared):
            if self.fail_after is not None and done == self.fail_after:
                raise RuntimeError("the process dies half-way through a batch")
            sql.execute(
                "INSERT INTO {counts} (game_id, n) VALUES (?, 1) "
                "ON CONFLICT (game_id) DO UPDATE SET n = {counts}.n + 1",
                [str(head.originator_id)],
            )

    @staticmethod
    def counts(views: Views, view: View) -> dict[str, int]:
        rows = views.read(view, lambda sql: sql.all("SELECT game_id, n FROM {counts}"), fresh=False)
        return {row["game_id"]: int(row["n"]) for row in rows}


def test_a_restart_reads_no_history_before_its_first_listing(database_url: str) -> None:
    """A worker that starts against thousands of games answers its first listing from the
    view in the store: it applies no event, as a worker against an empty store does."""
    with Runtime(Settings(database_url=database_url), create_tables=True) as first:
        assert listing(first) == ([], 0)
        assert first.views.processed == 0  # against an empty store
        ids = lobbies(first, 2_000)
        first.views.catch_up(first.game_list)  # a request's catch-up is bounded to 1 s
        page, total = listing(first)
        assert total == 2_000 and page[0]["id"] == ids[-1]  # newest first
        assert first.views.processed == 2_000
    with another_worker(database_url) as restarted:
        again, total_again = listing(restarted)
        assert [g["id"] for g in again] == [g["id"] for g in page] and total_again == total
        assert restarted.views.processed == 0  # nothing of the history was read again


def test_a_client_reads_its_own_writes_on_another_worker(database_url: str) -> None:
    """No scheduler runs: the worker that answers the listing catches the view up itself."""
    with (
        Runtime(Settings(database_url=database_url), create_tables=True) as one,
        another_worker(database_url) as two,
    ):
        assert listing(two) == ([], 0)
        state, _ = one.games.create(NewGame(seats=2, dice="manual"))
        page, total = listing(two)
        assert total == 1 and page[0]["id"] == state["id"] and page[0]["open_seats"] == 2
        game_id = uuid.UUID(state["id"])
        one.lobby.join(game_id, "Ann")
        assert listing(two)[0][0]["players"] == ["Ann", None]
        assert listing(two, open_only=True)[1] == 1
        two.lobby.join(game_id, "Bob")  # the game starts on the second worker
        assert listing(one, status="in_progress")[0][0]["players"] == ["Ann", "Bob"]
        assert listing(one, open_only=True) == ([], 0)


def test_racing_workers_apply_each_event_exactly_once(database_url: str) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        ids = lobbies(rt, 1_200)
        for game_id in ids[:300]:
            rt.lobby.join(uuid.UUID(game_id), "Ann")
        workers = [another_worker(database_url) for _ in range(3)]
        view = Counter()
        rt.views.setup([view])
        race_cleanly([partial(worker.views.catch_up, view) for worker in workers])
        for worker in workers:
            worker.close()
        counts = Counter.counts(rt.views, view)
        assert counts == {g: 2 if i < 300 else 1 for i, g in enumerate(ids)}
        assert sum(w.views.processed for w in workers) == 1_500  # between them, once each


class Joins(Counter):
    """Counts seats joined: a lobby's creation is no concern of it."""

    name = "joins"
    topics = (get_topic(Game.SeatJoined),)


def test_a_follower_reads_past_events_of_no_concern_without_storing_its_position(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``catch_up(lazy=True)`` (the scheduler's loop) stores no position for a read that found
    nothing for the view, for up to ``PASSED_KEPT`` seconds, and reads on from where it was
    while the stored row is unchanged; what concerns the view is applied at once, as ever."""
    starts: list[Any] = []
    readers: list[LogReader] = []

    class Reader(LogReader):  # where each read starts (a reader may serve several reads)
        def read(self, limit: int) -> list[Any]:
            starts.append(self.position)
            readers.append(self)
            return super().read(limit)

        def heads(self, limit: int) -> list[Any]:
            starts.append(self.position)
            readers.append(self)
            return super().heads(limit)

    monkeypatch.setattr(views_module, "LogReader", Reader)
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        view = Joins()
        rt.views.setup([view])
        rt.views.catch_up(view)
        stored = rt.views.tracking(view)
        lobbies(rt, 3)  # three creations: nothing for the view
        assert rt.views.catch_up(view, lazy=True) == 0
        assert rt.views.tracking(view) == stored  # no write
        read_to = readers[-1].position  # where that read reached
        assert read_to > stored.position
        ids = lobbies(rt, 2)
        starts.clear()
        assert rt.views.catch_up(view, lazy=True) == 0
        assert starts[0] == read_to  # read on from where it was, not from the row's
        assert rt.views.tracking(view) == stored
        rt.lobby.join(uuid.UUID(ids[0]), "Ann")  # its concern: applied, the position stored
        assert rt.views.catch_up(view, lazy=True) == 1
        assert Counter.counts(rt.views, view) == {ids[0]: 1}
        assert rt.views.tracking(view).position > read_to
        # Another process moves the view: the first reads from the stored row again.
        lobbies(rt, 1)
        assert rt.views.catch_up(view, lazy=True) == 0
        with another_worker(database_url) as other:
            other.lobby.join(uuid.UUID(ids[1]), "Bob")
            assert other.views.catch_up(view) == 1
            moved = rt.views.tracking(view)
        starts.clear()
        assert rt.views.catch_up(view, lazy=True) == 0
        assert starts[0] == moved.position
        assert Counter.counts(rt.views, view) == {ids[0]: 1, ids[1]: 1}
        # Past PASSED_KEPT a read of nothing for the view stores its position after all.
        monkeypatch.setattr(views_module, "PASSED_KEPT", 0.0)
        lobbies(rt, 1)
        rt.views.catch_up(view, lazy=True)
        assert rt.views.tracking(view).position > moved.position
        # Its own kinds of events not yet applied: none (what the metric's lag counts).
        behind = LogReader(rt.games.recorder, view.topics, stored.position).heads(100)
        assert [h.originator_id for h in behind] == [uuid.UUID(i) for i in ids[:2]]


def test_moving_views_on_reads_no_page_of_the_log_for_a_view_that_has_read_it_all(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``move_on`` (the scheduler's loop) reads where the log's newest event stands and every
    tracking row once; a view already past it is not read, one behind it is caught up as
    ``catch_up(lazy=True)`` would, and writes that are not events (a view's own position) do
    not make the others read again."""
    pages: list[tuple[str, ...]] = []

    class Reader(LogReader):
        def _read(self, limit: int, *, heads: bool) -> list[Any]:
            pages.append(tuple(self.topics))
            return super()._read(limit, heads=heads)

    monkeypatch.setattr(views_module, "LogReader", Reader)
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        joins, counter = Joins(), Counter()
        rt.views.setup([joins, counter])
        ids = lobbies(rt, 2)
        assert rt.views.move_on([joins, counter]) == 2  # two creations, the counter's
        pages.clear()
        assert rt.views.move_on([joins, counter]) == 0
        assert pages == []  # nothing recorded since: no page read
        rt.lobby.join(uuid.UUID(ids[0]), "Ann")  # both views' concern
        assert rt.views.move_on([joins, counter]) == 2
        assert Counter.counts(rt.views, counter) == {ids[0]: 2, ids[1]: 1}
        assert Counter.counts(rt.views, joins) == {ids[0]: 1}
        # A view's position written (past PASSED_KEPT) is no event: the next pass reads nothing.
        monkeypatch.setattr(views_module, "PASSED_KEPT", 0.0)
        lobbies(rt, 1)  # the counter's concern, not the joins'
        assert rt.views.move_on([joins, counter]) == 1
        pages.clear()
        assert rt.views.move_on([joins, counter]) == 0
        assert pages == []
        # A view some other process moved on and one it left behind: only the latter is read.
        with another_worker(database_url) as other:
            lobbies(other, 1)
            assert other.views.catch_up(counter) == 1
        pages.clear()
        assert rt.views.move_on([joins, counter]) == 0
        assert pages == [joins.topics]


def test_a_fresh_read_of_a_view_at_the_logs_end_reads_its_tracking_row_once(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's read (a listing) catches the view up to the log's end first: a view found
    there already is read once for its row, not again after the catch-up; one behind is
    caught up and answers with what was just recorded."""
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        counter = Counter()
        rt.views.setup([counter])
        ids = lobbies(rt, 2)
        rows: list[str] = []
        tracking = rt.views.tracking

        def counted(view: View, name: str | None = None) -> Any:
            rows.append(view.name)
            return tracking(view, name) if name is not None else tracking(view)

        monkeypatch.setattr(rt.views, "tracking", counted)
        query = lambda sql: sql.all("SELECT game_id, n FROM {counts}")  # noqa: E731
        assert len(rt.views.read(counter, query)) == 2  # caught up: read, then read again
        rows.clear()
        assert len(rt.views.read(counter, query)) == 2
        assert rows == ["counter"]
        ids += lobbies(rt, 1)
        found = rt.views.read(counter, query)
        assert sorted(row["game_id"] for row in found) == sorted(ids)


def test_a_crash_half_way_through_a_batch_loses_and_doubles_nothing(database_url: str) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        ids = lobbies(rt, 40)
        view = Counter()
        rt.views.setup([view])
        before = rt.views.tracking(view)
        view.fail_after = 25  # dies after writing 25 of the batch's 40 rows, before the commit
        with pytest.raises(RuntimeError):
            rt.views.catch_up(view)
        assert rt.views.tracking(view) == before
        assert Counter.counts(rt.views, view) == {}
        view.fail_after = None  # the next process goes on from the same position
        rt.views.catch_up(view)
        assert Counter.counts(rt.views, view) == dict.fromkeys(ids, 1)


def test_a_process_killed_inside_the_transaction_leaves_the_view_as_it_was(
    database_url: str, tmp_path: Path
) -> None:
    """The whole process dies (no exception handler, no rollback) while its transaction is
    open: the store keeps neither the rows nor the position; the next catch-up applies each
    event once."""
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        ids = lobbies(rt, 30)
        rt.views.setup([Counter()])
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.test_views import Counter
from service.config import Settings
from service.runtime import Runtime
class Dying(Counter):
    def apply(self, sql, prepared):
        super().apply(sql, prepared)
        os._exit(3)
rt = Runtime(Settings(database_url={database_url!r}), create_tables=False)
rt.views.catch_up(Dying())
"""
    done = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert done.returncode == 3
    with another_worker(database_url) as rt:
        view = Counter()
        assert Counter.counts(rt.views, view) == {}
        rt.views.catch_up(view)
        assert Counter.counts(rt.views, view) == dict.fromkeys(ids, 1)


def test_an_event_that_cannot_be_read_is_passed_over(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        first = lobbies(rt, 1)
        damaged = Game.start(uuid.uuid4(), NewGame(seats=2, dice="manual"))
        stored = [rt.games.store.mapper.to_stored_event(e) for e in damaged.collect_events()]
        stored[0] = dataclasses.replace(stored[0], state=b"{not json")
        rt.games.store.recorder.insert_events(stored)
        last = lobbies(rt, 1)
        page, total = listing(rt)
        assert [g["id"] for g in page] == [*last, *first] and total == 2
        assert "passed over notification" in caplog.text


def timeless(found: tuple[list[dict[str, Any]], int]) -> tuple[list[dict[str, Any]], int]:
    """A listing without how long each lobby has waited (a second may pass between two)."""
    page, total = found
    return [{k: v for k, v in g.items() if k != "waited_seconds"} for g in page], total


def test_a_rebuild_serves_the_old_view_until_it_is_done_then_the_same_answer(
    database_url: str,
) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        lobbies(rt, 30)
        before = timeless(listing(rt))
        live = rt.views.tracking(rt.game_list)

        class Failing(GameList):
            def apply(self, sql: Sql, prepared: list[Any]) -> None:
                raise RuntimeError("the rebuild's code fails")

        with pytest.raises(RuntimeError):
            rt.views.rebuild(Failing())
        assert rt.views.tracking(rt.game_list) == live  # the old view still serves
        assert timeless(listing(rt)) == before

        seen: list[Any] = []

        def during(position: Any) -> None:  # between batches, the live view answers as before
            seen.append(listing(rt)[1])

        rt.views.rebuild(rt.game_list, progress=during)
        assert seen and all(total == before[1] for total in seen)
        after = rt.views.tracking(rt.game_list)
        assert after.generation > live.generation and after.position >= live.position
        assert timeless(listing(rt)) == before


class Reading(Counter):
    """A counter whose ``prepare`` reads its tables, as most views' do."""

    name = "reading"

    def prepare(self, items: list[Any], read: Sql) -> Any:
        read.all("SELECT game_id FROM {counts}")
        return items


def test_a_read_that_meets_the_tables_a_rebuild_dropped_reads_the_new_ones(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that need not catch up reads the tables of the generation this process last knew,
    without reading the tracking row; when another process's rebuild has switched generations
    since, those tables are gone: it reads the row again and answers from the new tables, at
    once, and the store stays available to everyone (on SQLite the missing table had been
    retried as a lock would be, then opened the breaker: a 503 for this request and every store
    read for a second). Moving the view on from a row read before a switch: the same."""
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        ids = lobbies(rt, 3)
        view = Reading()
        rt.views.setup([view])
        rt.views.catch_up(view)
        before = rt.views.tracking(view)
        read = rt.views.tracking
        rows: list[Any] = []

        def tracking(view: View, name: str | None = None) -> Any:
            rows.append(name or view.name)
            return rows.pop(0) if rows and isinstance(rows[0], Tracking) else read(view, name)

        monkeypatch.setattr(rt.views, "tracking", tracking)
        assert Counter.counts(rt.views, view) == dict.fromkeys(ids, 1)
        assert rows == []  # the generation known: no row read
        with another_worker(database_url) as other:
            other.views.rebuild(view)
            assert other.views.tracking(view).generation != before.generation
        assert Counter.counts(rt.views, view) == dict.fromkeys(ids, 1)
        assert rows == [view.name]  # read again once its tables were found gone
        assert not guard.BREAKER.is_open
        assert listing(rt)[1] == 3  # the store answers at once
        later = lobbies(rt, 2)
        rows[:] = [before]  # the next row read is the one from before the switch
        assert rt.views.catch_up(view) == 2
        assert not guard.BREAKER.is_open
        assert Counter.counts(rt.views, view) == dict.fromkeys(ids + later, 1)


def test_a_view_whose_tables_are_missing_answers_503_and_is_not_read_for_ever(
    database_url: str,
) -> None:
    """A damaged store, a view's table dropped by hand (no rebuild switched it): a read and the
    scheduler's catching up each report it as ``store_unavailable`` once, instead of reading
    the tracking row again and again, and no breaker opens for the others."""
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        lobbies(rt, 2)
        view = Reading()
        rt.views.setup([view])
        rt.views.catch_up(view)
        rt.views.write(view, lambda sql: sql.execute("DROP TABLE {counts}"))
        with pytest.raises(StoreUnavailable, match="tables are missing"):
            Counter.counts(rt.views, view)
        lobbies(rt, 1)
        with pytest.raises(StoreUnavailable, match="tables are missing"):
            rt.views.catch_up(view)
        assert not guard.BREAKER.is_open
        assert listing(rt)[1] == 3  # the other views answer


def test_a_view_whose_code_changed_is_not_moved_on_until_rebuilt(database_url: str) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        lobbies(rt, 3)
        assert listing(rt)[1] == 3

        class Changed(GameList):
            version = GameList.version + 1

        changed = Changed()
        assert rt.views.stale(changed) is not None and "rebuild games" in str(
            rt.views.stale(changed)
        )
        lobbies(rt, 2)
        assert changed.query(rt.views, limit=10)[1] == 3  # served as it stands: not moved on
        rt.views.rebuild(changed)
        assert rt.views.stale(changed) is None
        assert changed.query(rt.views, limit=10)[1] == 5


def test_the_command_rebuilds_a_view_and_reports_status(database_url: str) -> None:
    with Runtime(Settings(database_url=database_url), create_tables=True) as rt:
        lobbies(rt, 5)
    env = {**os.environ, "CANTSTOP_DATABASE_URL": database_url}
    cli = [sys.executable, "-m", "service.cli", "projections"]
    rebuilt = subprocess.run(
        [*cli, "rebuild", "games"], env=env, capture_output=True, text=True, check=False
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "games: rebuilt from 5 events" in rebuilt.stderr
    status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, check=False)
    assert status.returncode == 0, status.stderr
    assert "games: version 1, generation 2" in status.stdout and "current" in status.stdout
    unknown = subprocess.run(
        [*cli, "rebuild", "nope"], env=env, capture_output=True, text=True, check=False
    )
    assert unknown.returncode == 2 and "the views are games" in unknown.stderr


def filled(postgres_url: str) -> None:
    """50,000 events of another kind in the log, and the planner told so (ANALYZE)."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        state = json.dumps({"x": 1}).encode()
        conn.execute(
            "INSERT INTO cantstop_events (originator_id, originator_version, topic, state) "
            "SELECT gen_random_uuid(), 1, 'filler', %s FROM generate_series(1, 50000)",
            [state],
        )
        conn.execute("ANALYZE cantstop_events")


@pytest.mark.postgres
def test_the_log_poll_reads_an_index_range_on_postgresql(postgres_url: str) -> None:
    """The log's page from a position is a range of the (tx, notification_id) index, bounded
    by xmin: not a scan of the notification_id index from the start of the log."""
    with Runtime(Settings(database_url=postgres_url), create_tables=True) as rt:
        lobbies(rt, 50)
        filled(postgres_url)
        reader = LogReader(rt.games.store.recorder, rt.game_list.topics)
        reader.skip_to_end()
        plan = reader.plan()
        assert "cantstop_events_tx" in plan, plan
        assert "Index Cond" in plan and "Sort" not in plan and "Seq Scan" not in plan, plan


@pytest.mark.postgres
def test_the_newest_event_is_read_from_the_index_and_moves_only_with_events(
    postgres_url: str,
) -> None:
    """``LogReader.newest`` (what ``Views.move_on`` compares each view's position with) reads
    one row of the (tx, notification_id) index backwards, and a transaction that writes no
    event, which moves ``end``, leaves it where it was."""
    with Runtime(Settings(database_url=postgres_url), create_tables=True) as rt:
        recorder = rt.games.store.recorder
        assert LogReader(recorder).newest() == (0, 0)  # an empty log
        lobbies(rt, 3)
        newest = LogReader(recorder).newest()
        reader = LogReader(recorder)
        assert reader.read(100) and reader.read(100) == []
        assert reader.position >= newest  # read to the end: past the newest event
        end = LogReader(recorder).end()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS not_events (x int)")
            conn.execute("INSERT INTO not_events VALUES (1)")
        assert LogReader(recorder).end() > end
        assert LogReader(recorder).newest() == newest
        lobbies(rt, 1)
        assert LogReader(recorder).newest() > newest
        filled(postgres_url)
        for below_xmin in (True, False):  # newest, and last
            plan = reader.newest_plan(below_xmin=below_xmin)
            assert "Index Only Scan Backward" in plan and "cantstop_events_tx" in plan, plan
            assert "Sort" not in plan and "Seq Scan" not in plan, plan


@pytest.mark.postgres
def test_a_fresh_read_targets_the_last_event_committed_not_the_servers_last_transaction(
    postgres_url: str,
) -> None:
    """``LogReader.last``, the target of a request's read (``Views.fresh``): at rest a view
    that has read everything is at it, however many transactions without events the server
    ran (``end``, the snapshot's xmax, moved with each, and each listing read the log and wrote
    the view's position); an event committed while an older transaction is still open is past
    ``newest`` (what can be read now) but not past ``last``, so a read waits for it."""
    with Runtime(Settings(database_url=postgres_url), create_tables=True) as rt:
        recorder = rt.games.store.recorder
        assert LogReader(recorder).last() == (0, 0)  # an empty log
        lobbies(rt, 2)
        rt.views.catch_up(rt.game_list)
        track = rt.views.tracking(rt.game_list)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS not_events (x int)")
            conn.execute("INSERT INTO not_events VALUES (1)")
        assert track.position >= LogReader(recorder).last()
        assert rt.views.fresh(rt.game_list) == track  # nothing read, nothing written
        with psycopg.connect(postgres_url) as other:
            other.execute("SELECT txid_current()")  # a transaction, open, with an id
            newest = LogReader(recorder).newest()
            lobbies(rt, 1)
            assert LogReader(recorder).newest() == newest  # not readable yet
            assert LogReader(recorder).last() > newest
            assert rt.views.fresh(rt.game_list, budget=0.2).position < LogReader(recorder).last()
            other.rollback()
        assert rt.views.fresh(rt.game_list).position >= LogReader(recorder).last()
        assert listing(rt)[1] == 3
