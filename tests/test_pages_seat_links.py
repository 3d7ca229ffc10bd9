"""A link cannot take a browser's seat away, and the account page's forms never send a password
in an address: in a real browser (Debian's Chromium driven by Playwright, as in
tests/test_pages_browser.py), against ``cantstop serve`` in a subprocess.

Game ids are public, so anyone can send a player ``/games/{id}#token=…``. The game page
(static/js/api.js, ``takeSeatFromAddress``) takes a link's token as it comes only when the
browser holds none for the game; otherwise it drops a token that holds no seat, and takes one
that holds a seat only if the person confirms it. Without account.js, the account page's forms
cannot be sent by pressing Enter (their buttons come disabled), and if sent anyway they POST.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, Request, Route, expect

from tests.support.browser import ACCESS_LOG, PASSWORD, Server, sign_up, started_server

pytestmark = pytest.mark.slow

# A two-player game with manual dice, Ann first.
ANN_AND_BOB = {"players": ["Ann", "Bob"], "dice": "manual", "first_player": 0}
JUNK = "nope-not-a-token"


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("seat-links"), env=ACCESS_LOG) as started:
        yield started


@dataclass
class Seen:
    """What a browser context did: every request (method and URL), page errors, and the text
    of every dialog, each answered as ``answer`` says (accepted when True)."""

    answer: bool = False
    requests: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: {exc}"))

        def dialog(d: Dialog) -> None:
            self.dialogs.append(d.message)
            if self.answer:
                d.accept()
            else:
                d.dismiss()

        page.on("dialog", dialog)


@contextlib.contextmanager
def browsing(browser: Browser, server: Server) -> Iterator[tuple[BrowserContext, Seen]]:
    """A browser context on the server whose dialogs the test answers (``Seen.answer``); closed
    afterwards, when no page may have thrown."""
    ctx = browser.new_context(base_url=server.base, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    seen = Seen()

    def request(r: Request) -> None:
        seen.requests.append((r.method, r.url))

    ctx.on("request", request)
    ctx.on("page", seen.attach)
    try:
        yield ctx, seen
    finally:
        ctx.close()
    assert not seen.errors, seen.errors


# ------------------------------------------------------------------------------- helpers
def new_game(server: Server) -> tuple[str, str, str]:
    """A new ANN_AND_BOB game: its id, Ann's token and Bob's."""
    created = server.api("POST", "/v1/games", ANN_AND_BOB)
    return created["game"]["id"], created["seats"][0]["token"], created["seats"][1]["token"]


def kept_seat(page: Page, game_id: str) -> dict[str, Any]:
    """What the browser keeps for the game (api.js: localStorage ``cantstop:seat:{id}``)."""
    raw = page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')")
    assert raw, "the browser holds no token for the game"
    return dict(json.loads(raw))


def open_link(ctx: BrowserContext, link: str) -> Page:
    """``link`` opened in a new tab, as a person opens a link they were sent (a tab already on
    the game would only change its fragment, and its page would not load again)."""
    page = ctx.new_page()
    page.goto(link)
    return page


def ann_holds_her_seat(ctx: BrowserContext, game_id: str, ann: str) -> Page:
    """Ann's link opened in a browser that holds nothing for the game: taken, as it always was."""
    page = open_link(ctx, f"/games/{game_id}#token={ann}&seat=0")
    expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()
    assert kept_seat(page, game_id) == {"token": ann, "seat": 0}
    return page


def plays_ann(page: Page, game_id: str, ann: str) -> None:
    """The page plays Ann's seat: its token held, and a roll it sends is taken."""
    expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()
    assert kept_seat(page, game_id)["token"] == ann
    for i, die in enumerate([1, 2, 3, 4], start=1):
        page.get_by_label(f"Die {i}").fill(str(die))
    page.get_by_role("button", name="Roll").click()
    expect(page.get_by_role("button", name=re.compile(r"^Move "))).not_to_have_count(0)


