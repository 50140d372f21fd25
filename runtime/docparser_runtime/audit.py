"""Coverage audit: find ink on a page that no returned box accounts for.

WHY: a parser that drops a line without saying so is worse than one that fails, because
the user trusts the output. Whatever the engine (a detector that missed a line, a
generation cut at ``max_new_tokens``), the page itself says where text is: binarise it,
take the connected components of ink, drop those that lie inside the boxes the engine
read, and what is left, grouped into line-like regions, is text nobody transcribed.

Engine-independent and pure: an image and boxes in, regions out. Only cv2 (installed
with ``rapidocr-onnxruntime``, a base dependency) and numpy. Cost is one Otsu threshold,
one connected-component labelling and a few vectorised passes (tens of milliseconds for
an A4 page at 150 dpi; ``bench/runtime.py`` reports it against the engine's time).

Not text: specks (noise), rules and frames (long thin or hollow shapes), solid blobs
taller than a few lines (pictures). A figure with printed labels can still be reported:
the audit prefers a false alarm to silence.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

BBox = tuple[float, float, float, float]

MAX_PIXELS = 4_000_000  # larger pages are audited downscaled (text stays > 5 px tall)
PAPER_CONTRAST = 40  # ink is at least this much darker than the paper (0..255)
MIN_INK_HEIGHT = 5  # px at audit scale: shorter components are specks or punctuation
COVERED = 0.5  # a component is covered when this share of its ink is inside a box
MAX_REGIONS = 200  # per page, largest first: bounds the reply on a page of noise


@dataclass(frozen=True)
class Uncovered:
    """A line-like region of ink outside every box; ``bbox`` in page pixels."""

    bbox: BBox
    ink_pixels: int


@dataclass(frozen=True)
class InkMap:
    """Connected components of a page's ink at audit ``scale`` (page px * scale)."""

    labels: np.ndarray  # int32, 0 = paper
    stats: np.ndarray  # per label: x, y, w, h, area (cv2 layout)
    scale: float
    text_like: np.ndarray  # bool per label

    @property
    def unit(self) -> float:
        """Median glyph height at audit scale: the yardstick for margins and grouping."""
        heights = self.stats[1:][self.text_like[1:], 3]
        return float(np.median(heights)) if len(heights) else float(MIN_INK_HEIGHT * 2)


_last_lock = threading.Lock()
_last: list[tuple[weakref.ref[Image.Image], InkMap]] = []


def ink_map(image: Image.Image) -> InkMap:
    """Binarise the page (Otsu, bounded by the paper tone) and label its ink.

    The last page's map is kept (by identity, while that image lives): an engine that
    audits its own output before answering (rapidocr re-reads what it missed) and the
    coverage stage after it then pay for one labelling, not two. Callers never draw on
    an image they audited."""
    with _last_lock:
        if _last and _last[0][0]() is image:
            return _last[0][1]
    found = _ink_map(image)
    with _last_lock:
        _last[:] = [(weakref.ref(image), found)]
    return found


def _ink_map(image: Image.Image) -> InkMap:
    import cv2

    gray = image.convert("L")
    scale = min(1.0, (MAX_PIXELS / max(gray.width * gray.height, 1)) ** 0.5)
    if scale < 1.0:
        size = (max(1, round(gray.width * scale)), max(1, round(gray.height * scale)))
        gray = gray.resize(size, Image.Resampling.BOX)
    pixels = np.asarray(gray)
    hist = np.bincount(pixels.ravel(), minlength=256)
    if np.median(pixels) < 128:  # light text on a dark page: the paper is dark
        pixels, hist = 255 - pixels, hist[::-1]
    paper = int(np.searchsorted(np.cumsum(hist), 0.9 * pixels.size))
    threshold = min(otsu(hist), paper - PAPER_CONTRAST)
    ink = (pixels < threshold).astype(np.uint8)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    return InkMap(labels, stats, scale, _text_like(stats, pixels.shape))


def otsu(hist: np.ndarray) -> int:
    """Otsu's threshold of a 256-bin histogram (between-class variance maximised)."""
    levels = np.arange(256, dtype=np.float64)
    weight = np.cumsum(hist, dtype=np.float64)
    mean = np.cumsum(hist * levels)
    total, total_mean = weight[-1], mean[-1]
    back = weight[:-1]
    fore = total - back
    valid = (back > 0) & (fore > 0)
    between = np.zeros(255)
    mb = mean[:-1][valid] / back[valid]
    mf = (total_mean - mean[:-1][valid]) / fore[valid]
    between[valid] = back[valid] * fore[valid] * (mb - mf) ** 2
    return int(np.argmax(between)) + 1


