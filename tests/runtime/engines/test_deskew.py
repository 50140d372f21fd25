"""Tests for engines.rapidocr.deskew: skew estimation on rendered pages and box mapping."""

from __future__ import annotations

import documents
import numpy as np
import pytest
from docparser_runtime.engines.rapidocr.deskew import Rotation, estimate_skew
from PIL import Image, ImageDraw


@pytest.mark.parametrize("angle", [-2.5, -1.2, 0.7, 1.5, 4.0])
@pytest.mark.parametrize("make", [documents.single_column, documents.ruled_table])
def test_skew_of_a_turned_page_is_measured(make, angle):
    gray = make().image.convert("L").rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=255)
    assert estimate_skew(np.asarray(gray)) == pytest.approx(-angle, abs=0.15)


def test_straight_blank_and_tiny_pages_need_no_rotation():
    assert estimate_skew(np.asarray(documents.two_columns().image.convert("L"))) == 0.0
    assert estimate_skew(np.full((500, 700), 255, dtype=np.uint8)) == 0.0
    assert estimate_skew(np.zeros((10, 10), dtype=np.uint8)) == 0.0


def test_points_and_boxes_map_back_to_the_page_as_sent():
    img = Image.new("RGB", (400, 300), "white")
    ImageDraw.Draw(img).rectangle([96, 46, 104, 54], fill="black")
    rotation = Rotation(img.size, 3.0)
    turned = np.asarray(rotation.apply(img).convert("L"))
    assert turned.shape[1] > 400 and turned.shape[0] > 300  # expanded, nothing cropped
    ys, xs = np.nonzero(turned < 128)
    x, y = rotation.to_original(xs.mean(), ys.mean())
    assert abs(x - 100) < 1.0 and abs(y - 50) < 1.0
    x1, y1, x2, y2 = rotation.bbox_to_original((xs.min(), ys.min(), xs.max(), ys.max()))
    assert x1 < 97 and y1 < 47 and x2 > 103 and y2 > 53  # the hull covers the dot
    assert rotation.bbox_to_original((0, 0, 10_000, 10_000)) == (0, 0, 400, 300)
