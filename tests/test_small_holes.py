"""The smaller holes of #41, each shut and kept shut: closing an account gives up every seat
whatever its token's scopes and its seat tokens stop playing; only live challenges count, and
caps hold with requests racing on two hosts; expired challenges and seeks are announced once;
the offline receipt check derives key ids; reserved handles; built-in bots told apart; one
answer for every refused webhook host."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cantstop_client.verify import signature_problem
from flask import Flask
from flask.testing import FlaskClient

from domain.errors import InvalidRequest
from domain.game import parse_at
from service.application.matchmaking import challenges as challenges_module
from service.application.matchmaking import seeks as seeks_module
from service.application.matchmaking.challenges import MAX_PENDING_OUT, TooManyChallenges
from service.application.matchmaking.seeks import MAX_OPEN, TooManySeeks
from service.application.notify.webhooks import system_resolver
from service.application.players.accounts import Principal
from service.config import Settings
from service.http.app import create_app
from service.runtime import Runtime
from tests.support.http import bearer
from tests.support.polling import poll
from tests.support.racing import race
from tests.support.servers import run_scheduler

Json = dict[str, Any]
PASSWORD = "correct horse battery"
PUBLIC_ADDRESS = "93.184.215.14"  # a public address (never connected to here)


def runtime_of(app: Flask) -> Runtime:
    rt: Runtime = app.extensions["cantstop"]
    return rt


def sign_up(client: FlaskClient, handle: str, *, bot: bool = False) -> str:
    body: Json = {"handle": handle, **({"bot": True} if bot else {"password": PASSWORD})}
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.get_json()
    token: str = response.get_json()["token"]
    return token


# ------------------------------------------------------------------------ reserved handles
@pytest.mark.parametrize(
    "handle",
    [
        *("admin", "ADMIN", "Admin_2", "root", "System", "moderator", "support", "cantstop"),
        *("Cant_Stop", "expert-bot", "Expert_Bot", "expertbot", "bot-expert", "expert2"),
        *("RuleOf28", "random_bot"),
    ],
)
def test_a_reserved_handle_or_a_variant_of_one_cannot_be_registered(
    client: FlaskClient, handle: str
) -> None:
    refused = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert (refused.status_code, refused.get_json()["code"]) == (422, "handle_reserved")
    assert refused.mimetype == "application/problem+json"
    # Nothing was recorded: the handle is no account, and a bot account is refused the same.
    assert client.get(f"/v1/accounts/{handle}").status_code == 404
    as_bot = client.post("/v1/accounts", json={"handle": handle, "bot": True})
    assert as_bot.get_json()["code"] == "handle_reserved"


def test_handles_near_a_reserved_one_are_free(client: FlaskClient) -> None:
    for handle in ("botany", "modest", "experts-club", "Randall", "rooted"):
        sign_up(client, handle)
    # A built-in bot's own handle is taken (by the bot), as before.
    taken = client.post("/v1/accounts", json={"handle": "Expert", "password": PASSWORD})
    assert (taken.status_code, taken.get_json()["code"]) == (409, "handle_taken")


# ------------------------------------------------------------------- built-in bots told apart
def test_a_profile_tells_a_built_in_bot_from_a_registered_bot_account(client: FlaskClient) -> None:
    token = sign_up(client, "robo", bot=True)
    registered = client.get("/v1/accounts/robo").get_json()
    builtin = client.get("/v1/accounts/expert").get_json()
    assert (registered["bot"], registered["builtin"]) == (True, False)
    assert (builtin["bot"], builtin["builtin"]) == (True, True)
    mine = client.get("/v1/account", headers=bearer(token)).get_json()
    assert (mine["bot"], mine["builtin"]) == (True, False)
    sign_up(client, "ann")
    person = client.get("/v1/accounts/ann").get_json()
    assert (person["bot"], person["builtin"]) == (False, False)
    # The profile pages say it in words.
    assert "The server's own computer player" in client.get("/players/expert").text
    page = client.get("/players/robo").text
    assert "A registered bot account" in page and "server's own" not in page


# ------------------------------------------------------------------ refused webhook hosts
@pytest.fixture
def public_client(client: FlaskClient, tmp_path: Path) -> Any:
    """A server without CANTSTOP_WEBHOOK_ALLOW_PRIVATE, checked against openapi.yaml."""
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'public.sqlite'}"), create_tables=True
    )
    app.test_client_class = type(client)
    checked = app.test_client()
    checked.spec = client.spec  # type: ignore[attr-defined]
    yield checked
    runtime_of(app).close()


def test_an_internal_name_and_a_name_that_does_not_resolve_get_one_answer(
    public_client: FlaskClient,
) -> None:
    token = sign_up(public_client, "ann")
    rt = runtime_of(public_client.application)
    table = {"db.internal": ["10.0.0.5"], "intranet.corp": ["192.168.1.20"]}

    def resolver(host: str, port: int) -> list[str]:
        if host in table:
            return table[host]
        return system_resolver(host, port)  # the real resolver: *.invalid never resolves

    rt.webhooks.resolver = resolver
    answers = []
    for host in ("db.internal", "nowhere.invalid", "intranet.corp", "absent.invalid"):
        reply = public_client.post(
            "/v1/account/webhooks",
            json={"url": f"https://{host}/hook", "events": ["your_turn"]},
            headers=bearer(token),
        )
        body = reply.get_json()
        answers.append((reply.status_code, body["code"], body["title"], body["detail"]))
    assert len(set(answers)) == 1, answers
    assert answers[0][:2] == (422, "webhook_url_not_public")
    assert public_client.get("/v1/account/webhooks", headers=bearer(token)).get_json() == {
        "webhooks": []
    }


# ------------------------------------------------------------------ receipts' key ids
def test_a_keys_file_that_misnames_a_key_fails_the_receipt_check(
    client: FlaskClient, tmp_path: Path
) -> None:
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    game_id = created["game"]["id"]
    state = created["game"]
    token = created["seats"][state["turn"]["player"]]["token"]
    answer = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(token)
    ).get_json()
    receipt, keys = answer["receipt"], client.get("/v1/keys").get_json()
    export = client.get(f"/v1/games/{game_id}/export").get_data()
    assert signature_problem(receipt, keys) is None
    # The same key under another id, and the receipt naming that id: the signature still
    # verifies, but the id is not the key's, so the check fails offline and in the CLI.
    forged_id = "ed25519-" + "0" * 16
    renamed = {"keys": [dict(k, key_id=forged_id) for k in keys["keys"]]}
    claimed = dict(receipt, key_id=forged_id)
    problem = signature_problem(claimed, renamed)
    assert problem is not None and receipt["key_id"] in problem
    (tmp_path / "game.ndjson").write_bytes(export)
    for name, (the_receipt, the_keys, ok) in {
        "honest": (receipt, keys, True),
        "renamed": (claimed, renamed, False),
        "renamed-other": (receipt, {"keys": [*keys["keys"], *renamed["keys"]]}, False),
    }.items():
        (tmp_path / f"{name}-receipt.json").write_text(json.dumps(the_receipt))
        (tmp_path / f"{name}-keys.json").write_text(json.dumps(the_keys))
        done = subprocess.run(
            [
                *(sys.executable, "-m", "service.cli", "audit"),
                *("--receipt", str(tmp_path / f"{name}-receipt.json")),
                *("--keys", str(tmp_path / f"{name}-keys.json")),
                str(tmp_path / "game.ndjson"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.stdout, done.stderr
        check = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "receipt")
        assert (done.returncode == 0, check["ok"]) == (ok, ok), (name, check)
        if not ok:
            assert "whose id is" in check["detail"]


# ------------------------------------------------------------------------ closing an account
def test_closing_with_an_account_only_token_gives_up_every_seat_and_kills_seat_tokens(
    client: FlaskClient,
) -> None:
    ann, bob, cy = sign_up(client, "ann"), sign_up(client, "bob"), sign_up(client, "cy")
    account_only = client.post(
        "/v1/tokens", json={"handle": "ann", "password": PASSWORD, "scopes": ["account"]}
    ).get_json()["token"]

    def create(body: Json, *others: str) -> Json:
        """A game ann creates, the others join (each seat's token in ``tokens``)."""
        created: Json = client.post("/v1/games", json=body, headers=bearer(ann)).get_json()
        created["tokens"] = [created["seats"][0]["token"]]
        for token in others:
            joined = client.post(
                f"/v1/games/{created['game']['id']}/players", json={}, headers=bearer(token)
            )
            assert joined.status_code == 201, joined.get_json()
            created["tokens"].append(joined.get_json()["token"])
        return created

    lobby = create({"seats": 3}, bob)  # waiting: ann's seat is given back
    duel = create({"seats": 2}, bob)  # under way: resigned, the game ends
    trio = create({"seats": 3}, bob, cy)  # under way: resigned, the others play on
    rated = create({"seats": 2, "rated": True, "clock": {"turn_seconds": 60}}, bob)
    finished = create({"seats": 2}, bob)
    client.post(
        f"/v1/games/{finished['game']['id']}/actions",
        json={"type": "resign"},
        headers=bearer(bob),
    )
    assert client.delete("/v1/account", headers=bearer(account_only)).status_code == 204

    def game(created: Json) -> Json:
        body: Json = client.get(f"/v1/games/{created['game']['id']}").get_json()
        return body

    def seat_token(created: Json) -> str:
        token: str = created["tokens"][0]
        return token

    waiting = game(lobby)
    assert waiting["status"] == "waiting"
    assert waiting["players"][0]["name"] is None and waiting["players"][0]["account"] is None
    left = client.delete(
        f"/v1/games/{lobby['game']['id']}/players/0", headers=bearer(seat_token(lobby))
    )
    assert left.status_code in (401, 409)  # the seat is no longer the token's
    for created in (duel, rated):
        assert game(created)["status"] == "finished", game(created)
    on = game(trio)
    assert on["status"] == "in_progress" and on["players"][0]["resigned"] is True
    for created in (duel, trio, rated):
        before = game(created)["version"]
        refused = client.post(
            f"/v1/games/{created['game']['id']}/actions",
            json={"type": "roll"},
            headers=bearer(seat_token(created)),
        )
        assert refused.status_code in (401, 403, 409), refused.get_json()
        assert game(created)["version"] == before  # nothing recorded
    rematch = client.post(
        f"/v1/games/{finished['game']['id']}/rematch", headers=bearer(seat_token(finished))
    )
    assert rematch.status_code == 401, rematch.get_json()
    # Bob's seat of the same game still claims the rematch.
    claimed = client.post(
        f"/v1/games/{finished['game']['id']}/rematch", headers=bearer(finished["tokens"][1])
    )
    assert claimed.status_code in (200, 201), claimed.get_json()
    assert client.get("/v1/accounts/ann").get_json()["closed"] is True
    assert client.get("/v1/account", headers=bearer(ann)).status_code == 401


# ------------------------------------------------------- caps, expiry and its announcement
@pytest.fixture
def two_hosts(database_url: str) -> Any:
    """Two applications on one store, as two hosts are."""
    one = create_app(Settings(database_url=database_url), create_tables=True)
    two = create_app(Settings(database_url=database_url))
    yield runtime_of(one), runtime_of(two), one.test_client()
    runtime_of(one).close()
    runtime_of(two).close()


def principal(rt: Runtime, token: str) -> Principal:
    return rt.accounts.authenticate(token)


def notices_of(rt: Runtime, handle: str, kind: str) -> list[Json]:
    rt.views.catch_up(rt.notices_view)
    return [n.data for n in rt.notices.after(handle, 0, 1000) if n.type == kind]


def test_racing_challenges_on_two_hosts_leave_exactly_the_cap_pending(two_hosts: Any) -> None:
    one, two, client = two_hosts
    ann = sign_up(client, "ann")
    targets = ["foe0", "foe1", "foe2"]
    for handle in targets:
        sign_up(client, handle, bot=True)
    me = principal(one, ann)
    hosts = [one, two] * 18
    calls = [
        partial(rt.challenges.issue, me, targets[i % 3], None, False, None)
        for i, rt in enumerate(hosts)
    ]
    results = race(calls)
    issued = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, TooManyChallenges)]
    assert (len(issued), len(refused)) == (MAX_PENDING_OUT, 36 - MAX_PENDING_OUT), results
    listing = client.get("/v1/challenges", headers=bearer(ann)).get_json()
    assert len(listing["outgoing"]) == MAX_PENDING_OUT
    # Answered ones give their slots back: one cancelled, one more goes through.
    client.post(f"/v1/challenges/{issued[0]['id']}/cancel", headers=bearer(ann))
    assert isinstance(one.challenges.issue(me, targets[0], None, False, None), dict)
    with pytest.raises(TooManyChallenges):
        two.challenges.issue(me, targets[1], None, False, None)


