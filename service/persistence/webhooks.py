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

One account cannot starve the others' deliveries (a receiver that never answers holds a thread
for each attempt's whole deadline):

- **In flight.** A claim leases at most ``in_flight`` (2) deliveries of one webhook at a time,
  and hands out each webhook's first due delivery before any webhook's second, the webhooks
  whose receivers failed fewer attempts in a row first. The claim reads which webhooks hold live
  leases and leases only each webhook's first due rows, in one statement whose rows a concurrent
  claim either locks first (PostgreSQL: ``SKIP LOCKED``, and the row's conditions are checked
  again once locked) or has already moved out of the due set: two claimers never together take
  more than ``in_flight`` of one webhook's rows.
- **Waiting.** At most ``max_pending`` (1,000) deliveries of a webhook wait: queueing more gives
  up the oldest that are not in flight (``failed``, with one log entry saying why,
  ``QUEUE_FULL``). The trim runs with the webhook's row locked (PostgreSQL: ``FOR UPDATE``;
  SQLite has one writer), in a statement of its own, so two transactions queueing at once trim
  in turn, each seeing the other's rows.
- **Failing.** ``cantstop_webhooks.failures`` counts the attempts that failed in a row (a 2xx sets
  it back to 0). From ``failing_after`` (20) on, each failed attempt pauses the whole webhook
  (``paused_until``) for the next of ``pauses`` (the retry intervals: 5 s, 30 s, … up to the
  longest, 10 h, which then repeats): its deliveries waiting are due then, not before, and
  those queued meanwhile too. A 2xx ends the pause and its deliveries are due at once.

The secret is stored as it was issued: signing needs it (an HMAC key cannot be kept as a hash).
Anyone who can read this table can sign deliveries as the service: the README says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.persistence.sqlite import in_chunks
from service.persistence.tables import SideTable, Sql, in_a_free_slot

WEBHOOKS = "cantstop_webhooks"
DELIVERIES = "cantstop_webhook_deliveries"
ATTEMPTS = "cantstop_webhook_attempts"
QUEUE_FULL = "given up: newer deliveries of this webhook fill its queue"
"""The log's entry of a delivery given up because ``max_pending`` newer ones wait."""


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
    failures: int = 0  # attempts that failed in a row
    paused_until_us: int = 0  # no delivery is due before (0: not paused)


