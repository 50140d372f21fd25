"""Tests for engines.rapidocr.spacing: word gaps in the image put back into glued OCR text."""

from __future__ import annotations

import numpy as np
import pytest
from docparser_runtime.engines.rapidocr.spacing import (
    blank_gaps,
    restore_spaces,
    word_gap_threshold,
)
from documents import font
from PIL import Image, ImageDraw


def rendered(words: list[str], size: int = 24):
    """Ink columns of a rendered line and the x centre of each non-space character."""
    f = font(size)
    text = " ".join(words)
    img = Image.new("L", (int(f.getlength(text)) + 20, size * 2), 255)
    ImageDraw.Draw(img).text((10, size // 3), text, font=f, fill=0)
    ink = np.asarray(img) < 128
    rows = np.flatnonzero(ink.any(axis=1))
    line = ink[rows[0] - 3 : rows[-1] + 4]
    centers = []
    for i, ch in enumerate(text):
        if ch != " ":
            a, b = f.getlength(text[:i]), f.getlength(text[: i + 1])
            centers.append(10 + (a + b) / 2)
    return line.any(axis=0), centers, line.shape[0]


@pytest.mark.parametrize(
    "words",
    [
        ["Tables", "keep", "their", "rows", "and", "cells"],
        ["The", "left", "column", "starts", "here"],
        ["Quarterly", "Report"],
        ["a", "parser", "that", "knows", "columns."],
    ],
)
def test_glued_words_are_separated_again(words):
    ink, centers, height = rendered(words)
    glued = "".join(words)
    text, xs = restore_spaces(glued, centers, ink, 0, height)
    assert text == " ".join(words)
    assert len(xs) == len(text) and list(xs) == sorted(xs)


def test_existing_spaces_are_kept_and_not_doubled():
    words = ["with", "a", "short", "paragraph"]
    ink, centers, height = rendered(words)
    partly = "witha short paragraph"
    spaced_centers = [*centers[:5], (centers[4] + centers[5]) / 2, *centers[5:10]]
    spaced_centers += [(centers[9] + centers[10]) / 2, *centers[10:]]
    text, _ = restore_spaces(partly, spaced_centers, ink, 0, height)
    assert text == "with a short paragraph"


def test_no_space_inside_numbers_or_before_punctuation():
    ink, centers, height = rendered(["7.95"])
    assert restore_spaces("7.95", centers, ink, 0, height)[0] == "7.95"
    ink, centers, height = rendered(["end.", "Next"])
    assert restore_spaces("end.Next", centers, ink, 0, height)[0] == "end. Next"


def test_cjk_and_mismatched_inputs_are_left_alone():
    ink = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1], dtype=bool)
    assert restore_spaces("文本", [1.0, 12.0], ink, 0, 10)[0] == "文本"
    assert restore_spaces("ab", [1.0], ink, 0, 10) == ("ab", (1.0,))
    assert restore_spaces("ab", [1.0, 12.0], ink, 0, 10)[0] == "a b"


def test_gap_helpers():
    ink = np.array([0, 1, 1, 0, 1, 0, 0, 0, 1, 0], dtype=bool)
    assert blank_gaps(ink) == [(3, 4), (5, 8)]
    assert blank_gaps(np.zeros(5, dtype=bool)) == []
    # bimodal gaps: threshold lands between letter gaps (2-4 px) and word gaps (9-10 px)
    assert 4 < word_gap_threshold([2, 3, 3, 4, 9, 10], 30) < 9
    # one word: the typographic default (0.26 line heights)
    assert word_gap_threshold([2, 3, 3], 30) == pytest.approx(7.8)
