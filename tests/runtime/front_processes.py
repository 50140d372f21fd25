"""Real processes for the CPU front's tests: a front (``DOCPARSER_ROLE=front``) and, when a
test says so, a rapidocr server on the port the front forwards to; both on the test's Redis.

Every wait is bounded and reads only public surfaces (HTTP replies, ``/metrics``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from live_server import LiveServer
from redis_server import free_port


class FrontAndBackend:
    """A front now; the backend (a GPU-role server, rapidocr engine) when ``start_backend``."""

    def __init__(
        self,
        redis_url: str,
        *,
        front_env: dict[str, object] | None = None,
        backend_env: dict[str, object] | None = None,
        shared_env: dict[str, object] | None = None,
    ) -> None:
        self.backend_port = free_port()
        self.backend_url = f"http://127.0.0.1:{self.backend_port}"
        shared = {"DOCPARSER_REDIS_URL": redis_url, **(shared_env or {})}
        self.front_env = {
            **shared,
            "DOCPARSER_ROLE": "front",
            "DOCPARSER_FRONT_BACKEND_URL": self.backend_url,
            "DOCPARSER_FRONT_POLL_INTERVAL_S": 0.2,
            **(front_env or {}),
        }
        self.backend_env = {**shared, "DOCPARSER_MAX_WAIT_MS": 5, **(backend_env or {})}
        self.front = self.new_front()
        self.backend: LiveServer | None = None

    def new_front(self) -> LiveServer:
        return LiveServer(env=self.front_env).start().wait_ready(60)

    def start_backend(self) -> LiveServer:
        self.backend = LiveServer(env=self.backend_env, port=self.backend_port).start()
        return self.backend

    def stop(self) -> None:
        for server in (self.front, self.backend):
            if server is not None:
                server.stop()

    def __enter__(self) -> FrontAndBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def metric(url: str, name: str) -> float | None:
    """The value of an unlabelled series on ``url``/metrics (None when absent)."""
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class InBackground:
    """One HTTP request on a thread (a held request blocks its client)."""

    def __init__(self, call: Callable[[], httpx.Response]) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.response = call()
            except BaseException as exc:  # reported by result()
                self.error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self, timeout: float = 120.0) -> httpx.Response:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the request did not finish in time"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def post_parse(
    url: str,
    document: bytes,
    *,
    fields: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 150,
) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/document/parse",
        files={"file": ("page.png", document, "image/png")},
        data=fields,
        headers=headers,
        timeout=timeout,
    )
