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


def encrypted_pdf() -> bytes:
    """A one-page PDF behind the standard security handler with an unknown password."""
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
        b"<< /Filter /Standard /V 1 /R 2 /O <"
        + b"11" * 32
        + b"> /U <"
        + b"22" * 32
        + b"> /P -4 >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    file_id = b"<" + b"ab" * 16 + b">"
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R " % (len(objs) + 1)
    out += b"/ID [" + file_id + b" " + file_id + b"] >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def test_password_protected_pdf_has_its_own_code():
    with pytest.raises(InvalidInput) as err:
        render_pdf(encrypted_pdf(), dpi=72, max_pages=10, pages=None, max_pixels=BIG)
    assert err.value.code == "encrypted_pdf"
    assert "password" in err.value.message
