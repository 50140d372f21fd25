"""Tests for preprocess.pipeline: the one path from upload bytes to tiled pages."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document
from docparser_runtime.preprocess.tiling import plan_tiles
from docparser_runtime.settings import Settings
from PIL import Image

LIMITS = DecodeLimits(max_pixels=50_000_000, max_pages=10, pdf_dpi=72)
LIMITS_144 = DecodeLimits(max_pixels=50_000_000, max_pages=10, pdf_dpi=144)


def png(size=(1600, 900)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, "white").save(buf, "PNG")
    return buf.getvalue()


def pdf(sizes) -> bytes:
    pages = [Image.new("RGB", s, "white") for s in sizes]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", resolution=72, save_all=True, append_images=pages[1:])
    return buf.getvalue()


@pytest.mark.parametrize("tier", [0, 1, 2, 4, 6])
def test_image_page_carries_its_tiling_plan(tier):
    (page,) = load_document(png(), tier=tier, pages=None, limits=LIMITS)
    plan = plan_tiles(1600, 900, tier)
    assert (page.index, page.width, page.height) == (0, 1600, 900)
    assert page.image.mode == "RGB"
    assert (page.tiles, page.vision_tokens) == (plan.tiles, plan.vision_tokens)
    assert page.vision_tokens == 256 + 144 * page.tiles


def test_tier_caps_tiles_and_small_pages_have_none():
    (big,) = load_document(png((1500, 1000)), tier=6, pages=None, limits=LIMITS)
    (capped,) = load_document(png((1500, 1000)), tier=2, pages=None, limits=LIMITS)
    (small,) = load_document(png((700, 500)), tier=6, pages=None, limits=LIMITS)
    assert big.tiles == 6 and capped.tiles == 2
    assert (small.tiles, small.vision_tokens) == (0, 256)


def test_pdf_pages_each_get_a_plan_and_keep_their_document_index():
    data = pdf([(1600, 900), (600, 800), (900, 1600)])
    pages = load_document(data, tier=6, pages="1,3", limits=LIMITS)
    assert [p.index for p in pages] == [0, 2]
    assert [(p.width, p.height) for p in pages] == [(1600, 900), (900, 1600)]
    for p in pages:
        assert p.tiles == plan_tiles(p.width, p.height, 6).tiles


@pytest.mark.parametrize("tier", [-1, 7, 100, 2.0, "3", True, None])
def test_unknown_tier_is_invalid_tier(tier):
    with pytest.raises(InvalidInput) as err:
        load_document(png(), tier=tier, pages=None, limits=LIMITS)
    assert err.value.code == "invalid_tier"


def test_page_ranges_on_a_single_image():
    assert len(load_document(png(), tier=0, pages="1", limits=LIMITS)) == 1
    with pytest.raises(InvalidInput) as err:
        load_document(png(), tier=0, pages="2", limits=LIMITS)
    assert err.value.code == "invalid_pages"


def test_limits_are_enforced_through_the_pipeline():
    tight = DecodeLimits(max_pixels=1_000_000, max_pages=1, pdf_dpi=72)
    with pytest.raises(PayloadTooLarge):
        load_document(png(), tier=0, pages=None, limits=tight)
    with pytest.raises(PayloadTooLarge) as err:
        load_document(pdf([(100, 100)] * 2), tier=0, pages=None, limits=tight)
    assert err.value.code == "too_many_pages"
    with pytest.raises(UnsupportedMediaType):
        load_document(b"<html></html>", tier=0, pages=None, limits=tight)


def test_limits_from_settings():
    limits = DecodeLimits.from_settings(Settings(max_image_pixels=123, max_pages=4, pdf_dpi=100))
    assert limits == DecodeLimits(max_pixels=123, max_pages=4, pdf_dpi=100)


SAMPLES = Path(__file__).resolve().parents[3] / "examples" / "documents"


@pytest.mark.parametrize(
    ("name", "pages"),
    [
        ("two-columns.png", 1),
        ("single-column.png", 1),
        ("ruled-table.png", 1),
        ("rotated-scan.jpg", 1),
        ("two-pages.pdf", 2),
    ],
)
def test_checked_in_samples_load(name, pages):
    data = (SAMPLES / name).read_bytes()
    assert len(data) < 200_000
    loaded = load_document(data, tier=6, pages=None, limits=LIMITS_144)
    assert len(loaded) == pages
    assert all((p.width, p.height) == (1000, 700) for p in loaded)


def _png_bomb() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", 50_000, 50_000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("data", "tier", "error", "code"),
    [
        (b"", 0, InvalidInput, "empty_document"),
        (bytes(range(256)) * 4, 0, UnsupportedMediaType, "unsupported_media_type"),
        (png()[:300], 0, InvalidInput, "corrupt_image"),
        (_png_bomb(), 0, PayloadTooLarge, "image_too_large"),
        (b"just some text, not an image\n", 0, UnsupportedMediaType, "unsupported_media_type"),
        (
            b"<svg xmlns='http://www.w3.org/2000/svg'/>",
            0,
            UnsupportedMediaType,
            "unsupported_media_type",
        ),
        (b"<!doctype html><p>hi</p>", 0, UnsupportedMediaType, "unsupported_media_type"),
        (b"%PDF-1.7\n1 0 obj <<>> garbage", 0, InvalidInput, "corrupt_pdf"),
        (png(), 9, InvalidInput, "invalid_tier"),
    ],
    ids=["empty", "random", "truncated-png", "bomb", "text", "svg", "html", "corrupt-pdf", "tier"],
)
def test_every_bad_input_is_a_typed_error(data, tier, error, code):
    with pytest.raises(error) as err:
        load_document(data, tier=tier, pages=None, limits=LIMITS)
    assert err.value.code == code
    assert err.value.message
