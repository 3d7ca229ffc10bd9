"""A finished game archived (its events kept as one value: service/persistence/archive.py)
answers every read as it did from its rows, on SQLite and PostgreSQL: state, past versions,
events, export, audit, record sheet, receipt, listings; the views rebuilt from the log read
its events in their place; a game is archived only when it will record nothing more, every
view has read it and its last row is not the log's newest; a damaged archive is that game's
corrupt_game, never another's."""

from __future__ import annotations

import functools
import random
import threading
import uuid
from typing import Any

import pytest
from eventsourcing.utils import get_topic
from flask import Flask
from flask.testing import FlaskClient

from domain.commands import NewGame
from domain.game import Game
from service import cli
from service.config import ConfigError, Settings
from service.persistence import archive as archive_module
from service.persistence import postgres as postgres_module
from service.persistence import views as views_module
from service.persistence.log import START, LogReader
from service.persistence.views import TRACKING, Views
from service.runtime import Runtime
from tests.support.games import create_game, play_to_the_end
from tests.support.mixed_store import a_mixed_store, play, tables
from tests.support.racing import race, race_cleanly
from tests.support.stored import answers, served


def runtime(app: Flask) -> Runtime:
    rt: Runtime = app.extensions["cantstop"]
    return rt


def caught_up(rt: Runtime) -> None:
    for view in rt.all_views():
        rt.views.catch_up(view)


def stored_rows(rt: Runtime, game_id: uuid.UUID) -> int:
    return len(rt.games.store.recorder.select_events(game_id))


def row_count(rt: Runtime, game_id: uuid.UUID) -> int:
    """The game's rows in the events table itself (not its archive)."""
    recorder: Any = rt.games.store.recorder
    if recorder.dialect == "postgres":
        with recorder.datastore.reading() as curs:
            curs.execute(
                f"SELECT count(*) AS n FROM {recorder.table} WHERE originator_id = %s", [game_id]
            )
            return int(curs.fetchone()["n"])
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {recorder.events_table_name} WHERE originator_id = ?",
            [game_id.hex],
        )
        return int(cursor.fetchone()[0])


def everything_about(client: FlaskClient, game_id: str) -> dict[str, Any]:
    found = answers(client, game_id)
    for path in (f"/v1/games/{game_id}/receipt", "/v1/games?status=finished"):
        response = client.get(path)
        assert response.status_code == 200, path
        found[path] = response.get_data()
    return found


def test_a_finished_game_archived_answers_every_read_as_before(database_url: str) -> None:
    with served(database_url) as client:
        rt = runtime(client.application)
        game_id, tokens = create_game(client, players=["Ann", "Bob"])
        assert play_to_the_end(client, game_id, tokens)["status"] == "finished"
        later, _ = create_game(client, players=["Cy", "Di"])  # the log's newest rows
        caught_up(rt)
        before = everything_about(client, game_id)
        rows = stored_rows(rt, uuid.UUID(game_id))
        assert rt.games.store.archive(uuid.UUID(game_id)) == "archived"
        assert row_count(rt, uuid.UUID(game_id)) == 0
        assert stored_rows(rt, uuid.UUID(game_id)) == rows
        with pytest.MonkeyPatch.context() as scope:  # archived already: its archive not read
            scope.setattr(archive_module, "unpack", lambda *args: pytest.fail("unpacked"))
            assert rt.games.store.archive(uuid.UUID(game_id)) == "no rows"
        assert everything_about(client, game_id) == before  # this host, its game held
    with served(database_url) as fresh:  # nothing cached: read from the archive
        assert everything_about(fresh, game_id) == before
        assert fresh.get(f"/v1/games/{later}").status_code == 200


