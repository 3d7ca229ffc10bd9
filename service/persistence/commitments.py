"""Seeds committed before their games exist (contract 1.1), in a table beside the events."""

from __future__ import annotations

import logging
from typing import Any

from service.persistence.tables import SideTable

log = logging.getLogger("cantstop.store")


class SeedCommitments(SideTable):
    """Seeds drawn before a game exists, known to clients only by their commitment (contract 1.1:
    Fairness that no one can grind). Kept in a table of their own beside the events: a row is
    deleted when a game takes it (atomically: ``DELETE … RETURNING``, so two games can never share
    one) or once it has expired, and the seed moves into the game's vault."""

    TABLE = "cantstop_seed_commitments"

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.execute(sql, params, fetch="one" if "RETURNING" in sql else "")

    def create_table(self) -> None:
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} "
            "(commitment CHAR(64) PRIMARY KEY, seed CHAR(64) NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL)"
        )

    def put(self, commitment: str, seed: str, created_at: float, expires_at: float) -> None:
        self._execute(
            f"INSERT INTO {self.TABLE} (commitment, seed, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (commitment, seed, created_at, expires_at),
        )

    def take(self, commitment: str, now: float) -> tuple[str, float] | None:
        """The seed and the time it was committed, removed; None if unknown, used or expired."""
        row = self._execute(
            f"DELETE FROM {self.TABLE} WHERE commitment = ? AND expires_at > ? "
            "RETURNING seed, created_at",
            (commitment, now),
        )
        if row is None:
            return None
        return str(row["seed"]), float(row["created_at"])

    def purge(self, now: float) -> None:
        self._execute(f"DELETE FROM {self.TABLE} WHERE expires_at <= ?", (now,))
