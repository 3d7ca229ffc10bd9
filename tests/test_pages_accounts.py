"""The pages of accounts (contract 1.2) in a real browser: Debian's Chromium driven by Playwright,
against ``cantstop serve`` in a subprocess (its scheduler plays the computer players;
``CANTSTOP_BOT_PAUSE=0``), as tests/test_pages_browser.py drives the game pages.

Signing up and in and out on ``/account``; the lobby signed in: "My games", a rated game against
a computer player, an open seat taken as the account; the game page playing the account's seat
with its personal token; a profile at ``/players/{handle}`` with each pool's rating and its
chart; a pool's leaderboard at ``/leaderboards/{pool}``. The personal token never leaves the
browser but in the Authorization header: no address, no log line. Every page is scanned with the
vendored axe-core.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from service.http.pages import game_summary, pool_text
from service.http.pages.charts import nice_step, rating_chart
from tests.support.browser import (
    ACCESS_LOG,
    PASSWORD,
    Server,
    Watch,
    axe,
    context,
    kept_account,
    shot,
    sign_up,
    started_server,
)
from tests.support.http import send
from tests.support.polling import poll

CHOICE = re.compile(r"^(Roll|Stop|Move \d+( and \d+)?)$")
STEP_TIMEOUT = 45  # seconds for one step of a game (a computer player's whole turn included)
ONE_COLUMN = "2 players · 1 column to win · 6-sided dice"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("account-pages"), env=ACCESS_LOG) as started:
        yield started


# ------------------------------------------------------------------------------- helpers
def game_id_of(page: Page) -> str:
    match = re.search(r"/games/([0-9a-f-]{36})", page.url)
    assert match, page.url
    return match.group(1)


def board_version(page: Page) -> int:
    label = page.get_by_role("group", name=re.compile(r"^Board at version \d+$")).get_attribute(
        "aria-label"
    )
    assert label
    return int(label.rsplit(" ", 1)[1])


def my_choices(page: Page) -> list[str] | None:
    """Wait until this seat may act (its enabled choices) or the game is over (None)."""
    enabled = page.get_by_role("button", name=CHOICE, disabled=False)
    over = page.get_by_role("button", name="Rematch")
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        if over.count():
            return None
        names = enabled.all_inner_texts()
        if names:
            return names
        time.sleep(0.05)
    raise AssertionError(f"neither a choice nor the end came within {STEP_TIMEOUT} s")


def play_to_the_end(page: Page) -> int:
    """Play this page's seat by clicking until the game is over: roll, take the first move,
    stop after three moves. Returns the number of actions taken."""
    actions = 0
    moved = 0
    while (names := my_choices(page)) is not None:
        if names == ["Roll"]:
            moved = 0  # a new turn
        if any(n.startswith("Move") for n in names):
            choice = next(n for n in names if n.startswith("Move"))
            moved += 1
        elif "Stop" in names and moved >= 3:
            choice = "Stop"
        else:
            choice = "Roll"
        before = board_version(page)
        page.get_by_role("button", name=choice, exact=True).click()
        expect(
            page.get_by_role("group", name=f"Board at version {before}", exact=True)
        ).to_have_count(0)
        actions += 1
        assert actions < 400, "the game does not end"
    return actions


def rated_game_lost_at_once(server: Server, token: str, handle: str) -> str:
    """A rated game against the expert in the one-column pool, which ``handle`` (seat 0)
    resigns once both seats have played a turn (resigned before, it would be aborted and rate
    nobody, contract 1.3), unless it ends before: it finishes, and it is rated."""
    body = {
        "players": [{"account": handle}, {"name": "Expert", "bot": "expert"}],
        "rules": {"columns_to_win": 1},
        "rated": True,
        "clock": {"turn_seconds": 3600},
    }
    game_id = str(server.api("POST", "/v1/games", body, token)["game"]["id"])
    path = f"/v1/games/{game_id}"

    def mine() -> Any:  # the game once it is seat 0's turn to roll, or over
        state = server.api("GET", path)
        over = state["status"] == "finished"
        turn = state["turn"]
        return state if over or (turn["player"] == 0 and turn["phase"] == "roll") else None

    played = False
    while poll(mine, STEP_TIMEOUT)["status"] != "finished":
        if played:  # and the expert has played since (or before)
            send(server.port, "POST", f"{path}/actions", {"type": "resign"}, auth(token))
            continue
        after = server.api("POST", f"{path}/actions", {"type": "roll"}, token)["game"]
        if after["turn"] is not None and after["turn"]["player"] == 0:  # no bust: move, stop
            move = next(a for a in after["legal_actions"] if a["type"] == "move")
            server.api("POST", f"{path}/actions", {"type": "move", "sums": move["sums"]}, token)
            server.api("POST", f"{path}/actions", {"type": "stop"}, token)
        played = True
    return game_id


def on_a_phone(browser: Browser, server: Server, paths: list[str]) -> None:
    """Each page fits a phone's screen: no sideways scrolling."""
    phone: ViewportSize = {"width": 390, "height": 844}
    ctx = browser.new_context(base_url=server.base, viewport=phone, is_mobile=True)
    try:
        page = ctx.new_page()
        for path in paths:
            page.goto(path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= phone["width"], f"wider than the screen: {width} px on {path}"
            # A chart's labels stay readable (they shrank to about 6 px with the chart).
            heights = page.evaluate(
                "[...document.querySelectorAll('svg.chart text')]"
                ".map(t => t.getBoundingClientRect().height)"
            )
            assert all(h >= 11 for h in heights), f"labels of {min(heights)} px on {path}"
            shot(page, "phone-" + path.strip("/").split("/")[0])
    finally:
        ctx.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def check_token_never_left_the_browser(server: Server, watch: Watch, token: str) -> None:
    assert watch.requests, "no request was recorded"
    for url in watch.requests:
        assert token not in url, url  # in no address, not even a fragment
    assert token not in server.log()  # nor any log line of the server's


# --------------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_sign_up_play_rated_against_the_expert_then_the_profile_and_the_leaderboard(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        page.goto("/account")
        expect(page.get_by_role("heading", name="Your account", level=1)).to_be_visible()
        expect(page.get_by_role("form", name="Sign in")).to_be_visible()
        axe(page, "the account page, signed out")
        shot(page, "account-signed-out")
        token = sign_up(page, "ann")
        expect(page.get_by_role("status")).to_have_text(re.compile(r"^Welcome, ann"))
        expect(page.get_by_role("form", name="Sign up")).to_be_hidden()
        axe(page, "the account page, signed in")
        shot(page, "account-signed-in")

        # The lobby, signed in: no name to type, "My games", and a rated game from its form.
        page.get_by_role("link", name="Play in the lobby").click()
        expect(page.get_by_text("Signed in as ann")).to_be_visible()
        expect(page.get_by_label("Your name")).to_be_hidden()
        mine = page.get_by_role("region", name="My games")
        expect(mine.get_by_text("You have no game yet")).to_be_visible()
        page.get_by_label("Rated game").check()
        page.get_by_label("Seat 1").select_option(label="Computer: Expert")
        page.get_by_label("Columns to win").fill("1")
        axe(page, "the lobby, signed in")
        shot(page, "lobby-signed-in")
        page.get_by_role("button", name="Create game").click()
        page.wait_for_url(re.compile(r"/games/[0-9a-f-]{36}$"))
        game_id = game_id_of(page)
        state = server.api("GET", f"/v1/games/{game_id}")
        assert state["rated"] is True
        assert [p["account"] for p in state["players"]] == ["ann", "expert"]

        # The game page plays the account's seat with the personal token: no seat token kept.
        expect(page.get_by_text("You play ann (seat 0), blue.")).to_be_visible()
        expect(page.get_by_text("Signed in as ann: your account holds this seat")).to_be_visible()
        assert page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')") is None
        expect(page.get_by_role("button", name="Forget this seat")).to_have_count(0)
        play_to_the_end(page)
        final = server.api("GET", f"/v1/games/{game_id}")
        assert final["status"] == "finished" and final["rated"] is True
        winner = final["players"][final["winner"]]["name"]
        profile = poll(
            lambda: (p := server.api("GET", "/v1/accounts/ann"))["ratings"] and p, STEP_TIMEOUT
        )
        rating = profile["ratings"][0]
        assert rating["games"] == 1 and rating["provisional"]

        # "My games" lists it, with its outcome and a way to its replay.
        page.goto("/")
        card = mine.get_by_role("listitem").filter(has_text="ann vs Expert")
        expect(card).to_have_count(1)
        outcome = "you won" if winner == "ann" else "Expert won"
        expect(card.get_by_text(f"Rated · {outcome}")).to_be_visible()
        replay = card.get_by_role("link", name="Replay the game of ann vs Expert")
        expect(replay).to_have_attribute("href", f"/games/{game_id}/replay")

        # The profile: the pool's rating in its table, and the chart of its history.
        page.get_by_role("link", name="Your profile").click()
        page.wait_for_url(re.compile(r"/players/ann$"))
        expect(page.get_by_role("heading", name="ann", level=1)).to_be_visible()
        ratings = page.get_by_role("table", name="Ratings of ann")
        row = ratings.get_by_role("row").filter(has_text=ONE_COLUMN)
        expect(row.get_by_role("cell").first).to_have_text(f"{rating['rating']:.2f} (provisional)")
        chart = page.get_by_role("img", name=f"Rating history of ann: {ONE_COLUMN}")
        expect(chart).to_be_visible()
        expect(chart.locator("circle")).to_have_count(2)  # the start, and after the game
        page.get_by_text("The chart's figures").click()
        figures = page.get_by_role(
            "table", name=f"Rating of ann after each rated game: {ONE_COLUMN}"
        )
        expect(figures.get_by_role("link", name="Game 1")).to_have_attribute(
            "href", f"/games/{game_id}/replay"
        )
        expect(figures.get_by_role("cell", name=f"{rating['rating']:.2f}")).to_be_visible()
        games = page.get_by_role("region", name="Latest games")
        expect(
            games.get_by_text("Rated · " + ("ann won" if winner == "ann" else "Expert won"))
        ).to_be_visible()
        axe(page, "a profile")
        shot(page, "profile")

        # The pool's leaderboard, from the profile: nobody has 10 rated games yet.
        page.get_by_role("link", name=f"Leaderboard of {ONE_COLUMN}").first.click()
        page.wait_for_url(re.compile(rf"/leaderboards/{re.escape(rating['pool'])}$"))
        expect(page.get_by_role("heading", name="Leaderboard", level=1)).to_be_visible()
        expect(page.get_by_text(f"Rated games: {ONE_COLUMN}.")).to_be_visible()
        expect(
            page.get_by_text("No account has played 10 rated games in this pool yet")
        ).to_be_visible()
        axe(page, "an empty leaderboard")

        # Nine more rated games in the pool (lost at once): ann and the expert are ranked.
        for _ in range(9):
            rated_game_lost_at_once(server, token, "ann")
        poll(lambda: server.api("GET", f"/v1/leaderboards/{rating['pool']}")["ranking"], 30)
        board = server.api("GET", f"/v1/leaderboards/{rating['pool']}")["ranking"]
        page.reload()
        ranking = page.get_by_role("table", name=f"Ranking: {ONE_COLUMN}")
        for entry in board:
            line = ranking.get_by_role("row").filter(
                has=page.get_by_role("link", name=entry["handle"], exact=True)
            )
            expect(line.get_by_role("cell").first).to_have_text(str(entry["rank"]))
            expect(line.get_by_role("cell").nth(1)).to_have_text(f"{entry['rating']:.2f}")
        axe(page, "a leaderboard")
        shot(page, "leaderboard")
        ranking.get_by_role("link", name="ann", exact=True).click()
        page.wait_for_url(re.compile(r"/players/ann$"))
        expect(chart.locator("circle")).to_have_count(11)
        expect(row.get_by_role("cell").first).not_to_contain_text("provisional")
        on_a_phone(browser, server, ["/players/ann", f"/leaderboards/{rating['pool']}"])

        # Sign out: the browser forgets the token, and the server refuses it from now on.
        page.get_by_role("link", name="Account", exact=True).click()
        expect(page.get_by_role("heading", name="Signed in as ann")).to_be_visible()
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("form", name="Sign in")).to_be_visible()
        expect(page.get_by_role("status")).to_have_text(re.compile(r"^You signed out"))
        assert kept_account(page) is None
        assert server.status("GET", "/v1/account", token) == 401
        page.goto("/")
        expect(page.get_by_label("Your name")).to_be_visible()
        expect(page.get_by_role("region", name="My games")).to_have_count(0)
        expect(page.get_by_label("Rated game")).to_be_hidden()

        # And in again, with the password: a new token.
        page.goto("/account")
        form = page.get_by_role("form", name="Sign in")
        form.get_by_label("Handle").fill("ann")
        form.get_by_label("Password").fill("not the password")
        form.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text(
            "That handle and password do not match an account."
        )
        watch.errors[:] = [e for e in watch.errors if "status of 401" not in e]  # said above
        form.get_by_label("Password").fill(PASSWORD)
        form.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Signed in as ann")).to_be_visible()
        again = kept_account(page)
        assert again is not None and again["token"] != token
        assert server.api("GET", "/v1/account", token=again["token"])["handle"] == "ann"
        page.goto(f"/games/{game_id}")  # the finished game: the account's seat again
        expect(page.get_by_text("You play ann (seat 0), blue.")).to_be_visible()
        expect(page.get_by_role("button", name="Rematch")).to_be_visible()

        for held in (token, again["token"]):
            check_token_never_left_the_browser(server, watch, held)


