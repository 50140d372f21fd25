"""Hostile documents against a real server process (production app, sandboxed decoder,
default limits except a short decode deadline), under a memory watchdog.

Each attack must end in a 4xx or a bounded 200, while a normal request sent during the
attack is served and ``/readyz`` stays 200; the server's resident memory (server + decoder
workers) must stay under ``CEILING`` (the watchdog kills the tree above it, so a
regression fails here instead of taking the machine down). Peak memory and the normal
request's latency are printed per attack (``-s``); docs/benchmarks.md records them.
"""

from __future__ import annotations

import io
import threading
import time

import httpx
import pytest
from engines_for_tests import png_bytes
from hostile_docs import huge_pages_pdf, nested_xobject_pdf
from live_server import LiveServer
from memory_watchdog import MemoryWatchdog
from PIL import Image

pytestmark = pytest.mark.slow

PARSE = "/v1/document/parse"
GIB = 1024**3
CEILING = 4 * GIB
NORMAL_BOUND_S = 60.0  # the normal request's client timeout: served within it, or failed


def big_png(side: int = 8900) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (side, side), 255).save(buf, "PNG", optimize=True)
    return buf.getvalue()


ATTACKS = [
    ("nested_xobjects_8", lambda: nested_xobject_pdf(levels=8), "application/pdf", {422}),
    ("nested_xobjects_10", lambda: nested_xobject_pdf(levels=10), "application/pdf", {422}),
    ("huge_pages_8x200in", lambda: huge_pages_pdf(pages=8), "application/pdf", {200}),
    ("png_8900x8900", big_png, "image/png", {200}),
]


@pytest.fixture(scope="module")
def server():
    env = {"DOCPARSER_DECODE_TIMEOUT_S": 10, "DOCPARSER_DEFAULT_TIER": 0}
    with LiveServer(env=env, gated_delay_s=0.0) as live:
        yield live


def _normal_request(url: str, out: dict) -> None:
    started = time.monotonic()
    try:
        reply = httpx.post(
            f"{url}{PARSE}", files={"file": ("n.png", png_bytes(), "image/png")},
            timeout=NORMAL_BOUND_S,
        )  # fmt: skip
        out["status"] = reply.status_code
    except httpx.HTTPError as exc:
        out["status"] = type(exc).__name__
    out["latency_s"] = time.monotonic() - started


@pytest.mark.parametrize(
    ("name", "make", "ctype", "expected"), ATTACKS, ids=[a[0] for a in ATTACKS]
)
def test_attack_is_bounded_and_the_server_keeps_serving(server, name, make, ctype, expected):
    data = make()
    with MemoryWatchdog(server.proc.pid, CEILING) as watchdog:
        baseline = watchdog.current()
        watchdog.reset_peak()
        attack: dict = {}

        def send() -> None:
            started = time.monotonic()
            try:
                reply = httpx.post(
                    f"{server.url}{PARSE}", files={"file": ("x", data, ctype)}, timeout=300
                )
                attack["status"], attack["body"] = reply.status_code, reply.json()
            except httpx.HTTPError as exc:
                attack["status"] = type(exc).__name__
            attack["s"] = time.monotonic() - started

        attacker = threading.Thread(target=send)
        attacker.start()
        time.sleep(0.5)  # the attack is being decoded
        normal: dict = {}
        _normal_request(server.url, normal)
        ready_during = httpx.get(f"{server.url}/readyz", timeout=10).status_code
        attacker.join(300)
        ready_after = httpx.get(f"{server.url}/readyz", timeout=10).status_code
    print(
        f"\n{name}: {len(data)} bytes -> {attack.get('status')} in {attack.get('s', 0):.1f}s; "
        f"tree RSS baseline {baseline / 2**20:.0f} MiB, peak {watchdog.peak / 2**20:.0f} MiB; "
        f"normal request {normal.get('status')} in {normal['latency_s']:.2f}s"
    )
    assert not watchdog.tripped, f"{name}: RSS passed {CEILING / GIB:.0f} GiB\n{server.log()}"
    assert attack.get("status") in expected, (attack, server.log())
    if attack["status"] == 422:
        assert attack["body"]["error"]["code"] == "document_too_complex"
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
        restarts = [
            line for line in metrics.splitlines()
            if line.startswith("docparser_decoder_restarts_total{") and not line.endswith(" 0.0")
        ]  # fmt: skip
        assert restarts, "the killed decoder was not counted"
    assert normal["status"] == 200
    assert ready_during == 200 and ready_after == 200