# --------------------------------------------------------------------------------- tests
def test_a_link_with_a_token_of_no_seat_leaves_the_held_token_alone(
    server: Server, browser: Browser
) -> None:
    """Ann holds her seat; a link to her game with a junk token (and her seat's number, to look
    right) is dropped: she keeps her token, is told, and can still play. No dialog: there is
    nothing to choose."""
    game_id, ann, _bob = new_game(server)
    with browsing(browser, server) as (ctx, seen):
        ann_holds_her_seat(ctx, game_id, ann).close()
        page = open_link(ctx, f"/games/{game_id}#token={JUNK}&seat=0")
        expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()
        assert kept_seat(page, game_id) == {"token": ann, "seat": 0}
        expect(page.get_by_text("The link's token holds no seat of this game")).to_be_visible()
        assert "token" not in page.url  # the fragment left the address bar all the same
        plays_ann(page, game_id, ann)  # (an action clears the message)
        assert not seen.dialogs
    assert JUNK not in server.log() and ann not in server.log()


@pytest.mark.parametrize("accepted", [False, True], ids=["dismissed", "accepted"])
def test_a_link_with_another_seats_token_replaces_the_held_one_only_when_confirmed(
    server: Server, browser: Browser, accepted: bool
) -> None:
    """Ann holds her seat; a link with Bob's token asks first, naming both seats. Dismissed,
    Ann's token stays and the page plays her seat; accepted, the browser holds Bob's."""
    game_id, ann, bob = new_game(server)
    with browsing(browser, server) as (ctx, seen):
        ann_holds_her_seat(ctx, game_id, ann).close()
        seen.answer = accepted
        page = open_link(ctx, f"/games/{game_id}#token={bob}&seat=1")
        if accepted:
            expect(page.get_by_text("You play Bob (seat 1), orange.")).to_be_visible()
            assert kept_seat(page, game_id) == {"token": bob, "seat": 1}
            expect(page.get_by_role("button", name="Resign")).to_be_visible()
            expect(page.get_by_role("button", name="Roll")).to_have_count(0)  # Ann's turn
        else:
            expect(page.get_by_text("the link's seat was not taken")).to_be_visible()
            plays_ann(page, game_id, ann)
        assert "token" not in page.url
        assert len(seen.dialogs) == 1, seen.dialogs
        assert "Bob (seat 1)" in seen.dialogs[0] and "Ann (seat 0)" in seen.dialogs[0]
    assert bob not in server.log()


def test_a_link_is_taken_as_before_by_a_browser_that_holds_no_token_of_the_game(
    server: Server, browser: Browser
) -> None:
    """Nothing held for the game: the contract's bare ``#token=`` link is taken at once, with
    no question, and the page learns which seat it holds."""
    game_id, _ann, bob = new_game(server)
    with browsing(browser, server) as (ctx, seen):
        page = open_link(ctx, f"/games/{game_id}#token={bob}")
        expect(page.get_by_text("You play Bob (seat 1), orange.")).to_be_visible()
        page.wait_for_function(
            "key => (JSON.parse(localStorage.getItem(key) || '{}')).seat === 1",
            arg=f"cantstop:seat:{game_id}",
        )
        assert kept_seat(page, game_id) == {"token": bob, "seat": 1}
        assert "token" not in page.url
        expect(page.locator("#action-message")).to_be_hidden()
        assert not seen.dialogs