def test_a_game_is_archived_only_once_it_ends_every_view_read_it_and_it_is_not_newest(
    app: Flask, client: FlaskClient
) -> None:
    rt = runtime(app)
    store = rt.games.store
    going, _ = create_game(client, players=["Ann", "Bob"])
    assert store.archive(uuid.UUID(going)) == "not finished"
    game_id, tokens = create_game(client, players=["Cy", "Di"])
    play_to_the_end(client, game_id, tokens)
    create_game(client, players=["Ed", "Flo"])
    assert store.archive(uuid.UUID(game_id)) == "not read"  # no view has read it all yet
    caught_up(rt)
    other, tokens = create_game(client, players=["Gil", "Hal"])
    play_to_the_end(client, other, tokens)
    caught_up(rt)
    assert store.archive(uuid.UUID(other)) == "the newest"
    view = rt.all_views()[0]
    with rt.views._writing() as cursor:  # a rebuild begun: its tracking row at the start
        rt.views._put(cursor, views_module.Tracking(view.name + "~", view.version, 9, START))
    assert store.archive(uuid.UUID(game_id)) == "not read"
    with rt.views._writing() as cursor:
        views_module.Sql(cursor, {}, rt.views.postgres).execute(
            f"DELETE FROM {TRACKING} WHERE name = ?", [view.name + "~"]
        )
    assert store.archive(uuid.UUID(game_id)) == "archived"
    assert store.archive(uuid.UUID(uuid.uuid4().hex)) == "no rows"


