"""PDF rasterisation with pypdfium2: bytes in, one RGB image per selected page out.

WHY pdfium: it is the renderer Chrome ships, copes with broken real-world PDFs, and its
wheel carries no system dependencies. PDFium is not thread-safe, and the server runs
preprocessing on worker threads, so every call into it holds one process-wide lock.
"""

from __future__ import annotations

import math
import threading

import pypdfium2 as pdfium
from PIL import Image

from docparser_runtime.errors import InvalidInput, PayloadTooLarge
from docparser_runtime.preprocess.decode import to_rgb
from docparser_runtime.preprocess.page_ranges import parse_page_ranges
from docparser_runtime.preprocess.page_size import PageSize, pdf_render_cost

PDFIUM_LOCK = threading.Lock()
_POINTS_PER_INCH = 72.0


def render_pdf(
    data: bytes,
    *,
    dpi: int,
    max_pages: int,
    pages: str | None,
    max_pixels: int,
    page: PageSize | None = None,
) -> list[tuple[int, Image.Image]]:
    """Render the pages that ``pages`` selects (1-based spec, all when None).

    Returns ``(0-based page index, RGB image)`` pairs in page order. Raises
    ``InvalidInput`` (``corrupt_pdf``, ``encrypted_pdf``, ``invalid_pages``) and
    ``PayloadTooLarge`` (``too_many_pages``) when more than ``max_pages`` pages are
    selected. A page larger than ``max_pixels`` at ``dpi`` is rendered at the highest
    resolution that fits: the page is vector data, so shrinking it loses nothing the
    user sent, whereas refusing a valid PDF would. For the same reason a page larger than
    ``page`` (the engine's size) is rendered at that size.
    """
    with PDFIUM_LOCK:
        doc = _open(data)
        try:
            selected = select_pdf_pages(doc, pages, max_pages)
            return [(i, _render_page(doc, i, dpi, max_pixels, page)) for i in selected]
        finally:
            doc.close()


def select_pdf_pages(doc: pdfium.PdfDocument, pages: str | None, max_pages: int) -> list[int]:
    """The 0-based indices ``pages`` selects from an open document, within ``max_pages``."""
    count = len(doc)
    if count == 0:
        raise InvalidInput("corrupt PDF: it has no pages", code="corrupt_pdf")
    selected = parse_page_ranges(pages, count)
    if len(selected) > max_pages:
        raise PayloadTooLarge(
            f"{len(selected)} pages selected, above the limit of {max_pages} per "
            f"request; select fewer with the 'pages' option (e.g. '1-{max_pages}')",
            code="too_many_pages",
        )
    return selected


def open_pdf(data: bytes) -> pdfium.PdfDocument:
    """Open a PDF (caller holds ``PDFIUM_LOCK`` when threads share PDFium, and closes it)."""
    return _open(data)


def render_pdf_page(
    doc: pdfium.PdfDocument,
    index: int,
    *,
    dpi: int,
    max_pixels: int,
    page: PageSize | None = None,
) -> Image.Image:
    """Render one page of an open document (see ``render_pdf`` for the pixel cap)."""
    return _render_page(doc, index, dpi, max_pixels, page)


def pdf_page_cost(
    doc: pdfium.PdfDocument, index: int, *, dpi: int, max_pixels: int, page: PageSize | None
) -> tuple[int, int]:
    """``(peak render bytes, output pixels)`` of page ``index``, from its size alone."""
    try:
        width_pt, height_pt = doc.get_page_size(index)
    except pdfium.PdfiumError as exc:
        raise InvalidInput(f"corrupt PDF: page {index + 1}: {exc}", code="corrupt_pdf") from exc
    if not (width_pt > 0 and height_pt > 0):
        return 0, 0  # refused when rendered, with the page's own message
    scale = _scale(width_pt, height_pt, dpi, max_pixels, page)
    out = (math.ceil(width_pt * scale), math.ceil(height_pt * scale))
    return pdf_render_cost(out), out[0] * out[1]


def _scale(
    width_pt: float, height_pt: float, dpi: int, max_pixels: int, page: PageSize | None
) -> float:
    """Points -> pixels: ``dpi``, then shrunk to ``max_pixels`` and the engine's size."""
    scale = dpi / _POINTS_PER_INCH
    pixels = (width_pt * scale) * (height_pt * scale)
    if pixels > max_pixels:
        scale *= math.sqrt(max_pixels / pixels) * 0.999
    fit = 1.0 if page is None else page.scale(width_pt * scale, height_pt * scale)
    return scale * fit * 0.999 if fit < 1.0 else scale


def pdf_page_count(data: bytes) -> int:
    """Number of pages, without rendering (for limits and job planning)."""
    with PDFIUM_LOCK:
        doc = _open(data)
        try:
            return len(doc)
        finally:
            doc.close()


def _open(data: bytes) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        text = str(exc)
        if "password" in text.lower():
            raise InvalidInput(
                "the PDF is encrypted with a password; send an unencrypted copy",
                code="encrypted_pdf",
            ) from exc
        raise InvalidInput(f"corrupt PDF: {text}", code="corrupt_pdf") from exc


def _render_page(
    doc: pdfium.PdfDocument, index: int, dpi: int, max_pixels: int, page_size: PageSize | None
) -> Image.Image:
    try:
        page = doc[index]
    except pdfium.PdfiumError as exc:
        raise InvalidInput(f"corrupt PDF: page {index + 1}: {exc}", code="corrupt_pdf") from exc
    try:
        width_pt, height_pt = page.get_size()
        if not (width_pt > 0 and height_pt > 0):
            raise InvalidInput(
                f"corrupt PDF: page {index + 1} has no area ({width_pt}x{height_pt} pt)",
                code="corrupt_pdf",
            )
        scale = _scale(width_pt, height_pt, dpi, max_pixels, page_size)
        try:
            bitmap = page.render(scale=scale, fill_color=(255, 255, 255, 255))
            image = bitmap.to_pil()
        except pdfium.PdfiumError as exc:
            raise InvalidInput(
                f"corrupt PDF: page {index + 1} cannot be rendered: {exc}", code="corrupt_pdf"
            ) from exc
        # to_pil() shares memory with the pdfium bitmap: copy before closing it.
        rgb = to_rgb(image)
        bitmap.close()
        return rgb
    finally:
        page.close()
