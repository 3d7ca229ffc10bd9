"""Slots: how caps on live things per account hold with requests racing on any number of
workers and hosts (pending challenges, open seeks).

A cap of N is N rows an account may hold, keyed ``(kind, account, slot)``: taking one is a single
conditional write, an insert that on a key already held overwrites the row only if its holder's
time is up (``until`` passed). The key's uniqueness does what a count read and then written
cannot: of two requests racing for the last slot, the store lets one write it (on PostgreSQL
the second waits for the first's row lock, then finds it held). A slot is given back when its
holder is settled (answered, paired, withdrawn, expired); one a crash failed to give back frees
itself at ``until``, the holder's own expiry, so nothing live is ever counted for longer.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.persistence.tables import SideTable, Sql

TABLE = "cantstop_slots"


class Slots(SideTable):
    def create_table(self) -> None:
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (kind TEXT NOT NULL, account TEXT NOT NULL, "
            "slot TEXT NOT NULL, holder TEXT NOT NULL, until DOUBLE PRECISION NOT NULL, "
            "PRIMARY KEY (kind, account, slot))"
        )
        self.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_holder ON {TABLE} (holder)")

    def take(
        self,
        account: str,
        holder: str,
        until: float,
        now: float,
        wants: Sequence[tuple[str, Sequence[str]]],
    ) -> int | None:
        """For each ``(kind, slots)`` of ``wants``, one of those slots of the account for
        ``holder`` until ``until``, all in one transaction: None when every one was taken, else
        the index of the first that found all its slots held (and nothing is taken)."""

        def work(sql: Sql) -> int | None:
            taken: list[tuple[str, str]] = []
            for index, (kind, slots) in enumerate(wants):
                got = next(
                    (s for s in slots if _take(sql, kind, account, s, holder, until, now)), None
                )
                if got is None:
                    for undo_kind, undo_slot in taken:  # free again what this one took
                        sql.execute(
                            f"DELETE FROM {TABLE} WHERE kind = ? AND account = ? AND slot = ? "
                            "AND holder = ?",
                            [undo_kind, account, undo_slot, holder],
                        )
                    return index
                taken.append((kind, got))
            return None

        return self.transaction(work)

    def release(self, holders: Sequence[str]) -> None:
        """Give back every slot these holders hold (settled: answered, paired, expired…)."""
        if holders:
            marks = ",".join("?" * len(holders))
            self.execute(f"DELETE FROM {TABLE} WHERE holder IN ({marks})", list(holders))

    def held(self, kind: str, account: str, now: float) -> int:
        """How many of the account's slots of ``kind`` are held now (tests, logs)."""
        row = self.execute(
            f"SELECT count(*) AS n FROM {TABLE} WHERE kind = ? AND account = ? AND until > ?",
            (kind, account, now),
            fetch="one",
        )
        return int(row["n"])


def _take(
    sql: Sql, kind: str, account: str, slot: str, holder: str, until: float, now: float
) -> bool:
    """One conditional write: the slot is free (no row, or its holder's time is up) and is now
    ``holder``'s, or it is held and nothing changes."""
    row = sql.one(
        f"INSERT INTO {TABLE} (kind, account, slot, holder, until) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (kind, account, slot) DO UPDATE SET holder = excluded.holder, "
        f"until = excluded.until WHERE {TABLE}.until <= ? RETURNING slot",
        [kind, account, slot, holder, until, now],
    )
    return row is not None
