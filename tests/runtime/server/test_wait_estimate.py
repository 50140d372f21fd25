"""``docparser_estimated_wait_seconds``: queued pages x measured seconds per page / slots.

The latency autoscaler (``autoscaling.metric: latency``) keeps the pods' average of this
gauge at ``targetSeconds``, so it must follow the queue and the measured service times.
"""

from __future__ import annotations

import asyncio

import pytest
from app_for_tests import make_settings, scrape, serving, value
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.server.inference.batcher import MicroBatcher
from docparser_runtime.server.inference.wait_estimate import PRIOR_PAGE_S, WaitEstimator
from docparser_runtime.server.ops.metrics import Metrics
from engines_for_tests import GatedEngine, page
from test_metrics import PARSE, pdf_bytes

GAUGE = "docparser_estimated_wait_seconds"


def test_known_service_times_give_a_known_wait() -> None:
    wait = WaitEstimator(slots=4, alpha=0.5)
    assert wait.estimate([0, 6]) == pytest.approx(2 * PRIOR_PAGE_S / 4)  # nothing measured yet
    wait.observe(6, 8.0)
    wait.observe(6, 4.0)  # tier 6: 8 then 4 at alpha 0.5 -> 6
    wait.observe(0, 1.0)  # tier 0: 1
    assert wait.seconds_per_page(6) == pytest.approx(6.0)
    assert wait.seconds_per_page(0) == pytest.approx(1.0)
    # three tier-6 pages and two tier-0 pages over four slots
    assert wait.estimate([6, 6, 6, 0, 0]) == pytest.approx((3 * 6.0 + 2 * 1.0) / 4)
    assert wait.estimate([]) == 0.0


def test_an_unmeasured_tier_borrows_every_page_mean_and_clock_steps_count_zero() -> None:
    wait = WaitEstimator(slots=1, alpha=0.5)
    wait.observe(6, 4.0)
    wait.observe(2, 2.0)  # all pages: 4 then 2 -> 3
    assert wait.seconds_per_page(0) == pytest.approx(3.0)
    wait.observe(0, -5.0)  # a clock step back is not negative work
    assert wait.seconds_per_page(0) == 0.0
    assert WaitEstimator(slots=0).slots == 1  # never a division by zero


async def test_the_batcher_gauge_is_its_queue_times_its_measured_seconds() -> None:
    """A real MicroBatcher: pages measured through the engine, then a queue behind a held
    engine call; the gauge read at scrape time is the queue's estimate."""
    engine = GatedEngine()
    metrics = Metrics()
    batcher = MicroBatcher(
        engine, max_batch_size=2, max_wait_ms=1.0, max_queue_pages=64, metrics=metrics
    )
    batcher.start()
    try:
        options = ParseOptions(tier=0, mode="markdown", max_new_tokens=16)
        await batcher.submit([page(1), page(2)], options)  # one measured engine call
        measured = batcher.wait.seconds_per_page(0)
        assert measured != PRIOR_PAGE_S and measured >= 0
        engine.gate.clear()
        engine.entered.clear()
        held = asyncio.create_task(batcher.submit([page(3)], options))
        await asyncio.to_thread(engine.entered.wait, 5)
        queued = asyncio.create_task(batcher.submit([page(i) for i in range(5)], options))
        for _ in range(200):  # bounded: the pages reach the queue on the next loop turns
            if batcher.queued_pages == 5:
                break
            await asyncio.sleep(0.005)
        assert batcher.queued_pages == 5
        gauge = metrics.registry.get_sample_value(GAUGE)
        assert gauge == pytest.approx(5 * batcher.wait.seconds_per_page(0) / 2)
        engine.gate.set()
        await asyncio.gather(held, queued)
        assert metrics.registry.get_sample_value(GAUGE) == 0.0
    finally:
        engine.gate.set()
        await batcher.close()


async def test_the_gauge_is_in_metrics_and_grows_with_queued_pages() -> None:
    """The app's /metrics: 0 when idle, then each queued page adds its seconds (the prior
    before any page was measured) over the decode slots."""
    async with serving(make_settings(max_batch_size=1)) as (_, client, engine):
        idle = await scrape(client)
        assert (GAUGE, ()) in idle and value(idle, GAUGE) == 0
        engine.gate.clear()
        engine.entered.clear()
        pdf = ("d.pdf", pdf_bytes(3), "application/pdf")
        first = asyncio.create_task(client.post(PARSE, files={"file": pdf}))
        await asyncio.to_thread(engine.entered.wait, 5)
        one = await scrape(client)
        second = asyncio.create_task(client.post(PARSE, files={"file": pdf}))
        for _ in range(400):  # bounded: until the second request's first chunk is queued
            more = await scrape(client)
            if value(more, "docparser_queue_pages") > value(one, "docparser_queue_pages"):
                break
            await asyncio.sleep(0.01)
        engine.gate.set()
        assert (await first).status_code == 200 and (await second).status_code == 200
        after = await scrape(client)
    assert value(one, "docparser_queue_pages") >= 1
    for samples in (one, more):
        queued = value(samples, "docparser_queue_pages")
        assert value(samples, GAUGE) == pytest.approx(queued * PRIOR_PAGE_S / 1)
    assert value(more, GAUGE) > value(one, GAUGE) > 0
    assert value(after, GAUGE) == 0


@pytest.mark.torch
async def test_the_continuous_scheduler_measures_the_pages_it_serves(tiny_model_dir) -> None:
    """The continuous batcher (the tiny DeepSeek-OCR-2 on CPU): with its one slot held by a
    long page, queued pages read at the prior; once they are served, their tier's seconds
    per page are the measured ones (time in the running batch), and the queue reads 0."""
    from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine
    from docparser_runtime.server.inference.continuous import ContinuousBatcher
    from tiny_deepseek import make_page

    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", version="tiny")
    engine.load()
    metrics = Metrics()
    batcher = ContinuousBatcher(
        engine, max_batch_size=1, max_queue_pages=16, audit=False, metrics=metrics
    )
    batcher.start()
    short = ParseOptions(tier=0, mode="text", max_new_tokens=4, min_new_tokens=4)
    long = ParseOptions(tier=0, max_new_tokens=60, min_new_tokens=60)
    try:
        first = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], long))
        for _ in range(2000):  # bounded: until the long page holds the slot
            if batcher._running:
                break
            await asyncio.sleep(0.005)
        queued = asyncio.create_task(
            batcher.submit([make_page(i, 640, 480, 0) for i in (1, 2, 3)], short)
        )
        for _ in range(200):
            if batcher.queued_pages == 3:
                break
            await asyncio.sleep(0.005)
        assert batcher.queued_pages == 3 and not first.done()
        assert metrics.registry.get_sample_value(GAUGE) == pytest.approx(3 * PRIOR_PAGE_S)
        await asyncio.gather(first, queued)
    finally:
        await batcher.close()
        engine.close()
    measured = batcher.wait.seconds_per_page(0)
    assert measured != PRIOR_PAGE_S and 0 < measured < 600
    assert metrics.registry.get_sample_value(GAUGE) == 0.0
