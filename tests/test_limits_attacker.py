"""Rate limits an attacker could turn against others (CANTSTOP_RATE_LIMITS).

A count that anyone may spend in another's name is a way to lock that other out: challenges
are counted only once the caller is signed in; sign-in attempts per address, per handle from
each address, and per handle from addresses not known for it (none signed in as it from there
lately), so guesses never refuse the right password from an address its owner signed in from,
and guesses spread over many addresses are capped per account all the same.
And what works through a whole history (an account's bulk export too) is limited, per
address; a profile's rating history is the newest ``RATING_HISTORY_LIMIT`` entries.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.players import standings
from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.racing import race_cleanly
from tests.support.rated import finished_rated_game

Json = dict[str, Any]
PASSWORD = "correct horse battery"
SIGN_INS_A_MINUTE = 10  # service.config's defaults, on whatever CANTSTOP_RATE_LIMITS says
CHALLENGES_A_MINUTE = 20
AUDITS_A_MINUTE = 120


def at(address: str) -> dict[str, Any]:
    """A request's keyword arguments that make it come from ``address``."""
    return {"environ_base": {"REMOTE_ADDR": address}}


def sign_up(client: FlaskClient, handle: str, address: str, *, bot: bool = False) -> str:
    body: Json = {"handle": handle, **({"bot": True} if bot else {"password": PASSWORD})}
    reply = client.post("/v1/accounts", json=body, **at(address))
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


# ------------------------------------------------------------------------------ challenges
def test_challenges_without_a_valid_token_spend_nothing_of_the_challenged_accounts_count(
    client: FlaskClient,
) -> None:
    """The attack: 20 challenges a minute to bob with no token (or a bogus one, or a seat's)
    are each 401, and must not leave ann's real challenge to bob a 429."""
    ann = sign_up(client, "ann", "10.1.0.1")
    sign_up(client, "bob", "10.1.0.2")
    seat = client.post("/v1/games", json={"players": ["a", "b"]}).get_json()["seats"][0]["token"]
    not_signed_in: list[dict[str, str]] = [{}, bearer("cs_0123456789abcdef_nope"), bearer(seat)]
    for i in range(CHALLENGES_A_MINUTE):
        for headers in not_signed_in:
            reply = client.post(
                "/v1/challenges", json={"to": "bob"}, headers=headers, **at(f"10.2.0.{i + 1}")
            )
            assert reply.status_code == 401, reply.get_json()
            assert "X-RateLimit-Limit" not in reply.headers  # counted nowhere
    made = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann))
    assert made.status_code == 201, made.get_json()
    assert made.headers["X-RateLimit-Limit"] == str(CHALLENGES_A_MINUTE)


def test_a_challenger_is_counted_first_and_past_its_count_spends_no_one_elses(
    limited: Any,
) -> None:
    """``challenge`` counts each signed-in challenger, then the challenged account: a
    challenger refused by its own count leaves the challenged account's count as it was."""
    client = limited("challenge=3/minute").test_client()
    handles = ("ann", "bob", "cy", "dan", "eve")
    tokens = {h: sign_up(client, h, f"10.3.0.{n}") for n, h in enumerate(handles)}

    def challenge(by: str, to: str) -> int:
        reply = client.post("/v1/challenges", json={"to": to}, headers=bearer(tokens[by]))
        status: int = reply.status_code
        return status

    assert [challenge("ann", to) for to in ("bob", "cy", "dan")] == [201, 201, 201]
    assert challenge("ann", "eve") == 429  # ann's own count: 3 a minute, to anyone
    # eve's count is whole: three others may challenge her, a fourth is one too many.
    assert [challenge(by, "eve") for by in ("bob", "cy", "dan")] == [201, 201, 201]
    assert challenge("cy", "bob") == 201  # (cy's count: 2 of 3)
    assert challenge("cy", "eve") == 429  # eve's count: the flood of challenges to her


