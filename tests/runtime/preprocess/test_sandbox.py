"""The sandboxed decoder pool: limits end hostile decodes, a killed worker is replaced,
ordinary errors keep their codes and leave the worker alive. Real worker processes, real
PDFium; limits are set low so each attack ends in seconds."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from docparser_runtime.errors import DeadlineExceeded, DocumentTooComplex, InvalidInput
from docparser_runtime.preprocess.pipeline import DecodeLimits
from docparser_runtime.preprocess.sandbox import DecodePool, SandboxLimits
from engines_for_tests import png_bytes
from hostile_docs import blank_pdf, huge_pages_pdf, nested_xobject_pdf

LIMITS = DecodeLimits(max_pixels=80_000_000, max_pages=50, pdf_dpi=72)
FAR = 120.0  # a request deadline that is never the binding limit here


def pool(*, timeout_s=30.0, cpu_s=30, memory_mb=2048, size=1) -> DecodePool:
    return DecodePool(size, SandboxLimits(timeout_s, cpu_s, memory_mb * 1024 * 1024))


async def render_all(p: DecodePool, data: bytes, pages=None) -> list:
    token = uuid.uuid4().hex  # one per document, as the server does
    plan = await p.plan(token, data, pages, LIMITS, time.monotonic() + FAR)
    return [
        await p.render(token, data, plan.fmt, i, LIMITS, time.monotonic() + FAR)
        for i in plan.indices
    ]


async def test_pages_render_one_by_one_in_a_reused_worker():
    p = pool()
    try:
        images = await render_all(p, blank_pdf(3, 200, 150), "2-")
        assert [im.size for im in images] == [(200, 150), (200, 150)]
        assert images[0].mode == "RGB" and images[0].getpixel((20, 130)) == (0, 0, 0)
        (png,) = await render_all(p, png_bytes(64, 48))
        assert png.size == (64, 48)
        assert p.replaced == 0 and len(p.pids()) == 1
    finally:
        p.close()


async def test_ordinary_errors_keep_their_codes_and_the_worker():
    p = pool()
    try:
        await render_all(p, png_bytes())
        pid = p.pids()
        for data, code in [(b"%PDF-1.7\n garbage", "corrupt_pdf"), (b"\x00" * 64, None)]:
            with pytest.raises(InvalidInput) as err:
                await render_all(p, data)
            if code:
                assert err.value.code == code
        with pytest.raises(InvalidInput) as err:
            await render_all(p, blank_pdf(2), "5")
        assert err.value.code == "invalid_pages"
        assert p.pids() == pid and p.replaced == 0
    finally:
        p.close()


async def test_wall_clock_limit_kills_and_replaces_the_worker():
    p = pool(timeout_s=1.5)
    try:
        started = time.monotonic()
        with pytest.raises(DocumentTooComplex) as err:
            await render_all(p, nested_xobject_pdf(levels=9))
        assert "wall-clock" in err.value.message and err.value.code == "document_too_complex"
        print(f"wall-clock limit ended the decode after {time.monotonic() - started:.1f}s")
        assert p.replaced == 1
        (page,) = await render_all(p, blank_pdf(1))  # the replacement serves
        assert page.size == (200, 150)
    finally:
        p.close()


async def test_cpu_limit_ends_the_decode():
    p = pool(cpu_s=1)
    try:
        with pytest.raises(DocumentTooComplex) as err:
            await render_all(p, nested_xobject_pdf(levels=9))
        assert "CPU-time" in err.value.message
        assert p.replaced == 1
        assert len(await render_all(p, blank_pdf(2))) == 2
    finally:
        p.close()


async def test_memory_limit_ends_the_decode():
    p = pool(memory_mb=600)
    try:
        with pytest.raises(DocumentTooComplex) as err:
            await render_all(p, huge_pages_pdf(pages=1))
        assert "memory" in err.value.message
        assert len(await render_all(p, blank_pdf(1))) == 1
    finally:
        p.close()


async def test_a_cancelled_decode_kills_its_worker():
    """The client left: the render must not run on (PDFium cannot be interrupted)."""
    p = pool()
    try:
        await render_all(p, png_bytes())
        (before,) = p.pids()
        task = asyncio.ensure_future(render_all(p, nested_xobject_pdf(levels=9)))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert p.replaced == 1 and before not in p.pids()
        assert len(await render_all(p, blank_pdf(1))) == 1
    finally:
        p.close()


async def test_request_deadline_is_a_504_not_a_complexity_verdict():
    p = pool(timeout_s=60)
    try:
        data = nested_xobject_pdf(levels=9)
        plan = await p.plan("d", data, None, LIMITS, time.monotonic() + FAR)
        with pytest.raises(DeadlineExceeded):
            await p.render("d", data, plan.fmt, 0, LIMITS, time.monotonic() + 1.0)
    finally:
        p.close()