@pytest.mark.slow
def test_an_open_seat_of_a_rated_game_is_taken_as_the_account_from_the_lobby(
    server: Server, browser: Browser
) -> None:
    """Bob opens a rated lobby game (through the API). A guest cannot take its seat; Cat, signed
    in, joins from the lobby, plays it as her account, and a sign-in ended elsewhere is said."""
    bob = server.api("POST", "/v1/accounts", {"handle": "bob", "password": PASSWORD})["token"]
    rated = {"seats": 2, "rated": True, "clock": {"turn_seconds": 3600}}
    created = server.api("POST", "/v1/games", rated, bob)
    game_id = created["game"]["id"]
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        page.goto("/")
        page.get_by_label("Your name").fill("Guest")
        join = page.get_by_role("button", name="Join the game of bob")
        join.click()
        expect(page.get_by_role("alert")).to_contain_text("join with a personal token")
        watch.errors[:] = [e for e in watch.errors if "status of 422" not in e]  # said above

        token = sign_up(page, "cat")
        page.goto("/")
        page.get_by_role("button", name="Join the game of bob").click()
        page.wait_for_url(re.compile(rf"/games/{game_id}$"))
        expect(page.get_by_text("You play cat (seat 1), orange.")).to_be_visible()
        state = server.api("GET", f"/v1/games/{game_id}")
        assert state["status"] == "in_progress"
        assert [p["account"] for p in state["players"]] == ["bob", "cat"]
        assert page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')") is None
        axe(page, "a rated game played as an account")

        # Revoked elsewhere (here: through the API): the page says so, and only watches.
        kept = kept_account(page)
        assert kept is not None
        server.api("DELETE", f"/v1/account/tokens/{kept['tokenId']}", token=token)
        page.get_by_role("button", name="Resign").click()
        page.get_by_role("button", name="Yes, resign").click()
        expect(page.get_by_role("alert")).to_contain_text("Your sign-in has ended")
        expect(page.get_by_role("button", name="Resign")).to_have_count(0)
        assert kept_account(page) is None
        watch.errors[:] = [e for e in watch.errors if "status of 401" not in e]  # said above
        check_token_never_left_the_browser(server, watch, token)


