"""The web pages in a real browser: Debian's Chromium (``/usr/bin/chromium``, which ``make test``
installs when it is missing) driven by Playwright, against ``cantstop serve`` in a subprocess (its
scheduler plays the computer players; ``CANTSTOP_BOT_PAUSE=0``).

The pages are driven as a person does: by role and accessible name, with the mouse, with the
keyboard alone, and on a phone-sized screen. Nothing here is skipped: without the browser, these
tests fail. Every page is checked for console errors and scanned with the vendored axe-core; a
screenshot of each page is kept under ``var/screenshots/`` for a person to look at.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect
from pypdf import PdfReader

from tests.support.browser import ACCESS_LOG, Server, Watch, axe, context, shot, started_server
from tests.support.servers import free_port

CHOICE = re.compile(r"^(Roll|Stop|Move \d+( and \d+)?)$")
HEIGHTS = {2: 3, 3: 5, 4: 7, 5: 9, 6: 11, 7: 13, 8: 11, 9: 9, 10: 7, 11: 5, 12: 3}
STEP_TIMEOUT = 45  # seconds for one step of a game (a computer player's whole turn included)

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("pages"), env=ACCESS_LOG) as started:
        yield started


# ------------------------------------------------------------------------------- helpers
def no_sideways_scroll(page: Page) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"the page is wider than the screen: {widths} on {page.url}"


def game_id_of(page: Page) -> str:
    match = re.search(r"/games/([0-9a-f-]{36})", page.url)
    assert match, page.url
    return match.group(1)


def held_token(page: Page, game_id: str) -> str:
    raw = page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')")
    assert raw, "the seat's token is not in the browser's storage"
    token = json.loads(raw)["token"]
    assert isinstance(token, str) and token
    return token


def board_version(page: Page) -> int:
    label = page.get_by_role("group", name=re.compile(r"^Board at version \d+$")).get_attribute(
        "aria-label"
    )
    assert label
    return int(label.rsplit(" ", 1)[1])


def create_in_lobby(
    page: Page, name: str, *, opponent: str, columns: int = 1, keyboard: bool = False
) -> str:
    """Create a game against a computer player from the lobby, in which the person plays first;
    returns its id. The first player is drawn from the dice, and a bot that starts a race to one
    column can win it before the person acts: such a game is left and another created (twelve
    tries: a 1 in 4,096 chance of failing, with each try's draw shown in the error)."""
    draws = []
    for _ in range(12):
        game_id = _create_in_lobby(
            page, name, opponent=opponent, columns=columns, keyboard=keyboard
        )
        events = page.request.get(f"/v1/games/{game_id}/events").json()["events"]
        first = next(e for e in events if e["type"] == "TurnOrderDecided")["data"]["first_player"]
        if first == 0:
            return game_id
        draws.append(first)
    raise AssertionError(f"the bot moved first in every game created: {draws}")


def _create_in_lobby(page: Page, name: str, *, opponent: str, columns: int, keyboard: bool) -> str:
    page.goto("/")
    name_field = page.get_by_label("Your name")
    seat = page.get_by_label("Seat 1")
    to_win = page.get_by_label("Columns to win")
    create = page.get_by_role("button", name="Create game")
    expect(seat.locator("option", has_text=opponent)).to_have_count(1)  # the bots are listed
    if keyboard:
        tab_to(page, name_field)
        page.keyboard.type(name)
        tab_to(page, seat)
        choose_with_keys(page, seat, f"Computer: {opponent}")
        tab_to(page, to_win)
        page.keyboard.press("Control+A")
        page.keyboard.type(str(columns))
        tab_to(page, create)
        page.keyboard.press("Enter")
    else:
        name_field.fill(name)
        seat.select_option(label=f"Computer: {opponent}")
        to_win.fill(str(columns))
        create.click()
    page.wait_for_url(re.compile(r"/games/[0-9a-f-]{36}$"))
    return game_id_of(page)


def tab_to(page: Page, target: Locator, limit: int = 60) -> None:
    """Press Tab until ``target`` has the focus, as a keyboard user would."""
    for _ in range(limit):
        if target.evaluate("el => el === document.activeElement"):
            outline = target.evaluate(
                "el => [getComputedStyle(el).outlineStyle, getComputedStyle(el).outlineWidth]"
            )
            assert outline[0] != "none" and float(outline[1].rstrip("px")) >= 2, outline
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {target}")


def choose_with_keys(page: Page, select: Locator, label: str) -> None:
    page.keyboard.press("Home")
    for _ in range(12):
        chosen = select.evaluate("el => el.options[el.selectedIndex].text")
        if chosen == label:
            return
        page.keyboard.press("ArrowDown")
    raise AssertionError(f"no option {label!r}")


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


def play_to_the_end(page: Page, *, keyboard: bool = False, on_move: Any = None) -> int:
    """Play this page's seat until the game is over: roll, take the first move, stop after
    three moves. Returns the number of actions taken."""
    actions = 0
    moved = 0
    while (names := my_choices(page)) is not None:
        if names == ["Roll"]:
            moved = 0  # a new turn
        if any(n.startswith("Move") for n in names):
            choice = next(n for n in names if n.startswith("Move"))
            if on_move is not None:
                on_move(page)
            moved += 1
        elif "Stop" in names and moved >= 3:
            choice = "Stop"
        else:
            choice = "Roll"
        before = board_version(page)
        button = page.get_by_role("button", name=choice, exact=True)
        if keyboard:
            tab_to(page, button)
            page.keyboard.press("Enter")
        else:
            button.click()
        expect(
            page.get_by_role("group", name=f"Board at version {before}", exact=True)
        ).to_have_count(0)
        actions += 1
        assert actions < 400, "the game does not end"
    return actions


def check_token_never_left_the_browser(
    server: Server, watch: Watch, page: Page, token: str
) -> None:
    assert token not in page.url  # the address bar lost it
    assert watch.requests, "no request was recorded"
    for url in watch.requests:
        sent = url.split("#", 1)[0]  # what reaches the server: never the fragment
        assert token not in sent, url
    assert token not in server.log()  # nor any log line of the server's


# --------------------------------------------------------------------------------- tests
def test_a_whole_game_against_a_bot_by_clicking_while_a_spectator_follows_it_live(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, watch), context(browser, server) as (ctx2, watch2):
        page = ctx.new_page()
        response = page.goto("/")
        assert response is not None
        policy = response.headers["content-security-policy"]
        script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src"))
        assert "'self'" in script_src and "unsafe-inline" not in script_src
        expect(page.get_by_role("heading", name="Can't Stop", level=1)).to_be_visible()
        axe(page, "the lobby")
        shot(page, "lobby")

        game_id = create_in_lobby(page, "Ann", opponent="Expert")
        expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()
        token = held_token(page, game_id)
        assert "token" not in page.url

        spectator = ctx2.new_page()
        navigations: list[str] = []
        spectator.on(
            "framenavigated",
            lambda frame: navigations.append(frame.url) if frame == spectator.main_frame else None,
        )
        spectator.goto(f"/games/{game_id}")
        expect(spectator.get_by_text("You are watching this game.")).to_be_visible()

        seen: list[int] = []

        def mid_game(p: Page) -> None:
            """At the first choice of a move: the advice, and the checks of a game in progress;
            at each later one, a picture for people."""
            if not seen:
                p.get_by_role("button", name="Show advice").click()
                advice = "Chance of busting on the next roll after each move:"
                expect(p.get_by_text(advice)).to_be_visible()
                expect(p.get_by_text(re.compile(r"^The expert suggests: Move \d+"))).to_be_visible()
                axe(p, "a game in progress")
                shot(p, "game-in-progress")
                seen.append(board_version(spectator))
            else:  # the latest move's picture stays: the board at its fullest
                p.get_by_role("button", name=CHOICE).first.focus()  # its columns light up
                expect(p.get_by_text(re.compile(r"^The expert suggests: "))).to_be_visible()
                shot(p, "game-in-progress")

        actions = play_to_the_end(page, on_move=mid_game)
        assert actions >= 2
        final = server.api("GET", f"/v1/games/{game_id}")
        assert final["status"] == "finished"
        winner = final["players"][final["winner"]]["name"]
        # One column to win, but one stop may claim two ("columns 11 and 12").
        claimed = r"(column \d+|columns \d+(, \d+)* and \d+)"
        result = re.compile(rf"^{re.escape(winner)} won by claiming {claimed}$")
        expect(page.get_by_text(result)).to_be_visible()
        expect(page.get_by_role("link", name=re.compile("record sheet \\(PDF\\)"))).to_have_count(2)
        axe(page, "a finished game")
        shot(page, "game-finished")

        # The spectator followed live, in the same page: every event, then the same ending.
        history = spectator.get_by_role("list", name="History").get_by_role("listitem")
        expect(history).to_have_count(final["version"], timeout=STEP_TIMEOUT * 1000)
        expect(spectator.get_by_text(result)).to_be_visible()
        expect(spectator.get_by_role("button", name="Roll")).to_have_count(0)
        expect(spectator.get_by_role("button", name="Rematch")).to_have_count(0)
        assert len(navigations) == 1, navigations  # never reloaded
        assert seen and seen[0] < final["version"]
        shot(spectator, "game-spectator")

        check_token_never_left_the_browser(server, watch, page, token)
        check_token_never_left_the_browser(server, watch2, spectator, token)


def test_a_whole_game_with_the_keyboard_alone_then_its_replay_stepped_with_keys(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, _watch):
        page = ctx.new_page()
        game_id = create_in_lobby(page, "Kim", opponent="Rule of 28", keyboard=True)
        play_to_the_end(page, keyboard=True)
        final = server.api("GET", f"/v1/games/{game_id}")
        total = final["version"]

        tab_to(page, page.get_by_role("link", name="Replay and audit this game"))
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/replay"))
        expect(page.get_by_text(f"Version {total} of {total}")).to_be_visible()
        expect(page.get_by_text("Verdict: valid — every check passed.")).to_be_visible()
        for check in ("chain", "rules", "dice", "final_state"):
            expect(page.get_by_text(f"{check}: passed")).to_be_visible()

        page.keyboard.press("Home")
        expect(page.get_by_text(f"Version 1 of {total}")).to_be_visible()
        page.keyboard.press("End")
        for _ in range(3):
            page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowRight")
        version = total - 2
        expect(page.get_by_text(f"Version {version} of {total}")).to_be_visible()
        expect(page.get_by_role("slider", name="Version")).to_have_value(str(version))
        current = page.get_by_role("list", name="Events").locator("[aria-current=step]")
        expect(current).to_have_count(1)
        expect(current).to_have_text(re.compile(rf"^{version} "))

        # The board shown is the state as it was at that version.
        then = server.api("GET", f"/v1/games/{game_id}?version={version}")
        expect(page.get_by_role("group", name=f"Board at version {version}")).to_be_visible()
        for column in then["columns"]:
            number = column["column"]
            label = (
                page.get_by_role("img", name=re.compile(rf"^Column {number} \(")).get_attribute(
                    "aria-label"
                )
                or ""
            )
            if column["claimed_by"] is not None:
                assert label.endswith(f"claimed by {name_at(then, column['claimed_by'])}"), label
                continue
            for player in then["players"]:
                at = player["markers"].get(str(number))
                mark = f"{name_at(then, player['seat'])} at "
                if at:
                    assert f"{mark}{at}" in label, (label, then["players"])
                else:
                    assert mark not in label, (label, then["players"])
            runner = (then["turn"] or {}).get("runners", {}).get(str(number))
            assert (f"runner at {runner}" in label) if runner else ("runner" not in label), label
        svg = page.get_by_role("link", name="Board picture at this version (SVG)")
        expect(svg).to_have_attribute("href", f"/v1/games/{game_id}/board.svg?version={version}")
        for name in ("Export: every event (NDJSON)",):
            expect(page.get_by_role("link", name=name)).to_be_visible()
        expect(page.get_by_role("link", name="PDF")).to_have_count(2)
        axe(page, "the replay")
        shot(page, "replay")


def name_at(state: dict[str, Any], seat: int) -> str:
    return f"{state['players'][seat]['name']} (seat {seat})"


def test_a_solitaire_game_to_the_end_and_its_record_sheet_downloaded(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, _watch):
        page = ctx.new_page()
        page.goto("/")
        page.get_by_label("Your name").fill("Sol")
        page.get_by_label("Real dice: type in what you rolled (not ranked)").check()
        page.get_by_role("button", name="Play solitaire").click()
        page.wait_for_url(re.compile(r"/games/[0-9a-f-]{36}$"))
        expect(page.get_by_role("heading", name="Solitaire: Sol")).to_be_visible()
        expect(
            page.get_by_text(re.compile(r"turns taken: 0 · target: 30 or fewer"))
        ).to_be_visible()
        for column, height in HEIGHTS.items():
            low = max(1, column - 6)
            dice = [low, column - low, low, column - low]
            column_image = page.get_by_role("img", name=re.compile(rf"^Column {column} \("))
            while f"runner at {height}" not in (column_image.get_attribute("aria-label") or ""):
                for i, value in enumerate(dice, start=1):
                    page.get_by_label(f"Die {i}").fill(str(value))
                page.get_by_role("button", name="Roll", exact=True).click()
                double = page.get_by_role("button", name=f"Move {column} and {column}")
                single = page.get_by_role("button", name=f"Move {column}", exact=True)
                expect(double.or_(single).first).to_be_visible()
                (double if double.count() else single).click()
                expect(page.get_by_role("button", name="Stop")).to_be_visible()
            page.get_by_role("button", name="Stop").click()
            expect(column_image).to_have_attribute(
                "aria-label", re.compile(r"claimed by Sol \(seat 0\)$")
            )
        expect(page.get_by_text("Sol claimed every column in 11 turns")).to_be_visible()
        expect(
            page.get_by_text(re.compile(r"turns taken: 11 · target: 30 or fewer · rating: "))
        ).to_be_visible()
        expect(page.get_by_role("button", name="Play again")).to_be_visible()
        expect(page.get_by_role("button", name="Rematch")).to_have_count(0)
        shot(page, "solitaire-finished")
        with page.expect_download() as download:
            page.get_by_role("link", name="Download the record sheet (PDF)").click()
        pdf = Path(download.value.path()).read_bytes()
        assert pdf.startswith(b"%PDF")
        text = "".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages)
        assert "Sol" in text


