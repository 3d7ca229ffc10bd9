"""The client: one object per server and token, typed calls for the whole loop of play.

Every call raises ``ApiError`` when the server refuses (its problem+json, with ``status``,
``code`` and ``detail``) and ``TransportError`` when the server cannot be reached even after
retrying. What is retried, and why it is safe:

- reads (GET), withdrawals (DELETE), actions (``POST …/actions``) and creations (a game, a
  rematch, a sign-up, a challenge, a seek) on a connection error, a 429, 502, 503 or 504, or a
  409 ``idempotency_key_in_use``: each carries an ``Idempotency-Key`` header, the same on every
  attempt of one call, so the server records or creates it at most once and answers a repeat with
  the first answer (even when the first attempt was done but its answer was lost);
- every other POST (join, accept, decline, cancel…) only when it certainly never reached the
  server (the connection could not be made) or was refused by the rate limiter (429 with
  Retry-After): it carries no key, so sending it again after a lost answer could do it twice.

An action also carries ``If-Match`` with the version of the game this client last saw (from
``game``, ``wait_turn``, a creation, a join or the previous action), unless told otherwise: an
action is decided on a position, and is refused (412 ``version_conflict``, nothing recorded) if
the game has moved on, so a retry can never land in a later turn than the one it was decided in.

A 429 without ``Retry-After`` (``too_many_challenges``: a cap, not a window) is not retried.

Attempts are bounded (``attempts``, 5 by default) with exponential back-off and jitter;
``Retry-After`` is honoured up to ``max_wait`` seconds (a longer one is raised to the caller).
"""

from __future__ import annotations

import json
import json as jsonlib
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import httpx

from cantstop_client.errors import ApiError, TransportError, retry_after
from cantstop_client.notices import Notice
from cantstop_client.sse import EventStream, ServerSentEvent
from cantstop_client.types import (
    Accepted,
    AccountGamesPage,
    ActionResult,
    Advice,
    Challenge,
    ChallengeLists,
    Created,
    Event,
    GameState,
    IssuedToken,
    Joined,
    Keys,
    Receipt,
    Seek,
    SignedUp,
    Verdict,
)

__version__ = "0.1.0"