def test_racing_identical_seeks_on_two_hosts_make_one_seek(two_hosts: Any) -> None:
    one, two, client = two_hosts
    ann = sign_up(client, "ann")
    me = principal(one, ann)
    same = [partial(rt.seeks.place, me, None, 3, False, None) for rt in [one, two] * 4]
    results = race(same)
    placed = [r for r in results if isinstance(r, dict)]
    assert len(placed) == 1, results
    assert all(isinstance(r, InvalidRequest) for r in results if not isinstance(r, dict))
    # Twelve different kinds of game at once: the cap of open seeks holds too.
    kinds = [
        partial(rt.seeks.place, me, None, 3, False, {"turn_seconds": 30 + n})
        for n, rt in enumerate([one, two] * 6)
    ]
    results = race(kinds)
    placed += [r for r in results if isinstance(r, dict)]
    assert len(placed) == MAX_OPEN, results
    assert sum(isinstance(r, TooManySeeks) for r in results) == 12 - (MAX_OPEN - 1)
    open_ = [
        s
        for s in placed
        if client.get(f"/v1/seeks/{s['id']}", headers=bearer(ann)).get_json()["status"] == "open"
    ]
    assert len(open_) == MAX_OPEN


def test_expired_challenges_stop_counting_and_are_announced_once(
    two_hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two, client = two_hosts
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    sign_up(client, "cy")
    one.webhooks.resolver = lambda host, port: [PUBLIC_ADDRESS]
    hook = one.webhooks.create("ann", "https://hooks.example/in", ["challenge_expired"])
    monkeypatch.setattr(challenges_module, "TTL", timedelta(seconds=1))
    me = principal(one, ann)
    issued = [
        one.challenges.issue(me, "bob" if i % 2 else "cy", None, False, None)
        for i in range(MAX_PENDING_OUT)
    ]
    with pytest.raises(TooManyChallenges):
        one.challenges.issue(me, "bob", None, False, None)
    # Once their time is up they count no more, recorded or not.
    monkeypatch.setattr(challenges_module, "TTL", timedelta(minutes=10))
    last = parse_at(issued[-1]["expires_at"])
    poll(lambda: datetime.now(UTC) > last, 5)
    live = one.challenges.issue(me, "bob", None, False, None)
    assert client.get("/v1/challenges", headers=bearer(ann)).get_json()["outgoing"] == [live]
    # Two schedulers record the expiries at the same moment: each once.
    for rt in (one, two):
        rt.views.catch_up(rt.challenges.pending)
    counts = race([one.challenges.expire_due, two.challenges.expire_due])
    assert sum(counts) == MAX_PENDING_OUT, counts
    assert one.challenges.expire_due() == two.challenges.expire_due() == 0
    mine = notices_of(one, "ann", "challenge_expired")
    assert len(mine) == MAX_PENDING_OUT
    assert {n["challenge"]["status"] for n in mine} == {"expired"}
    assert len({n["challenge"]["id"] for n in mine}) == MAX_PENDING_OUT
    assert len(notices_of(one, "bob", "challenge_expired")) == MAX_PENDING_OUT // 2
    assert len(notices_of(one, "cy", "challenge_expired")) == MAX_PENDING_OUT // 2
    queued = one.webhooks.deliveries("ann", hook.webhook.id, 100)
    assert len(queued) == MAX_PENDING_OUT  # one delivery per notice
    # An expired challenge cannot be accepted, and stays expired.
    old = next(n["challenge"]["id"] for n in mine if n["challenge"]["to"] == "bob")
    late = client.post(f"/v1/challenges/{old}/accept", headers=bearer(bob))
    assert (late.status_code, late.get_json()["code"]) == (409, "challenge_not_pending")
    assert client.get(f"/v1/challenges/{old}", headers=bearer(ann)).get_json()["status"] == (
        "expired"
    )


def test_an_expired_seek_is_announced_once(two_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two, client = two_hosts
    ann = sign_up(client, "ann")
    monkeypatch.setattr(seeks_module, "TTL", timedelta(seconds=0.5))
    seek = one.seeks.place(principal(one, ann), None, 3, False, None)
    poll(
        lambda: (
            one.seeks.get(principal(one, ann), uuid.UUID(seek["id"])).status_at(datetime.now(UTC))
            == "expired"
        ),
        5,
    )
    for rt in (one, two):
        rt.views.catch_up(rt.seeks.pool)
    assert sorted(race([one.seeks.expire_due, two.seeks.expire_due])) == [0, 1]
    notices = notices_of(one, "ann", "seek_expired")
    assert len(notices) == 1 and notices[0]["seek"]["id"] == seek["id"]
    assert notices[0]["seek"]["status"] == "expired"
    # Its slot is free again: the same seek can be placed anew.
    monkeypatch.setattr(seeks_module, "TTL", timedelta(minutes=10))
    assert one.seeks.place(principal(one, ann), None, 3, False, None)["status"] == "open"


def test_the_schedulers_loop_announces_an_expired_challenge(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    monkeypatch.setattr(challenges_module, "TTL", timedelta(seconds=0.5))
    sent = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann)).get_json()
    halt = run_scheduler(app)
    try:
        rt = runtime_of(app)
        found = poll(lambda: notices_of(rt, "bob", "challenge_expired"), 10)
    finally:
        halt()
    assert [n["challenge"]["id"] for n in found] == [sent["id"]]
    assert client.get("/v1/challenges", headers=bearer(bob)).get_json()["incoming"] == []


def test_closing_while_a_seek_is_paired_on_another_host_leaves_no_seat_playing(
    two_hosts: Any,
) -> None:
    """Ann closes on one host as Bob's seek, on the other, pairs with hers: either no game is
    made, or the game made has Ann's seat resigned."""
    one, two, client = two_hosts
    for round_ in range(3):
        ann, bob = sign_up(client, f"ann{round_}"), sign_up(client, f"bob{round_}")
        one.seeks.place(principal(one, ann), None, 2, False, None)
        bob_seek = partial(two.seeks.place, principal(two, bob), None, 2, False, None)
        results = race([partial(one.closing.close, principal(one, ann)), bob_seek])
        assert not any(isinstance(r, Exception) for r in results), results
        games = client.get(f"/v1/accounts/ann{round_}/games").get_json()["games"]
        for entry in games:
            game = client.get(f"/v1/games/{entry['game_id']}").get_json()
            seat = entry["seat"]
            assert game["status"] == "finished" or game["players"][seat]["resigned"], game
