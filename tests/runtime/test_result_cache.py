"""Result cache: key composition, byte-bounded LRU with TTL, and hits through real apps."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import redis
from app_for_tests import make_settings, scrape, serving, value
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.result_cache import CachedParseService, MemoryCache, cache_key
from docparser_runtime.server.protocol import ParseRequest
from engines_for_tests import png_bytes

PARSE = "/v1/document/parse"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _key(data=b"doc", *, settings=None, engine="e", version="v1", pages=None, **opts):
    request = ParseRequest(data=data, options=ParseOptions(**opts), pages=pages)
    return cache_key(request, engine=engine, version=version, settings=settings or make_settings())


def test_key_covers_everything_that_changes_the_output():
    base = _key()
    assert base == _key() and base.startswith("docparser:result:v1:")
    variants = [
        _key(b"doc2"),
        _key(tier=2),
        _key(mode="text"),
        _key(max_new_tokens=17),
        _key(pages="1-2"),
        _key(engine="other"),
        _key(version="v2"),
        _key(settings=make_settings(pdf_dpi=200)),
        _key(settings=make_settings(weights_sha256="ab" * 32)),
    ]
    assert len({base, *variants}) == len(variants) + 1


async def test_memory_lru_byte_budget_and_ttl():
    clock = FakeClock()
    cache = MemoryCache(max_bytes=100, ttl_s=10, clock=clock)
    await cache.set("a", b"x" * 40)
    await cache.set("b", b"y" * 40)
    assert await cache.get("a") == b"x" * 40  # a is now most recent
    await cache.set("c", b"z" * 40)  # 120 > 100: evicts the least recent (b)
    assert await cache.get("b") is None
    assert await cache.get("a") is not None and await cache.get("c") is not None
    assert cache.used_bytes == 80 and len(cache) == 2
    await cache.set("huge", b"h" * 101)  # larger than the budget: not stored, nothing evicted
    assert await cache.get("huge") is None and len(cache) == 2
    await cache.set("a", b"x" * 10)  # overwrite accounts bytes correctly
    assert cache.used_bytes == 50
    clock.now += 10
    assert await cache.get("a") is None and await cache.get("c") is None  # expired
    assert cache.used_bytes == 0


async def test_second_identical_request_is_a_hit():
    files = {"file": ("a.png", png_bytes(120, 80), "image/png")}
    async with serving(make_settings()) as (app, client, engine):
        assert isinstance(app.state.runtime.parse_service, CachedParseService)
        first = (await client.post(PARSE, files=files)).json()
        calls = len(engine.batches)
        second = (await client.post(PARSE, files=files)).json()
        assert len(engine.batches) == calls, "a hit must not reach the engine"
        assert (first["cached"], second["cached"]) == (False, True)
        assert second["id"] != first["id"]
        assert second["content"] == first["content"] and second["pages"] == first["pages"]
        assert second["usage"] == first["usage"]
        other = (await client.post(PARSE, files=files, data={"tier": "1"})).json()
        assert other["cached"] is False and len(engine.batches) == calls + 1
        metrics = (await client.get("/metrics")).text
        samples = await scrape(client)
    assert "docparser_cache_hits_total 1.0" in metrics
    assert "docparser_cache_misses_total 2.0" in metrics
    # Every answer's latency, the hit's too (what a canary's p99 is compared on); the hit
    # parsed no page and ran no inference.
    assert value(samples, "docparser_stage_duration_seconds_count", stage="total") == 3
    assert value(samples, "docparser_stage_duration_seconds_count", stage="inference") == 2
    assert value(samples, "docparser_pages_total") == 2


async def test_hit_replays_pages_and_deltas_to_callbacks():
    async with serving(make_settings()) as (app, _client, engine):
        service = app.state.runtime.parse_service
        request = ParseRequest(data=png_bytes(64, 48), options=ParseOptions(tier=0))
        await service.parse(request)
        calls = len(engine.batches)
        pages, deltas = [], []
        body = await service.parse(
            request, on_page=pages.append, on_delta=lambda i, t: deltas.append((i, t))
        )
        assert body.cached is True and len(engine.batches) == calls
        assert pages == body.body()["pages"]
        assert deltas == [(0, body.pages[0].content)]


async def test_disabled_with_zero_budget():
    async with serving(make_settings(cache_max_bytes=0)) as (app, client, engine):
        assert not isinstance(app.state.runtime.parse_service, CachedParseService)
        files = {"file": ("a.png", png_bytes(), "image/png")}
        for _ in range(2):
            assert (await client.post(PARSE, files=files)).json()["cached"] is False
        assert len(engine.batches) == 2


@pytest.mark.redis
async def test_redis_cache_is_shared_between_replicas(redis_url):
    settings = make_settings(redis_url=redis_url, cache_ttl_s=120)
    files = {"file": ("a.png", png_bytes(150, 90), "image/png")}
    async with (
        serving(settings) as (_a, client_a, engine_a),
        serving(settings) as (_b, client_b, engine_b),
    ):
        first = (await client_a.post(PARSE, files=files)).json()
        assert first["cached"] is False
        second = (await client_b.post(PARSE, files=files)).json()
        assert second["cached"] is True and second["content"] == first["content"]
        assert engine_b.batches == [], "replica B answered from Redis without inference"
        assert engine_a.batches != []
    client = redis.Redis.from_url(redis_url)
    try:
        (key,) = client.keys("docparser:result:v1:*")
        assert 0 < client.ttl(key) <= 120
        assert json.loads(client.get(key))["content"] == first["content"]
    finally:
        client.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_redis_outage_degrades_to_misses():
    settings = make_settings(redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    files = {"file": ("a.png", png_bytes(), "image/png")}
    async with serving(settings) as (_app, client, engine):
        replies = [await client.post(PARSE, files=files) for _ in range(2)]
        assert [r.status_code for r in replies] == [200, 200]
        assert [r.json()["cached"] for r in replies] == [False, False]
        assert len(engine.batches) == 2
        metrics = (await client.get("/metrics")).text
    assert "docparser_cache_errors_total 4.0" in metrics  # 2 reads + 2 writes failed


async def test_concurrent_identical_requests_all_answered():
    files = {"file": ("a.png", png_bytes(100, 100), "image/png")}
    async with serving(make_settings()) as (_app, client, _engine):
        replies = await asyncio.gather(*(client.post(PARSE, files=files) for _ in range(4)))
    assert {r.status_code for r in replies} == {200}
    assert len({r.json()["content"] for r in replies}) == 1


KEY_A, KEY_B = "dp-key-alpha-0123456789", "dp-key-bravo-9876543210"


async def test_one_api_keys_results_never_answer_another(tmp_path):
    """Key A parses a page; key B sending the same page is parsed for B (no `cached: true`,
    nothing of A's returned), and B's own repeat is then a hit."""
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    files = {"file": ("a.png", png_bytes(140, 90), "image/png")}
    as_a = {"Authorization": f"Bearer {KEY_A}"}
    as_b = {"Authorization": f"Bearer {KEY_B}"}
    async with serving(make_settings(api_keys_file=keys)) as (_app, client, engine):
        assert (await client.post(PARSE, files=files, headers=as_a)).json()["cached"] is False
        calls = len(engine.batches)
        first_b = (await client.post(PARSE, files=files, headers=as_b)).json()
        assert first_b["cached"] is False and len(engine.batches) == calls + 1
        assert (await client.post(PARSE, files=files, headers=as_b)).json()["cached"] is True
        assert (await client.post(PARSE, files=files, headers=as_a)).json()["cached"] is True


async def test_sharing_the_cache_across_keys_is_a_deliberate_setting(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    files = {"file": ("a.png", png_bytes(140, 90), "image/png")}
    settings = make_settings(api_keys_file=keys, cache_shared=True)
    async with serving(settings) as (_app, client, _engine):
        await client.post(PARSE, files=files, headers={"Authorization": f"Bearer {KEY_A}"})
        reply = await client.post(PARSE, files=files, headers={"Authorization": f"Bearer {KEY_B}"})
        assert reply.json()["cached"] is True


async def test_a_request_can_opt_out_of_the_cache():
    files = {"file": ("a.png", png_bytes(120, 80), "image/png")}
    async with serving(make_settings()) as (_app, client, engine):
        await client.post(PARSE, files=files)
        calls = len(engine.batches)
        fresh = (await client.post(PARSE, files=files, data={"cache": "false"})).json()
        assert fresh["cached"] is False and len(engine.batches) == calls + 1
        assert (await client.post(PARSE, files=files)).json()["cached"] is True
        bad = await client.post(PARSE, files=files, data={"cache": "maybe"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_option"
        metrics = (await client.get("/metrics")).text
    assert "docparser_cache_bypassed_total 1.0" in metrics


def test_the_key_is_scoped_by_tenant():
    settings = make_settings()
    opts = ParseOptions(tier=0, mode="markdown", max_new_tokens=8)
    a = ParseRequest(data=b"doc", options=opts, tenant="key-a")
    b = ParseRequest(data=b"doc", options=opts, tenant="key-b")
    keys = {cache_key(r, engine="e", version="v", settings=settings) for r in (a, b)}
    assert len(keys) == 2
    shared = make_settings(cache_shared=True)
    assert len({cache_key(r, engine="e", version="v", settings=shared) for r in (a, b)}) == 1
