"""A real TCP proxy in front of a real server that loses, refuses or cuts chosen answers: the
network faults a client must survive, made on purpose (no mock: the server records what it
records, the client sees what a broken network would show it).

One request per connection: the proxy reads a request, sends it upstream with ``Connection:
close``, and passes the answer back as it comes (streams too), unless a fault is armed for it:

- ``drop``: the request reaches the server, which answers in full; the client gets nothing (its
  connection is closed), as when a load balancer or a mobile network loses an answer;
- ``refuse``: the server never sees the request; the client gets 503 with ``Retry-After: 0``;
- ``cut``: the answer (a stream) is passed on until it has carried ``events`` SSE ids, then the
  connection is closed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.http import HOST

_PROBLEM = (
    b'{"type": "about:blank", "title": "Service Unavailable", "status": 503, '
    b'"detail": "refused by the test proxy", "code": "store_unavailable"}'
)
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
    b"Retry-After: 0\r\nConnection: close\r\n"
    + f"Content-Length: {len(_PROBLEM)}\r\n\r\n".encode()
    + _PROBLEM
)


@dataclass
class Fault:
    kind: str  # drop | refuse | cut
    matches: Callable[[bytes], bool]  # on the request line, e.g. b"POST /v1/games/…/actions"
    times: int = 1
    events: int = 1  # for cut


class FaultyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.requests: list[bytes] = []  # every request line seen, in order
        self.applied: list[str] = []  # the faults made, in order
        self._lock = threading.Lock()
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the proxy
    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _fault_for(self, line: bytes) -> Fault | None:
        with self._lock:
            self.requests.append(line)
            for fault in self.faults:
                if fault.times > 0 and fault.matches(line):
                    fault.times -= 1
                    self.applied.append(fault.kind)
                    return fault
        return None

    def _handle(self, client: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(client)
            request = _read_request(client)
            if request is None:
                return
            line = request.split(b"\r\n", 1)[0]
            fault = self._fault_for(line)
            if fault is not None and fault.kind == "refuse":
                client.sendall(REFUSED)
                return
            upstream = stack.enter_context(socket.create_connection((HOST, self.upstream_port)))
            upstream.sendall(request)
            ids, last = 0, b""
            while True:
                try:
                    chunk = upstream.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                if fault is not None and fault.kind == "drop":
                    continue  # read the whole answer, pass none of it on
                if fault is not None and fault.kind == "cut":
                    # Pass on the first `events` messages whole, then close mid-stream. A
                    # message's "id: " line follows a line end, perhaps the previous chunk's.
                    seen = last + chunk
                    at = 0
                    while ids <= fault.events:
                        at = seen.find(b"\nid: ", at) + 1
                        if at == 0:
                            break
                        ids += 1
                    if ids > fault.events:
                        client.sendall(seen[len(last) : at])
                        return
                client.sendall(chunk)
                last = chunk[-1:]


def _read_request(client: socket.socket) -> bytes | None:
    """One request with ``Connection: close`` in place of the client's own header."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = 0
    kept = [lines[0]]
    for header in lines[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() in (b"connection", b"keep-alive"):
            continue
        kept.append(header)
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            return None
        body += chunk
    kept.append(b"Connection: close")
    return b"\r\n".join(kept) + b"\r\n\r\n" + body
