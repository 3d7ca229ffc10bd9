"""The newest releases' check (tests/newest.py, ``make newest``) reads its bounds from
pyproject.toml and is part of CI."""

from __future__ import annotations

from pathlib import Path

from tests.newest import ROOT, TESTS, bounded


def test_the_check_upgrades_each_library_pyproject_bounds() -> None:
    names = {requirement.name.lower() for requirement in bounded()}
    assert {"eventsourcing", "psycopg", "gunicorn", "flask", "werkzeug", "marshmallow"} <= names


def test_the_check_runs_tests_that_exist_and_ci_runs_it() -> None:
    assert all((ROOT / test).is_file() for test in TESTS)
    assert "make newest" in Path(ROOT / ".ci" / "run").read_text(encoding="utf-8")
