"""Put back the spaces the recogniser drops between English words.

RapidOCR ships the PP-OCRv4 *Chinese* recogniser (it also reads Latin text), and it
often glues English words together ("Tableskeeptheirrows"). The page itself still
shows the spaces: a word gap is a run of blank pixel columns about 0.3 line heights
wide, while gaps inside a word stay under 0.2. So we measure the blank runs in the
line's box, and where a wide one falls between two recognised characters (whose x
positions come from the CTC decoder's time steps) and no space was read, we add one.
CJK text is left alone: it has no spaces.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from docparser_runtime.engines.base import BBox
from docparser_runtime.engines.rapidocr.tables import otsu_threshold

_DEFAULT_GAP_RATIO = 0.26  # of the line box height
_MIN_JUMP_RATIO = 0.06
_SEARCH_RANGE = (0.2, 0.5)  # letter gaps stay under 0.2 line heights
# Never a space before closing punctuation or after opening punctuation ("7.95").
_NO_SPACE_BEFORE = set(".,:;!?)]}%'\"")
_NO_SPACE_AFTER = set("([{")


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, kana
        or 0x3400 <= code <= 0x9FFF  # CJK ideographs (+ extension A)
        or 0xAC00 <= code <= 0xD7AF  # Hangul
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
    )


def blank_gaps(ink_columns: np.ndarray) -> list[tuple[int, int]]:
    """Runs of blank columns between the first and the last inked column."""
    inked = np.flatnonzero(ink_columns)
    if len(inked) < 2:
        return []
    inner = ~ink_columns[inked[0] : inked[-1] + 1]
    padded = np.concatenate(([False], inner, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [
        (int(s) + int(inked[0]), int(e) + int(inked[0]))
        for s, e in zip(edges[::2], edges[1::2], strict=True)
    ]


def word_gap_threshold(widths: Sequence[float], height: float) -> float:
    """Pixel width from which a blank run is a word space, adapted to this line.

    Gap widths are bimodal (letter gaps vs word gaps); the largest jump between sorted
    widths inside a plausible range separates them. Without a clear jump (one word, or
    only word gaps) a typographic default is used.
    """
    default = _DEFAULT_GAP_RATIO * height
    lo, hi = (_SEARCH_RANGE[0] * height, _SEARCH_RANGE[1] * height)
    ordered = sorted(w for w in widths if w > 0)
    best_jump, best_mid = 0.0, default
    for a, b in itertools.pairwise(ordered):
        if b < lo or a > hi:
            continue
        if b - a > best_jump:
            best_jump, best_mid = b - a, (a + b) / 2
    if best_jump >= _MIN_JUMP_RATIO * height:
        return min(max(best_mid, lo), hi)
    return default


def restore_spaces(
    text: str, char_centers: Sequence[float], ink_columns: np.ndarray, x0: float, height: float
) -> tuple[str, tuple[float, ...]]:
    """Insert spaces into ``text`` where the line image shows word gaps.

    ``char_centers`` are the page x of each character of ``text`` (same length);
    ``ink_columns`` says for each pixel column of the line box (starting at page x
    ``x0``) whether it holds ink; ``height`` is the line box height. Returns the new
    text and its character centres (an inserted space sits mid-gap); the inputs
    unchanged when they do not line up.
    """
    unchanged = (text, tuple(char_centers))
    if len(char_centers) != len(text) or len(text) < 2 or height <= 0:
        return unchanged
    gaps = blank_gaps(ink_columns)
    if not gaps:
        return unchanged
    threshold = word_gap_threshold([e - s for s, e in gaps], height)
    centers = np.asarray(char_centers, dtype=np.float64)
    insert_before: dict[int, float] = {}
    for start, end in gaps:
        if end - start < threshold:
            continue
        gap_mid = x0 + (start + end) / 2
        k = int(np.searchsorted(centers, gap_mid))
        if 0 < k < len(text):
            left, right = text[k - 1], text[k]
            if (
                left.isspace()
                or right.isspace()
                or is_cjk(left)
                or is_cjk(right)
                or right in _NO_SPACE_BEFORE
                or left in _NO_SPACE_AFTER
                or (left == "." and right.isdigit())
            ):
                continue
            insert_before.setdefault(k, gap_mid)
    if not insert_before:
        return unchanged
    chars: list[str] = []
    xs: list[float] = []
    for i, ch in enumerate(text):
        if i in insert_before:
            chars.append(" ")
            xs.append(insert_before[i])
        chars.append(ch)
        xs.append(float(centers[i]))
    return "".join(chars), tuple(xs)


def bbox_x0(bbox: BBox) -> int:
    return max(int(bbox[0]), 0)


def ink_box(gray: np.ndarray, bbox: BBox) -> np.ndarray | None:
    """Ink mask of the line's box (Otsu on the crop, so grey scans work too)."""
    x1, y1 = bbox_x0(bbox), max(int(bbox[1]), 0)
    x2, y2 = min(int(np.ceil(bbox[2])), gray.shape[1]), min(int(np.ceil(bbox[3])), gray.shape[0])
    if x2 - x1 < 2 or y2 - y1 < 2:
        return None
    crop = gray[y1:y2, x1:x2]
    return crop < min(otsu_threshold(crop), 200)


def ink_height(ink: np.ndarray) -> float:
    """Glyph height of a line, robust to slight skew and to table rules in the box.

    Rows that are nearly all ink are rules, not letters. The extent is measured in
    strips about one box-height wide and a high percentile is taken, so a skewed line
    does not look taller than it is and strips of x-height-only letters don't count.
    """
    h, w = ink.shape
    ink = ink & ~(ink.mean(axis=1) > 0.85)[:, None]
    strip = max(8, h)
    extents = []
    for x in range(0, w, strip):
        rows = np.flatnonzero(ink[:, x : x + strip].any(axis=1))
        if len(rows):
            extents.append(rows[-1] - rows[0] + 1)
    return float(np.percentile(extents, 80)) if extents else 0.0