def test_a_whole_game_on_a_phone_with_a_name_that_looks_like_markup(
    server: Server, browser: Browser
) -> None:
    name = '<script>alert("x")</script><b>Zoë'
    phone = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
    with context(browser, server, **phone) as (ctx, watch):
        page = ctx.new_page()
        page.goto("/")
        no_sideways_scroll(page)
        shot(page, "phone-lobby")
        game_id = create_in_lobby(page, name, opponent="Random")
        heading = page.get_by_role("heading", level=1)
        expect(heading).to_have_text(f"{name} vs Random")  # shown as text, never run
        no_sideways_scroll(page)
        shot(page, "phone-game")
        play_to_the_end(page)
        no_sideways_scroll(page)
        shot(page, "phone-game-finished")
        token = held_token(page, game_id)

        page.get_by_role("button", name="Forget this seat").click()
        page.get_by_role("button", name="Yes, forget it").click()
        expect(page.get_by_text("You are watching this game.")).to_be_visible()
        assert page.evaluate(f"localStorage.getItem('cantstop:seat:{game_id}')") is None
        page.reload()
        expect(heading).to_have_text(f"{name} vs Random")  # server-rendered, escaped
        page.goto(f"/games/{game_id}/replay")
        expect(page.get_by_role("heading", level=1)).to_have_text(f"Replay: {name} vs Random")
        no_sideways_scroll(page)
        shot(page, "phone-replay")
        check_token_never_left_the_browser(server, watch, page, token)
    assert not watch.dialogs  # no alert() ever ran


