"""The preprocessing use case: upload bytes -> decoded, tiled pages for an engine.

Both engines and every route (parse, jobs, OpenAI) go through ``load_document``, so
limits, page selection and the tier -> tiles -> visual-token accounting are identical
everywhere, and the autoscaler's "visual tokens" metric means the same thing for the
CPU engine as for DeepSeek-OCR-2.
"""

from __future__ import annotations

from dataclasses import dataclass

from docparser_runtime.engines.base import PageImage
from docparser_runtime.errors import InvalidInput
from docparser_runtime.preprocess.decode import decode_image, sniff_format
from docparser_runtime.preprocess.page_ranges import parse_page_ranges
from docparser_runtime.preprocess.pdf import render_pdf
from docparser_runtime.preprocess.tiling import MAX_TIER, plan_tiles


@dataclass(frozen=True)
class DecodeLimits:
    """Per-request resource limits (from ``Settings``: max_image_pixels, max_pages, pdf_dpi)."""

    max_pixels: int
    max_pages: int
    pdf_dpi: int

    @classmethod
    def from_settings(cls, settings) -> DecodeLimits:
        return cls(
            max_pixels=settings.max_image_pixels,
            max_pages=settings.max_pages,
            pdf_dpi=settings.pdf_dpi,
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
    data: bytes, *, tier: int, pages: str | None, limits: DecodeLimits
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
        )
    else:
        parse_page_ranges(pages, 1)
        rendered = [(0, decode_image(data, max_pixels=limits.max_pixels))]
    result = []
    for index, image in rendered:
        plan = plan_tiles(image.width, image.height, tier)
        result.append(
            PageImage(index=index, image=image, tiles=plan.tiles, vision_tokens=plan.vision_tokens)
        )
    return result
