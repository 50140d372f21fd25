"""Only authenticated, routed requests are activity: what scale to zero reads (issue 34).

A real server (and a real CPU front) with API keys: keyless, malformed and wrong-key calls
and unknown ``/v1`` paths leave the idleness figures the operator reads unchanged, read
with the operator's own parser (``docparser_operator.analysis.activity.parse``), and count
by reason in ``docparser_unauthorized_requests_total``; an authorised call moves them.
Before the fix one keyless request per idle window kept a DocParser's GPU pods awake.
"""

from __future__ import annotations

import time

import httpx
import pytest
from docparser_operator.analysis.activity import PodReading, parse
from documents import png_bytes, single_column
from front_processes import FrontAndBackend
from live_server import LiveServer

pytestmark = pytest.mark.slow

PARSE = "/v1/document/parse"
KEY = {"Authorization": "Bearer key-alpha"}
# (method, path, headers) -> the reason each is refused for
REFUSED = [
    ("POST", PARSE, {}, "missing_key"),
    ("POST", PARSE, {"Authorization": "Basic a2V5"}, "malformed_key"),
    ("POST", PARSE, {"Authorization": "Bearer key-wrong"}, "wrong_key"),
    ("GET", "/v1/jobs/job_x", {"Authorization": "Bearer key-wrong"}, "wrong_key"),
    ("GET", "/v1/no/such/route", {}, "unknown_route"),
    ("GET", "/v1/no/such/route", KEY, "unknown_route"),
    ("GET", PARSE, KEY, "unknown_route"),  # no such method: routing refused it
]


def reading(url: str) -> tuple[PodReading, dict[str, float]]:
    """The operator's reading of ``url``/metrics and the unauthorised counter by reason."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("docparser_unauthorized_requests_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return parse(text), counts


def send_refused(url: str, page: bytes) -> None:
    for method, path, headers, _ in REFUSED:
        resp = httpx.request(
            method, url + path, headers=headers, timeout=30,
            files={"file": ("p.png", page, "image/png")} if method == "POST" else None,
        )  # fmt: skip
        assert resp.status_code in (401, 403, 404, 405), (path, resp.status_code, resp.text)


def expected_counts() -> dict[str, float]:
    counts: dict[str, float] = {}
    for *_, reason in REFUSED:
        counts[reason] = counts.get(reason, 0.0) + 1
    return counts


def test_refused_requests_are_not_activity_on_a_pod(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-alpha\n")
    page = png_bytes(single_column().image)
    env = {"DOCPARSER_API_KEYS_FILE": keys, "DOCPARSER_MAX_WAIT_MS": 5}
    with LiveServer(env=env) as server:
        before, _ = reading(server.url)
        time.sleep(0.05)  # a stamp taken now would be later than the start's
        send_refused(server.url, page)
        after, counts = reading(server.url)
        assert after.requests == before.requests == 0
        assert after.last_request == before.last_request
        assert {k: v for k, v in counts.items() if v} == expected_counts()
        ok = httpx.post(
            server.url + PARSE, headers=KEY, files={"file": ("p.png", page, "image/png")},
            timeout=120,
        )  # fmt: skip
        assert ok.status_code == 200, ok.text
        moved, _ = reading(server.url)
        assert moved.requests == 1 and moved.last_request > before.last_request


@pytest.mark.redis
def test_refused_requests_are_not_activity_at_the_front(redis_url, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-alpha\n")
    page = png_bytes(single_column().image)
    shared = {"DOCPARSER_API_KEYS_FILE": keys}
    with FrontAndBackend(
        redis_url, shared_env=shared, front_env={"DOCPARSER_FRONT_HOLD_SECONDS": 0}
    ) as fb:
        front = fb.front.url
        before, _ = reading(front)
        time.sleep(0.05)
        send_refused(front, page)
        after, counts = reading(front)
        assert after.requests == before.requests == 0
        assert after.last_request == before.last_request
        assert {k: v for k, v in counts.items() if v} == expected_counts()
        held = httpx.post(
            front + PARSE, headers=KEY, files={"file": ("p.png", page, "image/png")}, timeout=30
        )
        assert held.status_code == 503 and held.json()["error"]["code"] == "no_capacity"
        moved, _ = reading(front)
        assert moved.requests == 1 and moved.last_request > before.last_request