def _text_like(stats: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Components that could be glyphs: not specks, rules, frames or pictures."""
    w, h, area = stats[:, 2], stats[:, 3], stats[:, 4]
    height, width = shape
    fill = area / np.maximum(w * h, 1)
    speck = (h < MIN_INK_HEIGHT) & (w < 3 * MIN_INK_HEIGHT)
    rule = ((w >= 12 * np.maximum(h, 1)) & (w > 60)) | ((h >= 12 * np.maximum(w, 1)) & (h > 60))
    big = (h > 0.2 * height) | (w > 0.5 * width)
    hollow = (fill < 0.08) & (h > 4 * MIN_INK_HEIGHT)  # a frame or a table's grid
    keep: np.ndarray = ~(speck | rule | big | hollow)
    keep[0] = False  # the paper
    return keep


def uncovered(ink: InkMap, boxes: Sequence[BBox], *, margin: float = 0.35) -> list[Uncovered]:
    """Regions of text-like ink outside ``boxes`` (page pixels), largest first.

    A box is widened by ``margin`` glyph heights on each side: detectors and grounding
    grids cut a little into ascenders, descenders and accents.
    """
    s, unit = ink.scale, ink.unit
    labels, stats = ink.labels, ink.stats
    height, width = labels.shape
    pad = margin * unit
    inside = np.zeros(labels.shape, dtype=bool)
    for x1, y1, x2, y2 in boxes:
        a, b = max(int(x1 * s - pad), 0), min(int(np.ceil(x2 * s + pad)), width)
        c, d = max(int(y1 * s - pad), 0), min(int(np.ceil(y2 * s + pad)), height)
        if b > a and d > c:
            inside[c:d, a:b] = True
    counts = np.bincount(labels[inside], minlength=len(stats))
    covered = counts >= COVERED * stats[:, 4]
    lost = np.flatnonzero(ink.text_like & ~covered)
    if len(lost) == 0:
        return []
    return _group(stats[lost], unit, s, (height, width))


def _group(stats: np.ndarray, unit: float, scale: float, shape: tuple[int, int]) -> list[Uncovered]:
    """Merge lost glyphs into line-like regions (word gaps closed, lines kept apart)."""
    import cv2

    gx, gy = max(1, round(1.2 * unit)), max(1, round(0.25 * unit))
    canvas = np.zeros(shape, dtype=np.uint8)
    for x, y, w, h, _ in stats:
        canvas[max(y - gy, 0) : y + h + gy, max(x - gx, 0) : x + w + gx] = 1
    n, labels = cv2.connectedComponents(canvas, connectivity=4)
    region = labels[stats[:, 1], stats[:, 0]]  # each glyph's top-left pixel is in its region
    x1 = np.full(n, np.inf)
    y1 = np.full(n, np.inf)
    x2 = np.zeros(n)
    y2 = np.zeros(n)
    np.minimum.at(x1, region, stats[:, 0])
    np.minimum.at(y1, region, stats[:, 1])
    np.maximum.at(x2, region, stats[:, 0] + stats[:, 2])
    np.maximum.at(y2, region, stats[:, 1] + stats[:, 3])
    ink = np.bincount(region, weights=stats[:, 4], minlength=n)
    regions = []
    for i in np.flatnonzero(ink):
        if y2[i] - y1[i] < 0.6 * unit:  # only punctuation-sized ink
            continue
        bbox = (
            round(float(x1[i]) / scale, 1),
            round(float(y1[i]) / scale, 1),
            round(float(x2[i]) / scale, 1),
            round(float(y2[i]) / scale, 1),
        )
        regions.append(Uncovered(bbox, int(ink[i])))
    regions.sort(key=lambda r: -r.ink_pixels)
    return regions[:MAX_REGIONS]


def audit(image: Image.Image, boxes: Sequence[BBox]) -> list[Uncovered]:
    """``uncovered(ink_map(image), boxes)``: the one call most users need."""
    return uncovered(ink_map(image), boxes)
