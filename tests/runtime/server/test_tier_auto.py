"""``tier: auto`` through the app: per-page tiers, static batches per tier, the cap, the
cache key, metrics and option validation (issue 25). The real-process check is
``test_tier_auto_server.py``."""

from __future__ import annotations

import base64

import documents
import pytest
import tier_pages
from app_for_tests import make_settings, scrape, serving
from docparser_runtime import result_cache
from docparser_runtime.preprocess.tier_select import SELECTOR_VERSION
from docparser_runtime.result_cache import cache_key
from docparser_runtime.server.endpoints.parse.request_input import build_parse_request

PARSE = "/v1/document/parse"


@pytest.fixture(scope="module")
def mixed_pdf() -> bytes:
    """Page 1 a plain letter (auto: tier 0), page 2 dense two columns with a table (6)."""
    letter = documents.Doc(tier_pages.plain_letter().image)
    dense = documents.Doc(tier_pages.dense_two_columns_table().image)
    return documents.pdf_of([letter, dense, letter], resolution=150)


async def test_auto_gives_each_page_its_tier_in_batches_of_one_tier(mixed_pdf) -> None:
    settings = make_settings(max_batch_size=8, max_wait_ms=50.0, pdf_dpi=150)
    async with serving(settings) as (_, client, engine):
        resp = await client.post(
            PARSE, files={"file": ("m.pdf", mixed_pdf, "application/pdf")}, data={"tier": "auto"}
        )
        assert resp.status_code == 200, resp.text
        metrics = await scrape(client)
    pages = resp.json()["pages"]
    assert [p["tier"] for p in pages] == [0, 6, 0]
    assert [p["vision_tokens"] for p in pages] == [256, 1120, 256]
    assert resp.json()["vision_tokens"] == 256 + 1120 + 256
    # the engine never saw auto, and never two tiers in one batch
    assert all(not o.auto for o in engine.batch_options)
    by_tier: dict[int, list[int]] = {}
    for options, batch in zip(engine.batch_options, engine.batches, strict=True):
        by_tier.setdefault(options.tier, []).extend(batch)  # one tier per engine call
    assert {t: sorted(p) for t, p in by_tier.items()} == {0: [0, 2], 6: [1]}
    counted = {
        labels: value
        for (name, labels), value in metrics.items()
        if name == "docparser_tier_pages_total"
    }
    assert sum(v for k, v in counted.items() if ("tier", "0") in k and ("choice", "auto") in k) == 2
    assert sum(v for k, v in counted.items() if ("tier", "6") in k and ("choice", "auto") in k) == 1


async def test_the_default_can_be_auto_and_a_named_tier_is_exact(mixed_pdf) -> None:
    settings = make_settings(default_tier="auto", max_tier=4, pdf_dpi=150)
    async with serving(settings) as (_, client, _engine):
        auto = await client.post(PARSE, files={"file": ("m.pdf", mixed_pdf, "application/pdf")})
        named = await client.post(
            PARSE, json={"image": base64.b64encode(mixed_pdf).decode(), "tier": 3, "pages": "1"}
        )
        too_high = await client.post(PARSE, json={"image": "aGk=", "tier": 5})
        bad = await client.post(PARSE, json={"image": "aGk=", "tier": "max"})
        quoted = await client.post(PARSE, json={"image": "aGk=", "tier": "6"})
    assert auto.status_code == 200, auto.text
    # capped at DOCPARSER_MAX_TIER=4: the dense page gets the most that allows (A4: tier 2)
    assert [p["tier"] for p in auto.json()["pages"]] == [0, 2, 0]
    assert named.json()["pages"][0]["tier"] == 3
    assert (too_high.status_code, too_high.json()["error"]["code"]) == (400, "invalid_tier")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_tier")
    assert (quoted.status_code, quoted.json()["error"]["code"]) == (400, "invalid_tier")


def test_cache_key_carries_auto_its_cap_and_the_selector_version(monkeypatch) -> None:
    settings = make_settings(max_tier=6)
    data = b"%PDF-1.4 whatever"
    auto = build_parse_request(data, {"tier": "auto"}, settings)
    six = build_parse_request(data, {"tier": 6}, settings)
    capped = build_parse_request(data, {"tier": "auto"}, make_settings(max_tier=4))
    assert auto.options.auto and auto.options.tier == 6 and not six.options.auto
    key = {
        name: cache_key(r, engine="e", version="v", settings=settings)
        for name, r in (("auto", auto), ("six", six), ("capped", capped))
    }
    assert len(set(key.values())) == 3
    # a new selector rule must not be answered from results of the old one
    monkeypatch.setattr(result_cache, "SELECTOR_VERSION", SELECTOR_VERSION + "-next")
    assert cache_key(auto, engine="e", version="v", settings=settings) != key["auto"]
    assert cache_key(six, engine="e", version="v", settings=settings) == key["six"]
