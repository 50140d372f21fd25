"""Straighten slightly rotated scans before OCR, and map boxes back afterwards.

A page scanned 1-2 degrees off breaks what the layout pass relies on: table rules are
no longer horizontal runs of ink, glyph heights grow with line length, column gutters
narrow. The skew is estimated the classic way (projection profiles): the rotation that
makes the rows of ink sharpest, i.e. maximises the variance of the row sums of a small
binarised copy. The page is turned by that angle (canvas expanded, nothing cropped),
parsed, and block boxes are turned back into the coordinates of the page as sent.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from docparser_runtime.engines.base import BBox
from docparser_runtime.engines.rapidocr.tables import otsu_threshold

MAX_SKEW_DEG = 5.0
MIN_SKEW_DEG = 0.3  # below this, rotating costs more sharpness than it buys
_WORK_WIDTH = 800
_MIN_GAIN = 1.05  # the best angle must beat "no rotation" by 5%


def _profile_score(binary: Image.Image, angle: float) -> float:
    rotated = np.asarray(binary.rotate(angle, resample=Image.Resampling.NEAREST, expand=True))
    rows = rotated.sum(axis=1, dtype=np.float64)
    return float(rows.var())


def estimate_skew(gray: np.ndarray) -> float:
    """PIL ``rotate`` angle (degrees, counter-clockwise) that levels the text lines.

    Returns 0.0 when there is too little ink to judge or no angle clearly wins.
    """
    if gray.size == 0 or min(gray.shape) < 32:
        return 0.0
    height, width = gray.shape
    scale = min(1.0, _WORK_WIDTH / width)
    small = Image.fromarray(gray).resize(
        (max(1, int(width * scale)), max(1, int(height * scale))), Image.Resampling.BOX
    )
    arr = np.asarray(small)
    ink = arr < min(otsu_threshold(arr), 200)
    if ink.mean() < 0.002:
        return 0.0
    binary = Image.fromarray(ink.astype(np.uint8))
    base = _profile_score(binary, 0.0)
    coarse = np.arange(-MAX_SKEW_DEG, MAX_SKEW_DEG + 1e-9, 0.5)
    best = max(coarse, key=lambda a: _profile_score(binary, float(a)))
    fine = np.arange(best - 0.5, best + 0.5 + 1e-9, 0.1)
    best = float(max(fine, key=lambda a: _profile_score(binary, float(a))))
    if _profile_score(binary, best) < _MIN_GAIN * base:
        return 0.0
    return round(best, 2)


class Rotation:
    """A page turned by ``angle`` degrees (PIL convention) on an expanded canvas."""

    def __init__(self, size: tuple[int, int], angle: float) -> None:
        self.angle = angle
        self.size = size
        w, h = size
        rad = math.radians(angle)
        self._cos, self._sin = math.cos(rad), math.sin(rad)
        new_w = abs(w * self._cos) + abs(h * self._sin)
        new_h = abs(w * self._sin) + abs(h * self._cos)
        self._c = (w / 2, h / 2)
        self._c_new = (new_w / 2, new_h / 2)

    def apply(self, image: Image.Image) -> Image.Image:
        return image.rotate(
            self.angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor="white"
        )

    def to_original(self, x: float, y: float) -> tuple[float, float]:
        """A point of the turned page on the page as sent."""
        dx, dy = x - self._c_new[0], y - self._c_new[1]
        return (
            self._c[0] + dx * self._cos - dy * self._sin,
            self._c[1] + dx * self._sin + dy * self._cos,
        )

    def bbox_to_original(self, bbox: BBox) -> BBox:
        """The axis-aligned hull of a turned box, clipped to the page as sent."""
        x1, y1, x2, y2 = bbox
        pts = [self.to_original(x, y) for x, y in ((x1, y1), (x2, y1), (x2, y2), (x1, y2))]
        w, h = self.size
        xs = [min(max(p[0], 0.0), w) for p in pts]
        ys = [min(max(p[1], 0.0), h) for p in pts]
        return (min(xs), min(ys), max(xs), max(ys))
