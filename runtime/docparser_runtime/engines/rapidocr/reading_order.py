"""Reading order of a page: columns first, then top to bottom.

A line detector returns boxes in raster order (top to bottom). On a two-column page
that interleaves the columns row by row, which makes the text unreadable, so order is
rebuilt with a recursive cut of the page:

* columns first: a gutter is an x-range covered by few items (the x-extent histogram
  of the lines) with items fully on both sides; items crossing it (titles, wide
  figures, tables) cut the region into bands, and inside a band the columns are read
  left to right, each top to bottom;
* otherwise the region is cut at its widest empty horizontal gap (XY-cut), so a
  single-column header above a two-column body still gets its columns detected;
* what cannot be cut is read row by row, left to right.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from docparser_runtime.engines.base import BBox

_GUTTER_MIN_RATIO = 0.6  # of the median line height
_MAX_DEPTH = 400


@dataclass(frozen=True)
class Item:
    """Something that takes part in ordering (a text line, a whole table): ``ref``
    points back to it."""

    bbox: BBox
    ref: Any = None


def reading_order(items: Sequence[Item], unit: float) -> list[Item]:
    """Order items column by column; ``unit`` is the median text line height."""
    out: list[Item] = []
    _order(list(items), max(unit, 1.0), out, 0)
    return out


def _order(items: list[Item], unit: float, out: list[Item], depth: int) -> None:
    if len(items) <= 1 or depth > _MAX_DEPTH:
        out.extend(_rows(items))
        return
    gutter = _find_gutter(items, unit)
    if gutter is not None:
        g1, g2 = gutter
        spanning = [it for it in items if it.bbox[0] < g2 and it.bbox[2] > g1]
        if not spanning:
            left = [it for it in items if it.bbox[2] <= g1]
            right = [it for it in items if it.bbox[0] >= g2]
            _order(left, unit, out, depth + 1)
            _order(right, unit, out, depth + 1)
            return
        for band in _bands(items, spanning):
            _order(band, unit, out, depth + 1)
        return
    cut = _widest_horizontal_gap(items)
    if cut is None:
        out.extend(_rows(items))
        return
    _order([it for it in items if it.bbox[3] <= cut], unit, out, depth + 1)
    _order([it for it in items if it.bbox[3] > cut], unit, out, depth + 1)


def _find_gutter(items: list[Item], unit: float) -> tuple[float, float] | None:
    """The best vertical gutter: the widest x-run covered by the fewest items.

    Accepted only if items lie fully on both sides of it and the items crossing it
    (spanning titles, figures) are fewer than the items it separates.
    """
    x_min = int(min(it.bbox[0] for it in items))
    x_max = int(np.ceil(max(it.bbox[2] for it in items)))
    if x_max - x_min < 3:
        return None
    diff = np.zeros(x_max - x_min + 2, dtype=np.int32)
    for it in items:
        diff[int(it.bbox[0]) - x_min] += 1
        diff[int(np.ceil(it.bbox[2])) - x_min] -= 1
    coverage = np.cumsum(diff)[: x_max - x_min]
    min_width = max(_GUTTER_MIN_RATIO * unit, 4.0)
    rights = sorted(it.bbox[2] for it in items)
    lefts = sorted(it.bbox[0] for it in items)
    for level in sorted(set(coverage.tolist())):
        if level >= len(items) / 2:
            break
        best: tuple[float, float] | None = None
        for start, end in _runs(coverage <= level):
            if start == 0 or end >= len(coverage) or end - start < min_width:
                continue
            g1, g2 = x_min + start, x_min + end
            left = bisect.bisect_right(rights, g1)  # items ending before the gutter
            right = len(lefts) - bisect.bisect_left(lefts, g2)  # items starting after it
            if (
                left
                and right
                and level < left + right
                and (best is None or g2 - g1 > best[1] - best[0])
            ):
                best = (g1, g2)
        if best is not None:
            return best
    return None


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    padded = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def _bands(items: list[Item], spanning: list[Item]) -> list[list[Item]]:
    """Split at spanning items: each is its own band, the lines between form bands."""
    span_ids = {id(it) for it in spanning}
    bands: list[list[Item]] = []
    current: list[Item] = []
    for it in sorted(items, key=lambda i: ((i.bbox[1] + i.bbox[3]) / 2, i.bbox[0])):
        if id(it) in span_ids:
            if current:
                bands.append(current)
                current = []
            bands.append([it])
        else:
            current.append(it)
    if current:
        bands.append(current)
    return bands


def _widest_horizontal_gap(items: list[Item]) -> float | None:
    """The middle of the widest empty y-range between items (None if there is none)."""
    spans = sorted((it.bbox[1], it.bbox[3]) for it in items)
    best, best_width = None, 0.0
    reach = spans[0][1]
    for y1, y2 in spans[1:]:
        if y1 > reach and y1 - reach > best_width:
            best, best_width = (reach + y1) / 2, y1 - reach
        reach = max(reach, y2)
    return best


def _rows(items: list[Item]) -> list[Item]:
    """Group items whose vertical extents overlap by half into rows; read each left to right."""
    rows: list[list[Item]] = []
    for it in sorted(items, key=lambda i: i.bbox[1]):
        h = it.bbox[3] - it.bbox[1]
        for row in rows:
            r1, r2 = min(i.bbox[1] for i in row), max(i.bbox[3] for i in row)
            overlap = min(r2, it.bbox[3]) - max(r1, it.bbox[1])
            if overlap >= 0.5 * min(h, r2 - r1):
                row.append(it)
                break
        else:
            rows.append([it])
    return [it for row in rows for it in sorted(row, key=lambda i: i.bbox[0])]
