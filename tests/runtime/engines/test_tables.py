"""Tests for engines.rapidocr.tables: rule detection on drawn pages, grids, Markdown tables."""

from __future__ import annotations

import numpy as np
from docparser_runtime.engines.rapidocr.tables import (
    TableGrid,
    detect_tables,
    markdown_table,
    otsu_threshold,
)
from PIL import Image, ImageDraw


def page(size=(1000, 700)) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    img = Image.new("L", size, 255)
    return img, ImageDraw.Draw(img)


def draw_grid(draw, left, top, col_w, row_h, n_cols, n_rows, width=3, ink=20):
    right, bottom = left + col_w * n_cols, top + row_h * n_rows
    for r in range(n_rows + 1):
        draw.line([(left, top + r * row_h), (right, top + r * row_h)], fill=ink, width=width)
    for c in range(n_cols + 1):
        draw.line([(left + c * col_w, top), (left + c * col_w, bottom)], fill=ink, width=width)


def test_grid_edges_are_found_where_they_were_drawn():
    img, draw = page()
    draw_grid(draw, 100, 200, 260, 70, 3, 5)
    (grid,) = detect_tables(np.asarray(img))
    assert (grid.n_rows, grid.n_cols) == (5, 3)
    assert np.allclose(grid.row_edges, [200, 270, 340, 410, 480, 550], atol=1.5)
    assert np.allclose(grid.col_edges, [100, 360, 620, 880], atol=1.5)
    assert grid.cell_of(400, 300) == (1, 1)
    assert grid.cell_of(870, 545) == (4, 2)


def test_two_separate_tables_and_thin_rules_on_grey_paper():
    img = Image.new("L", (1200, 900), 215)  # grey scan background
    draw = ImageDraw.Draw(img)
    draw_grid(draw, 50, 50, 150, 60, 2, 3, width=1, ink=70)
    draw_grid(draw, 600, 400, 120, 50, 4, 4, width=2, ink=70)
    grids = sorted(detect_tables(np.asarray(img)), key=lambda g: g.bbox[0])
    assert [(g.n_rows, g.n_cols) for g in grids] == [(3, 2), (4, 4)]
    assert abs(grids[1].bbox[0] - 600) <= 2 and abs(grids[1].bbox[3] - 600) <= 2


def test_no_table_on_text_rules_boxes_and_filled_areas():
    img, draw = page()
    draw.line([(50, 100), (950, 100)], fill=0, width=2)  # a horizontal rule
    draw.rectangle([100, 200, 400, 300], outline=0, width=2)  # a framed box: 1x1
    draw.rectangle([500, 200, 900, 600], fill=0)  # a black photo
    draw.text((60, 650), "Text with T and l and | marks ____ ----", fill=0)
    assert detect_tables(np.asarray(img)) == []


def test_large_pages_are_pooled_without_losing_one_pixel_rules():
    img, draw = page((4200, 3000))
    draw_grid(draw, 400, 500, 800, 300, 3, 4, width=1)
    (grid,) = detect_tables(np.asarray(img))
    assert (grid.n_rows, grid.n_cols) == (4, 3)
    assert np.allclose(grid.col_edges, [400, 1200, 2000, 2800], atol=4)


def test_rule_slivers_are_recognised():
    grid = TableGrid(row_edges=(0, 50, 100), col_edges=(0, 100, 200))
    assert grid.near_rule(97, 10, 104, 40, tol=8)  # a '|' read on the middle rule
    assert not grid.near_rule(20, 10, 80, 40, tol=8)


def test_otsu_splits_ink_from_paper():
    arr = np.full((10, 10), 230, dtype=np.uint8)
    arr[:3] = 40
    assert 40 < otsu_threshold(arr) < 230


def test_markdown_table_pads_rows_and_escapes_pipes():
    md = markdown_table([["a", "b|c"], ["1"]])
    assert md.splitlines() == ["| a | b\\|c |", "| --- | --- |", "| 1 |  |"]
    assert markdown_table([]) == ""