def test_an_open_seat_is_taken_from_the_lobby_and_the_players_ask_for_a_rematch(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, _w), context(browser, server) as (ctx2, _w2):
        host = ctx.new_page()
        host.goto("/")
        host.get_by_label("Your name").fill("Hosting Hal")
        host.get_by_label("Seat 1").select_option(label="Open seat (anyone may join)")
        host.get_by_role("button", name="Create game").click()
        host.wait_for_url(re.compile(r"/games/[0-9a-f-]{36}$"))
        game_id = game_id_of(host)
        expect(host.get_by_text("Waiting for 1 more player")).to_be_visible()
        expect(
            host.get_by_text("1 seat is open. Others join from the lobby, or here:")
        ).to_be_visible()

        guest = ctx2.new_page()
        guest.goto("/")
        guest.get_by_label("Your name").fill("Joining Jo")
        guest.get_by_role("button", name="Join the game of Hosting Hal").click()
        guest.wait_for_url(re.compile(rf"/games/{game_id}$"))
        expect(guest.get_by_text("You play Joining Jo (seat 1), orange.")).to_be_visible()
        assert "token" not in guest.url
        expect(host.get_by_role("heading", level=1)).to_have_text("Hosting Hal vs Joining Jo")

        guest.get_by_role("button", name="Resign").click()
        guest.get_by_role("button", name="Yes, resign").click()
        for page in (guest, host):  # the host's page hears it live
            expect(page.get_by_text("Hosting Hal won (the last player left)")).to_be_visible()
        state = server.api("GET", f"/v1/games/{game_id}")
        assert state["winner"] == 0 and state["players"][1]["resigned"]

        host.get_by_role("button", name="Rematch").click()
        host.wait_for_url(lambda url: game_id not in url and "/games/" in url)
        rematch_id = game_id_of(host)
        assert "token" not in host.url
        expect(host.get_by_text("You play Hosting Hal (seat 0), blue.")).to_be_visible()
        guest.get_by_role("button", name="Rematch").click()
        guest.wait_for_url(re.compile(rf"/games/{rematch_id}$"))
        again = server.api("GET", f"/v1/games/{rematch_id}")
        assert again["rematch_of"] == game_id and again["status"] == "in_progress"
        for made in (game_id, rematch_id):  # each seed committed before the page chose its own
            created = server.api("GET", f"/v1/games/{made}/events?limit=1")["events"][0]["data"]
            assert created["seed_committed_at"] is not None and created["client_seed"] != made
        for page in (host, guest):
            expect(page.get_by_role("button", name="Resign")).to_be_visible()