@pytest.mark.slow
def test_a_signed_in_player_asks_for_the_rematch_of_a_rated_game(
    server: Server, browser: Browser
) -> None:
    """Dan, signed in, lost a rated game to the expert: the game page's Rematch claims his
    account's seat with his personal token, and the rematch is rated, his, and under way (the
    expert seated at once), with no seat token kept. (The claim was 401: only seat tokens.)"""
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        token = sign_up(page, "dan")
        game_id = rated_game_lost_at_once(server, token, "dan")
        page.goto(f"/games/{game_id}")
        page.get_by_role("button", name="Rematch").click()
        page.wait_for_url(lambda url: game_id not in url and "/games/" in url)
        rematch_id = game_id_of(page)
        assert "token" not in page.url
        expect(page.get_by_text("Signed in as dan: your account holds this seat")).to_be_visible()
        state = server.api("GET", f"/v1/games/{rematch_id}")
        assert state["rematch_of"] == game_id and state["rated"] is True
        assert [p["account"] for p in state["players"]] == ["dan", "expert"]
        assert state["status"] == "in_progress"
        assert page.evaluate(f"localStorage.getItem('cantstop:seat:{rematch_id}')") is None
        check_token_never_left_the_browser(server, watch, token)


@pytest.mark.slow
def test_the_pages_of_an_unknown_account_or_pool_are_not_found(server: Server) -> None:
    for path in ("/players/nobody", "/players/%3Cb%3E", "/leaderboards/2p-0000000000"):
        reply = send(server.port, "GET", path, None, {"Accept": BROWSER_ACCEPT})
        assert reply.status == 404, path
        assert reply.content_type == "text/html"
        assert "unsafe-inline" not in reply.headers["content-security-policy"]
        assert b"<b>" not in reply.body
    reply = send(server.port, "GET", "/account", None, {"Accept": BROWSER_ACCEPT})
    assert reply.status == 200 and reply.content_type == "text/html"
    assert b'src="/assets/js/account.js"' in reply.body
    assert "script-src 'self'" in reply.headers["content-security-policy"]


