"""Real servers for a test: ``cantstop serve`` subprocesses on free ports, stopped afterwards;
an app's scheduling loop in a thread."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from flask import Flask

from tests.support.http import HOST, call
from tests.support.polling import wait_until

CANTSTOP = Path(sys.executable).parent / "cantstop"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """``cantstop serve`` as a subprocess with a clean ``CANTSTOP_*`` environment (SQLite in
    ``tmp`` unless told otherwise, no access log), its output in a log file."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str], name: str = "server") -> None:
        self.log = tmp / f"{name}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
        full_env["CANTSTOP_ACCESS_LOG"] = ""
        full_env["CANTSTOP_DATABASE_URL"] = f"sqlite:///{tmp / f'{name}.sqlite'}"
        full_env.update(env)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(CANTSTOP), "serve", *args],
                env=full_env,
                cwd=tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_ready(self, port: int, timeout: float = 90) -> None:
        # 90 s: a `serve` with two workers and its own worker process took over 30 s to first
        # answer on the 2-core VM while the whole suite ran beside it; the wait ends at once if
        # the server exits.
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.output()}")
            with contextlib.suppress(OSError):
                return call(port, "GET", "/healthz", timeout=5)[0] == 200
            return False

        wait_until(ready, timeout, f"/healthz on port {port}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
                raise AssertionError(
                    f"the server did not stop on SIGINT:\n{self.output()}"
                ) from None


@contextlib.contextmanager
def serving(
    tmp: Path, *args: str, env: dict[str, str], ready_port: int, name: str = "server"
) -> Iterator[Served]:
    """A started server (``/healthz`` answers 200 on ``ready_port``), stopped afterwards; if
    the block fails, the end of the server's log is printed (pytest shows it with the failure)."""
    server = Served(tmp, *args, env=env, name=name)
    try:
        server.wait_ready(ready_port)
        yield server
    except BaseException:
        print(server.output())
        raise
    finally:
        server.stop()


def run_scheduler(app: Flask) -> Callable[[], None]:
    """A scheduling loop for ``app``'s store, in a thread; returns its stop."""
    scheduler = app.extensions["cantstop"].scheduler()
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=10)

    return halt
