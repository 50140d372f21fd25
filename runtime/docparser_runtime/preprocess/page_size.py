"""Pages at the size the engine uses, and what decoding them costs in host memory.

WHY: an engine never looks at more pixels than its own input size (RapidOCR shrinks every
page to 2000 px on its longest side; DeepSeek-OCR-2's processor to a canvas of at most six
768 px tiles), yet a 200 x 200 inch PDF page at 144 dpi is 830 Mpx. Every byte past the
engine's size is memory spent for nothing: so PDF pages are rendered at that size, JPEGs
decoded at a reduced DCT scale (``draft``), and the other formats (no reduced decode in
Pillow) decoded once and shrunk at once, before any conversion copy. The full-size decode
still happens for those, so it is what ``decode_cost`` charges to the host memory budget
before it starts.

Pillow keeps RGB, RGBA, LA, CMYK, I and F pixels in 4 bytes, L/P/1 in 1, I;16 in 2: the
figures below are Pillow's, not the file's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image

# Modes Pillow resamples directly; the others (P, 1, I;16, PA, ...) are converted to RGB
# (or L) first, at full size.
RESAMPLE_MODES = frozenset({"L", "LA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "I", "F"})
PAGE_BYTES_PER_PIXEL = 4  # a decoded RGB page as Pillow holds it
# Bytes per *output* pixel around a decode: the resample passes and their intermediate
# (at most 4x the output), the RGB copy and the raw bytes sent to the server.
SHRINK_BYTES_PER_PIXEL = 24
# A rendered PDF page: PDFium's bitmap, the Pillow view converted to RGB, its copy, the
# raw bytes sent to the server.
PDF_BYTES_PER_PIXEL = 16


@dataclass(frozen=True)
class PageSize:
    """The most an engine uses: ``max_side`` px on the longest side, ``max_pixels`` in
    all (0: no bound of that kind)."""

    max_side: int = 0
    max_pixels: int = 0

    def fit(self, width: int, height: int) -> tuple[int, int]:
        """``width`` x ``height`` shrunk (never enlarged), aspect kept, to fit both bounds."""
        scale = self.scale(width, height)
        if scale >= 1.0:
            return width, height
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))

    def scale(self, width: float, height: float) -> float:
        """The factor (at most 1) that fits a ``width`` x ``height`` page."""
        scale = 1.0
        if self.max_side and max(width, height) > self.max_side:
            scale = self.max_side / max(width, height)
        if self.max_pixels and width * height * scale * scale > self.max_pixels:
            scale = math.sqrt(self.max_pixels / (width * height))
        return scale


def pillow_bytes_per_pixel(mode: str) -> int:
    if mode in ("1", "L", "P"):
        return 1
    if mode.startswith("I;16"):
        return 2
    return 4


def image_decode_cost(width: int, height: int, mode: str, out: tuple[int, int]) -> int:
    """Peak bytes of decoding a ``width`` x ``height`` image in ``mode`` (after any draft
    reduction) and shrinking it to ``out``."""
    pixels = width * height
    cost = pixels * pillow_bytes_per_pixel(mode)
    if mode not in RESAMPLE_MODES and out != (width, height):
        cost += pixels * PAGE_BYTES_PER_PIXEL  # converted at full size before shrinking
    return cost + out[0] * out[1] * SHRINK_BYTES_PER_PIXEL


def pdf_render_cost(out: tuple[int, int]) -> int:
    """Peak bytes of rendering one PDF page at ``out`` pixels."""
    return out[0] * out[1] * PDF_BYTES_PER_PIXEL


def shrink(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """``image`` (a mode in RESAMPLE_MODES) resampled to ``size`` at once: an integer box
    reduction first (cheap, and its output at most 4x ``size``), then one antialiased
    resample."""
    if image.size == size:
        return image
    factor = min(image.width // size[0], image.height // size[1])
    if factor >= 2:
        image = image.reduce(factor)
    return image.resize(size, Image.Resampling.LANCZOS)
