"""The notification log is read in commit order: a projection never passes over an event that
commits after a later one (PostgreSQL writes without a table lock: service/persistence/)."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import Notification
from eventsourcing.utils import get_topic

from domain.commands import NewGame
from domain.game import Game
from service.config import Settings
from service.http.app import create_app
from service.persistence.log import LogReader, ScannedRow, ahead, notification


def as_notification(read: Any) -> Notification:
    """What the reader handed out, as the library's notification of the same fields (a scan
    hands out its rows, ``ScannedRow``, read by the same names)."""
    return Notification(
        id=read.id,
        originator_id=read.originator_id,
        originator_version=read.originator_version,
        topic=read.topic,
        state=read.state,
    )


def created_game(games: object) -> Game:
    """A new game, not saved yet."""
    return Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def games(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Any]:
    """The application's games on a new store of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/log.sqlite"
    else:
        url = request.getfixturevalue("postgres_url")
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        yield app.extensions["cantstop"].games
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_a_slow_transaction_is_not_passed_over(postgres_url: str) -> None:
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    games = app.extensions["cantstop"].games
    try:
        reader = LogReader(games.store.recorder)
        first = created_game(games)
        games.store.save(first)
        assert {n.originator_id for n in reader.read(100)} == {first.id}
        # A writer takes the next notification ids and has not committed yet...
        slow = created_game(games)
        stored = [games.store.mapper.to_stored_event(e) for e in slow.collect_events()]
        with psycopg.connect(postgres_url) as conn:
            with conn.cursor() as cursor:
                for event in stored:
                    cursor.execute(
                        "INSERT INTO cantstop_events "
                        "(originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s)",
                        (event.originator_id, event.originator_version, event.topic, event.state),
                    )
                # ... while a later writer commits with higher ids.
                fast = created_game(games)
                games.store.save(fast)
                assert reader.read(100) == []  # nothing yet: the slow one may still commit
            conn.commit()
        seen = reader.read(100) + reader.read(100)
        ids = [n.id for n in seen]
        assert {n.originator_id for n in seen} == {slow.id, fast.id}
        assert len(ids) == len(set(ids)) == 4  # each event once (two per new game)
        assert reader.read(100) == []
    finally:
        app.extensions["cantstop"].close()


def test_sqlite_reads_by_id_from_where_it_left_off(tmp_path: object) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/log.sqlite"), create_tables=True)
    games = app.extensions["cantstop"].games
    try:
        reader = LogReader(games.store.recorder)
        one, two = created_game(games), created_game(games)
        games.store.save(one)
        assert {n.originator_id for n in reader.read(100)} == {one.id}
        reader.skip_to_end()
        games.store.save(two)
        assert [n.originator_id for n in reader.read(1)] == [two.id]
        assert [n.originator_id for n in reader.read(100)] == [two.id]
        assert reader.read(100) == []
    finally:
        app.extensions["cantstop"].close()


def test_heads_are_the_notifications_without_their_states(games: Any) -> None:
    """``heads`` reads the same log as ``read`` (ids, games, topics, filtered by topic, from
    where it left off), without the events' states."""
    full, light = LogReader(games.store.recorder), LogReader(games.store.recorder)
    full.skip_to_end()
    light.skip_to_end()
    one, two = created_game(games), created_game(games)
    games.store.save(one)
    games.store.save(two)
    expected = [(n.id, n.originator_id, n.originator_version, n.topic) for n in full.read(100)]
    assert len(expected) == 4  # two events per new game
    heads = light.heads(3) + light.heads(3) + light.heads(3)
    found = [(h.id, h.originator_id, h.originator_version, h.topic) for h in heads]
    assert found == expected
    assert light.heads(100) == []
    # Filtered by topic, as read is.
    created = get_topic(Game.GameCreated)
    only = LogReader(games.store.recorder, (created,))
    assert {h.topic for h in only.heads(100)} == {created}


def test_the_reader_makes_the_librarys_own_notifications(games: Any) -> None:
    """The reader sets a notification's fields at once (``notification``): the objects equal,
    field by field and as a whole, those the library's recorder makes with the class's own
    ``__init__``, and have exactly the class's fields (a field the library adds fails here, not
    as a notification without it). A scan hands out its rows (``ScannedRow``), whose fields
    by those names are the same."""
    start = LogReader(games.store.recorder)
    start.skip_to_end()
    for _ in range(2):
        games.store.save(created_game(games))
    own = {n.id: n for n in games.store.recorder.select_notifications(1, 10_000)}
    read = LogReader(games.store.recorder, (), start.position).read(10)
    pages = LogReader(games.store.recorder, (), start.position).scan(3)
    scanned = [n for page in pages for n in page]
    for found in (read, scanned):
        assert len(found) == 4
        assert [as_notification(n) for n in found] == [own[n.id] for n in found]
    for made in read:
        assert type(made) is Notification
        assert vars(made) == vars(Notification(**vars(made)))
    assert {type(made) for made in scanned} == {ScannedRow}  # read by the same names
    names = {field.name for field in dataclasses.fields(Notification)}
    made = notification(7, uuid.uuid4(), 3, "a:B", b"state")
    assert set(vars(made)) == names
    assert made == Notification(**{name: getattr(made, name) for name in names})
    assert hash(made) == hash(Notification(**vars(made)))


