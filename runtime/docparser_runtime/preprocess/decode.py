"""Safe image decoding: untrusted bytes in, one RGB page out.

Every upload is hostile until proven otherwise. The order of operations matters:
1. ``sniff_format`` decides from magic bytes (never from a filename or a client's
   Content-Type), so text, SVG or HTML posing as an image is refused before any
   decoder sees it.
2. ``Image.open`` only parses the header; the pixel count is checked against our limit
   *before* ``load()`` allocates anything (a 50000x50000 PNG is a few hundred bytes).
3. Only then the first frame is decoded, at the size the engine uses (``page_size``: a
   JPEG at a reduced DCT scale, anything else shrunk right after its decode, before any
   conversion copy), and normalised: EXIF orientation applied, and CMYK / 16-bit /
   palette / alpha converted to plain 8-bit RGB on a white background (what a scanner
   would have produced), because both engines expect RGB.
Every failure becomes an error from ``docparser_runtime.errors`` with a stable code.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.preprocess.page_size import (
    RESAMPLE_MODES,
    PageSize,
    image_decode_cost,
    shrink,
)

IMAGE_FORMATS = ("png", "jpeg", "webp", "tiff", "bmp", "gif")
ALL_FORMATS = (*IMAGE_FORMATS, "pdf")

# Never silently accept half an image: a truncated upload must be an error, not a page
# that is grey at the bottom.
ImageFile.LOAD_TRUNCATED_IMAGES = False
# Our own limit (``max_pixels``, and the host memory budget) applies before decoding;
# Pillow's fixed one would refuse images the budget can hold.
Image.MAX_IMAGE_PIXELS = None
_EXIF_ORIENTATION = 0x0112
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"BM", "bmp"),
)
# The PDF spec lets readers accept a header anywhere in the first 1024 bytes.
_PDF_HEADER_WINDOW = 1024
_TEXT_HINTS = (b"<svg", b"<?xml", b"<!doctype html", b"<html", b"<head", b"<body", b"{", b"[")


def sniff_format(data: bytes) -> str:
    """Return the container format of ``data`` from its magic bytes.

    Raises ``InvalidInput`` (code ``empty_document``) for no bytes and
    ``UnsupportedMediaType`` for anything that is not an accepted format.
    """
    if not data:
        raise InvalidInput("the document is empty (0 bytes)", code="empty_document")
    for magic, fmt in _MAGIC:
        if data.startswith(magic):
            return fmt
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if b"%PDF-" in data[:_PDF_HEADER_WINDOW]:
        return "pdf"
    raise UnsupportedMediaType(
        f"unsupported document format ({_describe_unknown(data)}); "
        f"accepted: PNG, JPEG, WebP, TIFF, BMP, GIF, PDF"
    )


def _describe_unknown(data: bytes) -> str:
    """A short human hint of what the bytes look like, for the error message."""
    head = data[:512].lstrip().lower()
    if head.startswith(b"<svg") or b"<svg" in head:
        return "looks like SVG, which is not rasterised"
    if any(head.startswith(h) for h in (b"<!doctype html", b"<html", b"<head", b"<body")):
        return "looks like HTML"
    if any(head.startswith(h) for h in _TEXT_HINTS) or _is_mostly_text(data[:512]):
        return "looks like text"
    return "unrecognised binary data"


def _is_mostly_text(chunk: bytes) -> bool:
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    printable = sum(ch.isprintable() or ch in "\r\n\t" for ch in text)
    return printable >= 0.95 * max(len(text), 1)


def decode_image(data: bytes, *, max_pixels: int, page: PageSize | None = None) -> Image.Image:
    """Decode an image upload into a loaded 8-bit RGB ``Image`` (first frame, upright),
    no larger than ``page`` (the engine's size; None: as stored).

    Raises ``PayloadTooLarge`` when the header announces more than ``max_pixels``
    pixels (checked before decoding), ``UnsupportedMediaType`` for non-images
    (including PDFs: use ``preprocess.pdf.render_pdf``) and ``InvalidInput`` with code
    ``corrupt_image`` for bytes that claim a format but do not decode.
    """
    fmt = sniff_format(data)
    if fmt == "pdf":
        raise UnsupportedMediaType("a PDF is not an image; render it with render_pdf")
    img = _open_header(data, fmt)
    try:
        _check_pixels(img.width, img.height, max_pixels)
        if getattr(img, "n_frames", 1) > 1:
            img.seek(0)  # animated GIF/WebP/APNG or multi-page TIFF: the first frame
        out = _reduced(img, page)
        try:
            orientation = img.getexif().get(_EXIF_ORIENTATION, 1)
            img.load()
            small = img if img.mode in RESAMPLE_MODES else to_rgb(img)
            small = shrink(small, out)
            if orientation in _TRANSPOSE:
                small = small.transpose(_TRANSPOSE[orientation])
            rgb = to_rgb(small)
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise InvalidInput(f"corrupt {fmt.upper()} image: {exc}", code="corrupt_image") from exc
        except Image.DecompressionBombError as exc:  # pragma: no cover - defensive
            raise PayloadTooLarge(str(exc), code="image_too_large") from exc
        _check_pixels(rgb.width, rgb.height, max_pixels)
        return rgb
    finally:
        img.close()


def _reduced(img: Image.Image, page: PageSize | None) -> tuple[int, int]:
    """The output size for ``img`` at ``page``; a JPEG is set to decode at the smallest
    DCT scale (1/2, 1/4, 1/8) still at least that large (``draft``: no pixel is decoded
    twice, and a 1/8 decode holds 1/64 of the memory)."""
    if page is None:
        return img.size
    out = page.fit(*img.size)
    if img.format == "JPEG" and out != img.size:
        img.draft(img.mode, out)
        out = page.fit(*img.size) if img.size != out else out
    return out


def image_cost(data: bytes, fmt: str, *, max_pixels: int, page: PageSize | None) -> tuple[int, int]:
    """``(peak decode bytes, output pixels)`` of ``decode_image`` on ``data``, from its
    header alone (no pixel decoded): what the host memory budget is charged before.
    Raises like ``decode_image`` for a bad header or too many pixels."""
    img = _open_header(data, fmt)
    try:
        _check_pixels(img.width, img.height, max_pixels)
        out = _reduced(img, page)
        width, height = img.size
        return image_decode_cost(width, height, img.mode, out), out[0] * out[1]
    finally:
        img.close()


def _open_header(data: bytes, fmt: str) -> Image.Image:
    """Parse only the header; Pillow's own bomb guard is mapped to our error."""
    try:
        with warnings.catch_warnings():
            # We enforce our own (configurable) limit; Pillow's warning is noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(io.BytesIO(data), formats=[_PIL_FORMAT[fmt]])
    except Image.DecompressionBombError as exc:
        raise PayloadTooLarge(
            f"image dimensions exceed the decoder's safety limit: {exc}",
            code="image_too_large",
        ) from exc
    except UnidentifiedImageError as exc:
        # Pillow's message names the BytesIO object (a memory address): not for clients.
        raise InvalidInput(
            f"corrupt {fmt.upper()} image: its header cannot be read", code="corrupt_image"
        ) from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise InvalidInput(
            f"corrupt {fmt.upper()} image: cannot read its header ({exc})", code="corrupt_image"
        ) from exc


_PIL_FORMAT = {
    "png": "PNG",
    "jpeg": "JPEG",
    "webp": "WEBP",
    "tiff": "TIFF",
    "bmp": "BMP",
    "gif": "GIF",
}


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise InvalidInput(f"image has no pixels ({width}x{height})", code="corrupt_image")
    if width * height > max_pixels:
        raise PayloadTooLarge(
            f"image is {width}x{height} = {width * height} pixels, above the limit of {max_pixels}",
            code="image_too_large",
        )


def to_rgb(img: Image.Image) -> Image.Image:
    """Normalise any Pillow mode to 8-bit RGB; transparency is composited on white.

    WHY white: documents are printed on white paper, and a transparent PNG screenshot
    of text has black glyphs on nothing; a black background would erase them.
    """
    mode = img.mode
    if mode == "RGB":
        return img.copy()
    if mode.startswith("I") or mode == "F":
        full_scale = 65535.0 if mode.startswith("I;16") else None
        grey = _to_uint8(np.asarray(img), full_scale)
        return Image.fromarray(grey).convert("RGB")
    if (mode == "P" and "transparency" in img.info) or mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    # CMYK, YCbCr, LAB, HSV, P, L, 1: Pillow's converters are correct for these.
    return img.convert("RGB")


def _to_uint8(arr: np.ndarray, full_scale: float | None) -> np.ndarray:
    """Scale high-bit-depth grey (I;16, I, F) into 0..255 without clipping highlights.

    ``full_scale`` is the white value when the mode fixes it (65535 for 16-bit);
    otherwise it is guessed from the data range.
    """
    if full_scale is not None:
        scaled = arr.astype(np.float64) * (255.0 / full_scale)
        return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    is_float = arr.dtype.kind == "f"
    arr = arr.astype(np.float64)
    if arr.size == 0:
        return arr.astype(np.uint8)
    hi = float(arr.max())
    if is_float and hi <= 1.0 and float(arr.min()) >= 0.0:
        scale = 255.0  # float images in 0..1
    elif hi <= 255:
        scale = 1.0
    elif hi <= 65535:
        scale = 255.0 / 65535.0
    else:
        scale = 255.0 / hi
    return np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8)
