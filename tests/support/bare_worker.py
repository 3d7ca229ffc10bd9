"""gunicorn with the service's worker class (service/server.py) serving a bare WSGI app, and a
raw exchange with it: what the worker itself does with bytes on the wire, the app aside
(tests/test_server_worker.py, tests/test_server_framing.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.http import HOST
from tests.support.polling import wait_until
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent

APP = """
import gc

def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/frozen":  # how many objects the worker set aside from the collector's passes
        body = str(gc.get_freeze_count()).encode()
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]
    if path == "/parts":  # no length: chunked on HTTP/1.1, up to the close on HTTP/1.0
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (b"part%d;" % i for i in range(3))
    if path == "/unread":  # answered without reading the body
        start_response("403 Forbidden", [("Content-Length", "2")])
        return [b"no"]
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""


@contextlib.contextmanager
def bare_server(folder: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """gunicorn with the service's worker class serving the bare app; its port."""
    (folder / "bare.py").write_text(APP)
    chosen = free_port()
    log = (folder / "log").open("wb")
    process = subprocess.Popen(
        [
            *(str(BIN / "gunicorn"), "-k", "service.server.ServiceWorker", "--threads", "4"),
            *("-b", f"{HOST}:{chosen}", "--chdir", str(folder), "bare:app"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})},
    )

    def up() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((HOST, chosen), 1):
            return True
        return False

    try:
        wait_until(up, 30, "the bare app")
        yield chosen
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` at once, then read until the server closes the connection."""
    with socket.create_connection((HOST, port), timeout=10) as raw:
        raw.sendall(data)
        return raw.makefile("rb").read()
