"""From OCR text lines to a document: reading order, headings, paragraphs, tables.

Lines (and whole tables) are put in reading order first (``reading_order``: columns
before rows). Then lines clearly taller than the body text become headings
(``#``/``##``), runs of close lines become paragraphs, and ruled tables
(``tables.detect_tables``) are filled cell by cell. All functions here are pure:
lines and grids in, blocks and text out.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from docparser_runtime.engines.base import BBox, Block
from docparser_runtime.engines.rapidocr.reading_order import Item, reading_order
from docparser_runtime.engines.rapidocr.tables import TableGrid, markdown_table

_HEADING_RATIO = 1.25  # type size over the median of the page
_TOP_LEVEL_RATIO = 0.9  # of the tallest heading: '#' instead of '##'
_MAX_HEADING_CHARS = 120
# What OCR makes of a table rule: bars, dashes and their CJK look-alikes.
_RULE_ARTIFACTS = set("|Il1!-_") | {"\u4e28", "\u2014", "\u2013", "\u4e00"}


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
    items = [Item(bbox=ln.bbox, ref=ln) for ln in free]
    items += [Item(bbox=tables[i].bbox, ref=i) for i in in_table]
    body_unit = statistics.median(ln.height for ln in free) if free else unit
    ordered = reading_order(items, body_unit)
    body_size = statistics.median(ln.size for ln in lines)
    return _group(ordered, tables, in_table, free, body_size)


def _group(
    ordered: list[Item],
    tables: Sequence[TableGrid],
    in_table: dict[int, list[OcrLine]],
    free: list[OcrLine],
    body_size: float,
) -> list[Region]:
    heads = [
        ln
        for ln in free
        if body_size > 0
        and ln.size >= _HEADING_RATIO * body_size
        and len(ln.text) <= _MAX_HEADING_CHARS
        and _wordy(ln.text)
    ]
    tallest = max((ln.size for ln in heads), default=0.0)
    head_ids = {id(ln) for ln in heads}
    pitch = _typical_gap(
        [it.ref for it in ordered if isinstance(it.ref, OcrLine) and id(it.ref) not in head_ids]
    )
    regions: list[Region] = []
    for it in ordered:
        if not isinstance(it.ref, OcrLine):
            grid = tables[it.ref]
            cells = fill_table(grid, in_table[it.ref])
            regions.append(
                Region(kind="table", cells=cells, bbox=grid.bbox, lines=in_table[it.ref])
            )
            continue
        line = it.ref
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


def _wordy(text: str) -> bool:
    """Headings have words: a big lone digit or symbol (a table cell, a page number)
    is not one."""
    return sum(ch.isalpha() for ch in text) >= 2


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


def union_bbox(boxes: Iterable[BBox]) -> BBox:
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
    out: list[str] = []
    for r in regions:
        if r.kind == "table":
            out.extend("\t".join(" ".join(c.split()) for c in row) for row in r.cells)
        else:
            out.extend(ln.text.strip() for ln in r.lines)
    return "\n".join(out)


def _float_bbox(b: BBox) -> BBox:
    return (float(b[0]), float(b[1]), float(b[2]), float(b[3]))


def to_blocks(regions: Sequence[Region]) -> list[Block]:
    blocks = []
    for r in regions:
        if r.kind == "table":
            text = markdown_table(r.cells)
        elif r.kind == "title":
            text = " ".join(ln.text.strip() for ln in r.lines)
        else:
            text = "\n".join(ln.text.strip() for ln in r.lines)
        blocks.append(Block(text=text, bbox=_float_bbox(r.bbox), type=r.kind))
    return blocks
