"""Long transactions on PostgreSQL (#43 item 5): the service's own sessions are ended by the
server when left idle in a transaction; its connections carry TCP keepalives; and what another
client's long transaction delays, and what it does not (README, "PostgreSQL": the figures).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from service.config import Settings
from service.http.app import create_app
from service.persistence.settings import persistence_env
from service.runtime import Runtime
from tests.support.http import ok
from tests.support.polling import wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture
def runtime(postgres_url: str) -> Iterator[Runtime]:
    settings = Settings(database_url=postgres_url, pg_idle_in_transaction=1.0)
    with Runtime(settings, create_tables=True) as rt:
        yield rt


def test_the_services_connections_carry_keepalives_and_an_idle_transaction_timeout(
    postgres_url: str, runtime: Runtime
) -> None:
    options = json.loads(
        persistence_env(Settings(database_url=postgres_url), create_table=False)[
            "CANTSTOP_PG_OPTIONS"
        ]
    )
    assert options["keepalives"] == "1" and options["keepalives_idle"] == "10"
    assert (options["keepalives_interval"], options["keepalives_count"]) == ("5", "3")
    mine = Settings(
        database_url=postgres_url + ("&" if "?" in postgres_url else "?") + "keepalives_idle=42"
    )
    assert (
        json.loads(persistence_env(mine, create_table=False)["CANTSTOP_PG_OPTIONS"])[
            "keepalives_idle"
        ]
        == "42"
    )
    with runtime.games.recorder.datastore.pool.connection() as conn:
        shown = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert list(shown.values()) == ["1s"]


def test_a_session_of_the_service_left_idle_in_a_transaction_is_ended(
    postgres_url: str, runtime: Runtime
) -> None:
    """As a host frozen or cut off between its insert and its commit would leave it: the server
    ends the session after the timeout, so it holds no lock and no snapshot horizon for longer."""
    pool = runtime.games.recorder.datastore.pool
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout), pool.connection() as conn:
        conn.execute("BEGIN")
        pid = next(iter(conn.execute("SELECT pg_backend_pid()").fetchone().values()))
        with psycopg.connect(postgres_url, autocommit=True) as watcher:

            def gone() -> bool:
                row = watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
                return row.fetchone() is None

            wait_until(gone, 15, "the server to end the idle transaction's session")
        conn.execute("SELECT 1")
    with pool.connection() as fresh:  # the pool replaced it
        assert fresh.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_another_clients_long_transaction_holds_back_the_views_not_the_game(
    postgres_url: str,
) -> None:
    """A transaction another client keeps open holds back the views (the listing, the
    scheduler's due-index: they read the log in commit order, up to the oldest transaction
    still open, which could yet commit an event below it) until it ends, and nothing else: the
    new game itself is read at once, and its actions go on."""
    app = create_app(Settings(database_url=postgres_url), create_tables=True)
    rt = app.extensions["cantstop"]
    client = app.test_client()
    try:
        with psycopg.connect(postgres_url) as other:
            other.execute("SELECT txid_current()")  # a transaction, open, with an id
            created = ok(client.post("/v1/games", json={"players": ["Ann", "Bob"]}), 201)
            game_id = created["game"]["id"]
            assert ok(client.get(f"/v1/games/{game_id}"))["id"] == game_id  # read at once
            token = created["seats"][created["game"]["turn"]["player"]]["token"]
            rolled = client.post(
                f"/v1/games/{game_id}/actions",
                json={"type": "roll"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert rolled.status_code == 200
            rt.views.catch_up(rt.game_list)
            listed = {g["id"] for g in ok(client.get("/v1/games"))["games"]}
            assert game_id not in listed  # held back while the other transaction is open
            other.rollback()
        rt.views.catch_up(rt.game_list)
        listed = {g["id"] for g in ok(client.get("/v1/games"))["games"]}
        assert game_id in listed and uuid.UUID(game_id)
    finally:
        rt.close()
