"""Webhooks' tables, beside the events: each account's webhooks (with the secret that signs their
deliveries), the deliveries to make (a queue that several schedulers on several hosts share) and
the log of their attempts.

- ``cantstop_webhooks``: one row a webhook; ``(account, slot)`` is unique, with slots
  ``0 .. cap-1``, so the cap on webhooks per account holds however many requests race.
- ``cantstop_webhook_deliveries``: one row per (webhook, notice), written in the notices view's
  own write transaction (``enqueue``): a notice is enqueued exactly once with it, and
  ``(webhook_id, seq)`` is unique, so a view rebuilt from the log enqueues nothing twice. A row
  is ``pending`` until delivered or given up (``failed``); ``next_at`` is when it is next due.
  Claiming a row (``claim``) moves ``next_at`` to the end of a lease and marks it with the
  claimer's token, in one conditional statement (PostgreSQL: ``FOR UPDATE SKIP LOCKED``): two
  dispatchers never claim one row, and the row of a claimer that died is due again when its
  lease ends.
- ``cantstop_webhook_attempts``: one row per attempt (status code, error, duration, address).

The secret is stored as it was issued: signing needs it (an HMAC key cannot be kept as a hash).
Anyone who can read this table can sign deliveries as the service: the README says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.persistence.sqlite import in_chunks
from service.persistence.tables import SideTable, Sql

WEBHOOKS = "cantstop_webhooks"
DELIVERIES = "cantstop_webhook_deliveries"
ATTEMPTS = "cantstop_webhook_attempts"


@dataclass(frozen=True)
class WebhookRow:
    id: str
    account: str  # the account's handle in lower case
    url: str
    events: tuple[str, ...]
    description: str
    secret: str
    created_at: str
    created_us: int  # the same time, in microseconds since the epoch


@dataclass(frozen=True)
class Enqueued:
    """A delivery to make: ``payload`` is the exact body that is signed and sent."""

    id: str  # the Standard Webhooks message id (``webhook-id``), the same on every retry
    webhook_id: str
    seq: int
    type: str
    payload: str
    created_us: int


@dataclass(frozen=True)
class Claimed:
    id: str
    webhook_id: str
    payload: str
    attempt: int  # this attempt's number, from 1
    claim: str
    url: str
    secret: str


@dataclass(frozen=True)
class AttemptRow:
    delivery_id: str
    attempt: int
    at: str
    status_code: int | None
    error: str | None
    duration_ms: int
    address: str | None


class WebhookTables(SideTable):
    def create_table(self) -> None:
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {WEBHOOKS} (id TEXT PRIMARY KEY, "
            "account TEXT NOT NULL, slot INTEGER NOT NULL, url TEXT NOT NULL, "
            "events TEXT NOT NULL, description TEXT NOT NULL, secret TEXT NOT NULL, "
            "created_at TEXT NOT NULL, created_us BIGINT NOT NULL, UNIQUE (account, slot))"
        )
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {DELIVERIES} (id TEXT PRIMARY KEY, "
            "webhook_id TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL, "
            "payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, "
            "next_at BIGINT NOT NULL, claim TEXT, created_us BIGINT NOT NULL, "
            "UNIQUE (webhook_id, seq))"
        )
        self.execute(
            f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_due ON {DELIVERIES} (status, next_at)"
        )
        self.execute(
            f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_hook ON {DELIVERIES} (webhook_id, created_us)"
        )
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {ATTEMPTS} (delivery_id TEXT NOT NULL, "
            "attempt INTEGER NOT NULL, at TEXT NOT NULL, status_code INTEGER, error TEXT, "
            "duration_ms INTEGER NOT NULL, address TEXT, PRIMARY KEY (delivery_id, attempt))"
        )

    # ----------------------------------------------------------------------------- webhooks
    def add(self, row: WebhookRow, cap: int) -> bool:
        """Store ``row`` in a free slot of its account; False if the account has ``cap``
        webhooks already. Two requests racing for the last slot: one gets it."""
        for _ in range(cap + 1):
            taken = {
                int(found["slot"])
                for found in self.execute(
                    f"SELECT slot FROM {WEBHOOKS} WHERE account = ?", (row.account,), fetch="all"
                )
            }
            free = [slot for slot in range(cap) if slot not in taken]
            if not free:
                return False
            stored = self.execute(
                f"INSERT INTO {WEBHOOKS} (id, account, slot, url, events, description, secret, "
                "created_at, created_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (account, slot) DO NOTHING RETURNING id",
                (
                    row.id,
                    row.account,
                    free[0],
                    row.url,
                    json.dumps(list(row.events)),
                    row.description,
                    row.secret,
                    row.created_at,
                    row.created_us,
                ),
                fetch="one",
            )
            if stored is not None:
                return True
        return False  # (slots taken and freed faster than this loop: answered as full)

    def webhooks(self, account: str) -> list[WebhookRow]:
        rows = self.execute(
            f"SELECT * FROM {WEBHOOKS} WHERE account = ? ORDER BY created_us, id",
            (account,),
            fetch="all",
        )
        return [_webhook(row) for row in rows]

    def webhook(self, account: str, webhook_id: str) -> WebhookRow | None:
        row = self.execute(
            f"SELECT * FROM {WEBHOOKS} WHERE account = ? AND id = ?",
            (account, webhook_id),
            fetch="one",
        )
        return None if row is None else _webhook(row)

    def delete(self, account: str, webhook_id: str) -> bool:
        """Delete the webhook, its deliveries still to make and its log, in one transaction."""

        def work(sql: Sql) -> bool:
            found = sql.one(
                f"DELETE FROM {WEBHOOKS} WHERE account = ? AND id = ? RETURNING id",
                (account, webhook_id),
            )
            if found is None:
                return False
            sql.execute(
                f"DELETE FROM {ATTEMPTS} WHERE delivery_id IN "
                f"(SELECT id FROM {DELIVERIES} WHERE webhook_id = ?)",
                (webhook_id,),
            )
            sql.execute(f"DELETE FROM {DELIVERIES} WHERE webhook_id = ?", (webhook_id,))
            return True

        return self.transaction(work)

    # ------------------------------------------------------------------- the notices' hook
    @staticmethod
    def subscribed(sql: Sql, accounts: Iterable[str]) -> list[WebhookRow]:
        """The webhooks of these accounts, read inside the caller's transaction."""
        keys = sorted(set(accounts))
        found: list[WebhookRow] = []
        for chunk, marks in in_chunks(keys):
            rows = sql.all(f"SELECT * FROM {WEBHOOKS} WHERE account IN ({marks})", chunk)
            found.extend(_webhook(row) for row in rows)
        return found

    @staticmethod
    def enqueue(sql: Sql, deliveries: Sequence[Enqueued]) -> None:
        """Enqueue inside the caller's transaction (the notices view's): due at once. A
        delivery of a notice enqueued before (a rebuilt view) is not enqueued again."""
        for item in deliveries:
            sql.execute(
                f"INSERT INTO {DELIVERIES} (id, webhook_id, seq, type, payload, status, "
                "attempts, next_at, claim, created_us) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, "
                "NULL, ?) ON CONFLICT (webhook_id, seq) DO NOTHING",
                (
                    item.id,
                    item.webhook_id,
                    item.seq,
                    item.type,
                    item.payload,
                    item.created_us,
                    item.created_us,
                ),
            )

    # --------------------------------------------------------------------------- delivering
    def claim(self, now_us: int, lease_until_us: int, token: str, limit: int) -> list[Claimed]:
        """Claim up to ``limit`` due deliveries for ``token`` until ``lease_until_us``: each
        row is claimed by one claimer only, whatever the others do at the same moment (the
        claim is one statement). The scheduler's loop asks at every pass: with nothing due
        that is the one statement, on PostgreSQL without a ``BEGIN`` and a ``COMMIT`` around
        it (two round trips a pass, of an idle pass's ~12). The hooks of what was claimed are
        read after: a hook deleted meanwhile took its deliveries with it (``delete``), and
        they are passed over."""
        lock = " FOR UPDATE SKIP LOCKED" if self.postgres else ""
        rows = self.execute(
            f"UPDATE {DELIVERIES} SET next_at = ?, claim = ?, attempts = attempts + 1 "
            f"WHERE id IN (SELECT id FROM {DELIVERIES} WHERE status = 'pending' "
            f"AND next_at <= ? ORDER BY next_at LIMIT ?{lock}) "
            "RETURNING id, webhook_id, payload, attempts",
            (lease_until_us, token, now_us, limit),
            fetch="all",
        )
        if not rows:
            return []
        hooks = sorted({str(row["webhook_id"]) for row in rows})
        marks = ",".join("?" * len(hooks))
        found = {
            str(hook["id"]): hook
            for hook in self.execute(
                f"SELECT id, url, secret FROM {WEBHOOKS} WHERE id IN ({marks})", hooks, fetch="all"
            )
        }
        return [
            Claimed(
                id=str(row["id"]),
                webhook_id=str(row["webhook_id"]),
                payload=str(row["payload"]),
                attempt=int(row["attempts"]),
                claim=token,
                url=str(found[str(row["webhook_id"])]["url"]),
                secret=str(found[str(row["webhook_id"])]["secret"]),
            )
            for row in rows
            if str(row["webhook_id"]) in found
        ]

    def finish(self, claimed: Claimed, attempt: AttemptRow, status: str, next_at_us: int) -> bool:
        """Record an attempt, and the delivery's new state (``pending`` again at ``next_at_us``,
        ``delivered`` or ``failed``) if it is still this claimer's: False if its lease ran out
        and another claimed it meanwhile (its attempt is logged all the same)."""

        def work(sql: Sql) -> bool:
            # (Logged only while the delivery exists: its webhook may have been deleted.)
            sql.execute(
                f"INSERT INTO {ATTEMPTS} (delivery_id, attempt, at, status_code, error, "
                "duration_ms, address) SELECT CAST(? AS TEXT), CAST(? AS INTEGER), "
                "CAST(? AS TEXT), CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS INTEGER), "
                f"CAST(? AS TEXT) WHERE EXISTS (SELECT 1 FROM {DELIVERIES} WHERE id = ?) "
                "ON CONFLICT (delivery_id, attempt) DO NOTHING",
                (
                    attempt.delivery_id,
                    attempt.attempt,
                    attempt.at,
                    attempt.status_code,
                    attempt.error,
                    attempt.duration_ms,
                    attempt.address,
                    attempt.delivery_id,
                ),
            )
            found = sql.one(
                f"UPDATE {DELIVERIES} SET status = ?, next_at = ?, claim = NULL "
                "WHERE id = ? AND claim = ? RETURNING id",
                (status, next_at_us, claimed.id, claimed.claim),
            )
            return found is not None

        return self.transaction(work)

    # ------------------------------------------------------------------------------ the log
    def deliveries(self, webhook_id: str, limit: int) -> list[tuple[Any, list[AttemptRow]]]:
        """The webhook's latest ``limit`` deliveries, newest first, each with its attempts."""

        def work(sql: Sql) -> list[tuple[Any, list[AttemptRow]]]:
            rows = sql.all(
                f"SELECT id, seq, type, status, attempts, next_at, created_us FROM {DELIVERIES} "
                "WHERE webhook_id = ? ORDER BY created_us DESC, seq DESC LIMIT ?",
                (webhook_id, limit),
            )
            attempts: dict[str, list[AttemptRow]] = {str(row["id"]): [] for row in rows}
            if rows:
                marks = ",".join("?" * len(rows))
                for found in sql.all(
                    f"SELECT * FROM {ATTEMPTS} WHERE delivery_id IN ({marks}) "
                    "ORDER BY delivery_id, attempt",
                    [row["id"] for row in rows],
                ):
                    attempts[str(found["delivery_id"])].append(_attempt(found))
            return [(row, attempts[str(row["id"])]) for row in rows]

        return self.transaction(work)

    def prune(self, before_us: int) -> int:
        """Forget deliveries made or given up that were enqueued before ``before_us``, and
        their attempts: how many."""

        def work(sql: Sql) -> int:
            old = f"SELECT id FROM {DELIVERIES} WHERE status <> 'pending' AND created_us < ?"
            sql.execute(f"DELETE FROM {ATTEMPTS} WHERE delivery_id IN ({old})", (before_us,))
            rows = sql.all(
                f"DELETE FROM {DELIVERIES} WHERE status <> 'pending' AND created_us < ? "
                "RETURNING id",
                (before_us,),
            )
            return len(rows)

        return self.transaction(work)

    def counts(self) -> dict[str, int]:
        """Deliveries stored, by status (``pending``: the queue; /metrics)."""
        rows = self.execute(
            f"SELECT status, count(*) AS n FROM {DELIVERIES} GROUP BY status", fetch="all"
        )
        return {str(row["status"]): int(row["n"]) for row in rows}


def _webhook(row: Any) -> WebhookRow:
    return WebhookRow(
        id=str(row["id"]),
        account=str(row["account"]),
        url=str(row["url"]),
        events=tuple(json.loads(row["events"])),
        description=str(row["description"]),
        secret=str(row["secret"]),
        created_at=str(row["created_at"]),
        created_us=int(row["created_us"]),
    )


def _attempt(row: Any) -> AttemptRow:
    return AttemptRow(
        delivery_id=str(row["delivery_id"]),
        attempt=int(row["attempt"]),
        at=str(row["at"]),
        status_code=None if row["status_code"] is None else int(row["status_code"]),
        error=None if row["error"] is None else str(row["error"]),
        duration_ms=int(row["duration_ms"]),
        address=None if row["address"] is None else str(row["address"]),
    )
