"""X-Forwarded-For is trusted only from configured proxies (DOCPARSER_FORWARDED_ALLOW_IPS).

Behind a mesh sidecar every request comes from 127.0.0.1, uvicorn's default trusted proxy:
rotating the header would then give every request a fresh rate-limit bucket. A real server
process with a tiny per-client budget shows the header is ignored by default and honoured
when the proxy is configured.
"""

from __future__ import annotations

import httpx
import pytest
from live_server import LiveServer

LIMITS = {"DOCPARSER_RATE_LIMIT_RPS": "0.001", "DOCPARSER_RATE_LIMIT_BURST": "2"}


def _statuses(url: str, n: int = 4) -> list[int]:
    return [
        httpx.get(f"{url}/v1/models", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
        for i in range(n)
    ]


@pytest.mark.slow
def test_forwarded_for_is_ignored_unless_the_proxy_is_trusted() -> None:
    server = LiveServer(env=LIMITS).start()
    try:
        server.wait_ready()
        assert _statuses(server.url) == [200, 200, 429, 429]  # one bucket: the real peer
    finally:
        server.stop()
    trusted = LiveServer(env={**LIMITS, "DOCPARSER_FORWARDED_ALLOW_IPS": "127.0.0.1"}).start()
    try:
        trusted.wait_ready()
        assert _statuses(trusted.url) == [200, 200, 200, 200]  # a bucket per forwarded client
    finally:
        trusted.stop()