def test_challenges_to_one_account_stay_capped_when_senders_race(limited: Any) -> None:
    app = limited("challenge=5/minute")
    client = app.test_client()
    senders = [sign_up(client, f"racer{i}", f"10.4.0.{i + 1}", bot=True) for i in range(12)]
    sign_up(client, "target", "10.4.1.1")
    # An unauthenticated flood in the same moment spends nothing of target's count.
    senders += [f"cs_0123456789abcdef_bogus{i}" for i in range(6)]

    def challenge(token: str) -> int:
        reply = app.test_client().post(
            "/v1/challenges", json={"to": "target"}, headers=bearer(token)
        )
        status: int = reply.status_code
        return status

    statuses = race_cleanly([partial(challenge, t) for t in senders], timeout=60)
    assert sorted(statuses) == [201] * 5 + [401] * 6 + [429] * 7, statuses


# -------------------------------------------------------------------------------- sign-in
def test_wrong_passwords_from_strangers_never_refuse_the_right_one_from_a_known_address(
    app: Flask,
) -> None:
    """The attack: guesses naming ann, from an address of the attacker's, must not stop ann
    signing in from an address she signed in from (or signed up from). The guesses stay capped
    (10 a minute from that address), racing or not, and so do all strangers' together: while
    they fill the count, ann from an address never seen for her waits as they do."""
    client = app.test_client()
    sign_up(client, "ann", "10.5.0.1")
    attacker = "10.66.0.1"

    def guess(n: int) -> int:
        reply = app.test_client().post(
            "/v1/tokens", json={"handle": "ann", "password": f"a wrong guess {n}"}, **at(attacker)
        )
        status: int = reply.status_code
        return status

    statuses = race_cleanly([partial(guess, n) for n in range(SIGN_INS_A_MINUTE + 4)])
    # (ann's sign-up, from an address new to the handle then, was counted among strangers too)
    assert sorted(statuses) == [401] * (SIGN_INS_A_MINUTE - 1) + [429] * 5, statuses
    # The attacker's address is held, whatever it sends: the right password, another handle.
    right = {"handle": "ann", "password": PASSWORD}
    assert client.post("/v1/tokens", json=right, **at(attacker)).status_code == 429
    other = client.post("/v1/tokens", json={"handle": "bob", "password": "x" * 12}, **at(attacker))
    assert other.status_code == 429
    # ann, from her sign-up's address, signs in, again and again; from a stranger's, she waits.
    for _ in range(3):
        signed_in = client.post("/v1/tokens", json=right, **at("10.5.0.1"))
        assert signed_in.status_code == 201, signed_in.get_json()
    assert client.post("/v1/tokens", json=right, **at("10.5.0.2")).status_code == 429


def test_guesses_spread_over_many_addresses_are_capped_per_account(app: Flask) -> None:
    """Guesses at one account's password from many addresses (none known for it) are capped
    together, 10 a minute, not 10 a minute from each; its owner signs in from an address she
    signed in from, and a sign-in there makes it known (the next works during the attack)."""
    client = app.test_client()
    sign_up(client, "ann", "10.6.0.1")
    right = {"handle": "ann", "password": PASSWORD}
    assert client.post("/v1/tokens", json=right, **at("10.6.0.9")).status_code == 201
    statuses = [
        client.post(
            "/v1/tokens", json={"handle": "ANN", "password": f"guess {i}"}, **at(f"10.67.0.{i}")
        ).status_code
        for i in range(1, 3 * SIGN_INS_A_MINUTE)
    ]
    # (its sign-up and that first sign-in, from addresses new to ann, were counted with them)
    assert statuses == [401] * (SIGN_INS_A_MINUTE - 2) + [429] * (2 * SIGN_INS_A_MINUTE + 1), (
        statuses
    )
    for address in ("10.6.0.1", "10.6.0.9"):
        signed_in = client.post("/v1/tokens", json=right, **at(address))
        assert signed_in.status_code == 201, signed_in.get_json()
    # another handle's count is its own
    sign_up(client, "bob", "10.6.0.2")
    guess = client.post(
        "/v1/tokens", json={"handle": "bob", "password": "x" * 12}, **at("10.67.1.1")
    )
    assert guess.status_code == 401


