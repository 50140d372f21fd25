"""Tests for engines.rapidocr.reading_order on bare boxes (the layout tests cover it with text)."""

from __future__ import annotations

from docparser_runtime.engines.rapidocr.reading_order import Item, reading_order


def refs(items, unit=10.0):
    return [it.ref for it in reading_order(items, unit)]


def test_long_single_column_stays_in_order_beyond_the_recursion_guard():
    # ragged right edges, fed bottom-up: 500 lines is deeper than the cut recursion goes
    items = [Item((50, 10 + i * 12, 850 - (i % 7) * 60, 20 + i * 12), i) for i in range(500)]
    assert refs(items[::-1]) == list(range(500))


def test_long_two_column_page():
    items = [
        Item((50 + side * 500, 10 + row * 12, 450 + side * 500, 20 + row * 12), (side, row))
        for row in range(300)
        for side in (0, 1)
    ]
    assert refs(items) == sorted(it.ref for it in items)


def test_a_wide_table_between_columns_is_a_band():
    top = [
        Item((50 + s * 500, 10 + r * 12, 450 + s * 500, 20 + r * 12), f"t{s}{r}")
        for s in (0, 1)
        for r in range(3)
    ]
    table = Item((50, 60, 950, 200), "table")
    bottom = [
        Item((50 + s * 500, 210 + r * 12, 450 + s * 500, 220 + r * 12), f"b{s}{r}")
        for s in (0, 1)
        for r in range(3)
    ]
    got = refs([table, *bottom, *top])
    assert got == [f"t0{r}" for r in range(3)] + [f"t1{r}" for r in range(3)] + ["table"] + [
        f"b0{r}" for r in range(3)
    ] + [f"b1{r}" for r in range(3)]


def test_same_row_items_read_left_to_right_and_empty_input():
    row = [
        Item((600, 10, 700, 30), "c"),
        Item((50, 12, 150, 30), "a"),
        Item((300, 8, 400, 30), "b"),
    ]
    assert refs(row) == ["a", "b", "c"]
    assert refs([]) == []
