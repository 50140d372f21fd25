"""Unit tests for preprocess.pdf: real PDFs rendered by real pdfium."""

from __future__ import annotations

import io
import random
import threading

import pypdfium2 as pdfium
import pytest
from docparser_runtime.errors import InvalidInput, PayloadTooLarge
from docparser_runtime.preprocess.pdf import pdf_page_count, render_pdf
from PIL import Image

COLORS = [(220, 0, 0), (0, 160, 0), (0, 0, 220)]
BIG = 100_000_000


def colour_pdf(colours=COLORS, size=(300, 200)) -> bytes:
    """One page per colour; at resolution 72 a page is ``size`` points."""
    pages = [Image.new("RGB", size, c) for c in colours]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", resolution=72, save_all=True, append_images=pages[1:])
    return buf.getvalue()


def blank_pdf(width_pt: float, height_pt: float, count: int = 1) -> bytes:
    doc = pdfium.PdfDocument.new()
    for _ in range(count):
        doc.new_page(width_pt, height_pt)
    buf = io.BytesIO()
    doc.save(buf)
    doc.close()
    return buf.getvalue()


def assert_colour(img: Image.Image, colour: tuple[int, int, int]) -> None:
    got = img.getpixel((img.width // 2, img.height // 2))
    assert all(abs(a - b) < 30 for a, b in zip(got, colour, strict=True)), (got, colour)


def test_all_pages_render_at_the_requested_dpi():
    data = colour_pdf()
    assert pdf_page_count(data) == 3
    pages = render_pdf(data, dpi=144, max_pages=10, pages=None, max_pixels=BIG)
    assert [i for i, _ in pages] == [0, 1, 2]
    for (_, img), colour in zip(pages, COLORS, strict=True):
        assert img.mode == "RGB"
        assert img.size == (600, 400)  # 300x200 pt at 2 px/pt
        assert_colour(img, colour)
    small = render_pdf(data, dpi=72, max_pages=10, pages="1", max_pixels=BIG)
    assert small[0][1].size == (300, 200)


def test_page_ranges_select_pages_in_order():
    data = colour_pdf()
    pages = render_pdf(data, dpi=72, max_pages=10, pages="3,1-2", max_pixels=BIG)
    assert [i for i, _ in pages] == [0, 1, 2]
    pages = render_pdf(data, dpi=72, max_pages=10, pages="2-", max_pixels=BIG)
    assert [i for i, _ in pages] == [1, 2]
    assert_colour(pages[0][1], COLORS[1])
    assert_colour(pages[1][1], COLORS[2])


def test_out_of_range_pages_are_invalid():
    with pytest.raises(InvalidInput) as err:
        render_pdf(colour_pdf(), dpi=72, max_pages=10, pages="4", max_pixels=BIG)
    assert err.value.code == "invalid_pages"


def test_page_limit_counts_selected_pages():
    data = colour_pdf()
    with pytest.raises(PayloadTooLarge) as err:
        render_pdf(data, dpi=72, max_pages=2, pages=None, max_pixels=BIG)
    assert err.value.code == "too_many_pages"
    assert "1-2" in err.value.message
    assert len(render_pdf(data, dpi=72, max_pages=2, pages="2-3", max_pixels=BIG)) == 2


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7\n" + random.Random(3).randbytes(2000),
        b"%PDF-1.4\n%%EOF\n",
        colour_pdf()[:2000],
    ],
    ids=["garbage-body", "header-only", "truncated"],
)
def test_corrupt_pdfs_are_invalid_input(data):
    with pytest.raises(InvalidInput) as err:
        render_pdf(data, dpi=72, max_pages=10, pages=None, max_pixels=BIG)
    assert err.value.code == "corrupt_pdf"


def test_oversized_page_is_rendered_within_the_pixel_limit():
    # 200 x 200 inches: 28800 x 28800 pixels at 144 dpi, 829 megapixels.
    pages = render_pdf(
        blank_pdf(14400, 14400), dpi=144, max_pages=1, pages=None, max_pixels=4_000_000
    )
    img = pages[0][1]
    assert img.width * img.height <= 4_000_000
    assert img.width > 1900  # shrunk to fit, not to a thumbnail
    assert img.getpixel((10, 10)) == (255, 255, 255)


def test_concurrent_renders_are_serialised_safely():
    data = colour_pdf()
    results: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append(
                    len(render_pdf(data, dpi=72, max_pages=10, pages=None, max_pixels=BIG))
                )
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert results == [3] * 12
