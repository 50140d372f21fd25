"""From OCR text lines to a document: reading order, headings, paragraphs, tables.

A line recogniser returns boxes in raster order (top to bottom). On a two-column page
that interleaves the columns row by row, which makes the text unreadable, so order is
rebuilt here with a recursive cut of the page:

* columns first: a gutter is an x-range covered by few lines (the x-extent histogram of
  the lines) with lines on both sides; lines crossing it (titles, wide figures) cut the
  page into bands, and inside a band the columns are read left to right, each top to
  bottom;
* otherwise the region is cut at its widest empty horizontal gap (XY-cut), so a
  single-column header above a two-column body still gets its columns detected;
* what cannot be cut is read row by row, left to right.

Then lines clearly taller than the body text become headings (``#``/``##``), runs of
close lines become paragraphs, and ruled tables (``tables.detect_tables``) are filled
cell by cell. All functions here are pure: lines and grids in, blocks and text out.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from docparser_runtime.engines.base import BBox, Block
from docparser_runtime.engines.tables import TableGrid, markdown_table

_HEADING_RATIO = 1.25  # type size over the median of the page
_TOP_LEVEL_RATIO = 0.9  # of the tallest heading: '#' instead of '##'
_MAX_HEADING_CHARS = 120
_GUTTER_MIN_RATIO = 0.6  # of the median line height
# What OCR makes of a table rule: bars, dashes and their CJK look-alikes.
_RULE_ARTIFACTS = set("|Il1!-_") | {"\u4e28", "\u2014", "\u2013", "\u4e00"}
_MAX_DEPTH = 400


@dataclass(frozen=True)
class OcrLine:
    """One recognised text line; ``bbox`` (x1, y1, x2, y2) in page pixels."""

    text: str
    bbox: BBox
    score: float = 1.0
    char_centers: tuple[float, ...] = ()  # page x of each character, when known
    ink_height: float = 0.0  # height of the glyphs themselves, when measured

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]

    @property
    def size(self) -> float:
        """Type size proxy: inked height if measured (detector boxes add padding that
        shrinks the ratio between title and body), else the box height."""
        return self.ink_height or self.height

    @property
    def center(self) -> tuple[float, float]:
        x1, y1, x2, y2 = self.bbox
        return (x1 + x2) / 2, (y1 + y2) / 2


@dataclass
class Region:
    """A unit of the reading order: a heading, a paragraph or a table."""

    kind: str  # "title" | "text" | "table"
    lines: list[OcrLine] = field(default_factory=list)
    level: int = 0  # heading level for titles
    cells: list[list[str]] = field(default_factory=list)  # tables
    bbox: BBox = (0.0, 0.0, 0.0, 0.0)


# ---------------------------------------------------------------- reading order


@dataclass(frozen=True)
class _Item:
    """Something that takes part in ordering: a text line or a whole table."""

    bbox: BBox
    line: OcrLine | None = None
    table: int = -1


def reading_order(items: Sequence[_Item], unit: float) -> list[_Item]:
    """Order items column by column; ``unit`` is the median text line height."""
    out: list[_Item] = []
    _order(list(items), max(unit, 1.0), out, 0)
    return out


def _order(items: list[_Item], unit: float, out: list[_Item], depth: int) -> None:
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


def _find_gutter(items: list[_Item], unit: float) -> tuple[float, float] | None:
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
    for level in sorted(set(coverage.tolist())):
        if level >= len(items) / 2:
            break
        best: tuple[float, float] | None = None
        for start, end in _runs(coverage <= level):
            if start == 0 or end >= len(coverage) or end - start < min_width:
                continue
            g1, g2 = x_min + start, x_min + end
            left = sum(1 for it in items if it.bbox[2] <= g1)
            right = sum(1 for it in items if it.bbox[0] >= g2)
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


def _bands(items: list[_Item], spanning: list[_Item]) -> list[list[_Item]]:
    """Split at spanning items: each is its own band, the lines between form bands."""
    span_ids = {id(it) for it in spanning}
    bands: list[list[_Item]] = []
    current: list[_Item] = []
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


def _widest_horizontal_gap(items: list[_Item]) -> float | None:
    """The middle of the widest empty y-range between items (None if there is none)."""
    spans = sorted((it.bbox[1], it.bbox[3]) for it in items)
    best, best_width = None, 0.0
    reach = spans[0][1]
    for y1, y2 in spans[1:]:
        if y1 > reach and y1 - reach > best_width:
            best, best_width = (reach + y1) / 2, y1 - reach
        reach = max(reach, y2)
    return best


def _rows(items: list[_Item]) -> list[_Item]:
    """Group items whose vertical extents overlap by half into rows; read each left to right."""
    rows: list[list[_Item]] = []
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


# ---------------------------------------------------------------- tables


def fill_table(grid: TableGrid, lines: Sequence[OcrLine]) -> list[list[str]]:
    """Cell texts, row by row. A line crossing column rules is split by character x."""
    parts: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for line in lines:
        for x, y, text in _split_on_columns(grid, line):
            parts.setdefault(grid.cell_of(x, y), []).append((y, x, text))
    cells = []
    for r in range(grid.n_rows):
        row = []
        for c in range(grid.n_cols):
            pieces = sorted(parts.get((r, c), []))
            row.append(" ".join(p[2] for p in pieces).strip())
        cells.append(row)
    return cells


def _split_on_columns(grid: TableGrid, line: OcrLine) -> list[tuple[float, float, str]]:
    cx, cy = line.center
    if len(line.char_centers) != len(line.text):
        return [(cx, cy, line.text)]
    groups: dict[int, list[tuple[float, str]]] = {}
    for x, ch in zip(line.char_centers, line.text, strict=True):
        groups.setdefault(grid.cell_of(x, cy)[1], []).append((x, ch))
    if len(groups) == 1:
        return [(cx, cy, line.text)]
    return [
        (chars[0][0], cy, "".join(ch for _, ch in chars).strip())
        for _, chars in sorted(groups.items())
    ]


def _is_rule_artifact(line: OcrLine, grid: TableGrid, unit: float) -> bool:
    text = line.text.strip()
    return (not text or set(text) <= _RULE_ARTIFACTS) and grid.near_rule(*line.bbox, tol=unit / 2)


# ---------------------------------------------------------------- page assembly


def layout_page(lines: Sequence[OcrLine], tables: Sequence[TableGrid] = ()) -> list[Region]:
    """Regions (titles, paragraphs, tables) of one page in reading order."""
    lines = [ln for ln in lines if ln.text.strip()]
    if not lines:
        return []
    unit = statistics.median(ln.height for ln in lines)
    in_table: dict[int, list[OcrLine]] = {}
    free: list[OcrLine] = []
    for line in lines:
        cx, cy = line.center
        owner = next((i for i, g in enumerate(tables) if g.contains(cx, cy)), None)
        if owner is None:
            free.append(line)
        elif not _is_rule_artifact(line, tables[owner], unit):
            in_table.setdefault(owner, []).append(line)
    items = [_Item(bbox=ln.bbox, line=ln) for ln in free]
    items += [_Item(bbox=tables[i].bbox, table=i) for i in in_table]
    body_unit = statistics.median(ln.height for ln in free) if free else unit
    ordered = reading_order(items, body_unit)
    body_size = statistics.median(ln.size for ln in lines)
    return _group(ordered, tables, in_table, free, body_size)


def _group(
    ordered: list[_Item],
    tables: Sequence[TableGrid],
    in_table: dict[int, list[OcrLine]],
    free: list[OcrLine],
    body_size: float,
) -> list[Region]:
    heads = [
        ln
        for ln in free
        if ln.size >= _HEADING_RATIO * body_size and len(ln.text) <= _MAX_HEADING_CHARS
    ]
    tallest = max((ln.size for ln in heads), default=0.0)
    head_ids = {id(ln) for ln in heads}
    pitch = _typical_gap(
        [it.line for it in ordered if it.line is not None and id(it.line) not in head_ids]
    )
    regions: list[Region] = []
    for it in ordered:
        if it.line is None:
            grid = tables[it.table]
            cells = fill_table(grid, in_table[it.table])
            regions.append(
                Region(kind="table", cells=cells, bbox=grid.bbox, lines=in_table[it.table])
            )
            continue
        line = it.line
        if id(line) in head_ids:
            level = 1 if line.size >= _TOP_LEVEL_RATIO * tallest else 2
            prev = regions[-1] if regions else None
            if (
                prev
                and prev.kind == "title"
                and prev.level == level
                and _continues(prev.lines[-1], line, 0.6 * line.height)
            ):
                prev.lines.append(line)
            else:
                regions.append(Region(kind="title", lines=[line], level=level))
            continue
        prev = regions[-1] if regions else None
        if prev and prev.kind == "text" and _continues(prev.lines[-1], line, pitch):
            prev.lines.append(line)
        else:
            regions.append(Region(kind="text", lines=[line]))
    for region in regions:
        if region.kind != "table":
            region.bbox = union_bbox(ln.bbox for ln in region.lines)
    return [r for r in regions if r.kind != "table" or any(any(c) for c in r.cells)]


def _typical_gap(lines: list[OcrLine]) -> float:
    """Median vertical gap between consecutive lines of one column (line spacing)."""
    gaps = [
        b.bbox[1] - a.bbox[3]
        for a, b in itertools.pairwise(lines)
        if b.bbox[1] >= a.bbox[3] - 0.3 * a.height and _x_overlap(a, b) > 0
    ]
    return statistics.median(gaps) if gaps else 0.0


def _continues(prev: OcrLine, line: OcrLine, pitch: float) -> bool:
    """Same paragraph: directly below, overlapping in x, gap not much above spacing."""
    gap = line.bbox[1] - prev.bbox[3]
    limit = max(pitch, 0.0) * 1.5 + 0.25 * min(prev.height, line.height)
    return -0.3 * prev.height <= gap <= limit and _x_overlap(prev, line) > 0


def _x_overlap(a: OcrLine, b: OcrLine) -> float:
    return min(a.bbox[2], b.bbox[2]) - max(a.bbox[0], b.bbox[0])


def union_bbox(boxes) -> BBox:
    boxes = list(boxes)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


# ---------------------------------------------------------------- rendering


def render_markdown(regions: Sequence[Region]) -> str:
    parts = []
    for r in regions:
        if r.kind == "title":
            parts.append("#" * r.level + " " + " ".join(ln.text.strip() for ln in r.lines))
        elif r.kind == "table":
            parts.append(markdown_table(r.cells))
        else:
            parts.append("\n".join(ln.text.strip() for ln in r.lines))
    return "\n\n".join(parts)


def render_text(regions: Sequence[Region]) -> str:
    """Plain lines in reading order; table rows as tab-separated cells."""
    out = []
    for r in regions:
        if r.kind == "table":
            out.extend("\t".join(" ".join(c.split()) for c in row) for row in r.cells)
        else:
            out.extend(ln.text.strip() for ln in r.lines)
    return "\n".join(out)


def to_blocks(regions: Sequence[Region]) -> list[Block]:
    blocks = []
    for r in regions:
        if r.kind == "table":
            text = markdown_table(r.cells)
        elif r.kind == "title":
            text = " ".join(ln.text.strip() for ln in r.lines)
        else:
            text = "\n".join(ln.text.strip() for ln in r.lines)
        blocks.append(Block(text=text, bbox=tuple(float(v) for v in r.bbox), type=r.kind))
    return blocks