def test_every_view_rebuilt_over_archived_games_is_as_built_from_their_rows(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built from the rows event by event, then every finished game archived, then each view
    rebuilt twice from the log: event by event in small pages (archived events merged into
    pages the reader cuts at their size) and by the rebuild's scan, with each view's tables as
    they were; but the archive queue's, which no longer holds the games archived (their ends
    are read from their archives), as the archiver would have left it."""
    rt = runtime(app)
    a_mixed_store(rt, client)
    rng = random.Random(5)
    for _ in range(3):
        play(rt, rt.games.create(NewGame(players=["Pat", "Quin"]))[0], rng, 400)
    play(rt, rt.games.create(NewGame(players=["Ray", "Sol"]))[0], rng, 3)  # the newest
    monkeypatch.setattr(views_module, "BATCH", 7)
    monkeypatch.setattr(views_module, "PAGE", 50)
    caught_up(rt)
    built = {view.name: tables(rt.views, view) for view in rt.all_views()}
    finished = [
        uuid.UUID(game["id"])
        for game in client.get("/v1/games?status=finished&limit=100").get_json()["games"]
    ]
    outcomes = [rt.games.store.archive(game_id) for game_id in finished]
    assert outcomes.count("archived") >= 5, outcomes
    archived = {
        str(g) for g, outcome in zip(finished, outcomes, strict=True) if outcome == "archived"
    }
    queued = built["archive_queue"]["queue"]
    built["archive_queue"]["queue"] = [r for r in queued if dict(r)["game_id"] not in archived]
    assert len(built["archive_queue"]["queue"]) == len(queued) - len(archived)
    for view in rt.all_views():
        with monkeypatch.context() as scope:
            scope.setattr(Views, "_build", lambda *args: 0)
            rt.views.rebuild(view)
        assert tables(rt.views, view) == built[view.name], view.name
        rt.views.rebuild(view)
        assert tables(rt.views, view) == built[view.name], view.name


def log_as_read(recorder: Any, page: int, **options: Any) -> dict[str, list[Any]]:
    """The whole log as each way of reading it hands it out: pages of ``read`` and ``heads``,
    a scan (its pages joined), each item with its fields; and an unordered scan's, put in
    order (the same items)."""

    def fields(item: Any) -> tuple[Any, ...]:
        return (
            item.id,
            item.originator_id,
            item.originator_version,
            item.topic,
            getattr(item, "state", None),
        )

    found: dict[str, list[Any]] = {}
    for how in ("read", "heads", "scan", "unordered"):
        reader = LogReader(recorder, **options)
        items: list[Any] = []
        if how in ("scan", "unordered"):
            for got in reader.scan(page, ordered=how == "scan"):
                items += got
        else:
            while True:
                got = getattr(reader, how)(page)
                assert len(got) <= page
                items += got
                if len(got) < page:
                    break
        found[how] = [fields(item) for item in items]
    found["unordered"].sort()
    assert found["unordered"] == sorted(found["scan"])
    return found


def test_the_log_reads_archived_events_in_their_place_whatever_the_page_and_filter(
    app: Flask, client: FlaskClient
) -> None:
    rt = runtime(app)
    rng = random.Random(11)
    finished = []
    for _ in range(5):
        state = play(rt, rt.games.create(NewGame(players=["Ann", "Bob"]))[0], rng, 3000)
        if state["status"] == "finished":
            finished.append(uuid.UUID(state["id"]))
    play(rt, rt.games.create(NewGame(players=["Cy", "Di"]))[0], rng, 5)
    recorder: Any = rt.games.store.recorder
    rolls = get_topic(Game.DiceRolled)
    kinds: list[dict[str, Any]] = [
        {},
        {"topics": (rolls, get_topic(Game.GameFinished))},
        {"narrow": ((rolls,), set(finished[::2]))},
    ]
    before = [log_as_read(recorder, page, **kind) for page in (1, 7, 500) for kind in kinds]
    caught_up(rt)
    assert [rt.games.store.archive(g) for g in finished] == ["archived"] * 5
    after = [log_as_read(recorder, page, **kind) for page in (1, 7, 500) for kind in kinds]
    assert after == before
    end = LogReader(recorder)
    end.skip_to_end()
    assert end.read(100) == []  # nothing archived after the end, and none looked for
    # a reader of topics no archive holds (the challenges') reads no archive
    assert len(recorder.archives_after((0, 0), [rolls])) == 5
    assert recorder.archives_after((0, 0), ["service.application.aggregates:Challenge"]) == []


def test_a_damaged_archive_is_its_games_corrupt_game_and_spares_the_others(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with served(database_url) as client:
        rt = runtime(client.application)
        game_id, tokens = create_game(client, players=["Ann", "Bob"])
        play_to_the_end(client, game_id, tokens)
        other, tokens = create_game(client, players=["Cy", "Di"])
        play_to_the_end(client, other, tokens)
        create_game(client, players=["Ed", "Flo"])
        caught_up(rt)
        assert rt.games.store.archive(uuid.UUID(game_id)) == "archived"
        assert rt.games.store.archive(uuid.UUID(other)) == "archived"
        recorder: Any = rt.games.store.recorder
        with recorder.datastore.transaction(commit=True) as cursor:
            key: Any = (
                uuid.UUID(game_id) if recorder.dialect == "postgres" else uuid.UUID(game_id).hex
            )
            placeholder = "%s" if recorder.dialect == "postgres" else "?"
            cursor.execute(
                f"UPDATE {recorder.archive_table} SET data = {placeholder} "
                f"WHERE originator_id = {placeholder}",
                [b"x\x9c not deflated", key],
            )
    with served(database_url) as fresh:
        reply = fresh.get(f"/v1/games/{game_id}")
        assert reply.status_code == 409
        assert reply.get_json()["code"] == "corrupt_game", reply.get_json()
        assert "version 1" in reply.get_json()["detail"]
        assert fresh.get(f"/v1/games/{other}").status_code == 200
        rt = runtime(fresh.application)
        view = rt.game_list
        with caplog.at_level("ERROR"):
            rt.views.rebuild(view)
        assert "left out of the log read" in caplog.text
        listed = {g["id"] for g in fresh.get("/v1/games?limit=100").get_json()["games"]}
        assert other in listed and game_id not in listed


def finished_games(client: FlaskClient, count: int) -> list[str]:
    """``count`` games played to their end, then one more game begun (the log's newest)."""
    found = []
    for i in range(count):
        game_id, tokens = create_game(client, players=[f"A{i}", f"B{i}"])
        play_to_the_end(client, game_id, tokens)
        found.append(game_id)
    create_game(client, players=["Late", "Comer"])
    return found


def test_two_hosts_archiving_the_same_games_at_once_archive_each_once(database_url: str) -> None:
    with served(database_url) as one, served(database_url) as two:
        games = finished_games(one, 4)
        caught_up(runtime(one.application))
        before = {g: answers(one, g) for g in games}
        stores = [runtime(c.application).games.store for c in (one, two)]
        for game_id in games:
            outcomes = race([functools.partial(s.archive, uuid.UUID(game_id)) for s in stores])
            assert sorted(outcomes) in (["archived", "no rows"], ["archived", "busy"]), outcomes
            assert row_count(runtime(one.application), uuid.UUID(game_id)) == 0
        for client in (one, two):
            assert {g: answers(client, g) for g in games} == before


def test_reads_racing_the_archiver_always_find_the_whole_game(database_url: str) -> None:
    with served(database_url) as one, served(database_url) as two:
        games = finished_games(one, 3)
        caught_up(runtime(one.application))
        reader: Any = runtime(two.application).games.store.recorder
        store = runtime(one.application).games.store
        for game_id in games:
            key = uuid.UUID(game_id)
            whole = [(e.originator_version, e.topic, e.state) for e in reader.select_events(key)]
            done = threading.Event()

            def read(key: uuid.UUID = key, done: threading.Event = done, whole: Any = whole) -> int:
                reads = 0
                while not done.is_set() or reads < 20:
                    found = reader.select_events(key)
                    assert [(e.originator_version, e.topic, e.state) for e in found] == whole
                    assert [e.originator_version for e in reader.select_events(key, gt=5)] == [
                        v for v, _, _ in whole[5:]
                    ]
                    reads += 1
                return reads

            def archive(key: uuid.UUID = key, done: threading.Event = done) -> str:
                try:
                    return store.archive(key)
                finally:
                    done.set()

            reads, outcome = race_cleanly([read, archive])
            assert outcome == "archived" and reads >= 20


@pytest.mark.postgres
def test_a_host_frozen_while_archiving_holds_back_no_other_host_and_loses_nothing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host one stops inside its archiving transaction (as a host frozen mid-request): host
    two finds the game whole, is told ``busy`` if it archives the same game, and goes on
    serving and moving its views; once one goes on, the game is archived and reads the same.
    A host that dies there (its transaction rolled back) leaves the rows as they were."""
    frozen, thawed = threading.Event(), threading.Event()
    packing = archive_module.pack

    def pack_frozen_in_host_one(rows: Any) -> bytes:
        if threading.current_thread().name == "host-one":
            frozen.set()
            assert thawed.wait(60)
        return packing(rows)

    monkeypatch.setattr(postgres_module, "pack", pack_frozen_in_host_one)
    with served(postgres_url) as one, served(postgres_url) as two:
        game_id, dying = finished_games(one, 2)
        caught_up(runtime(one.application))
        before = answers(two, game_id)
        outcome: list[str] = []
        host_one = threading.Thread(
            target=lambda: outcome.append(
                runtime(one.application).games.store.archive(uuid.UUID(game_id))
            ),
            name="host-one",
        )
        host_one.start()
        try:
            assert frozen.wait(30)
            rt2 = runtime(two.application)
            assert rt2.games.store.archive(uuid.UUID(game_id)) == "busy"
            assert answers(two, game_id) == before
            later, _ = create_game(two, players=["Ned", "Oz"])
            assert two.get(f"/v1/games/{later}").status_code == 200
            caught_up(rt2)  # its views move on meanwhile
        finally:
            thawed.set()
            host_one.join(30)
        assert outcome == ["archived"]
        assert row_count(runtime(one.application), uuid.UUID(game_id)) == 0
        assert answers(two, game_id) == before

        def pack_and_die(rows: Any) -> bytes:
            raise ConnectionError("the host died")

        monkeypatch.setattr(postgres_module, "pack", pack_and_die)
        whole = answers(two, dying)
        with pytest.raises(ConnectionError):
            runtime(one.application).games.store.archive(uuid.UUID(dying))
        assert row_count(runtime(one.application), uuid.UUID(dying)) > 0
        monkeypatch.setattr(postgres_module, "pack", packing)
        assert runtime(two.application).games.store.archive(uuid.UUID(dying)) == "archived"
        assert answers(one, dying) == whole


def test_the_scheduler_archives_finished_games_a_while_after_they_end(database_url: str) -> None:
    with served(database_url) as client:
        rt = runtime(client.application)
        games = finished_games(client, 3)
        caught_up(rt)
        assert rt.archiver.after == 24 * 3600  # the default: a day
        assert rt.archiver.step() == {"too recent": 1}  # the oldest ended just now
        assert all(row_count(rt, uuid.UUID(g)) > 0 for g in games)
        rt.archiver.after = None  # off
        assert rt.archiver.step() == {}
        rt.archiver.after = 0
        assert rt.archiver.step() == {"archived": 3}
        assert all(row_count(rt, uuid.UUID(g)) == 0 for g in games)
        assert rt.archiver.step() == {}  # none left queued
        rt.views.rebuild(rt.archiver.queue)  # read from the archives: none queued again
        assert rt.archiver.step() == {}
        state = client.get(f"/v1/games/{games[0]}").get_json()
        assert state["status"] == "finished"


def test_cantstop_archive_archives_the_finished_games_now(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with served(database_url) as client:
        games = finished_games(client, 2)
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", database_url)
    assert cli.main(["archive"]) == 0  # a day after: none yet
    assert "1 too recent" in capsys.readouterr().err
    assert cli.main(["archive", "--after", "0"]) == 0
    assert "2 archived" in capsys.readouterr().err
    monkeypatch.setenv("CANTSTOP_ARCHIVE_AFTER", "off")
    assert cli.main(["archive"]) == 2
    assert "archiving is off" in capsys.readouterr().err
    with served(database_url) as client:
        assert all(client.get(f"/v1/games/{g}").status_code == 200 for g in games)
        assert all(row_count(runtime(client.application), uuid.UUID(g)) == 0 for g in games)


@pytest.mark.parametrize(
    ("raw", "after"), [("", 86400.0), ("off", None), ("OFF", None), ("0", 0.0), ("90.5", 90.5)]
)
def test_the_archive_delay_is_a_number_of_seconds_or_off(raw: str, after: float | None) -> None:
    assert Settings.from_env({"CANTSTOP_ARCHIVE_AFTER": raw}).archive_after == after


@pytest.mark.parametrize("raw", ["-1", "soon", "nan"])
def test_a_bad_archive_delay_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(ConfigError, match="CANTSTOP_ARCHIVE_AFTER"):
        Settings.from_env({"CANTSTOP_ARCHIVE_AFTER": raw})


def raw_rows(rt: Runtime) -> list[tuple[Any, ...]]:
    """Every row of the events table as stored, with its place in the log."""
    recorder: Any = rt.games.store.recorder
    if recorder.dialect == "postgres":
        with recorder.datastore.reading() as curs:
            curs.execute(
                "SELECT originator_id, originator_version, topic, state, notification_id, "
                f"tx::text AS tx FROM {recorder.table} ORDER BY notification_id"
            )
            return [(*row.values(),) for row in curs.fetchall()]
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(f"SELECT rowid, * FROM {recorder.events_table_name} ORDER BY rowid")
        return [tuple(row) for row in cursor.fetchall()]


def test_archived_games_restored_are_the_rows_they_were_where_they_were(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cantstop archive --restore`` (before going back to a release that does not read
    archives) puts every row back as it was, at its place in the log: what a release before
    reads; not while a view has not read past a game (a rebuild begun)."""
    with served(database_url) as client:
        rt = runtime(client.application)
        games = finished_games(client, 3)
        caught_up(rt)
        rows = raw_rows(rt)
        log = log_as_read(rt.games.store.recorder, 50)
        assert [rt.games.store.archive(uuid.UUID(g)) for g in games] == ["archived"] * 3
        assert raw_rows(rt) != rows
        view = rt.all_views()[0]
        with rt.views._writing() as cursor:  # a rebuild begun: no game restored under it
            rt.views._put(cursor, views_module.Tracking(view.name + "~", view.version, 9, START))
        assert rt.games.store.restore(uuid.UUID(games[0])) == "not read"
        with rt.views._writing() as cursor:
            views_module.Sql(cursor, {}, rt.views.postgres).execute(
                f"DELETE FROM {TRACKING} WHERE name = ?", [view.name + "~"]
            )
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", database_url)
    assert cli.main(["archive", "--restore"]) == 0
    assert "3 restored" in capsys.readouterr().err
    with served(database_url) as fresh:
        rt = runtime(fresh.application)
        assert raw_rows(rt) == rows
        assert log_as_read(rt.games.store.recorder, 50) == log
        assert rt.games.store.archived(10) == []
        assert rt.games.store.restore(uuid.UUID(games[0])) == "not archived"


def test_a_scheduler_pass_catches_no_view_up_again_in_its_chores(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass moves every view on to the log's end first (``Views.move_on``); its chores then
    read the views as it left them, none caught up again: at rest that was two statements a
    pass more for the archive queue (its tracking row and the log's newest event)."""
    with served(database_url) as client:
        rt = runtime(client.application)
        games = finished_games(client, 2)
        caught_up(rt)  # every view's position stored past the games (a lazy pass stores none)
        scheduler = rt.scheduler()
        caught: list[str] = []
        fresh = Views.fresh

        def counted(self: Views, view: Any, *args: Any, **kwargs: Any) -> Any:
            caught.append(view.name)
            return fresh(self, view, *args, **kwargs)

        monkeypatch.setattr(Views, "fresh", counted)
        rt.archiver.after = 0  # the games are archived in this pass
        scheduler.step()
        assert caught == []
        assert all(row_count(rt, uuid.UUID(g)) == 0 for g in games)  # the chore did its work
        assert rt.archiver.step() == {}  # the queue read fresh, as a command reads it: empty
        assert caught == ["archive_queue"]