def test_the_creator_hands_out_a_seat_by_its_link_shown_once(
    server: Server, browser: Browser
) -> None:
    with context(browser, server) as (ctx, _w), context(browser, server) as (ctx2, _w2):
        page = ctx.new_page()
        page.goto("/")
        page.get_by_label("Your name").fill("Ann")
        page.get_by_label("Seat 1").select_option(label="Person (you hand them a link)")
        page.get_by_label("Name", exact=True).fill("Bob")
        page.get_by_role("button", name="Create game").click()
        link = page.get_by_label("Link for Bob (seat 1)")
        expect(link).to_have_value(re.compile(r"/games/[0-9a-f-]{36}#token=[^&]+&seat=1$"))
        bob_link = link.input_value()
        axe(page, "the lobby handing out a seat")
        page.get_by_role("link", name="Go to your game").click()
        page.wait_for_url(re.compile(r"/games/[0-9a-f-]{36}$"))
        expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()

        bob = ctx2.new_page()
        bob.goto(bob_link)
        expect(bob.get_by_text("You play Bob (seat 1), orange.")).to_be_visible()
        assert "token" not in bob.url
        token = bob_link.split("#token=", 1)[1].split("&", 1)[0]
        assert token not in server.log()


# A two-player game with manual dice, Ann first: the test plays Ann's turn through the API.
ANN_AND_BOB = {"players": ["Ann", "Bob"], "dice": "manual", "first_player": 0}


