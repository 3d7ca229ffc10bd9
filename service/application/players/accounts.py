"""Accounts and personal tokens (contract 1.2): sign-up, sign-in, tokens with scopes, closing.

An account is an ``Account`` aggregate whose id is derived from its handle in lower case, so
handles that differ only in case are one account, and of ten sign-ups racing for one handle the
store records exactly one (the others find its first version taken: 409 ``handle_taken``). A
closed account's aggregate stays: its handle is never registered again, and its games stay
auditable under it. What is secret lives beside the events (``persistence.accounts``):

- the password, as an argon2id hash (``argon2-cffi``'s defaults), erased when the account
  closes; a sign-in with an unknown handle verifies the password against a stand-in hash, so it
  answers the same, in about the same time, whether the handle exists or not;
- personal tokens, ``cst_<id>_<secret>``: 256 random bits, of which only a SHA-256 is kept and
  compared in constant time; each with scopes (``play``, ``account``), listed and revoked. No
  worker keeps a token: each request reads its row, so a revocation holds on every worker and
  host from the next request on. An account holds at most ``MAX_TOKENS`` (100) live tokens: a
  sign-in past them revokes the oldest (a client that signs in at every start and never signs
  out goes on working, and nobody is locked out of an account whose tokens are all lost).
  Without the cap, ten sign-ins a minute (the ``signin`` limit) were ~14,000 live tokens a
  day, each listed by ``/v1/account/tokens``; whoever could make them has the password, and
  with it can revoke them all already (a token with the ``account`` scope). A revoked token is
  forgotten 30 days later (``prune_now_and_then``, the scheduler's chore).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import argon2
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from domain import strategies
from domain.errors import InvalidRequest
from domain.game import check_handle, format_at
from service.application.aggregates import Account, account_id
from service.application.errors import (
    ApplicationError,
    ConcurrentAction,
    NotFound,
    Unauthorized,
)
from service.application.store import Store
from service.persistence.accounts import Credentials, TokenRow

log = logging.getLogger("cantstop.accounts")

SCOPES = ("play", "account")
BOTS = frozenset(strategy.id for strategy in strategies.list())  # their accounts' handles
PASSWORD_LENGTH = (8, 1024)
TOKEN_PREFIX = "cst_"
TOKEN_SHAPE = re.compile(r"cst_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
MAX_DESCRIPTION = 200
MAX_TOKENS = 100
"""Live (not revoked) personal tokens per account (``persistence.accounts``: slots)."""
MAX_REASON = 500
REVOKED_KEPT = 30 * 86_400.0
"""Seconds a revoked token's row is kept (told "revoked"), then forgotten (told "unknown")."""
PRUNE_EVERY = 3600.0
"""Seconds between a process's prunings of the revoked tokens."""
CLOSE_TRIES = 2
"""Saves of an account's Closed event a close tries when other events take its version."""


class HandleTaken(ApplicationError):
    code = "handle_taken"


class TooManyTokens(ApplicationError):
    code = "too_many_tokens"


class InsufficientScope(ApplicationError):
    code = "insufficient_scope"


class HandleReserved(ApplicationError):
    code = "handle_reserved"


RESERVED = frozenset(
    {
        *("admin", "administrator", "root", "system", "sysadmin", "superuser", "operator"),
        *("moderator", "mod", "support", "help", "helpdesk", "staff", "official", "security"),
        *("cantstop", "server", "service", "api", "bot", "bots", "builtin", "abuse"),
        *("postmaster", "webmaster", "hostmaster", "anonymous", "guest", "null", "none"),
    }
)
"""Handles nobody may register (422 ``handle_reserved``), nor their variants (``reserved``)."""


class ModerationRefused(ApplicationError):
    """An exclusion of an account already excluded, or a reinstatement of one that is not (the
    operator's command line; nothing is recorded)."""

    code = "moderation_refused"


@dataclass(frozen=True)
class Principal:
    """Who a personal token speaks for: the account's handle as registered, and the scopes."""

    handle: str
    bot: bool
    scopes: tuple[str, ...]
    token_id: str

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise InsufficientScope(f"this token lacks the scope {scope!r}")


@dataclass(frozen=True)
class Issued:
    id: str
    token: str
    scopes: tuple[str, ...]
    created_at: str
    description: str