def test_a_scan_reads_in_one_pass_what_reads_page_by_page_do(games: Any) -> None:
    """``scan`` (a rebuild's pass over the log) hands out the same notifications, heads and
    states, in the same order, from the same position, and leaves the reader where ``read``
    does."""
    start = LogReader(games.store.recorder)
    start.skip_to_end()
    for _ in range(4):
        games.store.save(created_game(games))
    created = get_topic(Game.GameCreated)
    paged, scanned = (LogReader(games.store.recorder, (created,), start.position) for _ in "ab")
    expected = paged.read(2) + paged.read(2) + paged.read(2)
    pages = list(scanned.scan(2))
    assert [len(page) for page in pages] == [2, 2, 0]
    assert [as_notification(n) for page in pages for n in page] == expected
    assert scanned.position == paged.position
    heads = [h for page in LogReader(games.store.recorder).scan(3, heads=True) for h in page]
    assert len(heads) >= 8 and all(not hasattr(h, "state") for h in heads)


def test_a_scan_reads_the_log_as_it_stood_when_it_began(games: Any) -> None:
    """A scan is one statement in one transaction on either store (SQLite's once read a page
    a statement, each reading to the end as it then stood): what is saved between its pages
    is not in them, its position ends where its window did, and the next read begins there."""
    start = LogReader(games.store.recorder)
    start.skip_to_end()
    before = [created_game(games) for _ in range(3)]
    for game in before:
        games.store.save(game)
    created = get_topic(Game.GameCreated)
    reader = LogReader(games.store.recorder, (created,), start.position)
    pages = reader.scan(2)
    first = next(pages)
    later = created_game(games)
    games.store.save(later)  # between the scan's pages
    rest = [n for page in pages for n in page]
    assert [n.originator_id for n in first + rest] == [game.id for game in before]
    assert [n.originator_id for n in reader.read(10)] == [later.id]


def test_a_narrowed_reader_leaves_out_the_other_games_events_of_some_topics(games: Any) -> None:
    """``narrow``: of some topics, only the events of some games (the rest of the log as it
    is); ``until``: no further than where another reader stopped, which is where it then ends
    (a rebuild's second pass over the log: ``Views._fill``)."""
    recorder = games.store.recorder
    start = LogReader(recorder)
    start.skip_to_end()
    one, two, three = (created_game(games) for _ in range(3))
    games.store.save(one)
    games.store.save(two)
    first = LogReader(recorder, (), start.position)
    assert len([n for page in first.scan(100) for n in page]) == 4
    games.store.save(three)  # after the first reader's end
    created = get_topic(Game.GameCreated)
    everything = [
        as_notification(n)
        for page in LogReader(recorder, (), start.position).scan(100)
        for n in page
    ]
    assert len(everything) == 6
    expected = [
        n
        for n in everything
        if n.originator_id != three.id and (n.topic != created or n.originator_id == two.id)
    ]
    assert [n.originator_id for n in expected] == [one.id, two.id, two.id]

    def narrowed() -> LogReader:
        return LogReader(
            recorder, (), start.position, narrow=((created,), {two.id}), until=first.position
        )

    scanned, paged = narrowed(), narrowed()
    assert [as_notification(n) for page in scanned.scan(2) for n in page] == expected
    assert paged.read(2) + paged.read(2) + paged.read(2) == expected
    assert scanned.position == paged.position == first.position


def test_pages_read_ahead_come_in_order_and_their_source_ends_in_its_own_thread() -> None:
    """``ahead`` (a rebuild's scan on PostgreSQL): every page in order; the source runs in a
    thread of its own, and is closed there when the caller is done, whether it read to the end
    or stopped early; an error of the source reaches the caller."""
    events: list[tuple[str, str]] = []

    def source(n: int, fail: bool = False) -> Iterator[list[Any]]:
        try:
            for i in range(n):
                events.append(("read", threading.current_thread().name))
                yield [i]
            if fail:
                raise ValueError("the store went away")
        finally:
            events.append(("closed", threading.current_thread().name))

    assert list(ahead(source(5))) == [[i] for i in range(5)]
    assert {name for _, name in events} == {"cantstop-log-ahead"}
    assert events[-1][0] == "closed"

    events.clear()
    taken = []
    pages = ahead(source(1000))
    for page in pages:
        taken.append(page)
        if len(taken) == 3:
            break
    pages.close()  # as the end of a ``for`` with an error would, once its frame is gone
    assert taken == [[0], [1], [2]]
    assert events[-1] == ("closed", "cantstop-log-ahead")
    assert len([e for e in events if e[0] == "read"]) <= 5  # one page ahead, not the rest

    events.clear()
    with pytest.raises(ValueError, match="went away"):
        list(ahead(source(2, fail=True)))
    assert events[-1] == ("closed", "cantstop-log-ahead")