def ann_to_play(server: Server) -> tuple[str, str, str]:
    """A new ANN_AND_BOB game: its id, Ann's token and the path of its actions."""
    created = server.api("POST", "/v1/games", ANN_AND_BOB)
    game_id = created["game"]["id"]
    return game_id, created["seats"][0]["token"], f"/v1/games/{game_id}/actions"


def test_a_link_with_the_token_alone_finds_its_seat_at_once(
    server: Server, browser: Browser
) -> None:
    """The contract's link carries only ``#token=``: the page asks which seat it holds before
    anyone acts, and shows the controls only on that seat's turn."""
    created = server.api("POST", "/v1/games", ANN_AND_BOB)
    game_id, ann, bob = created["game"]["id"], *(s["token"] for s in created["seats"])
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        page.goto(f"/games/{game_id}#token={bob}")
        expect(page.get_by_text("You play Bob (seat 1), orange.")).to_be_visible()
        assert "token" not in page.url
        expect(page.get_by_role("button", name="Resign")).to_be_visible()
        expect(page.get_by_role("button", name="Roll")).to_have_count(0)  # Ann's turn
        path = f"/v1/games/{game_id}/actions"
        rolled = server.api("POST", path, {"type": "roll", "dice": [1, 2, 3, 4]}, ann)
        server.api("POST", path, rolled["game"]["legal_actions"][0], ann)
        server.api("POST", path, {"type": "stop"}, ann)
        expect(page.get_by_role("button", name="Roll")).to_be_visible()  # Bob's, heard live
        assert not watch.errors
    assert bob not in server.log()


