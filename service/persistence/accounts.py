"""Accounts' secrets, beside the events and never in them: each account's password hash
(argon2id) and its personal tokens' hashes (SHA-256 of 256 random bits), with their scopes.

Kept in tables of their own so that closing an account can delete its password hash and revoke
its tokens (an event is immutable).
A token is found by its id (the part before its secret) and its secret compared with the stored
hash in constant time; revoking one is a row update, read by every worker and host at the next
request.

**The cap on live tokens.** Each live token holds a slot of its account, ``(account, slot)``
unique among the tokens not revoked (a partial unique index), so an account holds at most ``cap``
live tokens however many sign-ins race (``add_token``: a conditional insert, see
``tables.in_a_free_slot``). With every slot held, a new token takes the place of the oldest:
it is revoked (a conditional update, so two sign-ins racing revoke one each), and its slot
taken. Revoking a token (or closing the account) frees its slot. Tokens made before slots were
get theirs when a release that has them first opens the store (``create_table``, under the
schema lock): every slot from 0 up not held, oldest first, so an account that had more than
``cap`` keeps the newest past the cap until they are revoked (the oldest, under it, make room).

**Revoked tokens are forgotten** 30 days after their revocation (``prune``, an hourly chore of
the scheduler: ``players.accounts.REVOKED_KEPT``): until then a request with one is told it was
revoked, then that it is unknown (401 either way). So the table holds at most ``cap`` live
tokens an account and the revocations of the last 30 days, which sign-ins past the cap add to.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from service.persistence.tables import SideTable, Sql, in_a_free_slot

ROOM_TRIES = 32
"""Rounds of a sign-in's search for a slot, revoking the oldest token between them."""


@dataclass(frozen=True)
class TokenRow:
    id: str
    account: str  # the account's key: its handle in lower case
    digest: str
    scopes: tuple[str, ...]
    description: str
    created_at: str
    revoked: bool


