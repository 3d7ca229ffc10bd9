"""Fleet restarts (issue #43): any number of hosts and ``migrate``s starting at once against one
store all come up, whether the store is empty or already migrated, and leave the schema whole.

Real processes, as a fleet starts them: each runs ``cantstop migrate`` (the start of ``cantstop
serve`` is the same ``Runtime(create_tables=True)``). Each imports first and then waits at a
shared starting line, so their DDL runs at the same moment rather than a second apart."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from service.config import Settings
from service.runtime import Runtime
from tests.conftest import _with_database
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
AT_ONCE = 8
# Imports done, the process waits for the starting line (a file) and then migrates.
RUNNER = """
import os, sys, time
from service import cli
line = os.environ["FLEET_START_LINE"]
open(os.environ["FLEET_READY"], "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(line) and time.monotonic() < deadline:
    time.sleep(0.001)
sys.exit(cli.main(["migrate"]))
"""


def start_at_once(url: str, count: int, tmp: Path) -> list[tuple[int, str]]:
    """``count`` migrates released together: each one's exit status and standard error."""
    tmp.mkdir(parents=True, exist_ok=True)
    line = tmp / "go"
    procs = []
    for n in range(count):
        env = {
            **os.environ,
            "CANTSTOP_DATABASE_URL": url,
            "FLEET_START_LINE": str(line),
            "FLEET_READY": str(tmp / f"ready-{n}"),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RUNNER],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        wait_until(
            lambda: all((tmp / f"ready-{n}").exists() for n in range(count)),
            120,
            "every process to import and reach the starting line",
        )
        line.touch()
        return [(p.wait(timeout=180), p.communicate()[1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        line.unlink(missing_ok=True)
        for n in range(count):
            (tmp / f"ready-{n}").unlink(missing_ok=True)


def schema(url: str) -> dict[str, object]:
    """The store's tables, columns and indexes, and how many rows each table holds."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as db:
            objects = sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
            tables = [name for kind, name, _, _ in objects if kind == "table"]
            rows = {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in tables}
        return {"objects": objects, "rows": rows}
    with psycopg.connect(url) as db:
        columns = db.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        indexes = db.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = 'public' ORDER BY 1, 2"
        ).fetchall()
        tables = sorted({row[0] for row in columns})
        rows = {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in tables}
    return {"columns": columns, "indexes": indexes, "rows": rows}


@pytest.fixture
def reference_url(
    database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A second, empty store of the same kind, migrated by one process alone."""
    if database_url.startswith("sqlite:///"):
        url = f"sqlite:///{tmp_path / 'alone.sqlite'}"
    else:
        server = request.getfixturevalue("postgres_server_url")
        dbname = f"cantstop_alone_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        url = _with_database(server, dbname)
    [(status, err)] = start_at_once(url, 1, tmp_path / "alone")
    assert status == 0, err
    yield url
    if not database_url.startswith("sqlite:///"):
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def test_eight_migrates_at_once_come_up_on_an_empty_and_on_a_migrated_store(
    database_url: str, reference_url: str, tmp_path: Path
) -> None:
    for store in ("empty", "migrated"):
        results = start_at_once(database_url, AT_ONCE, tmp_path / store)
        failed = [err.strip().splitlines()[-1:] for status, err in results if status != 0]
        assert not failed, (
            f"{len(failed)} of {AT_ONCE} starts failed on the {store} store: {failed}"
        )
        assert schema(database_url) == schema(reference_url), store


@pytest.mark.postgres
def test_a_start_adds_the_log_column_only_where_it_is_missing(postgres_url: str) -> None:
    """A start reads the catalog before altering the events table (an ALTER locks out reads
    while it waits): what it finds missing, such as the ``tx`` column of a store from before
    it, is still added, with its index."""
    Runtime(Settings(database_url=postgres_url), create_tables=True).close()
    whole = schema(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("ALTER TABLE cantstop_events DROP COLUMN tx")  # its index goes with it
    assert schema(postgres_url) != whole
    Runtime(Settings(database_url=postgres_url), create_tables=True).close()
    assert schema(postgres_url) == whole