def test_dice_typed_while_the_seat_is_looked_up_are_kept_and_rolled(
    server: Server, browser: Browser
) -> None:
    """A bare ``#token=`` link: the page draws the controls at once (the seat unknown, the turn
    may be this token's) and asks which seat it holds. The dice Ann types before that answer
    comes are still there after it (the controls are drawn again for the seat found), and Roll
    sends them. The answer is held back here until they are typed; on a loaded machine it
    came late by itself, and the Roll that followed asked for the dice again."""
    created = server.api("POST", "/v1/games", ANN_AND_BOB)
    game_id, ann = created["game"]["id"], created["seats"][0]["token"]
    held: list[Route] = []
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()

        def hold(route: Route) -> None:
            held.append(route)

        page.route(f"**/v1/games/{game_id}/seat", hold)
        page.goto(f"/games/{game_id}#token={ann}")
        for i, die in enumerate([1, 2, 3, 4], start=1):
            page.get_by_label(f"Die {i}").fill(str(die))
        page.get_by_label("Die 4").focus()
        deadline = time.monotonic() + 15
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(50)
        assert held, "the page never asked which seat its token holds"
        held[0].continue_()
        page.wait_for_function(
            "key => (JSON.parse(localStorage.getItem(key) || '{}')).seat === 0",
            arg=f"cantstop:seat:{game_id}",
        )
        expect(page.get_by_text("You play Ann (seat 0), blue.")).to_be_visible()
        for i, die in enumerate([1, 2, 3, 4], start=1):
            expect(page.get_by_label(f"Die {i}")).to_have_value(str(die))
        expect(page.get_by_label("Die 4")).to_be_focused()
        shot(page, "game-manual-dice")
        page.get_by_role("button", name="Roll").click()
        expect(page.get_by_role("button", name=re.compile(r"^Move "))).not_to_have_count(0)
        assert not watch.errors
    events = server.api("GET", f"/v1/games/{game_id}/events")["events"]
    assert [e["data"]["dice"] for e in events if e["type"] == "DiceRolled"] == [[1, 2, 3, 4]]


def test_an_imported_game_in_progress_offers_its_replay_not_play(
    server: Server, browser: Browser
) -> None:
    """An imported game is kept for reading: its page says so, has no button to act (not even
    with one of the original game's tokens in the link), and shows no running clock."""
    created = server.api("POST", "/v1/games", {**ANN_AND_BOB, "clock": {"turn_seconds": 5}})
    game_id, ann = created["game"]["id"], created["seats"][0]["token"]
    path = f"/v1/games/{game_id}/actions"
    rolled = server.api("POST", path, {"type": "roll", "dice": [1, 2, 3, 4]}, ann)
    server.api("POST", path, rolled["game"]["legal_actions"][0], ann)
    transcript = {
        "players": ["Ann", "Bob"],
        "actions": [{"type": "roll", "dice": [1, 2, 3, 4]}, rolled["game"]["legal_actions"][0]],
    }
    imported = server.api("POST", "/v1/games/import", {"transcript": transcript})["game"]
    assert imported["status"] == "in_progress" and imported["legal_actions"] == []
    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        page.goto(f"/games/{imported['id']}#token={ann}")
        expect(page.get_by_text("Imported for audit")).to_be_visible()
        expect(page.get_by_role("link", name="Replay it")).to_be_visible()
        expect(page.get_by_text("An imported game has no seat to play.")).to_be_visible()
        for name in ("Roll", "Stop", "Resign"):
            expect(page.get_by_role("button", name=name)).to_have_count(0)
        expect(page.get_by_text("Waiting for")).to_have_count(0)
        assert not watch.errors


