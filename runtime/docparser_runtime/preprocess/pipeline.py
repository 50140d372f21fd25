"""The preprocessing use case: upload bytes -> decoded, tiled pages for an engine.

Both engines and every route (parse, jobs, OpenAI) go through ``load_document``, so
limits, page selection and the tier -> tiles -> visual-token accounting are identical
everywhere, and the autoscaler's "visual tokens" metric means the same thing for the
CPU engine as for DeepSeek-OCR-2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PIL import Image

from docparser_runtime.errors import InvalidInput
from docparser_runtime.pages import PageImage
from docparser_runtime.preprocess.decode import decode_image, image_cost, sniff_format
from docparser_runtime.preprocess.page_ranges import parse_page_ranges
from docparser_runtime.preprocess.page_size import PageSize
from docparser_runtime.preprocess.pdf import (
    PDFIUM_LOCK,
    open_pdf,
    pdf_page_cost,
    render_pdf,
    render_pdf_page,
    select_pdf_pages,
)
from docparser_runtime.preprocess.tier_select import choose_tier
from docparser_runtime.preprocess.tiling import MAX_TIER, plan_tiles

if TYPE_CHECKING:
    import pypdfium2 as pdfium

    from docparser_runtime.settings import Settings

DEFAULT_MAX_PIXELS = 80_000_000  # header limit when neither the settings nor a budget say


@dataclass(frozen=True)
class DecodeLimits:
    """Per-request resource limits (from ``Settings``: max_image_pixels, max_pages, pdf_dpi)
    and ``page``, the engine's size: no page is decoded larger (None: as stored)."""

    max_pixels: int
    max_pages: int
    pdf_dpi: int
    page: PageSize | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, *, max_pixels: int | None = None, page: PageSize | None = None
    ) -> DecodeLimits:
        """``max_pixels``: the header limit when ``settings.max_image_pixels`` is unset (the
        server derives it from the host memory budget)."""
        return cls(
            max_pixels=settings.max_image_pixels or max_pixels or DEFAULT_MAX_PIXELS,
            max_pages=settings.max_pages,
            pdf_dpi=settings.pdf_dpi,
            page=page,
        )


def validate_tier(tier: object) -> int:
    """``tier`` must be an int 0..6 (bools are not ints here); else ``invalid_tier``."""
    if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= MAX_TIER:
        raise InvalidInput(
            f"tier must be an integer from 0 to {MAX_TIER} (most local tiles), got {tier!r}",
            code="invalid_tier",
        )
    return tier


def load_document(
    data: bytes, *, tier: int, pages: str | None, limits: DecodeLimits, auto: bool = False
) -> list[PageImage]:
    """Decode an image or PDF into ``PageImage``s, each with its tiling plan.

    ``pages`` selects PDF pages (1-based, "1-3,7"); for a single image only "1" (or
    nothing) is valid, so a client that sends a range with an image hears about it
    instead of getting silently one page.
    """
    validate_tier(tier)
    fmt = sniff_format(data)
    if fmt == "pdf":
        rendered = render_pdf(
            data,
            dpi=limits.pdf_dpi,
            max_pages=limits.max_pages,
            pages=pages,
            max_pixels=limits.max_pixels,
            page=limits.page,
        )
    else:
        parse_page_ranges(pages, 1)
        rendered = [(0, decode_image(data, max_pixels=limits.max_pixels, page=limits.page))]
    return [to_page_image(index, image, tier, auto=auto) for index, image in rendered]


def to_page_image(index: int, image: Image.Image, tier: int, *, auto: bool = False) -> PageImage:
    """A decoded page with its tiling plan (the visual-token accounting).

    ``auto``: ``tier`` is the cap and the page gets the smallest tier that reads it
    (``tier_select.choose_tier``), decided here, where the page is decoded (in the decoder
    pool, off the event loop), so the page is queued with its tier already known.
    """
    if auto:
        choice = choose_tier(image, tier)
        chosen, plan = choice.tier, choice.plan
    else:
        chosen, plan = tier, plan_tiles(image.width, image.height, tier)
    return PageImage(
        index=index, image=image, tiles=plan.tiles, vision_tokens=plan.vision_tokens, tier=chosen
    )


@dataclass(frozen=True)
class DocumentPlan:
    """What a document will produce, known before any page is rendered: per page also
    ``costs``, (peak decode bytes, output pixels) from headers and page sizes only, so the
    host memory budget is charged before the memory is spent (empty: unknown)."""

    fmt: str
    indices: tuple[int, ...]  # 0-based page indices, in order
    costs: tuple[tuple[int, int], ...] = ()


def plan_document(data: bytes, pages: str | None, limits: DecodeLimits) -> DocumentPlan:
    """Sniff the format and select pages (PDF: opens it and reads the page tree and the
    selected pages' sizes only; an image: its header)."""
    fmt = sniff_format(data)
    if fmt != "pdf":
        parse_page_ranges(pages, 1)
        cost = image_cost(data, fmt, max_pixels=limits.max_pixels, page=limits.page)
        return DocumentPlan(fmt, (0,), (cost,))
    with PDFIUM_LOCK:
        doc = open_pdf(data)
        try:
            selected = tuple(select_pdf_pages(doc, pages, limits.max_pages))
            costs = tuple(
                pdf_page_cost(doc, i, dpi=limits.pdf_dpi, max_pixels=limits.max_pixels,
                              page=limits.page)
                for i in selected
            )  # fmt: skip
            return DocumentPlan(fmt, selected, costs)
        finally:
            doc.close()


def render_page(
    data: bytes, fmt: str, index: int, limits: DecodeLimits, doc: pdfium.PdfDocument | None = None
) -> Image.Image:
    """Decode one page to RGB: the image itself, or page ``index`` of a PDF (``doc``: an
    already open ``PdfDocument`` of ``data`` to reuse, else the PDF is opened here)."""
    if fmt != "pdf":
        return decode_image(data, max_pixels=limits.max_pixels, page=limits.page)
    with PDFIUM_LOCK:
        own = doc is None
        pdf = open_pdf(data) if doc is None else doc
        try:
            return render_pdf_page(
                pdf, index, dpi=limits.pdf_dpi, max_pixels=limits.max_pixels, page=limits.page
            )
        finally:
            if own:
                pdf.close()