def is_personal(token: str | None) -> bool:
    return token is not None and token.startswith(TOKEN_PREFIX)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class Accounts:
    def __init__(
        self, store: Store, credentials: Credentials, *, max_tokens: int = MAX_TOKENS
    ) -> None:
        self.store = store
        self.credentials = credentials
        self.max_tokens = max_tokens
        self._next_prune = 0.0
        self.hasher = argon2.PasswordHasher()  # argon2id, the library's current defaults
        # Verified when a handle is unknown, so that a sign-in takes as long either way.
        self._stand_in = self.hasher.hash(secrets.token_urlsafe(16))

    # ------------------------------------------------------------------------------ reading
    def account(self, handle: str) -> Account:
        """The account registered under ``handle`` (whatever its case); NotFound if none."""
        try:
            check_handle(handle)
        except InvalidRequest:
            raise NotFound(f"no account {handle!r}") from None
        try:
            found: Any = self.store.repository.get(account_id(handle))
        except AggregateNotFoundError:
            if handle.lower() not in BOTS:
                raise NotFound(f"no account {handle!r}") from None
            found = self._bot(handle.lower())
        if not isinstance(found, Account):
            raise NotFound(f"no account {handle!r}")
        return found

    def exists(self, handle: str) -> bool:
        try:
            self.account(handle)
        except NotFound:
            return False
        return True

    # ----------------------------------------------------------------------------- creating
    def sign_up(self, handle: str, password: str | None, *, bot: bool = False) -> Issued:
        """A new account and its first token (both scopes). A bot account has no password: its
        token is its only credential."""
        check_handle(handle)
        if handle.lower() in BOTS:
            raise HandleTaken(f"the handle {handle!r} is a built-in bot's")
        if reserved(handle):
            raise HandleReserved(
                f"the handle {handle!r} is reserved: it reads as the server's or a built-in bot's"
            )
        if bot:
            if password is not None:
                raise InvalidRequest("a bot account has no password: its token is its credential")
        else:
            check_password(password)
        digest = None if bot else self.hasher.hash(password or "")
        self._register(handle, bot)
        key = handle.lower()
        if digest is not None:
            self.credentials.set_password(key, digest)
        return self._issue(key, SCOPES, "sign-up")

    def _register(self, handle: str, bot: bool) -> Account:
        account = Account(handle=handle, bot=bot)
        try:
            self.store.save(account)
        except IntegrityError:
            raise HandleTaken(
                f"the handle {handle!r} is taken (handles are the same whatever their case)"
            ) from None
        return account

    def _bot(self, handle: str) -> Account:
        """A built-in bot's account (its handle is its strategy's id), registered the first time
        it is asked for: the handles are reserved from the start (``sign_up`` refuses them)."""
        with contextlib.suppress(HandleTaken):  # another process registered it first
            return self._register(handle, True)
        found: Any = self.store.repository.get(account_id(handle))
        assert isinstance(found, Account)
        return found

    # ------------------------------------------------------------------------------ signing
    def sign_in(
        self, handle: str, password: str, scopes: Sequence[str], description: str = ""
    ) -> Issued:
        """A new token for the account, given its password. A wrong handle or password is the
        same 401, in about the same time."""
        check_scopes(scopes)
        description = check_description(description)
        stored = None
        account = None
        with contextlib.suppress(NotFound):
            account = self.account(handle)
        if account is not None and not account.closed and not account.bot:
            stored = self.credentials.password(handle.lower())
        try:
            self.hasher.verify(stored or self._stand_in, password)
            ok = stored is not None
        except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
            ok = False
        if not ok or account is None:
            raise Unauthorized("wrong handle or password")
        return self._issue(handle.lower(), tuple(scopes), description)

    def _issue(self, key: str, scopes: Sequence[str], description: str) -> Issued:
        token_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        created = format_at(datetime.now(UTC))
        row = TokenRow(token_id, key, _digest(secret), tuple(scopes), description, created, False)
        stored, revoked = self.credentials.add_token(row, self.max_tokens)
        for gone in revoked:  # (a token's id is not its secret: the listing shows it)
            log.info(
                "token %s of %s revoked by a sign-in: at most %d live", gone, key, self.max_tokens
            )
        if not stored:  # every slot freed was taken by other sign-ins, again and again
            raise TooManyTokens(
                f"sign-ins to this account raced for its {self.max_tokens} live tokens: retry",
                limit=self.max_tokens,
            )
        return Issued(
            token_id, f"{TOKEN_PREFIX}{token_id}_{secret}", tuple(scopes), created, description
        )

    def authenticate(self, token: str | None, scope: str | None = None) -> Principal:
        """Who the personal token speaks for (401 if unknown, revoked or its account closed;
        403 ``insufficient_scope`` without ``scope``)."""
        match = TOKEN_SHAPE.fullmatch(token or "")
        if match is None:
            raise Unauthorized("unknown token")
        row = self.credentials.token(match.group(1))
        expected = row.digest if row is not None else _digest("")
        if not hmac.compare_digest(expected, _digest(match.group(2))) or row is None:
            raise Unauthorized("unknown token")
        if row.revoked:
            raise Unauthorized("this token was revoked")
        account = self.account(row.account)
        if account.closed:
            raise Unauthorized("this account is closed")
        principal = Principal(account.handle, account.bot, row.scopes, row.id)
        if scope is not None:
            principal.require(scope)
        return principal

    def prune_now_and_then(self) -> int:
        """Forget the tokens revoked more than 30 days ago, at most once an hour per process
        (the scheduler's chore); how many were."""
        now = time.monotonic()
        if now < self._next_prune:
            return 0
        self._next_prune = now + PRUNE_EVERY
        return self.prune()

    def prune(self, now: float | None = None) -> int:
        """Forget the tokens revoked more than ``REVOKED_KEPT`` before ``now`` (those revoked
        before the time was kept: made that long ago, ``created_at`` as ``_issue`` writes it);
        how many were."""
        cut = (time.time() if now is None else now) - REVOKED_KEPT
        return self.credentials.prune(cut, format_at(datetime.fromtimestamp(cut, UTC)))

    def tokens(self, principal: Principal) -> list[TokenRow]:
        return self.credentials.tokens(principal.handle.lower())

    def revoke(self, principal: Principal, token_id: str) -> None:
        if not self.credentials.revoke(principal.handle.lower(), token_id):
            raise NotFound(f"no token {token_id!r} of this account")

    def close(self, principal: Principal) -> None:
        """Close the account: its tokens die, its password hash is erased, its handle is never
        registered again; its games stay as they were recorded."""
        principal.require("account")
        # Two closes at once (two tabs, a client's retry) both find the account open and save
        # its Closed event at the same version: the store takes one, the other's save is an
        # IntegrityError. That one reads the account again and finds it closed; if another
        # event took the version (an operator's exclusion), it closes on top of it, once more.
        for attempt in range(CLOSE_TRIES):
            account = self.account(principal.handle)
            if account.closed:
                break
            account.close()
            try:
                self.store.save(account)
            except IntegrityError:
                if attempt + 1 < CLOSE_TRIES:
                    continue
                if self.account(principal.handle).closed:
                    break
                # Nothing erased: the account is open, its credentials must keep working.
                raise ConcurrentAction(
                    f"{account.handle} changed at the same moment: it is not closed, try again"
                ) from None
            break
        self.credentials.erase(principal.handle.lower())

    # ---------------------------------------------------------------------------- moderation
    def moderate(self, handle: str, *, exclude: bool, reason: str) -> Account:
        """Exclude the account from the ratings (or reinstate it), as an event on it with the
        operator's reason. Two operators racing: the store takes one, the other is refused."""
        reason = check_reason(reason)
        account = self.account(handle)
        if account.excluded == exclude:
            state = "already excluded" if exclude else "not excluded"
            raise ModerationRefused(f"{account.handle} is {state}: nothing recorded")
        if exclude:
            account.exclude(reason)
        else:
            account.reinstate(reason)
        try:
            self.store.save(account)
        except IntegrityError:
            raise ModerationRefused(
                f"{account.handle} changed meanwhile: nothing recorded, try again"
            ) from None
        return account


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not 1 <= len(reason.strip()) <= MAX_REASON:
        raise InvalidRequest(f"a moderation's reason is text of 1 to {MAX_REASON} characters")
    return reason.strip()