class Credentials(SideTable):
    PASSWORDS = "cantstop_passwords"
    TOKENS = "cantstop_tokens"

    def create_table(self) -> None:
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {self.PASSWORDS} "
            "(account TEXT PRIMARY KEY, hash TEXT NOT NULL)"
        )
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {self.TOKENS} (id TEXT PRIMARY KEY, "
            "account TEXT NOT NULL, digest TEXT NOT NULL, scopes TEXT NOT NULL, "
            "description TEXT NOT NULL, "
            "created_at TEXT NOT NULL, revoked INTEGER NOT NULL, slot INTEGER, "
            "revoked_at DOUBLE PRECISION)"
        )
        self.execute(f"CREATE INDEX IF NOT EXISTS {self.TOKENS}_account ON {self.TOKENS} (account)")
        self.add_columns(self.TOKENS, {"slot": "INTEGER", "revoked_at": "DOUBLE PRECISION"})
        self.execute(
            f"CREATE UNIQUE INDEX IF NOT EXISTS {self.TOKENS}_slot ON {self.TOKENS} "
            "(account, slot) WHERE revoked = 0"
        )
        # The tokens still without a slot (none once a start has given them theirs), found at
        # each start without reading the table through: revoked tokens are kept.
        self.execute(
            f"CREATE INDEX IF NOT EXISTS {self.TOKENS}_unslotted ON {self.TOKENS} (account) "
            "WHERE slot IS NULL AND revoked = 0"
        )
        self.transaction(self._slot_older_tokens)

    def _slot_older_tokens(self, sql: Sql) -> None:
        """A slot for each live token made before slots were (its ``slot`` NULL): the lowest of
        its account's not held, oldest token first. Nothing to do once done: one query."""
        rows = sql.all(
            f"SELECT id, account, slot FROM {self.TOKENS} WHERE revoked = 0 AND account IN "
            f"(SELECT account FROM {self.TOKENS} WHERE slot IS NULL AND revoked = 0) "
            "ORDER BY account, created_at, id"
        )
        held: defaultdict[str, set[int]] = defaultdict(set)
        for row in rows:
            if row["slot"] is not None:
                held[str(row["account"])].add(int(row["slot"]))
        given: list[tuple[int, str]] = []
        for row in rows:
            if row["slot"] is None:
                taken = held[str(row["account"])]
                slot = next(n for n in itertools.count() if n not in taken)
                taken.add(slot)
                given.append((slot, str(row["id"])))
        sql.many(f"UPDATE {self.TOKENS} SET slot = ? WHERE id = ?", given)

    # ---------------------------------------------------------------------------- passwords
    def set_password(self, account: str, digest: str) -> None:
        self.execute(
            f"INSERT INTO {self.PASSWORDS} (account, hash) VALUES (?, ?) "
            "ON CONFLICT (account) DO UPDATE SET hash = excluded.hash",
            (account, digest),
        )

    def password(self, account: str) -> str | None:
        row = self.execute(
            f"SELECT hash FROM {self.PASSWORDS} WHERE account = ?", (account,), fetch="one"
        )
        return None if row is None else str(row["hash"])

    def erase(self, account: str) -> None:
        """Close an account's credentials: its password hash is deleted, its tokens revoked."""
        self.execute(f"DELETE FROM {self.PASSWORDS} WHERE account = ?", (account,))
        self.execute(
            f"UPDATE {self.TOKENS} SET revoked = 1, revoked_at = ? "
            "WHERE account = ? AND revoked = 0",
            (time.time(), account),
        )

    # ------------------------------------------------------------------------------- tokens
    def add_token(self, row: TokenRow, cap: int) -> tuple[bool, list[str]]:
        """Store ``row`` in a free slot of its account, revoking its oldest live tokens under
        the cap for room while every slot is held: whether it was stored, and the ids of those
        revoked. Sign-ins racing for the last slots each get one (each revokes a token of its
        own); not stored only if other sign-ins took every slot freed, ``ROOM_TRIES`` times
        over (each sign-in takes one slot: it would take that many racing)."""

        def held() -> list[int]:
            rows = self.execute(
                f"SELECT slot FROM {self.TOKENS} WHERE account = ? AND revoked = 0 AND slot < ?",
                (row.account, cap),
                fetch="all",
            )
            return [int(found["slot"]) for found in rows]

        def insert(slot: int) -> bool:
            stored = self.execute(
                f"INSERT INTO {self.TOKENS} "
                "(id, account, digest, scopes, description, created_at, revoked, slot) "
                "VALUES (?, ?, ?, ?, ?, ?, 0, ?) "
                "ON CONFLICT (account, slot) WHERE revoked = 0 DO NOTHING RETURNING id",
                (
                    row.id,
                    row.account,
                    row.digest,
                    json.dumps(row.scopes),
                    row.description,
                    row.created_at,
                    slot,
                ),
                fetch="one",
            )
            return stored is not None

        revoked: list[str] = []
        for _ in range(ROOM_TRIES):
            if in_a_free_slot(cap, held, insert):
                return True, revoked
            oldest = self.execute(
                f"UPDATE {self.TOKENS} SET revoked = 1, revoked_at = ? WHERE revoked = 0 AND id = "
                f"(SELECT id FROM {self.TOKENS} WHERE account = ? AND revoked = 0 AND slot < ? "
                "ORDER BY created_at, id LIMIT 1) RETURNING id",
                (time.time(), row.account, cap),
                fetch="one",
            )
            if oldest is not None:  # (else another sign-in revoked it first: look again)
                revoked.append(str(oldest["id"]))
        return False, revoked

    def token(self, token_id: str) -> TokenRow | None:
        row = self.execute(f"SELECT * FROM {self.TOKENS} WHERE id = ?", (token_id,), fetch="one")
        return None if row is None else _token(row)

    def tokens(self, account: str) -> list[TokenRow]:
        rows = self.execute(
            f"SELECT * FROM {self.TOKENS} WHERE account = ? AND revoked = 0 ORDER BY created_at",
            (account,),
            fetch="all",
        )
        return [_token(row) for row in rows]

    def alive(self, ids: list[str]) -> set[str]:
        """Those of the tokens ``ids`` not revoked (closing an account revokes its tokens): one
        query by the primary key (the caller pages the ids: the live hub, 500 at a time)."""
        if not ids:
            return set()
        marks = ", ".join("?" for _ in ids)
        rows = self.execute(
            f"SELECT id FROM {self.TOKENS} WHERE revoked = 0 AND id IN ({marks})",
            ids,
            fetch="all",
        )
        return {str(row["id"]) for row in rows}

    def revoke(self, account: str, token_id: str) -> bool:
        row = self.execute(
            f"UPDATE {self.TOKENS} SET revoked = 1, revoked_at = ? "
            "WHERE account = ? AND id = ? AND revoked = 0 RETURNING id",
            (time.time(), account, token_id),
            fetch="one",
        )
        return row is not None

    def prune(self, before: float, made_before: str) -> int:
        """Forget the tokens revoked before ``before`` (seconds since the epoch), and those
        revoked before the time was kept that were made before ``made_before`` (a
        ``created_at``); how many."""
        rows = self.execute(
            f"DELETE FROM {self.TOKENS} WHERE revoked = 1 AND (revoked_at < ? OR "
            "(revoked_at IS NULL AND created_at < ?)) RETURNING id",
            (before, made_before),
            fetch="all",
        )
        return len(rows)


def _token(row: Any) -> TokenRow:
    return TokenRow(
        id=str(row["id"]),
        account=str(row["account"]),
        digest=str(row["digest"]),
        scopes=tuple(json.loads(row["scopes"])),
        description=str(row["description"]),
        created_at=str(row["created_at"]),
        revoked=bool(row["revoked"]),
    )
