"""Tests for engines.rapidocr.layout on hand-placed lines: reading order, headings, tables."""

from __future__ import annotations

from docparser_runtime.engines.rapidocr.layout import (
    OcrLine,
    fill_table,
    layout_page,
    render_markdown,
    render_text,
    to_blocks,
)
from docparser_runtime.engines.rapidocr.tables import TableGrid


def line(text: str, x: float, y: float, w: float = 300, h: float = 30) -> OcrLine:
    return OcrLine(text=text, bbox=(x, y, x + w, y + h))


def column(prefix: str, x: float, y0: float, n: int, pitch: float = 40, w: float = 300):
    return [line(f"{prefix}{i}", x, y0 + i * pitch, w) for i in range(n)]


def order_of(lines, tables=()) -> list[str]:
    return [ln.text for r in layout_page(lines, tables) for ln in r.lines]


def raster(lines):
    """What a line detector returns: top to bottom, then left to right."""
    return sorted(lines, key=lambda ln: (ln.bbox[1], ln.bbox[0]))


def test_single_column_reads_top_to_bottom():
    lines = column("L", 50, 100, 6, w=800)
    assert order_of(raster(lines)[::-1]) == [f"L{i}" for i in range(6)]


def test_two_columns_are_read_column_by_column_not_row_by_row():
    left, right = column("L", 50, 100, 8), column("R", 500, 100, 8)
    assert order_of(raster(left + right)) == [ln.text for ln in left + right]


def test_spanning_title_and_footer_frame_the_columns():
    title = line("Title", 50, 20, 800, 50)
    footer = line("Footer", 50, 500, 800)
    left, right = column("L", 50, 100, 8), column("R", 500, 100, 8)
    got = order_of(raster([title, footer, *left, *right]))
    assert got == ["Title", *[ln.text for ln in left + right], "Footer"]


def test_spanning_figure_caption_splits_columns_into_bands():
    top = column("A", 50, 100, 3) + column("B", 500, 100, 3)
    caption = line("Caption", 50, 240, 800)
    bottom = column("C", 50, 300, 3) + column("D", 500, 300, 3)
    got = order_of(raster([*top, caption, *bottom]))
    expected = [f"{p}{i}" for p in "AB" for i in range(3)] + ["Caption"]
    expected += [f"{p}{i}" for p in "CD" for i in range(3)]
    assert got == expected


def test_single_column_intro_above_a_two_column_body():
    intro = column("I", 50, 50, 6, w=800)
    left, right = column("L", 50, 330, 5), column("R", 500, 330, 5)
    got = order_of(raster(intro + left + right))
    assert got == [ln.text for ln in intro + left + right]


def test_three_columns():
    cols = [column(p, x, 100, 5, w=250) for p, x in (("A", 40), ("B", 340), ("C", 640))]
    flat = [ln for c in cols for ln in c]
    assert order_of(raster(flat)) == [ln.text for ln in flat]


def test_short_right_aligned_items_do_not_make_a_column():
    body = column("P", 50, 100, 10, w=800)
    page_no = line("12", 800, 520, 40)
    assert order_of(raster([*body, page_no])) == [*(ln.text for ln in body), "12"]


def test_headings_by_type_size_with_two_levels_and_paragraphs():
    lines = [
        line("Big Title", 50, 20, 500, 60),
        line("First paragraph line one", 50, 110, 700),
        line("First paragraph line two", 50, 148, 700),
        line("Section", 50, 230, 300, 42),
        line("Second paragraph", 50, 300, 700),
        line("still second", 50, 338, 700),
        line("Third paragraph after a gap", 50, 460, 700),
    ]
    regions = layout_page(lines)
    assert [(r.kind, r.level) for r in regions] == [
        ("title", 1),
        ("text", 0),
        ("title", 2),
        ("text", 0),
        ("text", 0),
    ]
    md = render_markdown(regions)
    assert md.startswith(
        "# Big Title\n\nFirst paragraph line one\nFirst paragraph line two\n\n## Section"
    )
    assert md.endswith("still second\n\nThird paragraph after a gap")


