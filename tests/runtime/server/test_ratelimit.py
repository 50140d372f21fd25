"""Per-key token bucket and concurrency cap: 429 with a Retry-After from the bucket."""

from __future__ import annotations

import asyncio

import pytest
from app_for_tests import make_settings, serving
from docparser_runtime.errors import Overloaded
from docparser_runtime.server.guards.ratelimit import RateLimiter, is_protected_path
from engines_for_tests import png_bytes

PARSE = "/v1/document/parse"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_burst_then_refills_at_rate():
    clock = FakeClock()
    limiter = RateLimiter(rps=2.0, burst=3, max_concurrency=0, clock=clock)
    for _ in range(3):
        limiter.take("k")
    with pytest.raises(Overloaded) as exc:
        limiter.take("k")
    assert exc.value.code == "rate_limited"
    assert exc.value.retry_after_s == pytest.approx(0.5)  # one token at 2/s
    clock.now += 0.25
    with pytest.raises(Overloaded) as exc:
        limiter.take("k")
    assert exc.value.retry_after_s == pytest.approx(0.25)
    clock.now += 0.25
    limiter.take("k")
    clock.now += 100  # refill caps at the burst size
    for _ in range(3):
        limiter.take("k")
    with pytest.raises(Overloaded):
        limiter.take("k")


def test_keys_are_isolated():
    limiter = RateLimiter(rps=1.0, burst=1, max_concurrency=0, clock=FakeClock())
    limiter.take("a")
    with pytest.raises(Overloaded):
        limiter.take("a")
    limiter.take("b")


def test_concurrency_cap():
    limiter = RateLimiter(rps=0, burst=1, max_concurrency=2)
    limiter.acquire("k")
    limiter.acquire("k")
    with pytest.raises(Overloaded) as exc:
        limiter.acquire("k")
    assert exc.value.code == "concurrency_limited"
    limiter.acquire("other")
    limiter.release("k")
    limiter.acquire("k")
    for _ in range(3):
        limiter.release("k")
    assert limiter.inflight("k") == 0


def test_disabled_by_default_settings():
    limiter = RateLimiter.from_settings(make_settings())
    assert not limiter.enabled
    for _ in range(1000):
        limiter.take("k")


def test_protected_paths():
    assert is_protected_path("/v1/document/parse") and is_protected_path("/v1")
    assert not any(map(is_protected_path, ["/livez", "/readyz", "/metrics", "/v10", "/docs"]))


async def test_429_with_retry_after_through_the_app(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-a\nkey-b\n")
    settings = make_settings(api_keys_file=keys, rate_limit_rps=0.25, rate_limit_burst=2)
    files = {"file": ("a.png", png_bytes(), "image/png")}
    a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    async with serving(settings) as (_app, client, _engine):
        for _ in range(2):
            assert (await client.post(PARSE, files=files, headers=a)).status_code == 200
        limited = await client.post(PARSE, files=files, headers=a)
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "rate_limited"
        assert 3 <= int(limited.headers["retry-after"]) <= 4  # ~4 s until the next token
        assert (await client.post(PARSE, files=files, headers=b)).status_code == 200
        assert (await client.get("/livez")).status_code == 200  # probes are never limited
        metrics = (await client.get("/metrics")).text
    rejected = 'docparser_rejected_total{code="rate_limited",model="gated-test",version="test-1"}'
    assert f"{rejected} 1.0" in metrics


async def test_concurrency_cap_through_the_app():
    settings = make_settings(max_concurrency_per_key=1)
    files = {"file": ("a.png", png_bytes(), "image/png")}
    async with serving(settings) as (_app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        first = asyncio.create_task(client.post(PARSE, files=files))
        await asyncio.to_thread(engine.entered.wait, 10)
        second = await client.post(PARSE, files=files)
        assert second.status_code == 429
        assert second.json()["error"]["code"] == "concurrency_limited"
        assert second.headers["retry-after"] == "1"
        engine.gate.set()
        assert (await first).status_code == 200
        third = await client.post(PARSE, files={"file": ("b.png", png_bytes(90), "image/png")})
        assert third.status_code == 200  # the slot was released with the first reply
