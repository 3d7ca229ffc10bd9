"""The first answers of creating requests sent with an ``Idempotency-Key``, so that a retry on any
host gets that answer again and creates nothing more.

A key is claimed by one conditional write (an insert that overwrites only an expired row, or a
claim left pending past ``STALE`` seconds by a host that died mid-request): of two requests racing
with one key, the store lets one claim it; the other finds it pending. The claimant creates, then
completes the row with its answer, on the condition that its claim still stands. The row holds no
key and no readable answer: it is keyed by a digest of the caller's credentials and the key, and
the answer (which holds new tokens) is sealed with a secret derived from the key itself, so the
table alone gives nothing away. Rows are kept for ``KEEP`` seconds, then pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.persistence.tables import SideTable, Sql

TABLE = "cantstop_creations"
KEEP = 48 * 3600.0  # as long as an action's key is honoured
STALE = 60.0  # a claim still pending after this long was left by a request that died


@dataclass(frozen=True)
class Found:
    """What a key already holds: its request's fingerprint and, once done, the sealed answer."""

    fingerprint: str
    answer: bytes | None  # None: its first request is still being answered


class Creations(SideTable):
    def create_table(self) -> None:
        blob = "BYTEA" if self.postgres else "BLOB"
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, "
            f"claimed_at DOUBLE PRECISION NOT NULL, answer {blob}, "
            "expires_at DOUBLE PRECISION NOT NULL)"
        )
        self.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_expires ON {TABLE} (expires_at)")

    def claim(self, id_: str, fingerprint: str, now: float) -> Found | None:
        """Claim ``id_`` for a request with this fingerprint: None when it is now this
        request's to answer, else what the key holds."""

        def work(sql: Sql) -> Found | None:
            row = sql.one(
                f"INSERT INTO {TABLE} (id, fingerprint, claimed_at, answer, expires_at) "
                "VALUES (?, ?, ?, NULL, ?) ON CONFLICT (id) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, claimed_at = excluded.claimed_at, "
                "answer = NULL, expires_at = excluded.expires_at "
                f"WHERE {TABLE}.expires_at <= ? OR ({TABLE}.answer IS NULL AND "
                f"{TABLE}.claimed_at <= ?) RETURNING id",
                [id_, fingerprint, now, now + KEEP, now, now - STALE],
            )
            if row is not None:
                return None
            held = sql.one(f"SELECT fingerprint, answer FROM {TABLE} WHERE id = ?", [id_])
            answer = held["answer"]
            return Found(held["fingerprint"], None if answer is None else bytes(answer))

        return self.transaction(work)

    def complete(self, id_: str, claimed_at: float, answer: bytes) -> bool:
        """Keep the answer, if this request's claim still stands (claimed at ``claimed_at``)."""
        row = self.execute(
            f"UPDATE {TABLE} SET answer = ? WHERE id = ? AND claimed_at = ? AND answer IS NULL "
            "RETURNING id",
            [answer, id_, claimed_at],
            fetch="one",
        )
        return row is not None

    def release(self, id_: str, claimed_at: float) -> None:
        """Give the key back: its request created nothing (refused, or failed)."""
        self.execute(
            f"DELETE FROM {TABLE} WHERE id = ? AND claimed_at = ? AND answer IS NULL",
            [id_, claimed_at],
        )

    def prune(self, now: float) -> None:
        self.execute(f"DELETE FROM {TABLE} WHERE expires_at <= ?", [now])
