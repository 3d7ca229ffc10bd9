"""The event store uses its libraries through their public doors only (issue 42): eventsourcing's
public persistence interfaces and classes, and the public APIs of sqlite3, psycopg and
psycopg_pool; none of eventsourcing's own SQLite or PostgreSQL modules, no private name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, InfrastructureFactory

from service.persistence.postgres import (
    GuardedPostgresAggregateRecorder,
    GuardedPostgresApplicationRecorder,
    PostgresStore,
)
from service.persistence.sqlite import (
    GuardedSQLiteAggregateRecorder,
    GuardedSQLiteApplicationRecorder,
    SQLiteStore,
)
from tests.support.doors import library_names

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("eventsourcing", "psycopg", "psycopg_pool", "sqlite3")
STORE = sorted((ROOT / "service" / "persistence").glob("*.py"))


@pytest.mark.parametrize("path", STORE, ids=lambda path: path.name)
def test_the_store_imports_no_private_part_of_a_library(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for origin in library_names(tree, LIBRARIES).values():
        parts = origin.split(".")
        assert not any(part.startswith("_") for part in parts), f"{path.name}: {origin}"
        assert parts[:2] not in (["eventsourcing", "sqlite"], ["eventsourcing", "postgres"]), (
            f"{path.name}: {origin} (the store is the service's own, not the library's)"
        )


@pytest.mark.parametrize("path", STORE, ids=lambda path: path.name)
def test_the_store_reaches_no_private_attribute_of_a_library(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = library_names(tree, LIBRARIES)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in names:
            raise AssertionError(f"{path.name}:{node.lineno}: {ast.unparse(node)}")


def test_the_stores_implement_the_librarys_public_interfaces() -> None:
    for factory in (SQLiteStore, PostgresStore):
        assert issubclass(factory, InfrastructureFactory)
        assert all(
            c.__module__.startswith(
                ("service.", "eventsourcing.persistence", "abc", "typing", "builtins")
            )
            for c in factory.__mro__
        )
    for aggregate, application in (
        (GuardedSQLiteAggregateRecorder, GuardedSQLiteApplicationRecorder),
        (GuardedPostgresAggregateRecorder, GuardedPostgresApplicationRecorder),
    ):
        assert issubclass(aggregate, AggregateRecorder)
        assert issubclass(application, ApplicationRecorder)
        for recorder in (aggregate, application):
            library = [c for c in recorder.__mro__ if c.__module__.startswith("eventsourcing.")]
            assert {c.__module__ for c in library} == {"eventsourcing.persistence"}, recorder
