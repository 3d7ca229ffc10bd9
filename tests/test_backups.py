"""Backups taken under load restore to a store that serves every acknowledged action, whose views
rebuild to what the log holds and whose every game audits clean (docs/reliability.md, Backups).

SQLite: ``cantstop backup`` (the online backup API) while games are played in process; the copy
replaces nothing, is owner-only, and is restored by copying it into place. PostgreSQL: pg_dump of
the live database while games are played, pg_restore into a new one. Both then run ``cantstop
projections rebuild`` against the restored store and audit every game it holds.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask

from service import cli
from service.config import Settings
from service.http.app import create_app
from tests.support.games import choose, create_game
from tests.support.http import bearer, ok
from tests.support.polling import wait_until

Json = dict[str, Any]


class Load:
    """Games played one after another on their own thread, each action's acknowledged version
    kept, until stopped."""

    def __init__(self, app: Flask) -> None:
        self.client = app.test_client()
        self.acknowledged: dict[str, int] = {}
        self.finished = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()
        if self.failure is not None:
            raise self.failure

    def _ack(self, game_id: str, version: int) -> None:
        with self._lock:
            self.acknowledged[game_id] = version

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.acknowledged)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                game_id, tokens = create_game(self.client, players=["Ann", "Bob"])
                state: Json = ok(self.client.get(f"/v1/games/{game_id}"))
                self._ack(game_id, state["version"])
                while state["status"] != "finished" and not self._stop.is_set():
                    token = tokens[state["turn"]["player"]]
                    response = self.client.post(
                        f"/v1/games/{game_id}/actions", json=choose(state), headers=bearer(token)
                    )
                    state = ok(response)["game"]
                    self._ack(game_id, state["version"])
                if state["status"] == "finished":
                    self.finished += 1
        except BaseException as exc:  # surfaced by __exit__
            self.failure = exc


@pytest.fixture
def loaded() -> Iterator[Callable[[str], Any]]:
    """An app on ``url`` with games being played on it (a context manager per call)."""
    apps: list[Flask] = []

    def start(url: str) -> Load:
        app = create_app(Settings(database_url=url), create_tables=True)
        apps.append(app)
        return Load(app)

    yield start
    for app in apps:
        app.extensions["cantstop"].close()


def rebuild_views(url: str) -> None:
    env = {**os.environ, "CANTSTOP_DATABASE_URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "projections", "rebuild"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def check_restored(url: str, acknowledged: dict[str, int], played: set[str]) -> None:
    """Every action acknowledged before the backup began is there; the rebuilt listing names
    exactly the games the restored log holds; every one of them audits clean."""
    rebuild_views(url)
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        client = app.test_client()
        for game_id, version in acknowledged.items():
            assert ok(client.get(f"/v1/games/{game_id}"))["version"] >= version
        listed = {g["id"] for g in ok(client.get("/v1/games?limit=200"))["games"]}
        held = {g for g in played if client.get(f"/v1/games/{g}").status_code == 200}
        assert listed == held and set(acknowledged) <= held
        for game_id in held:
            verdict = ok(client.get(f"/v1/games/{game_id}/audit"))
            assert verdict["valid"] is True, verdict
    finally:
        app.extensions["cantstop"].close()


def test_a_sqlite_backup_taken_under_load_restores_rebuilds_and_audits(
    tmp_path: Path, loaded: Callable[[str], Load], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tmp_path / "live.sqlite"
    backup = tmp_path / "backups" / "cantstop.sqlite"
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", f"sqlite:///{live}")
    with loaded(f"sqlite:///{live}") as load:
        wait_until(lambda: load.finished >= 2, 120, "two games finished")
        before = load.snapshot()
        assert cli.main(["backup", str(backup)]) == 0
        wait_until(lambda: len(load.snapshot()) > len(before), 60, "play goes on after it")
        # A backup never overwrites: a second one to the same file is refused.
        assert cli.main(["backup", str(backup)]) == 1
    played = set(load.snapshot())
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # it holds unrevealed seeds
    assert not list(backup.parent.glob(".*partial*"))

    restored = tmp_path / "restored" / "cantstop.sqlite"
    restored.parent.mkdir()
    shutil.copyfile(backup, restored)
    os.chmod(restored, 0o600)
    check_restored(f"sqlite:///{restored}", before, played)


def test_backup_refuses_postgresql_and_a_missing_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", "postgresql://postgres@127.0.0.1/x")
    assert cli.main(["backup", str(tmp_path / "b.sqlite")]) == 2
    assert "pg_dump" in capsys.readouterr().err
    monkeypatch.setenv("CANTSTOP_DATABASE_URL", f"sqlite:///{tmp_path / 'none.sqlite'}")
    assert cli.main(["backup", str(tmp_path / "b.sqlite")]) == 1
    assert "no SQLite store" in capsys.readouterr().err
    assert not (tmp_path / "b.sqlite").exists()


def pg_tool(name: str) -> str:
    """pgserver's own client tools (its server's version) when the tests run it; else the
    machine's."""
    if not os.environ.get("CANTSTOP_TEST_POSTGRES_URL"):
        import pgserver._commands

        return str(Path(pgserver._commands.POSTGRES_BIN_PATH) / name)
    found = shutil.which(name)
    assert found, f"{name} is not installed (apt-get install postgresql-client)"
    return found


@pytest.mark.postgres
def test_a_postgresql_dump_taken_under_load_restores_rebuilds_and_audits(
    tmp_path: Path,
    loaded: Callable[[str], Load],
    postgres_url: str,
    postgres_server_url: str,
) -> None:
    dump = tmp_path / "cantstop.dump"
    with loaded(postgres_url) as load:
        wait_until(lambda: load.finished >= 2, 120, "two games finished")
        before = load.snapshot()
        subprocess.run(
            [pg_tool("pg_dump"), "--format=custom", f"--file={dump}", postgres_url],
            check=True,
            timeout=300,
        )
        wait_until(lambda: len(load.snapshot()) > len(before), 60, "play goes on after it")
    played = set(load.snapshot())

    dbname = f"cantstop_restored_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    head, sep, query = postgres_server_url.partition("?")
    restored = f"{head.rpartition('/')[0]}/{dbname}{sep}{query}"
    try:
        subprocess.run(
            [pg_tool("pg_restore"), "--no-owner", f"--dbname={restored}", str(dump)],
            check=True,
            timeout=300,
        )
        check_restored(restored, before, played)
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