# ------------------------------------------------------------------------ whole histories
def test_an_accounts_bulk_export_counts_against_audit_as_a_games_export_does(app: Flask) -> None:
    client = app.test_client()  # (plain: the checked client reads no streamed NDJSON answer)
    sign_up(client, "ann", "10.7.0.1")
    game_id = client.post("/v1/games", json={"players": ["a", "b"]}).get_json()["game"]["id"]
    statuses = [
        client.get("/v1/accounts/ann/games/export").status_code for _ in range(AUDITS_A_MINUTE)
    ]
    assert statuses == [200] * AUDITS_A_MINUTE
    refused = client.get("/v1/accounts/ann/games/export")  # the 121st in the minute
    assert refused.status_code == 429 and refused.get_json()["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["X-RateLimit-Limit"] == str(AUDITS_A_MINUTE)
    # One count with the games' exports, per address.
    assert client.get(f"/v1/games/{game_id}/export").status_code == 429
    elsewhere = client.get("/v1/accounts/ann/games/export", **at("10.7.0.9"))
    assert elsewhere.status_code == 200


def test_an_accounts_bulk_export_counts_each_game_it_exports(limited: Any) -> None:
    """A page of the bulk export counts a game's export each against ``audit``, as each game's
    own export would be counted: a built-in bot's account, which sits in every game against the
    computer, is not 200 games' work for one count. A page holds no more games than the
    limit's count, which it could never be answered past."""
    app = limited("audit=5/minute")
    client = app.test_client()
    tokens = {h: sign_up(client, h, f"10.9.0.{n}") for n, h in enumerate(("ann", "bob"))}
    for _ in range(3):
        finished_rated_game(client, tokens)
    first = client.get("/v1/accounts/ann/games/export", **at("10.9.1.1"))
    assert first.status_code == 200
    assert first.get_data(as_text=True).count('"format"') == 3  # one header line a game
    assert first.headers["X-RateLimit-Remaining"] == "2"
    again = client.get("/v1/accounts/ann/games/export", **at("10.9.1.1"))
    assert again.status_code == 429 and again.get_json()["code"] == "rate_limited"
    assert int(again.headers["Retry-After"]) >= 1

    small = limited("audit=2/minute").test_client()
    page = small.get("/v1/accounts/ann/games/export?limit=100", **at("10.9.1.2"))
    assert page.status_code == 200
    assert page.get_data(as_text=True).count('"format"') == 2
    assert "after=" in page.headers["Link"] and "limit=2" in page.headers["Link"]


def test_a_profiles_rating_history_is_its_newest_entries_oldest_first(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(standings, "RATING_HISTORY_LIMIT", 2, raising=False)
    tokens = {h: sign_up(client, h, f"10.8.0.{n}") for n, h in enumerate(("ann", "bob"))}
    games = [finished_rated_game(client, tokens)["id"] for _ in range(3)]
    for handle in ("ann", "bob"):
        history = client.get(f"/v1/accounts/{handle}").get_json()["rating_history"]
        assert [entry["game_id"] for entry in history] == games[1:]
        assert history[0]["finished_at"] < history[1]["finished_at"]


# --------------------------------------------------------------------- computer players
BOT_GAMES_AN_HOUR = 60  # service.config's default, on whatever CANTSTOP_RATE_LIMITS says
WITH_BOTS = {"players": [{"name": "A", "bot": "expert"}, {"name": "B", "bot": "expert"}]}


def test_games_of_computer_players_are_limited_per_address_by_default(client: FlaskClient) -> None:
    """The attack: one request for a game of bots costs the host's worker a whole game (~140 ms
    of CPU and ~140 events), so a client asking for them as fast as it can would hold every
    clock of every game back. By default, 60 an hour from one address; another address has its
    own count, and games without a bot are not counted."""
    for n in range(BOT_GAMES_AN_HOUR):
        made = client.post("/v1/games", json=WITH_BOTS, **at("10.6.0.1"))
        assert made.status_code == 201, made.get_json()
        assert made.headers["X-RateLimit-Remaining"] == str(BOT_GAMES_AN_HOUR - n - 1)
    refused = client.post("/v1/games", json=WITH_BOTS, **at("10.6.0.1"))
    assert refused.status_code == 429
    assert refused.get_json()["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) > 0
    plain = client.post("/v1/games", json={"players": ["a", "b"]}, **at("10.6.0.1"))
    assert plain.status_code == 201  # no bot: not counted
    assert "X-RateLimit-Limit" not in plain.headers
    elsewhere = client.post("/v1/games", json=WITH_BOTS, **at("10.6.0.2"))
    assert elsewhere.status_code == 201


def test_every_way_of_giving_a_game_a_bot_counts_and_no_other(limited: Any) -> None:
    """A creation naming a bot, a bot seated in a lobby, a rematch of a game with bot seats and
    a challenge to a built-in bot each spend one of the address's count; the same requests
    without a bot spend none."""
    client = limited("bots=4/hour").test_client()
    here = at("10.7.0.1")

    def remaining(reply: Any) -> str | None:
        value: str | None = reply.headers.get("X-RateLimit-Remaining")
        return value

    # a game against the computer: counted
    game = client.post(
        "/v1/games", json={"players": ["Ann", {"name": "Robo", "bot": "rule-of-28"}]}, **here
    )
    assert game.status_code == 201 and remaining(game) == "3"
    # a lobby: a person's join is not counted, a bot seated by that person is
    lobby = client.post("/v1/games", json={"seats": 3}, **here).get_json()
    joined = client.post(f"/v1/games/{lobby['game']['id']}/players", json={"name": "Cy"}, **here)
    assert joined.status_code == 201 and remaining(joined) is None
    seated = client.post(
        f"/v1/games/{lobby['game']['id']}/players",
        json={"bot": "random"},
        headers=bearer(joined.get_json()["token"]),
        **here,
    )
    assert seated.status_code == 201 and remaining(seated) == "2"
    # the game against the computer, finished, and its rematch (its bot seated at once)
    state = game.get_json()
    ann = next(s["token"] for s in state["seats"] if s["bot"] is None)
    resigned = client.post(
        f"/v1/games/{state['game']['id']}/actions", json={"type": "resign"}, headers=bearer(ann)
    )
    assert resigned.get_json()["game"]["status"] == "finished", resigned.get_json()
    rematch = client.post(f"/v1/games/{state['game']['id']}/rematch", headers=bearer(ann), **here)
    assert rematch.status_code == 201 and remaining(rematch) == "1", rematch.get_json()
    # a challenge to a person is not counted here; one to a built-in bot is
    dan = sign_up(client, "dan", "10.7.0.1")
    sign_up(client, "eve", "10.7.0.2")
    to_eve = client.post("/v1/challenges", json={"to": "eve"}, headers=bearer(dan), **here)
    assert to_eve.status_code == 201
    to_bot = client.post("/v1/challenges", json={"to": "expert"}, headers=bearer(dan), **here)
    assert to_bot.status_code == 201 and to_bot.get_json()["status"] == "accepted"
    # (its headers show the challenger's own count, the first it is held to; that the bot
    # challenge was counted, and the one to eve not, the refusals below show: 4 of 4 spent)
    # the count is spent: each way is refused now, and the ways without a bot are not
    assert client.post("/v1/games", json=WITH_BOTS, **here).status_code == 429
    refused_seat = client.post(
        f"/v1/games/{lobby['game']['id']}/players",
        json={"bot": "expert"},
        headers=bearer(joined.get_json()["token"]),
        **here,
    )
    assert refused_seat.status_code == 429
    again = client.post("/v1/challenges", json={"to": "Expert"}, headers=bearer(dan), **here)
    assert again.status_code == 429
    assert client.post("/v1/games", json={"players": ["a", "b"]}, **here).status_code == 201
    person = client.post(f"/v1/games/{lobby['game']['id']}/players", json={"name": "Fay"}, **here)
    assert person.status_code == 201


def test_games_of_bots_stay_capped_when_one_address_races(limited: Any) -> None:
    app = limited("bots=5/hour")

    def create() -> int:
        reply = app.test_client().post("/v1/games", json=WITH_BOTS, **at("10.8.0.1"))
        status: int = reply.status_code
        return status

    statuses = race_cleanly([create for _ in range(12)], timeout=60)
    assert sorted(statuses) == [201] * 5 + [429] * 7, statuses


@pytest.mark.redis
def test_two_hosts_share_the_count_of_games_of_bots(database_url: str, redis_url: str) -> None:
    """Two hosts on one store, counting in one Redis: twelve creations of bot games from one
    address, six at each host at once, make exactly the five that the count allows."""
    settings = Settings(database_url=database_url, redis_url=redis_url, rate_limits="bots=5/hour")
    hosts = [create_app(settings, create_tables=True), create_app(settings)]
    address = f"10.9.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"  # a count of its own
    try:

        def create(host: Flask) -> int:
            reply = host.test_client().post("/v1/games", json=WITH_BOTS, **at(address))
            status: int = reply.status_code
            return status

        calls = [partial(create, hosts[i % 2]) for i in range(12)]
        statuses = race_cleanly(calls, timeout=60)
        assert sorted(statuses) == [201] * 5 + [429] * 7, statuses
    finally:
        for host in hosts:
            host.extensions["cantstop"].close()


# ------------------------------------------------------------------------------ scopes
def test_a_token_without_the_scope_spends_only_its_addresss_count(database_url: str) -> None:
    """``webhook`` and ``tournament`` count per account, but only for a token holding the scope
    the view needs: a ``play`` token (a third party's client, say) refused 403 by the webhooks'
    view must not use up its owner's webhooks of the hour, nor a token without ``play`` the
    account's tournaments."""
    settings = Settings(
        database_url=database_url,
        rate_limits="webhook=3/hour,tournament=3/hour",
        extra_env={"CANTSTOP_WEBHOOK_ALLOW_PRIVATE": "1"},
    )
    app = create_app(settings, create_tables=True)
    try:
        client = app.test_client()
        owner = sign_up(client, "ann", "10.5.0.1")

        def token(scopes: list[str]) -> str:
            body = {"handle": "ann", "password": PASSWORD, "scopes": scopes}
            reply = client.post("/v1/tokens", json=body, **at("10.5.0.1"))
            assert reply.status_code == 201, reply.get_json()
            return str(reply.get_json()["token"])

        play_only, account_only = token(["play"]), token(["account"])
        hook = {"url": "http://127.0.0.1:9/hook", "events": ["game_finished"]}
        for _ in range(3):
            refused = client.post(
                "/v1/account/webhooks", json=hook, headers=bearer(play_only), **at("10.5.0.2")
            )
            assert refused.status_code == 403, refused.get_json()
            refused = client.post(
                "/v1/tournaments", json={}, headers=bearer(account_only), **at("10.5.0.2")
            )
            assert refused.status_code == 403, refused.get_json()
        made = client.post("/v1/account/webhooks", json=hook, headers=bearer(owner))
        assert made.status_code == 201, made.get_json()
        assert made.headers["X-RateLimit-Remaining"] == "2"  # the owner's first of three
        # ... and the refused tokens' address has spent its own three
        again = client.post(
            "/v1/account/webhooks", json=hook, headers=bearer(play_only), **at("10.5.0.2")
        )
        assert again.status_code == 429, again.get_json()
    finally:
        app.extensions["cantstop"].close()
