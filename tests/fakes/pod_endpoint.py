"""A runtime pod's HTTP port as the operator reaches it: a loopback address standing in for
the pod IP, on the runtime's port, answering ``GET /metrics`` with whatever exposition the
test renders at that moment (``capacity_pods``, ``shadow_metrics``, the runtime's own
``Metrics``). The operator's owned-pod reader dials pod IPs on that port, so the tests that
check what it reads put one of these behind each pod they report Ready."""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from docparser_operator.api import naming


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # the operator reads up to 16 pods at once, several passes racing
    daemon_threads = True


_FIRST, _LAST = 10, 250  # the loopback /24s handed out: 127.0.10 .. 127.0.250
_handed = itertools.count(random.randrange(_LAST - _FIRST + 1))


def loopback_subnet() -> str:
    """Another loopback /24 per call ("127.0.N"), so a test never clashes on the pod port with
    a server an earlier one left in TIME_WAIT (a random start per process, then the next
    one each call) nor with a test running beside it: under pytest-xdist each worker hands
    out its own share of the range, so two workers never pick the same /24 at once (two
    random picks did, once in a few hundred overlapping pairs)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = int((os.environ.get("PYTEST_XDIST_WORKER") or "gw0").removeprefix("gw") or 0)
    share = (_LAST - _FIRST + 1) // max(workers, 1)
    return f"127.0.{_FIRST + worker * share + next(_handed) % share}"


def serve_metrics(
    host: str, body: Callable[[], str | bytes], before: Callable[[], None] | None = None
) -> ThreadingHTTPServer:
    """Serve ``body()`` at ``http://host:<runtime port>/metrics`` (404 elsewhere) until
    ``stop``; ``before`` runs first on each request (to count or delay reads)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if before is not None:
                before()
            found = self.path == "/metrics"
            text = body() if found else b""
            data = text.encode() if isinstance(text, str) else text
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = _Server((host, naming.HTTP_PORT), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(*servers: ThreadingHTTPServer) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()


@contextmanager
def metrics_endpoint(host: str, body: Callable[[], str | bytes]) -> Iterator[str]:
    server = serve_metrics(host, body)
    try:
        yield host
    finally:
        stop(server)
