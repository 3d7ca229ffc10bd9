"""Creating requests with an ``Idempotency-Key``: a retry gets the first answer, created once.

A client whose answer to ``POST /v1/games`` (or a rematch, a challenge, a seek, a webhook, a
sign-up) was lost cannot tell whether it was made; retried without a key, it makes a second one,
whose tokens the first answer held. With a key, the first request claims it in the store
(service/persistence/creations.py) before creating; a retry on any host with the same key, the
same credentials and the same request gets that first answer again (``Idempotent-Replayed:
true``) and creates nothing; with another request, 422 ``idempotency_key_reused``; while the
first is still being answered, 409 ``idempotency_key_in_use`` with ``Retry-After``. A refused or
failed request gives its key back: it created nothing, and a retry is judged afresh.

The answer holds new secrets (seat and personal tokens, a webhook's signing secret), so it is
stored sealed with a key derived from the Idempotency-Key, which the store never holds: the row
is found by a digest of the credentials sent and the key. Without credentials the key is the
only thing that tells one caller from another, so it must then be at least
``MIN_ANONYMOUS_KEY`` characters (a random UUID is 36).

The digest ties the row to the credentials *sent*, not to their being still good: a token
revoked, or an account closed, after the first request would otherwise get its answer (and the
secrets in it) again for as long as the key is kept. So whenever the key is found, the caller is
judged first, as the endpoint judges a fresh request (``_judge_caller``): a revoked or unknown
personal token, or a closed account's, is the same 401, before any answer about the key.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

import nacl.exceptions
import nacl.secret
from flask import Response

from service.application.errors import ApplicationError, IdempotencyKeyReused
from service.application.games.use_cases import parse_game_id
from service.application.players.accounts import is_personal
from service.http.core import (
    IDEMPOTENCY_KEY,
    BadRequest,
    bearer_token,
    has_body,
    json_bytes,
    runtime,
    this_request,
)

MIN_ANONYMOUS_KEY = 16
KEPT_HEADERS = ("Location", "ETag", "Content-Type")
PRUNE_ONE_IN = 256  # requests with a key that also prune expired rows

F = TypeVar("F", bound=Callable[..., Response])


class KeyInUse(ApplicationError):
    code = "idempotency_key_in_use"
    retry_after = 1


def creates(view: F) -> F:
    """Make a creating view answer a repeated ``Idempotency-Key`` with its first answer."""
    return _keyed(view, needs_credentials=False)


def creates_signed_in(view: F) -> F:
    """``creates`` for a view that needs credentials: without any, the view refuses it (401)
    before the key is looked at, as every refusal of the token comes first."""
    return _keyed(view, needs_credentials=True)


def _keyed(view: F, *, needs_credentials: bool) -> F:
    @wraps(view)
    def keyed(*args: Any, **kwargs: Any) -> Response:
        req = this_request()
        key = req.headers.get("Idempotency-Key")
        credentials = req.headers.get("Authorization", "")
        if key is None or (needs_credentials and not credentials):
            return view(*args, **kwargs)
        if not IDEMPOTENCY_KEY.match(key):
            raise BadRequest("Idempotency-Key must be 1 to 200 visible ASCII characters")
        if not credentials and len(key) < MIN_ANONYMOUS_KEY:
            raise BadRequest(
                f"without credentials, an Idempotency-Key must be at least {MIN_ANONYMOUS_KEY} "
                "characters (a random UUID): it alone tells your retries from others' requests"
            )
        id_ = _digest(b"creation", credentials.encode(), key.encode())
        body = json_bytes(req) if has_body(req) else b""
        fingerprint = _digest(b"request", req.path.encode(), body)
        creations = runtime().creations
        if creations is None:  # a store without tables of its own (tests' in-memory store)
            return view(*args, **kwargs)
        now = time.time()
        if random.randrange(PRUNE_ONE_IN) == 0:
            creations.prune(now)
        found = creations.claim(id_, fingerprint, now)
        if found is not None:
            # The view judges the credentials of a request that runs; one answered from the
            # key's row must be judged here, first (a dead token learns nothing of the key).
            _judge_caller(bearer_token(req.environ), kwargs)
            if found.fingerprint != fingerprint:
                raise IdempotencyKeyReused("this Idempotency-Key was used for another request")
            if found.answer is None:
                raise KeyInUse("a request with this Idempotency-Key is being answered; retry")
            return _replayed(_open(key, found.answer))
        try:
            response = view(*args, **kwargs)
        except BaseException:
            creations.release(id_, now)
            raise
        if 200 <= response.status_code < 300:
            creations.complete(id_, now, _seal(key, response))
        else:
            creations.release(id_, now)
        return response

    return cast(F, keyed)


def _judge_caller(token: str | None, kwargs: dict[str, Any]) -> None:
    """Refuse (401) credentials that the endpoint would refuse now, although they were good
    when the key's first request was answered: a personal token that was revoked, or whose
    account was closed (Accounts.authenticate: one row read, as every request it signs
    costs); a seat token that no longer holds a seat of the path's game (Seats.authenticate,
    from the game's vault as this worker keeps it), or whose seat is a closed account's (its
    seat tokens died with it, as ``Lobby.rematch`` judges them: one read of the account, and
    only for an account's seat). Scopes are not judged again: a token's scopes never change,
    and the first request had them. Without a token (an anonymous creation) there is nothing
    to judge: the key alone tells the caller, and a seat token sent where no game is named
    (``POST /v1/games``) is no credential of that endpoint either. (Actions are not keyed
    here: ``POST /v1/games/{id}/actions`` judges its token before its Idempotency-Key.)"""
    if token is None:
        return
    rt = runtime()
    if is_personal(token):
        rt.accounts.authenticate(token)
        return
    game_id = kwargs.get("game_id")
    if not isinstance(game_id, str):
        return
    gid = parse_game_id(game_id)
    seats = rt.games.seats
    seat = seats.authenticate(gid, token)
    with rt.games.store.owned(gid) as game:
        handle = game.accounts[seat]
    seats.refuse_closed(handle)


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _box(key: str) -> nacl.secret.SecretBox:
    secret = hashlib.blake2b(key.encode(), digest_size=32, person=b"cantstop-answer").digest()
    return nacl.secret.SecretBox(secret)


def _seal(key: str, response: Response) -> bytes:
    kept = {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers}
    answer = {
        "status": response.status_code,
        "headers": kept,
        "body": response.get_data(as_text=True),
    }
    return bytes(_box(key).encrypt(json.dumps(answer).encode()))


def _open(key: str, sealed: bytes) -> dict[str, Any]:
    try:
        opened: dict[str, Any] = json.loads(_box(key).decrypt(sealed))
    except nacl.exceptions.CryptoError as exc:  # found by this key's digest: cannot happen
        raise IdempotencyKeyReused("this Idempotency-Key was used for another request") from exc
    return opened


def _replayed(answer: dict[str, Any]) -> Response:
    headers = {**answer["headers"], "Idempotent-Replayed": "true"}
    return Response(answer["body"], status=answer["status"], headers=headers)