RETRIED_STATUSES = frozenset({429, 502, 503, 504})
# Failures before the request left this machine: safe to repeat whatever the request was.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class Client:
    """A client of one Can't Stop server.

    ``token`` is a personal token (from ``sign_up``/``sign_in``, which also set it) or a seat
    token; it is sent as ``Authorization: Bearer``. Calls that act for a seat take ``token=`` to
    use another one for that call. A client may be shared by threads (``httpx.Client`` is).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        attempts: int = 5,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_wait: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_wait = max_wait
        self.retries = 0  # attempts repeated so far, all calls together (for logs and tests)
        self._retries_lock = threading.Lock()
        self._seen: dict[str, int] = {}  # each game's version as last seen (for If-Match)
        self._http = http or httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"User-Agent": f"cantstop-client/{__version__}"},
        )

    @classmethod
    def from_env(cls, **options: Any) -> Client:
        """``CANTSTOP_URL`` (default http://127.0.0.1:8000) and ``CANTSTOP_TOKEN``."""
        url = os.environ.get("CANTSTOP_URL", "http://127.0.0.1:8000")
        return cls(url, os.environ.get("CANTSTOP_TOKEN") or None, **options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _saw(self, state: Mapping[str, Any]) -> None:
        """Remember the version of a game as this client last saw it (for ``If-Match``)."""
        with self._retries_lock:
            self._seen[str(state["id"])] = int(state["version"])

    def seen_version(self, game_id: str) -> int | None:
        """The version of the game this client last saw, or None."""
        with self._retries_lock:
            return self._seen.get(game_id)

    # ------------------------------------------------------------------ accounts and tokens
    def sign_up(self, handle: str, password: str | None = None, *, bot: bool = False) -> SignedUp:
        """Create an account (``bot=True``: a bot account, no password, its token the only
        credential) and use its personal token (scopes play and account) from now on."""
        body: dict[str, Any] = {"handle": handle}
        if bot:
            body["bot"] = True
        if password is not None:
            body["password"] = password
        answer = cast(SignedUp, self._creating("/v1/accounts", json=body, auth=False))
        self.token = answer["token"]
        return answer

    def sign_in(
        self,
        handle: str,
        password: str,
        *,
        scopes: Sequence[str] = ("play", "account"),
        description: str = "cantstop-client",
    ) -> IssuedToken:
        """A new personal token for the account, used from now on."""
        body = {
            "handle": handle,
            "password": password,
            "scopes": list(scopes),
            "description": description,
        }
        answer = cast(IssuedToken, self._json("POST", "/v1/tokens", json=body, auth=False))
        self.token = answer["token"]
        return answer

    def account(self) -> dict[str, Any]:
        """The account the token speaks for (handle, bot, ratings, scopes)."""
        return self._json("GET", "/v1/account")

    def tokens(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/account/tokens")["tokens"])

    def revoke_token(self, token_id: str) -> None:
        self._call("DELETE", f"/v1/account/tokens/{token_id}")

    def profile(self, handle: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/accounts/{handle}", auth=False)

    def account_games(
        self,
        handle: str,
        *,
        status: str | None = None,
        rated: bool | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AccountGamesPage:
        """One page of an account's games, newest first (``next_cursor`` for the next)."""
        params: dict[str, Any] = {"status": status, "limit": limit, "cursor": cursor}
        if rated is not None:
            params["rated"] = "true" if rated else "false"
        return cast(
            AccountGamesPage,
            self._json("GET", f"/v1/accounts/{handle}/games", params=params, auth=False),
        )

    def all_account_games(self, handle: str, **filters: Any) -> Iterator[dict[str, Any]]:
        """Every game of an account matching the filters, page after page."""
        cursor = None
        while True:
            page = self.account_games(handle, cursor=cursor, **filters)
            yield from page["games"]  # type: ignore[misc]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    # ------------------------------------------------------------------ games
    def bots(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/bots", auth=False)["bots"])

    def seed_commitment(self) -> str:
        """A fresh seed commitment for ``create_game(seed_commitment=…, client_seed=…)``."""
        return str(self._json("POST", "/v1/seed-commitments", auth=False)["seed_commitment"])

    def create_game(
        self,
        players: Sequence[str | Mapping[str, Any]] | None = None,
        *,
        seats: int | None = None,
        rules: Mapping[str, Any] | None = None,
        rated: bool | None = None,
        clock: Mapping[str, int] | None = None,
        dice: str | None = None,
        first_player: int | None = None,
        client_seed: str | None = None,
        seed_commitment: str | None = None,
    ) -> Created:
        """Create a game: ``players`` (names, ``{"account": me}`` for yourself with a personal
        token, ``{"name": "expert", "bot": "expert"}`` for a built-in bot) or ``seats`` (a
        lobby; with a personal token you take seat 0). The answer holds the state and one token
        per named seat, shown only here."""
        body: dict[str, Any] = {}
        if players is not None:
            body["players"] = [p if isinstance(p, str) else dict(p) for p in players]
        optional = {
            "seats": seats,
            "rules": dict(rules) if rules is not None else None,
            "rated": rated,
            "clock": dict(clock) if clock is not None else None,
            "dice": dice,
            "first_player": first_player,
            "client_seed": client_seed,
            "seed_commitment": seed_commitment,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        created = cast(Created, self._creating("/v1/games", json=body))
        self._saw(created["game"])
        return created

    def join(
        self,
        game_id: str,
        name: str | None = None,
        *,
        bot: str | None = None,
        token: str | None = None,
    ) -> Joined:
        """Take the next open lobby seat: as your account (no name, personal token), under a
        name, or for a built-in ``bot`` (with a seated player's token)."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if bot is not None:
            body["bot"] = bot
        path = f"/v1/games/{game_id}/players"
        joined = cast(Joined, self._json("POST", path, json=body, token=token))
        self._saw(joined["game"])
        return joined

    def leave(self, game_id: str, seat: int, *, token: str | None = None) -> None:
        self._call("DELETE", f"/v1/games/{game_id}/players/{seat}", token=token)

    def game(self, game_id: str, *, version: int | None = None) -> GameState:
        """The state (now, or just after event ``version``), with ``legal_actions``."""
        params = {"version": version}
        state = cast(GameState, self._json("GET", f"/v1/games/{game_id}", params=params))
        if version is None:
            self._saw(state)
        return state

    def seat(self, game_id: str, *, token: str | None = None) -> int:
        """The seat the token holds in the game."""
        return int(self._json("GET", f"/v1/games/{game_id}/seat", token=token)["seat"])

    def act(
        self,
        game_id: str,
        action: Mapping[str, Any],
        *,
        token: str | None = None,
        idempotency_key: str | None = None,
        if_match: int | bool | None = True,
    ) -> ActionResult:
        """Send one action body (``{"type": "roll"}``, ``{"type": "move", "sums": [6, 8]}``,
        ``{"type": "stop"}``, ``{"type": "resign"}``, or any entry of ``legal_actions``).

        Every attempt of this call carries the same ``Idempotency-Key`` (a fresh random one
        unless given), so retries never act twice. ``if_match``: refuse (412
        ``version_conflict``) unless the game is still at that version: by default (``True``)
        the version this client last saw of the game (none if it saw none), a version given,
        or ``False``/``None`` for none (the action then applies to whatever position is current
        when it arrives). The answer holds the state after, the events recorded and the signed
        receipt."""
        headers = {"Idempotency-Key": idempotency_key or _new_key()}
        version = self.seen_version(game_id) if if_match is True else if_match
        if version is not None and version is not False:
            headers["If-Match"] = f'"{int(version)}"'
        path = f"/v1/games/{game_id}/actions"
        result = cast(
            ActionResult,
            self._json(
                "POST", path, json=dict(action), headers=headers, token=token, idempotent=True
            ),
        )
        self._saw(result["game"])
        return result

    def roll(
        self,
        game_id: str,
        *,
        dice: Sequence[int] | None = None,
        entropy: str | None = None,
        **options: Any,
    ) -> ActionResult:
        """Roll: server dice (optionally mixing in your ``entropy``, 1 to 64 visible ASCII
        characters), or ``dice`` in a manual-dice game."""
        action: dict[str, Any] = {"type": "roll"}
        if dice is not None:
            action["dice"] = list(dice)
        if entropy is not None:
            action["entropy"] = entropy
        return self.act(game_id, action, **options)

    def move(self, game_id: str, sums: Sequence[int], **options: Any) -> ActionResult:
        return self.act(game_id, {"type": "move", "sums": list(sums)}, **options)

    def stop(self, game_id: str, **options: Any) -> ActionResult:
        return self.act(game_id, {"type": "stop"}, **options)

    def resign(self, game_id: str, **options: Any) -> ActionResult:
        return self.act(game_id, {"type": "resign"}, **options)

    def advice(self, game_id: str, *, version: int | None = None) -> Advice:
        """Bust chances and the expert's suggestion for the player to act."""
        params = {"version": version}
        return cast(Advice, self._json("GET", f"/v1/games/{game_id}/advice", params=params))

    def events(self, game_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        """The history after version ``after``, oldest first, every page."""
        found: list[Event] = []
        cursor: int | None = after
        while cursor is not None:
            params = {"after": cursor, "limit": limit}
            page = self._json("GET", f"/v1/games/{game_id}/events", params=params, auth=False)
            found.extend(page["events"])
            cursor = page["next_after"]
        return found

    def export(self, game_id: str) -> str:
        """The game's export (NDJSON: a header line, then every event): save it as it is."""
        return self._call("GET", f"/v1/games/{game_id}/export", auth=False).text

    def account_export(self, handle: str, *, limit: int | None = None) -> str:
        """The exports of an account's finished games, one after another, in the order they
        finished: every page (``limit`` games each, the server's default if None), each
        ``Link: <…>; rel="next"`` followed to the last page. Save it as it is."""
        path = f"/v1/accounts/{handle}/games/export"
        params: dict[str, Any] = {"limit": limit}
        pages: list[str] = []
        while True:
            response = self._call("GET", path, params=params, auth=False)
            pages.append(response.text)
            link = response.links.get("next")
            if link is None:
                return "".join(pages)
            # The next page's query, asked of the same path (under this client's base URL).
            params = dict(httpx.URL(link["url"]).params)

    def audit(self, game_id: str) -> Verdict:
        """The server's own audit of a stored game (chain, rules, dice, snapshots)."""
        return cast(Verdict, self._json("GET", f"/v1/games/{game_id}/audit", auth=False))

    def keys(self) -> Keys:
        """The public keys that sign receipts: save the answer beside your receipts."""
        return cast(Keys, self._json("GET", "/v1/keys", auth=False))

    def receipt(self, game_id: str) -> Receipt:
        """The signed receipt of the game's current version."""
        return cast(Receipt, self._json("GET", f"/v1/games/{game_id}/receipt", auth=False))

    def rematch(self, game_id: str, *, token: str | None = None) -> Joined:
        joined = cast(Joined, self._creating(f"/v1/games/{game_id}/rematch", token=token))
        self._saw(joined["game"])
        return joined

    # ------------------------------------------------------------------ challenges and seeks
    def challenge(
        self,
        to: str,
        *,
        rules: Mapping[str, Any] | None = None,
        rated: bool | None = None,
        clock: Mapping[str, int] | None = None,
    ) -> Challenge:
        """Challenge an account. A built-in bot (``expert``…) accepts at once: the answer is
        then ``accepted`` with its ``game_id``."""
        body = {"to": to, **_terms(rules, rated, clock)}
        return cast(Challenge, self._creating("/v1/challenges", json=body))

    def challenges(self) -> ChallengeLists:
        """The pending challenges to you (``incoming``) and from you (``outgoing``)."""
        return cast(ChallengeLists, self._json("GET", "/v1/challenges"))

    def get_challenge(self, challenge_id: str) -> Challenge:
        return cast(Challenge, self._json("GET", f"/v1/challenges/{challenge_id}"))

    def accept_challenge(self, challenge_id: str) -> Accepted:
        """Accept a challenge to you: the answer holds the game, both seats bound."""
        path = f"/v1/challenges/{challenge_id}/accept"
        accepted = cast(Accepted, self._json("POST", path))
        self._saw(accepted["game"])
        return accepted

    def decline_challenge(self, challenge_id: str) -> Challenge:
        path = f"/v1/challenges/{challenge_id}/decline"
        return cast(Challenge, self._json("POST", path))

    def cancel_challenge(self, challenge_id: str) -> Challenge:
        path = f"/v1/challenges/{challenge_id}/cancel"
        return cast(Challenge, self._json("POST", path))

    def seek(
        self,
        *,
        players: int = 2,
        rules: Mapping[str, Any] | None = None,
        rated: bool | None = None,
        clock: Mapping[str, int] | None = None,
    ) -> Seek:
        """Ask to be paired with someone of the same pool; the game is announced on the
        account stream (``game_started``)."""
        body = {"players": players, **_terms(rules, rated, clock)}
        return cast(Seek, self._creating("/v1/seeks", json=body))

    def get_seek(self, seek_id: str) -> Seek:
        return cast(Seek, self._json("GET", f"/v1/seeks/{seek_id}"))

    def withdraw_seek(self, seek_id: str) -> None:
        self._call("DELETE", f"/v1/seeks/{seek_id}")

    # ------------------------------------------------------------------ tournaments
    def create_tournament(
        self,
        name: str,
        kind: str,
        *,
        players_per_table: int,
        clock: Mapping[str, int],
        rounds: int | None = None,
        minutes: int | None = None,
        rules: Mapping[str, Any] | None = None,
        rated: bool = False,
        starts_at: str | None = None,
    ) -> dict[str, Any]:
        """A Swiss (``rounds``) or an arena (``minutes``) of this account's; its JSON."""
        body: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "players_per_table": players_per_table,
            "clock": dict(clock),
            "rated": rated,
        }
        optional = {"rounds": rounds, "minutes": minutes, "rules": rules, "starts_at": starts_at}
        body.update({k: v for k, v in optional.items() if v is not None})
        return cast(dict[str, Any], self._creating("/v1/tournaments", json=body)["tournament"])

    def tournaments(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """A page of tournaments, newest first: ``{"tournaments": [...], "next_cursor"}``."""
        params = {"status": status, "limit": limit, "cursor": cursor}
        return self._json("GET", "/v1/tournaments", params=params, auth=False)

    def tournament(self, tournament_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/tournaments/{tournament_id}", auth=False)

    def start_tournament(self, tournament_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/tournaments/{tournament_id}/start")

    def register(self, tournament_id: str) -> dict[str, Any]:
        """Register this account; a repeat is ``ApiError`` ``already_registered``."""
        found = self._json("POST", f"/v1/tournaments/{tournament_id}/players")
        return cast(dict[str, Any], found["tournament"])

    def withdraw(self, tournament_id: str, handle: str) -> None:
        """Withdraw this account (its own handle); idempotent."""
        self._call("DELETE", f"/v1/tournaments/{tournament_id}/players/{handle}")

    def pause(self, tournament_id: str, handle: str) -> None:
        self._call("POST", f"/v1/tournaments/{tournament_id}/players/{handle}/pause")

    def resume(self, tournament_id: str, handle: str) -> None:
        self._call("DELETE", f"/v1/tournaments/{tournament_id}/players/{handle}/pause")

    def standings(self, tournament_id: str) -> list[dict[str, Any]]:
        path = f"/v1/tournaments/{tournament_id}/standings"
        return cast(list[dict[str, Any]], self._json("GET", path, auth=False)["standings"])

    def tournament_export(self, tournament_id: str) -> str:
        """The tournament's events as NDJSON (``cantstop audit`` checks it offline)."""
        return self._call("GET", f"/v1/tournaments/{tournament_id}/export", auth=False).text

    def tournament_stream(
        self, tournament_id: str, *, after: int | None = None, max_failures: int | None = 10
    ) -> EventStream[dict[str, Any]]:
        """A tournament's events as they are recorded (registrations, rounds, results, its
        end); it ends after ``Finished`` (after version ``after`` when given, else from now).
        Of the events the server sends together, the last that may move the standings carries
        them (``standings``), the earlier ones not: read them from the newest event that has
        them, or from ``standings(id)``."""
        return EventStream(
            self._http,
            f"/v1/tournaments/{tournament_id}/stream",
            _record_of,
            headers={},
            last_event_id=None if after is None else str(after),
            max_failures=max_failures,
        )

    # ------------------------------------------------------------------ streams
    def account_stream(
        self,
        *,
        after: int | None = None,
        max_failures: int | None = 10,
        on_open: Callable[[], None] | None = None,
    ) -> EventStream[Notice]:
        """What concerns the account, as it happens: ``for notice in client.account_stream():``.

        Resumes after sequence number ``after`` when given (else from now); reconnects on a drop
        with ``Last-Event-ID`` (nothing lost, nothing twice); keep-alives are skipped.
        ``on_open`` runs at each (re)connection, before the first notice: catch up there.
        ``close()`` it (from any thread) to stop."""
        return EventStream(
            self._http,
            "/v1/account/stream",
            Notice.from_sse,
            headers=self._auth_headers(None),
            last_event_id=None if after is None else str(after),
            max_failures=max_failures,
            on_open=on_open,
        )

    def game_stream(
        self, game_id: str, *, after: int | None = None, max_failures: int | None = 10
    ) -> EventStream[Event]:
        """A game's events as they are recorded (after version ``after``, else from now); it
        ends once the game is finished and everything was sent."""
        return EventStream(
            self._http,
            f"/v1/games/{game_id}/stream",
            _event_of,
            headers={},
            last_event_id=None if after is None else str(after),
            max_failures=max_failures,
        )

    def wait_turn(self, game_id: str, seat: int, *, timeout: float = 300) -> GameState:
        """The state once ``seat`` is to act or the game is finished, waiting on the game's
        stream (no polling): for a client that holds only a seat token. With a personal token,
        the account stream's ``your_turn`` says the same for every game at once."""
        state = self.game(game_id)
        if _settled(state, seat):
            return state
        with self.game_stream(game_id, after=state["version"]) as stream:
            timer = threading.Timer(timeout, stream.close)
            timer.start()
            try:
                for event in stream:
                    if event["type"] in TURN_ENDS:
                        state = self.game(game_id)
                        if _settled(state, seat):
                            return state
            finally:
                timer.cancel()
        state = self.game(game_id)
        if _settled(state, seat):
            return state
        raise TimeoutError(f"seat {seat} of game {game_id} was not to act within {timeout} s")

    # ------------------------------------------------------------------ plumbing
    def _auth_headers(self, token: str | None) -> dict[str, str]:
        chosen = token or self.token
        return {"Authorization": f"Bearer {chosen}"} if chosen else {}

    def _creating(self, path: str, **options: Any) -> dict[str, Any]:
        """A creating POST with one Idempotency-Key on every attempt, retried as actions are."""
        headers = {**options.pop("headers", {}), "Idempotency-Key": _new_key()}
        return self._json("POST", path, headers=headers, idempotent=True, **options)

    def _json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = self._call(method, path, **options)
        value = response.json()
        if not isinstance(value, dict):
            raise ApiError(response.status_code, "unexpected_body", "not a JSON object")
        return value

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        auth: bool = True,
        idempotent: bool | None = None,
    ) -> httpx.Response:
        """One request, retried as the module says; a refusal is ``ApiError``."""
        safe = idempotent if idempotent is not None else method in ("GET", "HEAD", "DELETE")
        sent_headers = dict(headers or {})
        if auth:
            sent_headers.update(self._auth_headers(token))
        query = {k: v for k, v in (params or {}).items() if v is not None}
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    method, path, json=json, params=query, headers=sent_headers
                )
            except httpx.TransportError as exc:
                if attempt >= self.attempts or not (safe or isinstance(exc, NOT_SENT)):
                    raise TransportError(f"{method} {path}: {exc!r}") from exc
                self._pause(self._backoff(attempt))
                continue
            status = response.status_code
            wait = retry_after(response)
            # A 429 is a refusal before any work: safe to repeat, but only when it says when
            # (a rate limit); one without Retry-After (too_many_challenges) is not transient.
            transient = (status in RETRIED_STATUSES and (status != 429 or wait is not None)) or (
                status == 409 and safe and _problem_code(response) == "idempotency_key_in_use"
            )
            allowed = safe or status == 429
            in_time = wait is None or wait <= self.max_wait
            if transient and allowed and in_time and attempt < self.attempts:
                self._pause(self._backoff(attempt) if wait is None else wait)
                continue
            if response.is_error:
                raise ApiError.from_response(response)
            return response

    def _backoff(self, attempt: int) -> float:
        """Exponential, with jitter so that many clients refused together do not return
        together: between half and all of backoff·2^(attempt−1), at most max_backoff."""
        ceiling: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def _pause(self, seconds: float) -> None:
        """Sleep before the next attempt (the one place this package sleeps, with the
        stream's reconnection delay)."""
        with self._retries_lock:
            self.retries += 1
        time.sleep(seconds)


# Events after which someone else may be to act.
TURN_ENDS = frozenset(
    {
        "TurnOrderDecided",
        "TurnStopped",
        "TurnBusted",
        "TurnTimedOut",
        "PlayerResigned",
        "GameFinished",
        "GameAbandoned",
        "SeatJoined",
    }
)


def _new_key() -> str:
    return f"cantstop-client-{uuid.uuid4().hex}"  # 48 characters: enough without credentials


def _problem_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _settled(state: GameState, seat: int) -> bool:
    """Finished, or ``seat`` to act."""
    turn = state["turn"]
    return state["status"] == "finished" or (
        state["status"] == "in_progress" and turn is not None and turn["player"] == seat
    )


def _record_of(message: ServerSentEvent) -> dict[str, Any] | None:
    try:
        value = json.loads(message.data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _event_of(message: ServerSentEvent) -> Event | None:
    try:
        value = jsonlib.loads(message.data)
    except ValueError:
        return None
    return cast(Event, value) if isinstance(value, dict) else None


def _terms(
    rules: Mapping[str, Any] | None, rated: bool | None, clock: Mapping[str, int] | None
) -> dict[str, Any]:
    """The terms of a game a challenge or a seek asks for: only those given (the server's
    defaults stand for the rest)."""
    given = {"rules": rules, "rated": rated, "clock": clock}
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in given.items() if v is not None}
