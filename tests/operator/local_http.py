"""Real HTTP servers on 127.0.0.1 for the guarded client's tests (a module of its own so
several test files can use it by a unique name).

Each server counts the TCP connections it accepted and the requests it parsed (path and
Host header), so a test can say "nothing reached it" from the server's side, not the
client's. A route is a function of the handler that writes whatever it likes: a redirect, a
JSON error, an endless or trickling body, a reason phrase of its own.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Seen:
    connections: int = 0
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, Host
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class LocalServer:
    port: int
    seen: Seen
    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: Seen
    routes: dict[str, Route]
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[Any, Any]:
        conn, addr = super().get_request()
        with self.seen.lock:
            self.seen.connections += 1
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        return

    def _route(self) -> None:
        with self.server.seen.lock:
            self.server.seen.requests.append(
                (self.command, self.path, self.headers.get("Host", ""))
            )
        path = self.path.split("?")[0]
        route = self.server.routes.get(path) or self.server.routes.get("*")
        if route is None:
            reply(self, 404, b"not here")
            return
        route(self)

    do_GET = _route
    do_POST = _route


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain",
    headers: dict[str, str] | None = None,
    phrase: str | None = None,
) -> None:
    length = int(handler.headers.get("Content-Length") or 0)
    if length:
        handler.rfile.read(length)
    handler.send_response(status, phrase)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> Iterator[LocalServer]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen, server.routes, server.tls = Seen(), routes, tls
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield LocalServer(server.server_address[1], server.seen, "https" if tls else "http")
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
