"""The pages in a real browser: Debian's Chromium (``/usr/bin/chromium``, which ``make test``
installs when it is missing) driven by Playwright, against ``cantstop serve`` in a subprocess.

What tests/test_pages_*.py share: the server they drive, Chromium launched (tests/conftest.py's
``browser`` fixture, one per module), a browser context whose console errors and dialogs fail the
test, the vendored axe-core's scan, and screenshots kept under ``var/screenshots/``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    expect,
    sync_playwright,
)

from tests.support.http import HOST, send
from tests.support.servers import Served, free_port, serving

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = ROOT / "var" / "screenshots"
AXE_URL = "/assets/vendor/axe-core/axe.min.js"


# ------------------------------------------------------------------------------ the server
@dataclass
class Server:
    """A ``cantstop serve`` the pages are driven against: its base URL, its port and its process
    (whose output, the access log included when it is on, is in a log file)."""

    base: str
    port: int
    served: Served

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        """The JSON answer of a request that succeeds (None when its body is empty)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        reply = send(self.port, method, path, body, headers)
        assert reply.status < 300, (method, path, reply.status, reply.body[:300])
        return reply.json() if reply.body else None

    def status(self, method: str, path: str, token: str | None = None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return send(self.port, method, path, None, headers).status

    def export(self, game_id: str) -> bytes:
        reply = send(self.port, "GET", f"/v1/games/{game_id}/export")
        assert reply.status == 200, reply.body[:300]
        return reply.body

    def log(self) -> str:
        return self.served.log.read_text(errors="replace")


# The pages' server: computer players move at once, and 32 threads, so that a page's streams
# (each holds one) leave room for its requests. ``ACCESS_LOG`` adds the access log to the
# server's output, where a test checks that no token ever appears.
PAGE_ENV = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_THREADS": "32"}
ACCESS_LOG = {**PAGE_ENV, "CANTSTOP_ACCESS_LOG": "-"}


@contextlib.contextmanager
def started_server(
    tmp_path: Path, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """``cantstop serve`` with one worker on ``port`` (a free one by default), its store (and
    its development receipt key) in ``tmp_path``: a module's server, or a test's own (one it
    stops and starts again on the same store, or limits)."""
    port = free_port() if port is None else port
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env=PAGE_ENV if env is None else env, ready_port=port) as served:
        yield Server(f"http://{HOST}:{port}", port, served)


# ----------------------------------------------------------------------------- accounts
PASSWORD = "correct horse battery"  # the pages' accounts' password


def kept_account(page: Page) -> dict[str, Any] | None:
    """What the browser keeps of its sign-in (api.js: localStorage ``cantstop:account``)."""
    raw = page.evaluate("localStorage.getItem('cantstop:account')")
    return None if raw is None else dict(json.loads(raw))


def sign_up(page: Page, handle: str) -> str:
    """Sign up on the account page; the personal token the browser keeps."""
    page.goto("/account")
    form = page.get_by_role("form", name="Sign up")
    form.get_by_label("Handle").fill(handle)
    form.get_by_label("Password").fill(PASSWORD)
    form.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", name=f"Signed in as {handle}")).to_be_visible()
    kept = kept_account(page)
    assert kept is not None and kept["handle"] == handle
    token = kept["token"]
    assert isinstance(token, str) and token.startswith("cst_")
    return token


# ----------------------------------------------------------------------------- the browser
@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium launched headless by Playwright, closed afterwards."""
    assert CHROMIUM.exists(), (
        "Debian's chromium is not installed: `apt-get install chromium` (make test does it)"
    )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Watch:
    """What a browser context did: every request URL, console errors, dialogs."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        def console(message: ConsoleMessage) -> None:
            if message.type == "error":
                self.errors.append(f"{page.url}: {message.text}")

        page.on("console", console)
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: {exc}"))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", dialog)


@contextlib.contextmanager
def context(
    browser: Browser, base_or_server: Server | str, **options: Any
) -> Iterator[tuple[BrowserContext, Watch]]:
    """A browser context on a server (or its base URL), 1280×900 unless ``options`` say
    otherwise (``browser.new_context``'s); closed afterwards, when it must have had no console
    error and no dialog."""
    base = base_or_server if isinstance(base_or_server, str) else base_or_server.base
    options.setdefault("viewport", {"width": 1280, "height": 900})
    ctx = browser.new_context(base_url=base, **options)
    ctx.set_default_timeout(15_000)
    watch = Watch()

    def request(r: Request) -> None:
        watch.requests.append(r.url)

    ctx.on("request", request)
    ctx.on("page", watch.attach)
    try:
        yield ctx, watch
    finally:
        ctx.close()
    assert not watch.errors, watch.errors
    assert not watch.dialogs, watch.dialogs


# ------------------------------------------------------------------------------ the checks
def shot(page: Page, name: str) -> None:
    """A screenshot of the whole page, kept as ``var/screenshots/{name}.png``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def axe(page: Page, what: str) -> None:
    """No serious or critical violation of axe-core's rules on the page as it is now."""
    page.add_script_tag(url=AXE_URL)  # served from the app itself: allowed by the page's CSP
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:5]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"axe on {what}:\n" + "\n".join(bad)
