"""Host memory admission: the budget's arithmetic, its waiting and refusing, and the
server refusing a page that can never fit (413 naming the limit) before decoding it, while
pages are decoded no larger than the engine uses."""

from __future__ import annotations

import asyncio
import io
import struct
import time
import zlib

import pytest
from app_for_tests import make_settings, serving
from docparser_runtime.errors import DeadlineExceeded, Overloaded, PayloadTooLarge
from docparser_runtime.sizing import host_memory
from docparser_runtime.sizing.cgroup_memory import MemoryLimit
from docparser_runtime.sizing.host_memory import MemoryBudget, plan_budget
from engines_for_tests import png_bytes
from hostile_docs import huge_pages_pdf
from PIL import Image

MIB = 2**20
GIB = 2**30
PARSE = "/v1/document/parse"


def budget(work: int) -> MemoryBudget:
    limit = MemoryLimit(host_memory.pod_memory_bytes("rapidocr", 2, work), "test")
    return MemoryBudget(plan_budget(limit, "rapidocr", 2), wait_s=0.5)


def test_the_budget_is_what_the_limit_leaves_after_server_decoders_engine_and_headroom():
    limit = MemoryLimit(2 * GIB, "/sys/fs/cgroup/memory.max")
    planned = plan_budget(limit, "rapidocr", 2)
    reserved = (
        int(2 * GIB * host_memory.HEADROOM)
        + host_memory.SERVER_BYTES["rapidocr"]
        + 2 * host_memory.DECODER_BYTES
        + host_memory.engine_work_bytes("rapidocr")
    )
    assert planned.work_bytes == 2 * GIB - reserved
    assert "2.00 GiB (/sys/fs/cgroup/memory.max)" in planned.describe()
    # More decoders or a bigger engine leave less; a tiny limit still admits something.
    assert plan_budget(limit, "rapidocr", 4).work_bytes < planned.work_bytes
    tiny = plan_budget(MemoryLimit(256 * MIB, "x"), "rapidocr", 2)
    assert tiny.work_bytes == host_memory.MIN_WORK_BYTES


def test_decoders_together_stay_inside_the_budget_and_never_above_the_setting():
    planned = plan_budget(MemoryLimit(2 * GIB, "x"), "rapidocr", 2)
    each = planned.decoder_address_space(2, 3 * GIB)
    assert each == host_memory.DECODER_ADDRESS_BYTES + planned.work_bytes // 2
    big = plan_budget(MemoryLimit(64 * GIB, "x"), "rapidocr", 2)
    assert big.decoder_address_space(2, 3 * GIB) == 3 * GIB  # the setting caps it
    tiny = plan_budget(MemoryLimit(256 * MIB, "x"), "rapidocr", 2)
    assert tiny.decoder_address_space(2, 3 * GIB) == host_memory.MIN_DECODER_ADDRESS_BYTES


@pytest.mark.parametrize("engine", ["rapidocr", "deepseek-ocr2"])
def test_a_pod_sized_for_some_work_gets_that_work_back(engine: str):
    for work in (256 * MIB, GIB, 8 * GIB):
        pod = host_memory.pod_memory_bytes(engine, 2, work)
        got = plan_budget(MemoryLimit(pod, "pod"), engine, 2).work_bytes
        assert work <= got <= work + 0.01 * pod


def test_a_need_above_the_whole_budget_is_refused_at_once_naming_the_limit():
    b = budget(100 * MIB)
    with pytest.raises(PayloadTooLarge) as info:
        b.check(b.total + 1, "page 3")
    assert info.value.code == "host_memory_limit"
    assert "page 3" in info.value.message and "memory limit" in info.value.message


async def test_reserve_waits_for_a_release_and_small_needs_pass_a_waiting_big_one():
    b = budget(100 * MIB)
    deadline = time.monotonic() + 10
    held = await b.reserve(b.total - 10 * MIB, "first", deadline)
    big = asyncio.ensure_future(b.reserve(50 * MIB, "big", deadline))
    await asyncio.sleep(0.05)
    assert not big.done()
    assert await b.reserve(5 * MIB, "small", deadline) == 5 * MIB  # fits beside: at once
    b.release(held)
    assert await asyncio.wait_for(big, 2) == 50 * MIB
    assert b.used == 55 * MIB and b.peak == b.total - 5 * MIB


async def test_a_budget_that_stays_busy_is_429_and_a_passed_deadline_504():
    b = budget(100 * MIB)
    b.used = b.total
    with pytest.raises(Overloaded) as info:
        await b.reserve(MIB, "page 1", time.monotonic() + 10)
    assert info.value.code == "host_memory_busy"
    with pytest.raises(DeadlineExceeded):
        await b.reserve(MIB, "page 1", time.monotonic() + 0.1)


def rgb_png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (width * 3 + 1))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


async def test_the_server_refuses_an_image_it_cannot_decode_within_its_memory_limit():
    settings = make_settings(memory_limit_bytes=2 * GIB)
    async with serving(settings) as (_app, client, engine):
        reply = await client.post(
            PARSE, files={"file": ("x.png", rgb_png_header(14_143, 14_143), "image/png")}
        )
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["code"] == "host_memory_limit"
        assert "2.00 GiB (DOCPARSER_MEMORY_LIMIT_BYTES)" in error["message"]
        assert engine.batches == []  # nothing reached the engine
        ok = await client.post(PARSE, files={"file": ("n.png", png_bytes(), "image/png")})
        assert ok.status_code == 200


async def test_huge_pdf_pages_and_images_are_decoded_at_the_engines_size():
    settings = make_settings(memory_limit_bytes=2 * GIB)
    big = Image.new("RGB", (6000, 4500), "white")
    buf = io.BytesIO()
    big.save(buf, "JPEG", quality=50)
    async with serving(settings) as (_app, client, _engine):
        pdf = await client.post(
            PARSE, files={"file": ("h.pdf", huge_pages_pdf(pages=2), "application/pdf")}
        )
        jpeg = await client.post(PARSE, files={"file": ("b.jpg", buf.getvalue(), "image/jpeg")})
    assert pdf.status_code == 200 and jpeg.status_code == 200, (pdf.text, jpeg.text)
    page = host_memory.engine_page("gated-test")  # a test engine gets the default engine's size
    for reply in (pdf, jpeg):
        for p in reply.json()["pages"]:
            assert max(p["width"], p["height"]) <= page.max_side
    assert jpeg.json()["pages"][0]["width"] == page.max_side  # aspect kept, as large as used
    assert jpeg.json()["pages"][0]["height"] == 1500
