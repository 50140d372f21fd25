"""Parsing DeepSeek-OCR grounding output: boxes, block text, tag cleaning, garbage."""

from __future__ import annotations

import random

import pytest
from docparser_runtime.engines.deepseek_ocr2.grounding import (
    clean_content,
    parse_boxes,
    parse_output,
    rescale_box,
)

# Shaped like real DeepSeek-OCR-2 markdown-mode output.
SAMPLE = (
    "<|ref|>title<|/ref|><|det|>[[100, 50, 899, 100]]<|/det|>\n"
    "# Annual report\n\n"
    "<|ref|>text<|/ref|><|det|>[[100, 120, 899, 400]]<|/det|>\n"
    "Revenue grew by 12%.\n\n"
    "<|ref|>table<|/ref|><|det|>[[100, 420, 899, 700]]<|/det|>\n"
    "<table><tr><td>a</td></tr></table>\n\n"
    "<|ref|>image<|/ref|><|det|>[[0, 800, 999, 999]]<|/det|>\n"
)


def test_blocks_labels_text_and_pixel_boxes():
    parsed = parse_output(SAMPLE, width=1998, height=999)
    assert [b.type for b in parsed.blocks] == ["title", "text", "table", "image"]
    assert [b.text for b in parsed.blocks] == [
        "# Annual report",
        "Revenue grew by 12%.",
        "<table><tr><td>a</td></tr></table>",
        "",
    ]
    assert parsed.blocks[0].bbox == pytest.approx((200.0, 50.0, 1798.0, 100.0))
    assert parsed.blocks[3].bbox == pytest.approx((0.0, 800.0, 1998.0, 999.0))


def test_content_has_no_tags_and_keeps_markdown():
    parsed = parse_output(SAMPLE, width=1000, height=1000)
    assert "<|" not in parsed.content
    assert parsed.content == (
        "# Annual report\n\nRevenue grew by 12%.\n\n<table><tr><td>a</td></tr></table>"
    )


def test_grid_999_maps_to_page_edge_and_values_are_clamped():
    assert rescale_box((0, 0, 999, 999), 640, 480) == (0.0, 0.0, 640.0, 480.0)
    assert rescale_box((-50, -1, 5000, 1200), 640, 480) == (0.0, 0.0, 640.0, 480.0)
    assert rescale_box((499.5, 0, 999, 999), 1000, 1000)[0] == pytest.approx(500.0)


def test_swapped_corners_are_ordered_and_empty_boxes_dropped():
    assert rescale_box((800, 600, 200, 100), 999, 999) == (200.0, 100.0, 800.0, 600.0)
    assert rescale_box((10, 10, 10, 500), 999, 999) is None
    assert rescale_box((1200, 0, 1300, 500), 999, 999) is None  # both x beyond the grid


def test_several_boxes_in_one_header_give_one_block_each():
    raw = "<|ref|>text<|/ref|><|det|>[[0, 0, 499, 499], [500,500,999,999]]<|/det|>\nrepeated"
    blocks = parse_output(raw, 999, 999).blocks
    assert len(blocks) == 2
    assert all(b.text == "repeated" for b in blocks)
    assert blocks[1].bbox == pytest.approx((500.0, 500.0, 999.0, 999.0))


def test_float_and_spaced_coordinates_accepted_junk_ignored():
    boxes = parse_boxes("[[ 1.5 , 2 ,  300 , 400 ]], [a, b, c, d], [1, 2, 3]", 999, 999)
    assert boxes == [pytest.approx((1.5, 2.0, 300.0, 400.0))]


def test_text_mode_output_has_no_blocks_and_is_untouched():
    raw = "Plain OCR text.\nSecond line with <b>html</b> and a < sign."
    parsed = parse_output(raw, 100, 100)
    assert parsed.blocks == []
    assert parsed.content == raw


def test_text_before_first_header_stays_in_content_only():
    raw = "preamble\n<|ref|>text<|/ref|><|det|>[[0,0,10,10]]<|/det|>\nbody"
    parsed = parse_output(raw, 999, 999)
    assert parsed.content == "preamble\n\nbody"
    assert [b.text for b in parsed.blocks] == ["body"]


def test_header_without_valid_box_gives_no_block_but_text_survives():
    raw = "<|ref|>text<|/ref|><|det|>[[nonsense]]<|/det|>\nhello"
    parsed = parse_output(raw, 100, 100)
    assert parsed.blocks == []
    assert parsed.content == "hello"


@pytest.mark.parametrize(
    "raw, content",
    [
        # Truncated by max_new_tokens in the middle of a header.
        ("done\n<|ref|>text<|/ref|><|det|>[[12, 40, 5", "done"),
        ("done\n<|ref|>tex", "done"),
        ("done\n<|ref|>text<|/ref|>", "done"),
        # Unclosed det followed by more text.
        ("a <|det|>[[1, 2, 3, 4]] b", "a b"),
        # Stray closers and grounding markers.
        ("<|/det|>x<|/ref|>y<|grounding|>z", "xyz"),
        # A referenced phrase (rec mode) keeps its words.
        ("Found <|ref|>the cat<|/ref|> here", "Found the cat here"),
        ("", ""),
        ("\n\n\n\nA\n\n\n\n\nB\n\n", "A\n\nB"),
    ],
)
def test_malformed_tags_are_cleaned(raw, content):
    assert clean_content(raw) == content
    assert parse_output(raw, 500, 500).content == content


def test_nested_and_interleaved_garbage_never_raises():
    rng = random.Random(7)
    pieces = [
        "<|ref|>",
        "<|/ref|>",
        "<|det|>",
        "<|/det|>",
        "[[",
        "]]",
        "[",
        "]",
        ",",
        "999",
        "-3",
        "1e9",
        "text",
        "\n",
        "<|grounding|>",
        "表格",
        "<",
        "|",
    ]
    for _ in range(400):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        parsed = parse_output(raw, rng.randint(1, 4000), rng.randint(1, 4000))
        assert "<|ref|>" not in parsed.content and "<|det|>" not in parsed.content
        assert "<|/ref|>" not in parsed.content and "<|/det|>" not in parsed.content
        for block in parsed.blocks:
            x1, y1, x2, y2 = block.bbox
            assert 0 <= x1 < x2 and 0 <= y1 < y2
            assert "<|" not in block.type


def test_blocks_serialise_through_block_to_dict():
    block = parse_output(SAMPLE, 1000, 1000).blocks[0]
    assert block.to_dict() == {
        "text": "# Annual report",
        "bbox": [100.1, 50.1, 899.9, 100.1],
        "type": "title",
    }
