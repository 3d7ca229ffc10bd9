"""Receipts in the pages (contract 1.2, "Receipts and analysis"), in a real browser: Debian's
Chromium driven by Playwright, against ``cantstop serve`` in a subprocess, as
tests/test_pages_browser.py drives the game pages.

The game page keeps the server's signed receipt of every action's answer in the browser's storage
(``cantstop:receipts``, the latest per game, for the 200 games most recently acted in) and the
server's public keys beside it (``cantstop:receipt-keys``). The replay page checks the game's export
against the receipt held: the signature with WebCrypto's Ed25519, and the receipt's version, hash
and time in the export. A history cut after the server acknowledged a version, one rewritten
since, and a receipt whose signature was altered each get their own verdict, in a live region.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import Server, axe, context, shot, started_server
from tests.support.http import HOST
from tests.support.servers import CANTSTOP, free_port

ANN_AND_BOB = {"players": ["Ann", "Bob"], "dice": "manual", "first_player": 0}
RECEIPTS = "cantstop:receipts"
KEYS = "cantstop:receipt-keys"
CHECK = "Check the history against my receipt"

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("receipt-pages")) as started:
        yield started


# ------------------------------------------------------------------------------- helpers
def stored(page: Page, key: str) -> Any:
    raw = page.evaluate("key => localStorage.getItem(key)", key)
    return None if raw is None else json.loads(raw)


def store(page: Page, key: str, value: Any) -> None:
    page.evaluate("([key, value]) => localStorage.setItem(key, value)", [key, json.dumps(value)])


def roll_and_move(page: Page, dice: list[int]) -> None:
    """On the game page, Ann's turn: type in the dice, roll, and take the first move offered."""
    for i, die in enumerate(dice, start=1):
        page.get_by_label(f"Die {i}").fill(str(die))
    page.get_by_role("button", name="Roll").click()
    page.get_by_role("button", name=re.compile(r"^Move ")).first.click()
    expect(page.get_by_role("button", name="Stop")).to_be_visible()


def check_receipt(page: Page, game_id: str, verdict: str) -> None:
    """Open the game's replay, ask for the check, and read the verdict the live region says."""
    page.goto(f"/games/{game_id}/replay")
    section = page.get_by_role("region", name="Your receipt")
    section.get_by_role("button", name=CHECK).click()
    expect(section.get_by_role("status")).to_have_text(verdict)


def wait_for_receipt(page: Page, game_id: str, version: int) -> None:
    """Until the browser's storage holds the game's receipt of ``version``."""
    page.wait_for_function(
        "([key, id, v]) => (JSON.parse(localStorage.getItem(key) || '{}')[id] || {}).version === v",
        arg=[RECEIPTS, game_id, version],
    )


