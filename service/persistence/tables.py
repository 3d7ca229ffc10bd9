"""Tables of the service's own beside the events: rows that are taken, changed or erased (seed
commitments, accounts' secrets, webhooks' queue), which events cannot be. Through the store's
datastore, with the store's bounded waits and its errors (``guarded``). ``Sql`` is the cursor
these and the views (service/persistence/views.py) write SQL through, the same on both stores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from eventsourcing.persistence import IntegrityError, OperationalError, PersistenceError

from service.persistence.guard import BREAKER, SQLITE_BREAKER, guarded

T = TypeVar("T")


class Sql:
    """A cursor that takes ``?`` placeholders and ``{table}`` names on both stores."""

    def __init__(
        self, cursor: Any, tables: dict[str, str], postgres: bool, *, scratch: bool = False
    ) -> None:
        self.cursor = cursor
        self.tables = tables
        self.postgres = postgres
        self.scratch = scratch
        """A rebuild's scratch tables (``views.Views._build``): nothing reads them until they
        are settled and copied into the store."""
        self.carried: dict[str, Any] = {}
        """What a view keeps from one batch of a rebuild's fill to the next, by the view's name
        (the notices hold what they have not written yet: ``notices.Rebuilt``)."""

    def _statement(self, sql: str) -> str:
        """``sql`` with its tables named, in the store's placeholders."""
        statement = sql.format(**self.tables)
        return statement.replace("?", "%s") if self.postgres else statement

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self._statement(sql), list(params))

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``sql`` once for each of ``rows`` (PostgreSQL: pipelined, not a round trip each)."""
        if rows:
            self.cursor.executemany(self._statement(sql), rows)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self.execute(sql, params)
        return list(self.cursor.fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.execute(sql, params)
        return self.cursor.fetchone()


class SideTable:
    """SQL with ``?`` placeholders on either store: a statement, or a unit of work, in its own
    transaction."""

    def __init__(self, datastore: Any, dialect: str) -> None:
        self.datastore = datastore
        self.postgres = dialect != "sqlite"

    def transaction(self, work: Callable[[Sql], T]) -> T:
        """``work`` in one transaction (with the store's bounded waits and its errors)."""

        def run() -> T:
            try:
                with self.datastore.transaction(commit=True) as cursor:
                    return work(Sql(cursor, {}, self.postgres))
            except (PersistenceError, IntegrityError):
                raise
            except Exception as exc:  # sqlite3 / psycopg errors, as the recorders map them
                raise OperationalError(str(exc)) from exc

        result: T = guarded(run, breaker=BREAKER if self.postgres else SQLITE_BREAKER)
        return result

    def execute(self, sql: str, params: Sequence[Any] = (), *, fetch: str = "") -> Any:
        """Run ``sql``; with ``fetch`` "one" or "all", its rows (by column name). One statement
        is a transaction of its own: on PostgreSQL it runs on the pool's autocommit connection,
        without a ``BEGIN`` and a ``COMMIT`` around it (two round trips; a personal token's
        check on every request it signs is one: docs/performance.md, levers)."""

        def work(statements: Sql) -> Any:
            if fetch == "one":
                return statements.one(sql, params)
            if fetch == "all":
                return statements.all(sql, params)
            statements.execute(sql, params)
            return None

        if not self.postgres:
            return self.transaction(work)

        def alone() -> Any:
            try:
                with self.datastore.autocommit() as cursor:
                    return work(Sql(cursor, {}, True))
            except (PersistenceError, IntegrityError):
                raise
            except Exception as exc:  # psycopg's errors, as the recorders map them
                raise OperationalError(str(exc)) from exc

        return guarded(alone, breaker=BREAKER)

    def add_columns(self, table: str, columns: dict[str, str]) -> None:
        """Add the columns that a table made by an older version lacks, each only when missing
        (on PostgreSQL even ``ADD COLUMN IF NOT EXISTS`` takes the table's lock first)."""

        def work(sql: Sql) -> None:
            if self.postgres:
                found = sql.all(
                    "SELECT attname AS name FROM pg_attribute WHERE attrelid = "
                    "CAST(? AS regclass) AND attnum > 0 AND NOT attisdropped",
                    (table,),
                )
            else:
                found = sql.all(f"PRAGMA table_info({table})")
            have = {str(row["name"]) for row in found}
            for name, kind in columns.items():
                if name not in have:
                    exists = " IF NOT EXISTS" if self.postgres else ""
                    sql.execute(f"ALTER TABLE {table} ADD COLUMN{exists} {name} {kind}")

        self.transaction(work)  # (SQLite: with the write lock, so one process adds them)


def in_a_free_slot(
    cap: int, held: Callable[[], Iterable[int]], insert: Callable[[int], bool]
) -> bool:
    """Hold a cap of ``cap`` rows per account with a unique ``(account, slot)``: ``insert`` the
    row in the first of the slots ``0 .. cap-1`` not ``held`` (a conditional insert: True if it
    wrote the row, False if the slot was taken meanwhile, and then the next free one is tried).
    False when every slot is held. Of two requests racing for the last slot, the store lets one
    write it (on PostgreSQL the second waits for the first's row, then finds it taken)."""
    for _ in range(cap + 1):
        taken = set(held())
        free = next((slot for slot in range(cap) if slot not in taken), None)
        if free is None:
            return False
        if insert(free):
            return True
    return False  # (slots taken and freed faster than this loop: answered as full)