def _skeleton(handle: str) -> str:
    return handle.lower().replace("-", "").replace("_", "")


RESERVED_SKELETONS = frozenset(_skeleton(name) for name in RESERVED | BOTS)


def reserved(handle: str) -> bool:
    """Whether ``handle`` reads as the server's or a built-in bot's: a reserved name or a bot's
    handle whatever its case, ``-`` and ``_``, trailing digits and a ``bot`` before or after it
    (``Admin``, ``root_2``, ``expert-bot``, ``Bot_Rule_of_28``, ``ruleof28``)."""
    skeleton = _skeleton(handle)
    bare = skeleton.rstrip("0123456789") or skeleton
    forms = {skeleton, bare}
    for form in (skeleton, bare):
        forms.add(form.removeprefix("bot"))
        forms.add(form.removesuffix("bot"))
        forms.add(form.removeprefix("bot").removesuffix("bot"))
    forms |= {form.rstrip("0123456789") for form in forms}
    return bool(forms & RESERVED_SKELETONS)


def check_password(password: Any) -> str:
    low, high = PASSWORD_LENGTH
    if not isinstance(password, str) or not low <= len(password) <= high:
        raise InvalidRequest(f"a password is {low} to {high} characters")
    return password


def check_scopes(scopes: Iterable[Any]) -> None:
    scopes = list(scopes)
    if not scopes or any(s not in SCOPES for s in scopes) or len(set(scopes)) != len(scopes):
        raise InvalidRequest(f"scopes are one or more of {', '.join(SCOPES)}")


def check_description(description: Any) -> str:
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise InvalidRequest(f"a token's description is text of at most {MAX_DESCRIPTION}")
    return description


__all__ = [
    "Accounts",
    "HandleReserved",
    "HandleTaken",
    "InsufficientScope",
    "ModerationRefused",
    "Principal",
    "is_personal",
]
