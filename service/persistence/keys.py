"""The receipts' development key, kept in the store when the operator configures none: every
worker and host of one store then signs with the same key, and a restart keeps it. (An operator's
keys come from a file instead: service/application/games/receipts.py.)"""

from __future__ import annotations

from typing import Any

from service.persistence.tables import SideTable


class StoredKeys(SideTable):
    TABLE = "cantstop_receipt_keys"

    def create_table(self) -> None:
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (slot TEXT PRIMARY KEY, "
            "private_key TEXT NOT NULL, not_before TEXT NOT NULL)"
        )

    def development_key(self, private_key: str, not_before: str) -> tuple[str, str]:
        """The store's development key: the one given, unless another process stored its own
        first (then that one, for everybody)."""
        self.execute(
            f"INSERT INTO {self.TABLE} (slot, private_key, not_before) "
            "VALUES ('development', ?, ?) ON CONFLICT (slot) DO NOTHING",
            (private_key, not_before),
        )
        row: Any = self.execute(
            f"SELECT private_key, not_before FROM {self.TABLE} WHERE slot = 'development'",
            fetch="one",
        )
        return str(row["private_key"]), str(row["not_before"])