def test_two_line_title_is_one_heading():
    lines = [
        line("A Long Title That", 50, 20, 600, 60),
        line("Wraps Over", 50, 84, 400, 60),
        *column("body", 50, 200, 4, w=700),
    ]
    regions = layout_page(lines)
    assert regions[0].kind == "title"
    assert render_markdown(regions).startswith("# A Long Title That Wraps Over\n\nbody0")


def test_ink_height_beats_padded_box_height_for_headings():
    title = OcrLine("Caps Title", (50, 20, 450, 58), ink_height=37)
    body = [
        OcrLine(f"body {i}", (50, 100 + 40 * i, 700, 130 + 40 * i), ink_height=22) for i in range(4)
    ]
    regions = layout_page([title, *body])
    assert regions[0].kind == "title"


GRID = TableGrid(row_edges=(200, 270, 340, 410), col_edges=(100, 360, 620, 880))


def test_table_lines_fill_cells_row_by_row():
    cells_lines = [
        line("Item", 120, 220, 60),
        line("Qty", 380, 220, 60),
        line("Price", 640, 220, 60),
        line("Apples", 120, 290, 80),
        line("12", 380, 290, 30),
        line("3.50", 640, 290, 50),
        line("Red", 120, 370, 40),
        line("and sweet", 160, 375, 90),  # two lines, one cell
        line("|", 355, 360, 10, 30),  # OCR reading a rule
    ]
    intro = line("The order:", 100, 140, 200)
    regions = layout_page(raster([intro, *cells_lines]), [GRID])
    assert [r.kind for r in regions] == ["text", "table"]
    assert regions[1].cells == [
        ["Item", "Qty", "Price"],
        ["Apples", "12", "3.50"],
        ["Red and sweet", "", ""],
    ]
    assert regions[1].bbox == (100, 200, 880, 410)
    md = render_markdown(regions)
    assert "| Item | Qty | Price |\n| --- | --- | --- |\n| Apples | 12 | 3.50 |" in md
    text = render_text(regions)
    assert text.splitlines() == [
        "The order:",
        "Item\tQty\tPrice",
        "Apples\t12\t3.50",
        "Red and sweet\t\t",
    ]


def test_a_line_crossing_column_rules_is_split_by_character_position():
    merged = OcrLine(
        "Apples 12",
        (120, 290, 400, 320),
        char_centers=(125, 135, 145, 155, 165, 175, 200, 380, 390),
    )
    assert fill_table(GRID, [merged])[1] == ["Apples", "12", ""]


def test_empty_grid_is_not_a_table():
    regions = layout_page([line("Just text", 50, 50)], [GRID])
    assert [r.kind for r in regions] == ["text"]


def test_blocks_carry_types_texts_and_union_boxes():
    lines = [line("Heading", 50, 20, 300, 60), *column("p", 50, 100, 3, w=600)]
    blocks = to_blocks(layout_page(lines))
    assert [(b.type, b.text) for b in blocks] == [("title", "Heading"), ("text", "p0\np1\np2")]
    assert blocks[1].bbox == (50, 100, 650, 210)
    assert blocks[0].to_dict()["bbox"] == [50, 20, 350, 80]


def test_no_lines_no_regions():
    assert layout_page([]) == []
    assert layout_page([line("   ", 0, 0)]) == []
    assert render_markdown([]) == "" and render_text([]) == "" and to_blocks([]) == []


def test_degenerate_zero_height_lines_are_text_not_headings():
    lines = [OcrLine("flat one", (10, 10, 200, 10)), OcrLine("flat two", (10, 40, 200, 40))]
    assert [r.kind for r in layout_page(lines)] == ["text"] * len(layout_page(lines))
    assert "#" not in render_markdown(layout_page(lines))