@pytest.mark.parametrize("accepted", [False, True], ids=["dismissed", "accepted"])
def test_a_link_never_silently_moves_a_signed_in_player_off_their_accounts_seat(
    server: Server, browser: Browser, accepted: bool
) -> None:
    """Signed in, the account holds seat 0 and the browser keeps no seat token for the game: a
    link with Bob's token asks first, as a held seat token does. Dismissed, the page plays the
    account's seat and keeps no token; accepted, the browser holds Bob's. (It was taken
    silently, the player moved off their own seat.)"""
    handle = f"h{uuid.uuid4().hex[:12]}"
    with browsing(browser, server) as (ctx, seen):
        page = ctx.new_page()
        personal = sign_up(page, handle)
        created = server.api(
            "POST", "/v1/games", {**ANN_AND_BOB, "players": [{"account": handle}, "Bob"]}, personal
        )
        game_id, bob = created["game"]["id"], created["seats"][1]["token"]
        page.close()
        seen.answer = accepted
        page = open_link(ctx, f"/games/{game_id}#token={bob}&seat=1")
        if accepted:
            expect(page.get_by_text("You play Bob (seat 1), orange.")).to_be_visible()
            assert kept_seat(page, game_id) == {"token": bob, "seat": 1}
        else:
            expect(page.get_by_text("the link's seat was not taken")).to_be_visible()
            expect(page.get_by_text("your account holds this seat")).to_be_visible()
            expect(page.get_by_text(re.compile(r"You play .* \(seat 0\), blue\."))).to_be_visible()
            assert page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')") is None
        assert "token" not in page.url
        assert len(seen.dialogs) == 1, seen.dialogs
        assert "Bob (seat 1)" in seen.dialogs[0] and "(seat 0)" in seen.dialogs[0]
    assert bob not in server.log() and personal not in server.log()


def test_without_its_script_the_account_page_never_sends_a_password_in_an_address(
    server: Server, browser: Browser
) -> None:
    """account.js blocked: the sign-in button is disabled, and Enter in the password field sends
    nothing. A form sent all the same (by a script of the test's) is a POST, which the server
    refuses (405) without the fields reaching an address or its log."""
    handle = f"h{uuid.uuid4().hex[:12]}"
    secret = f"{PASSWORD} {uuid.uuid4().hex}"
    with browsing(browser, server) as (ctx, seen):
        page = ctx.new_page()

        def block(route: Route) -> None:
            route.abort()

        page.route("**/assets/js/account.js", block)
        page.goto("/account")
        form = page.get_by_role("form", name="Sign in")
        form.get_by_label("Handle").fill(handle)
        form.get_by_label("Password").fill(secret)
        form.get_by_label("Password").press("Enter")
        page.wait_for_timeout(1000)  # time for a navigation to start, had there been one
        assert page.url == f"{server.base}/account"
        assert [r for r in seen.requests if "/account?" in r[1] or r[0] == "POST"] == []
        expect(form.get_by_role("button", name="Sign in")).to_be_disabled()
        expect(page.get_by_role("form", name="Sign up").get_by_role("button")).to_be_disabled()

        with page.expect_response(f"{server.base}/account") as answered:
            page.evaluate("document.querySelector('#sign-in-form').requestSubmit()")
        assert answered.value.request.method == "POST"
        assert answered.value.status == 405
        assert secret not in answered.value.text()
        assert handle not in page.url and "password" not in page.url
        for _method, url in seen.requests:
            assert handle not in url and "password" not in url, url
    assert secret not in server.log() and handle not in server.log()


def test_with_its_script_the_account_page_enables_its_forms_and_signs_up(
    server: Server, browser: Browser
) -> None:
    """account.js enables the buttons once its handlers are on; signing up still goes through
    the API, the page staying where it is."""
    handle = f"h{uuid.uuid4().hex[:12]}"
    with browsing(browser, server) as (ctx, seen):
        page = ctx.new_page()
        page.goto("/account")
        form = page.get_by_role("form", name="Sign up")
        expect(form.get_by_role("button", name="Sign up")).to_be_enabled()
        expect(page.get_by_role("form", name="Sign in").get_by_role("button")).to_be_enabled()
        form.get_by_label("Handle").fill(handle)
        form.get_by_label("Password").fill(PASSWORD)
        form.get_by_label("Password").press("Enter")
        expect(page.get_by_role("heading", name=f"Signed in as {handle}")).to_be_visible()
        assert page.url == f"{server.base}/account"
        assert ("POST", f"{server.base}/v1/accounts") in seen.requests
