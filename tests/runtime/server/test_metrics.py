"""Prometheus metrics move as requests flow; every app has its own registry."""

from __future__ import annotations

import asyncio
import io

from app_for_tests import make_settings, scrape, serving, value
from docparser_runtime.server.ops.metrics import Metrics
from engines_for_tests import png_bytes
from PIL import Image

PARSE = "/v1/document/parse"


def pdf_bytes(pages: int) -> bytes:
    images = [Image.new("RGB", (300 + 10 * i, 400), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:], resolution=72)
    return buf.getvalue()


async def test_counters_histograms_and_info_after_a_parse():
    async with serving() as (_, client, _engine):
        before = await scrape(client)
        assert value(before, "docparser_ready") == 1
        assert value(before, "docparser_engine_info", engine="gated-test", version="test-1") == 1
        resp = await client.post(PARSE, files={"file": ("d.pdf", pdf_bytes(2), "application/pdf")})
        assert resp.status_code == 200
        body = resp.json()
        await client.get("/no/such/route")
        after = await scrape(client)
    key = {"route": PARSE, "method": "POST", "status": "200"}
    assert value(after, "docparser_requests_total", **key) == 1
    # Request series name the model and version: canary vs stable needs no join.
    identity = {"model": "gated-test", "version": "test-1"}
    assert value(after, "docparser_requests_total", **key, **identity) == 1
    assert value(after, "docparser_pages_total", **identity) == 2
    assert value(after, "docparser_stage_duration_seconds_count", stage="total", **identity) == 1
    assert (
        value(after, "docparser_requests_total", route="unmatched", method="GET", status="404") == 1
    )
    for stage in ("queue", "preprocess", "inference", "total"):
        assert value(after, "docparser_stage_duration_seconds_count", stage=stage) == 1
    total = value(after, "docparser_stage_duration_seconds_sum", stage="total")
    assert abs(total * 1000 - body["timings_ms"]["total"]) < 5
    assert value(after, "docparser_pages_total") == 2
    assert value(after, "docparser_vision_tokens_total") == body["vision_tokens"]
    assert value(after, "docparser_output_tokens_total") == body["usage"]["output_tokens"] > 0
    assert value(after, "docparser_batch_size_count") == 1
    assert value(after, "docparser_batch_size_sum") == 2


async def test_outstanding_work_gauges_count_pages_and_tokens_not_just_requests():
    async with serving(make_settings(max_batch_size=1)) as (_, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        pdf = pdf_bytes(3)
        task = asyncio.create_task(
            client.post(PARSE, files={"file": ("d.pdf", pdf, "application/pdf")})
        )
        await asyncio.to_thread(engine.entered.wait, 5)
        during = await scrape(client)
        engine.gate.set()
        body = (await task).json()
        after = await scrape(client)
    assert value(during, "docparser_outstanding_requests") == 1
    assert value(during, "docparser_outstanding_pages") == 3  # all planned pages
    # Tokens count decoded pages: the first chunk (decode_lookahead = 2 pages), and the
    # next chunk once it is decoded (page by page, bounded look-ahead).
    first_chunk = sum(p["vision_tokens"] for p in body["pages"][:2])
    tokens_during = value(during, "docparser_outstanding_vision_tokens")
    assert first_chunk <= tokens_during <= body["vision_tokens"]
    assert value(during, "docparser_queue_pages") == 1  # page 1 of the chunk; page 0 runs
    for name in (
        "docparser_outstanding_requests",
        "docparser_outstanding_pages",
        "docparser_outstanding_vision_tokens",
        "docparser_queue_pages",
    ):
        assert value(after, name) == 0, name
    assert value(after, "docparser_batch_size_count") == 3


async def test_page_outcomes_a_canary_is_judged_on_are_counted_per_version():
    """Pages cut at max_new_tokens, pages with no text and pages the repetition guard
    steered: each a counter with the model and version, at 0 before the first parse (a
    canary analysis differences them against stable's over the same window)."""
    async with serving() as (_, client, engine):
        identity = {"model": "gated-test", "version": "test-1"}
        names = ("truncated", "empty", "repetition_guarded")
        before = await scrape(client)
        for name in names:
            assert (f"docparser_pages_{name}_total", tuple(sorted(identity.items()))) in before
        engine.outcomes = {0: "empty", 1: "truncated", 2: "looping"}
        files = {"file": ("d.pdf", pdf_bytes(4), "application/pdf")}
        assert (await client.post(PARSE, files=files)).status_code == 200
        after = await scrape(client)
    assert value(after, "docparser_pages_total", **identity) == 4
    for name in names:
        assert value(after, f"docparser_pages_{name}_total", **identity) == 1, name


async def test_failed_requests_are_counted_by_status_and_rejections_by_code():
    settings = make_settings(max_batch_size=1, max_queue_pages=1)
    async with serving(settings) as (app, client, engine):
        await client.post(PARSE, content=b"junk", headers={"content-type": "image/png"})
        engine.gate.clear()
        engine.entered.clear()
        files = {"file": ("a.png", png_bytes(), "image/png")}
        held = asyncio.create_task(client.post(PARSE, files=files))
        await asyncio.to_thread(engine.entered.wait, 5)
        queued = asyncio.create_task(client.post(PARSE, files=files))
        while app.state.runtime.batcher.queued_pages < 1:
            await asyncio.sleep(0.005)
        assert (await client.post(PARSE, files=files)).status_code == 429
        engine.gate.set()
        await asyncio.gather(held, queued)
        samples = await scrape(client)
    assert value(samples, "docparser_requests_total", route=PARSE, method="POST", status="415") == 1
    assert value(samples, "docparser_requests_total", route=PARSE, method="POST", status="429") == 1
    assert value(samples, "docparser_requests_total", route=PARSE, method="POST", status="200") == 2
    assert value(samples, "docparser_rejected_total", code="overloaded") == 1


def test_each_metrics_object_has_its_own_registry():
    a, b = Metrics(), Metrics()
    a.count_parsed(pages=5, vision_tokens=0, output_tokens=0)
    identity = {"model": "", "version": ""}
    assert a.registry.get_sample_value("docparser_pages_total", identity) == 5
    assert b.registry.get_sample_value("docparser_pages_total", identity) == 0
    text = a.render().decode()
    for name in (
        "docparser_requests_total",
        "docparser_stage_duration_seconds_bucket",
        "docparser_outstanding_pages",
        "docparser_outstanding_vision_tokens",
        "docparser_outstanding_requests",
        "docparser_batch_size_bucket",
        "docparser_queue_pages",
    ):
        assert name in text or name.replace("_total", "") in text, name


def test_every_metric_the_runtime_exports_is_in_the_operations_guide():
    """docs/operations.md's metrics table is what dashboards and alerts are written from."""
    from pathlib import Path

    from prometheus_client.parser import text_string_to_metric_families

    guide = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    exported = set()
    for family in text_string_to_metric_families(Metrics().render().decode()):
        if family.name.startswith("docparser_") and not family.name.endswith("_created"):
            exported.add(family.name + ("_total" if family.type == "counter" else ""))
    assert exported, "no docparser_* family exported"
    assert sorted(n for n in exported if f"`{n}`" not in guide) == []
