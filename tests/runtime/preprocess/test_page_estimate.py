"""The page estimate of a queued job (the autoscaling backlog) reads bytes only."""

from __future__ import annotations

import io

import pytest
from docparser_runtime.preprocess.page_estimate import estimate_pages
from engines_for_tests import png_bytes
from PIL import Image


def pdf(pages: int) -> bytes:
    images = [Image.new("RGB", (100, 80 + i), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:])
    return buf.getvalue()


@pytest.mark.parametrize(
    ("pages", "max_pages", "expected"),
    [
        (None, 200, 7),  # every page object the file shows
        ("all", 200, 7),
        ("2-", 200, 6),  # an open range runs to the last visible page
        ("1,3,5", 200, 3),
        ("1-100", 200, 100),  # a closed range counts in full (or the job fails on it)
        ("1-100", 50, 50),  # never more than the job may parse
        (None, 5, 5),
    ],
)
def test_pdf_pages_follow_the_page_objects_and_the_pages_option(pages, max_pages, expected):
    assert estimate_pages(pdf(7), pages, max_pages=max_pages) == expected


def test_an_image_is_one_page_and_unknown_bytes_at_least_one():
    assert estimate_pages(png_bytes(), None, max_pages=200) == 1
    assert estimate_pages(b"%PDF-1.7 no visible pages", None, max_pages=200) == 1
    # "/Type /Pages" is the page tree, not a page.
    assert estimate_pages(b"%PDF-1.7 /Type /Pages /Type/Page /Type /Page", None, max_pages=9) == 2