# ------------------------------------------------------------------ the chart, measured
def test_the_chart_puts_higher_ratings_higher_and_the_games_in_order() -> None:
    history = [
        {"game_id": f"g{i}", "rating": r} for i, r in enumerate([-1.8, -3.1, 2.5, 7.25], start=1)
    ]
    chart = rating_chart(0.0, history)
    xs = [p.x for p in chart.points]
    assert xs == sorted(xs) and xs[0] == chart.left and xs[-1] == chart.right
    by_rating = sorted(chart.points, key=lambda p: p.rating)
    assert [p.y for p in by_rating] == sorted((p.y for p in by_rating), reverse=True)
    assert all(chart.top <= p.y <= chart.bottom for p in chart.points)
    assert [p.game_id for p in chart.points] == [None, "g1", "g2", "g3", "g4"]
    labels = [float(t.label) for t in chart.y_ticks]
    assert labels == sorted(labels) and labels[0] <= -3.1 and labels[-1] >= 7.25
    assert [t.label for t in chart.x_ticks] == ["0", "1", "2", "3", "4"]
    assert len(chart.polyline.split()) == 5


def test_a_flat_or_long_history_still_makes_a_readable_chart() -> None:
    flat = rating_chart(0.0, [{"game_id": "g", "rating": 0.0}])
    assert len(flat.y_ticks) >= 2 and len({p.y for p in flat.points}) == 1
    long = rating_chart(0.0, [{"game_id": str(i), "rating": i / 10} for i in range(95)])
    assert len(long.x_ticks) <= 11
    assert nice_step(7.0) == 2.0 and nice_step(0.3) == 0.1 and nice_step(40.0) == 10.0


def test_a_pool_and_a_game_in_words() -> None:
    rules = {"columns_to_win": 3, "dice_faces": 8, "jumping": True, "steep_hill": True}
    assert (
        pool_text(rules, 4) == "4 players · 3 columns to win · 8-sided dice · jumping · steep hill"
    )
    entry = {"game_id": "x", "seat": 0, "status": "finished", "rated": True, "created_at": "2026"}
    state = {
        "status": "finished",
        "players": [{"name": "ann"}, {"name": "Expert"}],
        "winner": 1,
        "solitaire": None,
    }
    summary = game_summary(entry, state)
    assert summary == {
        "title": "ann vs Expert",
        "summary": "Rated · Expert won · 2026",
        "href": "/games/x/replay",
        "action": "Replay",
    }
