"""The tiny random-weight DeepSeek-OCR-2 end to end through the server, batched.

The engine is created the production way (``settings.engine`` + ``model_path`` through the
registry, ``from_pretrained`` from a directory), loaded and warmed up by the app's lifespan.
Concurrent requests must share decode steps of the running batch (continuous batching, the
deepseek default): asserted on the decode-step metrics.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from app_for_tests import make_settings, scrape, value, wait_ready
from docparser_runtime.preprocess.tiling import plan_tiles
from docparser_runtime.server.app import create_app
from engines_for_tests import png_bytes

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PARSE = "/v1/document/parse"


async def test_tiny_deepseek_batches_concurrent_requests_through_http(tiny_model_dir):
    settings = make_settings(
        engine="deepseek-ocr2",
        model_path=tiny_model_dir,
        device="cpu",
        max_batch_size=4,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", timeout=300
        ) as client:
            await wait_ready(client, timeout=300)
            sizes = [(320, 240), (300, 260), (280, 200), (340, 220)]
            fields = {"tier": "2", "max_new_tokens": "48", "mode": "markdown"}
            files = [
                {"file": (f"{i}.png", png_bytes(w, h, f"page {i}"), "image/png")}
                for i, (w, h) in enumerate(sizes)
            ]
            replies = await asyncio.gather(
                *(client.post(PARSE, files=f, data=fields) for f in files)
            )
            samples = await scrape(client)
    for (w, h), resp in zip(sizes, replies, strict=True):
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["model"]["engine"] == "deepseek-ocr2"
        page = body["pages"][0]
        plan = plan_tiles(w, h, 2)
        assert (page["width"], page["height"]) == (w, h)
        assert (page["tiles"], page["vision_tokens"]) == (plan.tiles, plan.vision_tokens)
        assert 0 < page["output_tokens"] <= 48
        assert body["usage"]["output_tokens"] == page["output_tokens"]
    # Pages decoded side by side: some steps ran several pages (warm-up bypasses it).
    steps = value(samples, "docparser_decode_steps_total")
    assert 0 < steps < value(samples, "docparser_decode_slot_steps_total")
    assert value(samples, "docparser_running_pages") == 0
    assert (
        value(
            samples,
            "docparser_engine_info",
            engine="deepseek-ocr2",
            version=replies[0].json()["model"]["version"],
        )
        == 1
    )
