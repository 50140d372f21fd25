"""A bounded soak against a real server process: memory comes back and does not grow.

Large requests (a 4000 x 4000 PNG, a multi-page PDF) alternate with small ones for a fixed
number of rounds, under the memory watchdog. After a warm-up round the tree's resident memory
(server and decoder workers) is the baseline; at the end it must be within ``GROWTH`` of it.
The figures are printed (``-s``) for docs/benchmarks.md.
"""

from __future__ import annotations

import io
import time

import httpx
import pytest
from engines_for_tests import png_bytes
from live_server import LiveServer
from memory_watchdog import MemoryWatchdog
from PIL import Image

pytestmark = pytest.mark.slow

PARSE = "/v1/document/parse"
MIB = 2**20
CEILING = 3 * 1024 * MIB
GROWTH = 150 * MIB
ROUNDS = 12


def big_png(side: int = 4000) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), "white").save(buf, "PNG")
    return buf.getvalue()


def pdf(pages: int = 6) -> bytes:
    buf = io.BytesIO()
    images = [Image.new("RGB", (1700, 2200), "white") for _ in range(pages)]
    images[0].save(buf, "PDF", save_all=True, append_images=images[1:], resolution=200)
    return buf.getvalue()


def test_memory_returns_after_large_requests_and_does_not_grow() -> None:
    inputs = [
        ("big.png", big_png(), "image/png"),
        ("doc.pdf", pdf(), "application/pdf"),
        ("small.png", png_bytes(), "image/png"),
    ]
    env = {"DOCPARSER_DEFAULT_TIER": 0}
    with (
        LiveServer(env=env, gated_delay_s=0.0) as live,
        MemoryWatchdog(live.proc.pid, CEILING) as watchdog,
        httpx.Client(base_url=live.url, timeout=120) as client,
    ):

        def one_round() -> None:
            for name, data, ctype in inputs:
                reply = client.post(PARSE, files={"file": (name, data, ctype)})
                assert reply.status_code == 200, reply.text

        one_round()  # warm-up: imports, worker pool, allocator arenas
        time.sleep(0.5)
        baseline = watchdog.current()
        samples = []
        for _ in range(ROUNDS):
            one_round()
            samples.append(watchdog.current())
        time.sleep(0.5)
        final = watchdog.current()
    print(
        f"\nsoak: {ROUNDS} rounds of {len(inputs)} requests; tree RSS baseline "
        f"{baseline / MIB:.0f} MiB, peak {watchdog.peak / MIB:.0f} MiB, after each round "
        f"{[round(s / MIB) for s in samples]} MiB, final {final / MIB:.0f} MiB"
    )
    assert not watchdog.tripped, live.log()
    assert final - baseline < GROWTH, f"grew {(final - baseline) / MIB:.0f} MiB"