# The two pages that follow a game live, and the list of its events on each.
FOLLOWING_PAGES = pytest.mark.parametrize(
    ("page_path", "listed"),
    [("", "#history li[data-version]"), ("/replay", "#events li[data-version]")],
    ids=["game", "replay"],
)


@FOLLOWING_PAGES
def test_a_page_whose_stream_was_refused_follows_again_once_the_server_has_room(
    browser: Browser, tmp_path: Path, page_path: str, listed: str
) -> None:
    """A worker with room for one stream: a second page's stream is refused (503
    too_many_streams). Once the first page is closed, the second reads what it missed and
    follows live again."""
    with started_server(tmp_path, free_port(), {"CANTSTOP_STREAM_MAX": "1"}) as server:
        game_id, ann, path = ann_to_play(server)
        with context(browser, server) as (ctx, watch):
            first = ctx.new_page()
            first.goto(f"/games/{game_id}")
            rolled = server.api("POST", path, {"type": "roll", "dice": [1, 2, 3, 4]}, ann)
            # heard live: the first page holds the worker's one stream
            expect(first.locator("#history li[data-version]").last).to_have_attribute(
                "data-version", str(rolled["game"]["version"])
            )

            second = ctx.new_page()
            second.goto(f"/games/{game_id}{page_path}")
            listed_events = second.locator(listed)
            expect(listed_events).to_have_count(rolled["game"]["version"])
            deadline = time.monotonic() + 15
            while not any("status of 503" in e for e in watch.errors):
                assert time.monotonic() < deadline, watch.errors
                second.wait_for_timeout(100)
            missed = server.api("POST", path, rolled["game"]["legal_actions"][0], ann)["game"]

            first.close()  # the stream is free: the second page reads what it missed
            expect(listed_events.last).to_have_attribute(
                "data-version", str(missed["version"]), timeout=15_000
            )
            stopped = server.api("POST", path, {"type": "stop"}, ann)["game"]  # and follows
            expect(listed_events.last).to_have_attribute("data-version", str(stopped["version"]))
            expect(listed_events.last).to_contain_text("Ann stopped")
            second.close()
            refused = [e for e in watch.errors if "status of 503" in e]
            watch.errors[:] = [e for e in watch.errors if e not in refused]