def audit_offline(folder: Path) -> subprocess.CompletedProcess[str]:
    """`cantstop audit --receipt` on the receipt, keys and export saved in ``folder``."""
    return subprocess.run(
        [CANTSTOP, "audit", "--receipt", "receipt.json", "--keys", "keys.json", "export.ndjson"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def tampered(signature: str) -> str:
    """The signature with its first character changed (still base64url)."""
    return ("B" if signature[0] == "A" else "A") + signature[1:]


# --------------------------------------------------------------------------------- tests
def test_a_receipt_kept_while_playing_checks_the_history_and_names_a_cut_and_a_rewrite(
    browser: Browser, tmp_path: Path
) -> None:
    """Ann plays from the game page: the browser keeps the latest receipt (the very one the
    server signs for that version) and the server's keys. The replay page finds the history
    matching it; the same receipt with its signature altered does not verify. The server's store
    then loses the last events it acknowledged (restored from a backup): the history is cut
    before the receipt's version. Once the game goes on from there, the history differs at it.
    The receipt and the keys the page saves are those `cantstop audit --receipt` checks offline."""
    port = free_port()
    # One browser throughout, its storage kept while the server is restored from a backup and
    # started again on the same port (the same origin), store and key.
    with context(browser, f"http://{HOST}:{port}", accept_downloads=True) as (ctx, _watch):
        with started_server(tmp_path, port) as server:
            created = server.api("POST", "/v1/games", ANN_AND_BOB)
            game_id, ann = created["game"]["id"], created["seats"][0]["token"]
            page = ctx.new_page()
            page.goto(f"/games/{game_id}#token={ann}")
            roll_and_move(page, [1, 2, 3, 4])
            kept = server.api("GET", f"/v1/games/{game_id}")["version"]
            wait_for_receipt(page, game_id, kept)
            roll_and_move(page, [2, 3, 4, 5])
            acknowledged = server.api("GET", f"/v1/games/{game_id}")["version"]
            assert acknowledged == kept + 2
            wait_for_receipt(page, game_id, acknowledged)
            receipt = stored(page, RECEIPTS)[game_id]
            # Ed25519 signs deterministically: the server's receipt of this version, exactly
            assert receipt == server.api("GET", f"/v1/games/{game_id}/receipt")
            page.wait_for_function("key => localStorage.getItem(key) !== null", arg=KEYS)
            keys = server.api("GET", "/v1/keys")
            assert stored(page, KEYS) == keys

            matches = f"The server's history matches your receipt of version {acknowledged}."
            check_receipt(page, game_id, matches)
            section = page.get_by_role("region", name="Your receipt")
            expect(section.get_by_text("signature: passed")).to_be_visible()
            expect(section.get_by_text("history: passed")).to_be_visible()
            axe(page, "the replay with its receipt checked")
            shot(page, "replay-receipt")

            saved = tmp_path / "saved"
            saved.mkdir()
            for name, target in (
                ("Save my receipt (JSON)", "receipt.json"),
                ("Save the keys kept to check it (JSON)", "keys.json"),
            ):
                with page.expect_download() as download:
                    section.get_by_role("link", name=name).click()
                download.value.save_as(saved / target)
            assert json.loads((saved / "receipt.json").read_text()) == receipt
            assert json.loads((saved / "keys.json").read_text()) == keys
            (saved / "export.ndjson").write_bytes(server.export(game_id))
            offline = audit_offline(saved)
            assert offline.returncode == 0, offline.stdout + offline.stderr

            altered = {**receipt, "signature": tampered(receipt["signature"])}
            store(page, RECEIPTS, {game_id: altered})
            check_receipt(page, game_id, "The receipt's signature does not verify.")
            expect(section.get_by_text("signature: failed")).to_be_visible()
            store(page, RECEIPTS, {game_id: receipt})
            page.close()  # before the server stops: the replay's stream would report that

            server.served.stop()
            with sqlite3.connect(tmp_path / "server.sqlite") as db:  # the backup, as restored
                db.execute(
                    "DELETE FROM stored_events WHERE originator_id = ? AND originator_version > ?",
                    (uuid.UUID(game_id).hex, kept),
                )

        with started_server(tmp_path, port) as server:
            page = ctx.new_page()
            cut = f"The history is cut before version {acknowledged} that the server acknowledged."
            check_receipt(page, game_id, cut)
            section = page.get_by_role("region", name="Your receipt")
            expect(section.get_by_text("history: failed")).to_be_visible()
            expect(section.get_by_text("signature: passed")).to_be_visible()
            axe(page, "the replay of a cut history")
            shot(page, "replay-receipt-cut")
            (saved / "export.ndjson").write_bytes(server.export(game_id))
            offline = audit_offline(saved)
            assert offline.returncode == 1, offline.stdout + offline.stderr

            path = f"/v1/games/{game_id}/actions"  # the game goes on from the backup
            rolled = server.api("POST", path, {"type": "roll", "dice": [1, 2, 3, 4]}, ann)
            moved = server.api("POST", path, rolled["game"]["legal_actions"][0], ann)
            assert moved["receipt"]["version"] == acknowledged
            assert moved["receipt"]["hash"] != receipt["hash"]
            check_receipt(page, game_id, f"The history differs at version {acknowledged}.")
            page.close()


def test_a_receipt_without_its_key_held_is_checked_with_the_keys_the_server_publishes(
    server: Server, browser: Browser
) -> None:
    """A receipt put in the browser's storage by hand (as from another browser), no key held:
    the check reads the server's keys, says so, and keeps them. A game without a receipt held has
    no section "Your receipt"."""
    created = server.api("POST", "/v1/games", ANN_AND_BOB)
    game_id, ann = created["game"]["id"], created["seats"][0]["token"]
    rolled = server.api(
        "POST", f"/v1/games/{game_id}/actions", {"type": "roll", "dice": [1, 2, 3, 4]}, ann
    )
    other = server.api("POST", "/v1/games", ANN_AND_BOB)["game"]["id"]
    with context(browser, server.base) as (ctx, _watch):
        page = ctx.new_page()
        page.goto(f"/games/{other}/replay")
        expect(page.get_by_text("Version 2 of 2")).to_be_visible()
        expect(page.get_by_role("region", name="Your receipt")).to_have_count(0)
        expect(page.get_by_role("button", name=CHECK)).to_have_count(0)

        store(page, RECEIPTS, {game_id: rolled["receipt"]})
        version = rolled["receipt"]["version"]
        check_receipt(
            page, game_id, f"The server's history matches your receipt of version {version}."
        )
        expect(page.get_by_text("as the server publishes it now")).to_be_visible()
        assert stored(page, KEYS) == server.api("GET", "/v1/keys")


def test_the_browser_keeps_the_latest_receipt_of_the_200_games_most_recently_played(
    server: Server, browser: Browser
) -> None:
    """The store of receipts only ever moves forward in a game's versions, and forgets the games
    least recently played beyond 200."""
    with context(browser, server.base) as (ctx, _watch):
        page = ctx.new_page()
        page.goto("/")
        kept = page.evaluate(
            """async () => {
          const { keepReceipt } = await import("/assets/js/api.js");
          const receipt = (n, version) => ({
            game_id: `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`,
            version, hash: `h${n}-${version}`, at: "2026-11-27T00:00:00.000000Z",
            key_id: "ed25519-0", signature: "AA",
          });
          const answers = [];
          for (let n = 0; n < 205; n++) answers.push(keepReceipt(receipt(n, 5)));
          answers.push(keepReceipt(receipt(204, 4)));  // older: refused
          answers.push(keepReceipt(receipt(204, 5)));  // the same: nothing new
          answers.push(keepReceipt(receipt(10, 6)));   // later: kept, now the most recent
          answers.push(keepReceipt({ game_id: "x", version: 0 }));  // not a receipt
          return answers.slice(200);
        }"""
        )
        assert kept == [True] * 5 + [False, False, True, False]
        held = stored(page, RECEIPTS)
        assert len(held) == 200
        ids = list(held)
        assert ids[-1].endswith("000000000010") and held[ids[-1]]["version"] == 6
        assert not any(i.endswith(f"{n:012d}") for i in ids for n in range(5))
        assert ids[0].endswith("000000000005")  # the least recently kept: the first to go next
        assert held[ids[-2]]["version"] == 5 and ids[-2].endswith("000000000204")
