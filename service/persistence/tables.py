"""Tables of the service's own beside the events: rows that are taken, changed or erased (seed
commitments, accounts' secrets), which events cannot be. Through the library's datastore, with
the store's bounded waits and its errors (``guarded``)."""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import IntegrityError, OperationalError, PersistenceError

from service.persistence.guard import BREAKER, SQLITE_BREAKER, guarded


class SideTable:
    """SQL with ``?`` placeholders on either store, each statement its own transaction."""

    def __init__(self, datastore: Any, dialect: str) -> None:
        self.datastore = datastore
        self.mark = "?" if dialect == "sqlite" else "%s"

    def execute(self, sql: str, params: tuple[Any, ...] = (), *, fetch: str = "") -> Any:
        """Run ``sql``; with ``fetch`` "one" or "all", its rows (by column name)."""

        def run() -> Any:
            try:
                with self.datastore.transaction(commit=True) as cursor:
                    cursor.execute(sql.replace("?", self.mark), params)
                    if fetch == "one":
                        return cursor.fetchone()
                    if fetch == "all":
                        return cursor.fetchall()
                    return None
            except (PersistenceError, IntegrityError):
                raise
            except Exception as exc:  # sqlite3 / psycopg errors, as the recorders map them
                raise OperationalError(str(exc)) from exc

        return guarded(run, breaker=SQLITE_BREAKER if self.mark == "?" else BREAKER)