@FOLLOWING_PAGES
def test_a_page_open_while_the_store_goes_back_to_a_backup_starts_over_from_the_store(
    browser: Browser, tmp_path: Path, page_path: str, listed: str
) -> None:
    """The server stops, its store is restored to an earlier version of the game (its last
    events gone), and it starts again: the stream refuses to resume after an event the store no
    longer has. The page (the game's, or its replay) reads the game, sees it behind, and starts
    over; it follows live."""
    port = free_port()
    with started_server(tmp_path, port, {}) as server:
        game_id, ann, path = ann_to_play(server)
        rolled = server.api("POST", path, {"type": "roll", "dice": [1, 2, 3, 4]}, ann)
        kept = server.api("POST", path, rolled["game"]["legal_actions"][0], ann)["game"]
        rolled = server.api("POST", path, {"type": "roll", "dice": [2, 3, 4, 5]}, ann)
        shown = server.api("POST", path, rolled["game"]["legal_actions"][0], ann)["game"]
        assert shown["version"] == kept["version"] + 2

        with context(browser, server) as (ctx, watch):
            not_found: list[str] = []
            ctx.on("response", lambda r: not_found.append(r.url) if r.status == 404 else None)
            page = ctx.new_page()
            page.goto(f"/games/{game_id}{page_path}")
            history = page.locator(listed)
            expect(history.last).to_have_attribute("data-version", str(shown["version"]))

            server.served.stop()
            with sqlite3.connect(tmp_path / "server.sqlite") as db:  # the backup, as restored
                db.execute(
                    "DELETE FROM stored_events WHERE originator_id = ? AND originator_version > ?",
                    (uuid.UUID(game_id).hex, kept["version"]),
                )
            with started_server(tmp_path, port, {}):  # the same port and store
                expect(history.last).to_have_attribute(
                    "data-version", str(kept["version"]), timeout=30_000
                )
                expect(history).to_have_count(kept["version"])
                server.api("POST", path, {"type": "stop"}, ann)  # recorded after the restore
                expect(history.last).to_have_attribute("data-version", str(kept["version"] + 1))
                expect(history.last).to_contain_text("Ann stopped")
                if page_path:  # the replay shows the newest version, as it did before
                    last = kept["version"] + 1
                    expect(page.locator("#version-line")).to_have_text(f"Version {last} of {last}")
                page.close()  # before the server stops: its stream would report that as well
            # The browser reports on the console the stream's refusal: 422 (cannot resume after
            # a version the store does not have), or 503 when it asked while the first server
            # was shutting down and read the game only once the second had started; and, if it
            # tried while the server was down, the refused connection: expected here, and
            # nothing else.
            refused = [e for e in watch.errors if "status of 422" in e or "status of 503" in e]
            assert refused, watch.errors
            down = [e for e in watch.errors if "ERR_CONNECTION_REFUSED" in e]
            # And the analysis of the game as it stood (a job the page waits on), asked for
            # again before the page started over: 404 for a version the store no longer has.
            # Nothing else is not found.
            asked = f"/v1/games/{game_id}/analysis?version="
            gone = [u for u in not_found if asked in u and int(u.split(asked)[1]) > kept["version"]]
            assert gone == not_found, not_found
            missing = [e for e in watch.errors if "status of 404" in e]
            assert len(missing) <= len(gone), watch.errors
            watch.errors[:] = [e for e in watch.errors if e not in refused + down + missing]


def test_a_roll_that_failed_is_sent_again_with_its_entropy_and_key(
    server: Server, browser: Browser
) -> None:
    """The server's answer to a roll is lost (here: the browser's request fails once): the next
    click on Roll sends the same entropy under the same Idempotency-Key, so a server that drops
    the rolls it dislikes gets the same dice back. Once a roll is answered, the next one is new."""
    created = server.api("POST", "/v1/games", {"players": ["Ann", "Bob"]})  # server dice
    game_id, to_act = created["game"]["id"], created["game"]["turn"]["player"]
    token = created["seats"][to_act]["token"]
    sent: list[tuple[str, str | None]] = []

    def first_fails(route: Route) -> None:
        request = route.request
        body = request.post_data_json or {}
        if request.method == "POST" and body.get("type") == "roll":
            sent.append((body["entropy"], request.headers["idempotency-key"]))
            if len(sent) == 1:
                route.abort()
                return
        route.continue_()

    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        page.route(f"**/v1/games/{game_id}/actions", first_fails)
        page.goto(f"/games/{game_id}#token={token}")
        page.get_by_role("button", name="Roll").click()
        expect(page.get_by_text("The server cannot be reached; try again.")).to_be_visible()
        page.get_by_role("button", name="Roll").click()
        expect(page.get_by_role("button", name=re.compile(r"^Move "))).not_to_have_count(0)
        assert len(sent) == 2 and sent[1] == sent[0]
        page.get_by_role("button", name=re.compile(r"^Move ")).first.click()
        page.get_by_role("button", name="Roll").click()
        poll_until = time.monotonic() + 10
        while len(sent) < 3 and time.monotonic() < poll_until:
            page.wait_for_timeout(50)
        assert len(sent) == 3
        assert sent[2][0] != sent[0][0] and sent[2][1] != sent[0][1]
        watch.errors[:] = [
            e for e in watch.errors if "ERR_FAILED" not in e
        ]  # the failure made here
    events = server.api("GET", f"/v1/games/{game_id}/events")["events"]
    rolls = [e for e in events if e["type"] in ("DiceRolled", "TurnBusted")]
    assert rolls and rolls[0]["data"]["entropy"] == sent[0][0]