@dataclass(frozen=True)
class Enqueued:
    """A delivery to make: ``payload`` is the exact body that is signed and sent."""

    id: str  # the Standard Webhooks message id (``webhook-id``), the same on every retry
    webhook_id: str
    seq: int
    type: str
    payload: str
    created_us: int
    next_at_us: int | None = None  # when it is first due: at once (``created_us``) if None


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
            "created_at TEXT NOT NULL, created_us BIGINT NOT NULL, "
            "failures INTEGER NOT NULL DEFAULT 0, paused_until BIGINT NOT NULL DEFAULT 0, "
            "UNIQUE (account, slot))"
        )
        self.add_columns(
            WEBHOOKS,
            {
                "failures": "INTEGER NOT NULL DEFAULT 0",
                "paused_until": "BIGINT NOT NULL DEFAULT 0",
            },
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
        # A webhook's deliveries waiting (the cap's trim, the leases it holds, a pause).
        self.execute(
            f"CREATE INDEX IF NOT EXISTS {DELIVERIES}_waiting "
            f"ON {DELIVERIES} (webhook_id, status, created_us, seq)"
        )
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {ATTEMPTS} (delivery_id TEXT NOT NULL, "
            "attempt INTEGER NOT NULL, at TEXT NOT NULL, status_code INTEGER, error TEXT, "
            "duration_ms INTEGER NOT NULL, address TEXT, PRIMARY KEY (delivery_id, attempt))"
        )

    # ----------------------------------------------------------------------------- webhooks
    def count(self, account: str) -> int:
        """How many webhooks the account has (``add`` alone holds the cap, whatever races)."""
        row = self.execute(
            f"SELECT count(*) AS n FROM {WEBHOOKS} WHERE account = ?", (account,), fetch="one"
        )
        return int(row["n"])

    def add(self, row: WebhookRow, cap: int) -> bool:
        """Store ``row`` in a free slot of its account; False if the account has ``cap``
        webhooks already. Two requests racing for the last slot: one gets it."""

        def held() -> list[int]:
            rows = self.execute(
                f"SELECT slot FROM {WEBHOOKS} WHERE account = ?", (row.account,), fetch="all"
            )
            return [int(found["slot"]) for found in rows]

        def insert(slot: int) -> bool:
            stored = self.execute(
                f"INSERT INTO {WEBHOOKS} (id, account, slot, url, events, description, secret, "
                "created_at, created_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (account, slot) DO NOTHING RETURNING id",
                (
                    row.id,
                    row.account,
                    slot,
                    row.url,
                    json.dumps(list(row.events)),
                    row.description,
                    row.secret,
                    row.created_at,
                    row.created_us,
                ),
                fetch="one",
            )
            return stored is not None

        return in_a_free_slot(cap, held, insert)

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

    def enqueue(
        self, sql: Sql, deliveries: Sequence[Enqueued], max_pending: int, now_us: int, at: str
    ) -> int:
        """Enqueue inside the caller's transaction (the notices view's), due at once or when
        the webhook's pause ends. A delivery of a notice enqueued before (a rebuilt view) is
        not enqueued again. Then each webhook keeps its ``max_pending`` newest deliveries
        waiting and gives up the older ones that are not in flight (``QUEUE_FULL``, logged
        ``at``): how many it gave up."""
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
                    item.created_us if item.next_at_us is None else item.next_at_us,
                    item.created_us,
                ),
            )
        given_up = 0
        for webhook_id in sorted({item.webhook_id for item in deliveries}):
            given_up += self._trim(sql, webhook_id, max_pending, now_us, at)
        return given_up

    def _trim(self, sql: Sql, webhook_id: str, max_pending: int, now_us: int, at: str) -> int:
        """Give up the webhook's deliveries waiting beyond its ``max_pending`` newest, except
        those in flight. Its row is locked first and the trim is a statement of its own: on
        PostgreSQL it then sees what every transaction that trimmed before it committed (and
        those after it see this one's), so two that queue at once leave no more than the cap;
        on SQLite the caller holds the only write lock. (A webhook deleted meanwhile takes
        what was just queued for it along.)"""
        lock = " FOR UPDATE" if self.postgres else ""
        if sql.one(f"SELECT id FROM {WEBHOOKS} WHERE id = ?{lock}", (webhook_id,)) is None:
            sql.execute(f"DELETE FROM {DELIVERIES} WHERE webhook_id = ?", (webhook_id,))
            return 0
        every = "ALL" if self.postgres else "-1"
        rows = sql.all(
            f"UPDATE {DELIVERIES} SET status = 'failed', next_at = ?, claim = NULL "
            f"WHERE id IN (SELECT id FROM {DELIVERIES} WHERE webhook_id = ? "
            "AND status = 'pending' ORDER BY created_us DESC, seq DESC "
            f"LIMIT {every} OFFSET ?) AND status = 'pending' "
            "AND (claim IS NULL OR next_at <= ?) RETURNING id, attempts",
            (now_us, webhook_id, max_pending, now_us),
        )
        sql.many(
            f"INSERT INTO {ATTEMPTS} (delivery_id, attempt, at, status_code, error, "
            "duration_ms, address) VALUES (?, ?, ?, NULL, ?, 0, NULL) "
            "ON CONFLICT (delivery_id, attempt) DO NOTHING",
            [(str(row["id"]), int(row["attempts"]) + 1, at, QUEUE_FULL) for row in rows],
        )
        return len(rows)

    # --------------------------------------------------------------------------- delivering
    def claim(
        self, now_us: int, lease_until_us: int, token: str, limit: int, in_flight: int = 2
    ) -> list[Claimed]:
        """Claim up to ``limit`` due deliveries for ``token`` until ``lease_until_us``: each
        row is claimed by one claimer only, whatever the others do at the same moment (the
        claim is one statement). The scheduler's loop asks at every pass: with nothing due
        that is the one statement, on PostgreSQL without a ``BEGIN`` and a ``COMMIT`` around
        it (two round trips a pass, of an idle pass's ~12). The hooks of what was claimed are
        read after: a hook deleted meanwhile took its deliveries with it (``delete``), and
        they are passed over.

        Fair: a webhook holds at most ``in_flight`` live leases, and only its first due rows
        (by ``next_at``) are candidates, as many as it may still lease; the candidates go by
        the webhook's failures in a row (fewest first), then by their rank in their webhook
        (every webhook's first before any's second), then by ``next_at``. A paused webhook's
        rows are passed over. A concurrent claim cannot make a webhook exceed ``in_flight``:
        both pick the same first rows, which one of them locks (the other skips it, or finds it
        leased when its conditions are checked again on the locked row)."""
        lock = " FOR UPDATE OF d SKIP LOCKED" if self.postgres else ""
        rows = self.execute(
            f"UPDATE {DELIVERIES} SET next_at = ?, claim = ?, attempts = attempts + 1 "
            "WHERE status = 'pending' AND next_at <= ? AND id IN ("
            f"SELECT d.id FROM {DELIVERIES} d JOIN ("
            "SELECT q.id AS id, q.rn AS rn, h.failures AS failures FROM ("
            "SELECT id, webhook_id, ROW_NUMBER() OVER "
            "(PARTITION BY webhook_id ORDER BY next_at, id) AS rn "
            f"FROM {DELIVERIES} WHERE status = 'pending' AND next_at <= ?) q "
            f"JOIN {WEBHOOKS} h ON h.id = q.webhook_id "
            # the leases live now, counted once per webhook (a few rows: at most in_flight
            # each), not once per candidate: a webhook may have a thousand rows waiting
            "LEFT JOIN (SELECT webhook_id, count(*) AS n "
            f"FROM {DELIVERIES} WHERE status = 'pending' AND claim IS NOT NULL AND next_at > ? "
            "GROUP BY webhook_id) l ON l.webhook_id = q.webhook_id "
            "WHERE h.paused_until <= ? AND q.rn <= ? AND q.rn + COALESCE(l.n, 0) <= ?"
            ") c ON c.id = d.id WHERE d.status = 'pending' AND d.next_at <= ? "
            f"ORDER BY c.failures, c.rn, d.next_at, d.id LIMIT ?{lock}) "
            "RETURNING id, webhook_id, payload, attempts",
            (
                lease_until_us,
                token,
                now_us,
                now_us,
                now_us,
                now_us,
                in_flight,
                in_flight,
                now_us,
                limit,
            ),
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

    def finish(
        self,
        claimed: Claimed,
        attempt: AttemptRow,
        status: str,
        next_at_us: int,
        *,
        failed: bool = False,
        now_us: int = 0,
        failing_after: int = 20,
        pauses_us: Sequence[int] = (),
    ) -> bool:
        """Record an attempt, and the delivery's new state (``pending`` again at ``next_at_us``,
        ``delivered`` or ``failed``) if it is still this claimer's: False if its lease ran out
        and another claimed it meanwhile (its attempt is logged all the same).

        The webhook's failures in a row go up by one if the receiver ``failed`` (else back to
        0). From ``failing_after`` on, the webhook is paused from ``now_us`` for the next of
        ``pauses_us`` (the last repeating): this delivery and its others waiting are due
        then, not before. A delivery ends a pause: the webhook's deliveries waiting are all
        due at ``now_us``. (The webhook's row is locked first, by the statement that counts,
        before any of its deliveries, as ``_trim`` and ``delete`` do: no deadlock.)"""

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
            hook = claimed.webhook_id
            paused_until = 0
            if failed:
                row = sql.one(
                    f"UPDATE {WEBHOOKS} SET failures = failures + 1 WHERE id = ? "
                    "RETURNING failures, paused_until",
                    (hook,),
                )
                failures = 0 if row is None else int(row["failures"])
                if row is not None and failures >= failing_after and pauses_us:
                    # (The row is this transaction's until it ends: no one counts meanwhile.)
                    step = min(failures - failing_after, len(pauses_us) - 1)
                    paused_until = max(int(row["paused_until"]), now_us + pauses_us[step])
                    sql.execute(
                        f"UPDATE {WEBHOOKS} SET paused_until = ? WHERE id = ?",
                        (paused_until, hook),
                    )
            else:
                lock = " FOR UPDATE" if self.postgres else ""
                row = sql.one(
                    f"SELECT failures, paused_until FROM {WEBHOOKS} WHERE id = ?{lock}", (hook,)
                )
                if row is not None and int(row["paused_until"]) > 0:
                    # It was paused, and its receiver is back: all it holds is due at once.
                    sql.execute(
                        f"UPDATE {DELIVERIES} SET next_at = ? WHERE webhook_id = ? "
                        "AND status = 'pending' AND claim IS NULL AND next_at > ?",
                        (now_us, hook, now_us),
                    )
                if row is not None and (int(row["failures"]) or int(row["paused_until"])):
                    sql.execute(
                        f"UPDATE {WEBHOOKS} SET failures = 0, paused_until = 0 WHERE id = ?",
                        (hook,),
                    )
            due = max(next_at_us, paused_until) if status == "pending" else next_at_us
            found = sql.one(
                f"UPDATE {DELIVERIES} SET status = ?, next_at = ?, claim = NULL "
                "WHERE id = ? AND claim = ? RETURNING id",
                (status, due, claimed.id, claimed.claim),
            )
            if paused_until > now_us:
                # The webhook's others waiting (not those in flight: their own ends see to it).
                sql.execute(
                    f"UPDATE {DELIVERIES} SET next_at = ? WHERE webhook_id = ? "
                    "AND status = 'pending' AND next_at < ? AND (claim IS NULL OR next_at <= ?)",
                    (paused_until, hook, paused_until, now_us),
                )
            return found is not None

        return self.transaction(work)

    def release(self, claimed: Claimed, next_at_us: int) -> bool:
        """Give a claimed delivery back, unattempted (the service could not look its host up:
        no attempt of the receiver's), due again at ``next_at_us``: nothing logged, nothing
        counted against it or its webhook."""
        found = self.execute(
            f"UPDATE {DELIVERIES} SET next_at = ?, claim = NULL, attempts = attempts - 1 "
            "WHERE id = ? AND claim = ? AND status = 'pending' RETURNING id",
            (next_at_us, claimed.id, claimed.claim),
            fetch="one",
        )
        return found is not None

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

    def sweep_unreachable(self, passwords: str, tokens: str) -> int:
        """Delete the webhooks of accounts nobody can act for any more (no password, tokens
        all revoked: closed, or a bot account that revoked its every token), with their
        deliveries and log: how many. A close deletes its account's webhooks once its
        credentials are erased (``Webhooks.forget``); a process that died between the two left
        them, their secrets stored and deliveries still enqueued, and nobody could list or
        delete them. Revoked tokens are kept 30 days (``Accounts.prune``), this runs every few
        minutes. A webhook is made only by a token of its account, so no account being made is
        swept. ``passwords`` and ``tokens`` name the credentials' tables (``Credentials``: the
        accounts' module, which this layer does not import)."""
        held = f"SELECT 1 FROM {tokens} t WHERE t.account = w.account"
        unreachable = (
            f"SELECT id FROM {WEBHOOKS} w WHERE NOT EXISTS "
            f"(SELECT 1 FROM {passwords} p WHERE p.account = w.account) "
            f"AND EXISTS ({held}) AND NOT EXISTS ({held} AND t.revoked = 0)"
        )

        def work(sql: Sql) -> int:
            ids = [str(row["id"]) for row in sql.all(unreachable, ())]
            for chunk, marks in in_chunks(ids):
                deliveries = f"SELECT id FROM {DELIVERIES} WHERE webhook_id IN ({marks})"
                sql.execute(f"DELETE FROM {ATTEMPTS} WHERE delivery_id IN ({deliveries})", chunk)
                sql.execute(f"DELETE FROM {DELIVERIES} WHERE webhook_id IN ({marks})", chunk)
                sql.execute(f"DELETE FROM {WEBHOOKS} WHERE id IN ({marks})", chunk)
            return len(ids)

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
        failures=int(row["failures"]),
        paused_until_us=int(row["paused_until"]),
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
