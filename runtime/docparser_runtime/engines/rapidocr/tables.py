"""Ruled tables: find the grid drawn on the page, then put OCR lines into its cells.

A text-line detector sees table cells as unrelated short lines; read in y order they
come out as a word salad. Ruled tables carry their structure in the ink itself, so we
look for it directly: long thin horizontal and vertical runs of dark pixels (a
morphological opening with a 1xL / Lx1 line, done with cumulative sums in numpy), keep
clusters of rules that cross each other, and read rows and columns off the rule
positions. Tables without rules are left to the reading-order logic in ``layout``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A dark run must be this long (relative to the page side) to count as a rule, so
# letters, underlines of single words and dashes are ignored.
_MIN_H_RULE_FRACTION = 0.04
_MIN_V_RULE_FRACTION = 0.03
_MIN_RULE_PX = 24
_MAX_RULE_THICKNESS = 12
_MAX_SIDE = 2000


@dataclass(frozen=True)
class Segment:
    """A rule line: ``pos`` is y for horizontal and x for vertical rules."""

    pos: float
    start: float
    end: float


@dataclass(frozen=True)
class TableGrid:
    """Row edges (y) and column edges (x) in page pixels, both ascending."""

    row_edges: tuple[float, ...]
    col_edges: tuple[float, ...]

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        return (self.col_edges[0], self.row_edges[0], self.col_edges[-1], self.row_edges[-1])

    @property
    def n_rows(self) -> int:
        return len(self.row_edges) - 1

    @property
    def n_cols(self) -> int:
        return len(self.col_edges) - 1

    def contains(self, x: float, y: float) -> bool:
        x1, y1, x2, y2 = self.bbox
        return x1 <= x <= x2 and y1 <= y <= y2

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        row = int(np.searchsorted(self.row_edges, y, side="right")) - 1
        col = int(np.searchsorted(self.col_edges, x, side="right")) - 1
        return min(max(row, 0), self.n_rows - 1), min(max(col, 0), self.n_cols - 1)

    def near_rule(self, x1: float, y1: float, x2: float, y2: float, tol: float) -> bool:
        """True when a box is a sliver lying on a rule (OCR reading the rule as '|')."""
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        on_v = (x2 - x1) <= 2 * tol and any(abs(cx - e) <= tol for e in self.col_edges)
        on_h = (y2 - y1) <= 2 * tol and any(abs(cy - e) <= tol for e in self.row_edges)
        return on_v or on_h


def dark_mask(gray: np.ndarray) -> np.ndarray:
    """Ink pixels: darker than an Otsu threshold (capped so pale paper stays paper)."""
    return gray < min(otsu_threshold(gray), 200)


def otsu_threshold(gray: np.ndarray) -> float:
    hist = np.bincount(gray.ravel().astype(np.uint8), minlength=256).astype(np.float64)
    total = hist.sum()
    if total == 0:
        return 128.0
    levels = np.arange(256, dtype=np.float64)
    weight_bg = np.cumsum(hist)
    weight_fg = total - weight_bg
    mean_cum = np.cumsum(hist * levels)
    mean_total = mean_cum[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mean_total * weight_bg - total * mean_cum) ** 2 / (weight_bg * weight_fg)
    between = np.nan_to_num(between, nan=0.0, posinf=0.0)
    if not between.any():
        return 128.0
    return float(np.argmax(between)) + 0.5


def _open_runs(mask: np.ndarray, length: int) -> np.ndarray:
    """Morphological opening along axis 1 with a 1 x ``length`` line element.

    Keeps exactly the pixels that belong to a horizontal run of at least ``length``
    dark pixels: erosion = "the window starting here is all dark", dilation = "some
    all-dark window covers this pixel", both as differences of cumulative sums.
    """
    rows, cols = mask.shape
    if length > cols:
        return np.zeros_like(mask)
    csum = np.zeros((rows, cols + 1), dtype=np.int32)
    np.cumsum(mask, axis=1, out=csum[:, 1:])
    full = (csum[:, length:] - csum[:, :-length]) == length  # window [j, j+length)
    starts = np.zeros((rows, cols + 1), dtype=np.int32)
    np.cumsum(np.pad(full, ((0, 0), (0, length - 1))), axis=1, out=starts[:, 1:])
    # pixel j is covered if a full window starts in [j-length+1, j]
    idx = np.arange(cols)
    lo = np.maximum(idx - length + 1, 0)
    covered = (starts[:, idx + 1] - starts[:, lo]) > 0
    return covered


def _segments(opened: np.ndarray, min_len: int) -> list[Segment]:
    """Link long runs in adjacent rows into rules; thick blobs (filled boxes, photos)
    also survive the opening, so anything thicker than a rule is dropped here."""
    open_rows: list[list[int]] = []  # [y_start, y_end, x_start, x_end]
    done: list[list[int]] = []
    for row in np.flatnonzero(opened.any(axis=1)):
        y = int(row)
        still_open: list[list[int]] = []
        for seg in open_rows:
            (still_open if seg[1] == y - 1 else done).append(seg)
        open_rows = still_open
        for start, end in _true_runs(opened[y]):
            for seg in open_rows:
                if seg[1] == y - 1 and start < seg[3] and end > seg[2]:
                    seg[1], seg[2], seg[3] = y, min(seg[2], start), max(seg[3], end)
                    break
            else:
                open_rows.append([y, y, start, end])
    done.extend(open_rows)
    return [
        Segment(pos=(y0 + y1) / 2, start=x0, end=x1)
        for y0, y1, x0, x1 in done
        if y1 - y0 + 1 <= _MAX_RULE_THICKNESS and x1 - x0 >= min_len
    ]


def _true_runs(row: np.ndarray) -> list[tuple[int, int]]:
    padded = np.concatenate(([False], row, [False]))
    changes = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(s), int(e)) for s, e in zip(changes[::2], changes[1::2], strict=True)]


def find_rules(mask: np.ndarray) -> tuple[list[Segment], list[Segment]]:
    """Horizontal and vertical rule segments in an ink mask."""
    height, width = mask.shape
    h_len = max(_MIN_RULE_PX, int(width * _MIN_H_RULE_FRACTION))
    v_len = max(_MIN_RULE_PX, int(height * _MIN_V_RULE_FRACTION))
    horizontal = _segments(_open_runs(mask, h_len), h_len)
    vertical = _segments(_open_runs(mask.T, v_len), v_len)
    return horizontal, vertical


def detect_tables(gray: np.ndarray, *, max_side: int = _MAX_SIDE) -> list[TableGrid]:
    """Every ruled grid with at least 2 rows and 2 columns on a greyscale page.

    Big pages are min-pooled (a pixel is as dark as its darkest neighbour, so 1px
    rules survive) down to ``max_side`` to bound memory and time.
    """
    if gray.ndim != 2 or min(gray.shape) < 2 * _MIN_RULE_PX:
        return []
    factor = max(1, -(-max(gray.shape) // max_side))
    small = _min_pool(gray, factor) if factor > 1 else gray
    horizontal, vertical = find_rules(dark_mask(small))
    if len(horizontal) < 3 or len(vertical) < 3:
        return []
    grids = []
    for h_group, v_group in _crossing_clusters(horizontal, vertical):
        grid = _grid_from(h_group, v_group)
        if grid is not None:
            grids.append(
                TableGrid(
                    row_edges=tuple(e * factor for e in grid.row_edges),
                    col_edges=tuple(e * factor for e in grid.col_edges),
                )
            )
    return grids


def _min_pool(gray: np.ndarray, factor: int) -> np.ndarray:
    h, w = gray.shape
    pad_h, pad_w = (-h) % factor, (-w) % factor
    padded = np.pad(gray, ((0, pad_h), (0, pad_w)), constant_values=255)
    blocks = padded.reshape(padded.shape[0] // factor, factor, padded.shape[1] // factor, factor)
    pooled: np.ndarray = blocks.min(axis=(1, 3))
    return pooled


def _crossing_clusters(
    horizontal: list[Segment], vertical: list[Segment], tol: float = 6.0
) -> list[tuple[list[Segment], list[Segment]]]:
    """Union-find over rules that cross (or touch) each other."""
    n_h = len(horizontal)
    parent = list(range(n_h + len(vertical)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, h in enumerate(horizontal):
        for j, v in enumerate(vertical):
            if h.start - tol <= v.pos <= h.end + tol and v.start - tol <= h.pos <= v.end + tol:
                parent[find(i)] = find(n_h + j)
    clusters: dict[int, tuple[list[Segment], list[Segment]]] = {}
    for i, h in enumerate(horizontal):
        clusters.setdefault(find(i), ([], []))[0].append(h)
    for j, v in enumerate(vertical):
        clusters.setdefault(find(n_h + j), ([], []))[1].append(v)
    return [c for c in clusters.values() if len(c[0]) >= 3 and len(c[1]) >= 3]


def _merge_positions(values: list[float], tol: float) -> list[float]:
    merged: list[list[float]] = []
    for v in sorted(values):
        if merged and v - merged[-1][-1] <= tol:
            merged[-1].append(v)
        else:
            merged.append([v])
    return [sum(g) / len(g) for g in merged]


def _grid_from(horizontal: list[Segment], vertical: list[Segment]) -> TableGrid | None:
    rows = _merge_positions([h.pos for h in horizontal], tol=_MAX_RULE_THICKNESS)
    cols = _merge_positions([v.pos for v in vertical], tol=_MAX_RULE_THICKNESS)
    if len(rows) < 3 or len(cols) < 3:
        return None
    return TableGrid(row_edges=tuple(rows), col_edges=tuple(cols))


def escape_cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def markdown_table(cells: list[list[str]]) -> str:
    """GitHub-flavoured Markdown; the first grid row is the header row."""
    if not cells:
        return ""
    width = max(len(r) for r in cells)
    rows = [[escape_cell(c) for c in r] + [""] * (width - len(r)) for r in cells]
    lines = ["| " + " | ".join(rows[0]) + " |", "| " + " | ".join(["---"] * width) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)
