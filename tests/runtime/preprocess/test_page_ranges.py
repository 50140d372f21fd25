"""Unit tests for preprocess.page_ranges (1-based user specs -> 0-based indices)."""

from __future__ import annotations

import pytest
from docparser_runtime.errors import InvalidInput
from docparser_runtime.preprocess.page_ranges import parse_page_ranges


@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        (None, 3, [0, 1, 2]),
        ("", 2, [0, 1]),
        ("all", 2, [0, 1]),
        ("1", 5, [0]),
        ("1-3,7", 10, [0, 1, 2, 6]),
        (" 2 - 3 , 1 ", 4, [0, 1, 2]),
        ("3,1,3,2-3", 3, [0, 1, 2]),
        ("4-", 6, [3, 4, 5]),
        ("5-5", 5, [4]),
    ],
)
def test_valid_specs(spec, count, expected):
    assert parse_page_ranges(spec, count) == expected


@pytest.mark.parametrize(
    ("spec", "count", "fragment"),
    [
        ("0", 3, "count from 1"),
        ("3-1", 5, "reversed"),
        ("4", 3, "has 3 page(s)"),
        ("2-9", 3, "asks for page 9"),
        ("1,,2", 3, "is not N"),
        ("a-b", 3, "is not N"),
        ("-2", 3, "is not N"),
        ("1-2-3", 3, "is not N"),
        ("1.5", 3, "is not N"),
        ("1" * 2000, 3, "longer than"),
    ],
)
def test_invalid_specs_raise_invalid_pages(spec, count, fragment):
    with pytest.raises(InvalidInput) as err:
        parse_page_ranges(spec, count)
    assert err.value.code == "invalid_pages"
    assert fragment in err.value.message


def test_huge_range_is_rejected_without_materialising_it():
    with pytest.raises(InvalidInput):
        parse_page_ranges("1-1000000000000", 3)


def test_document_without_pages_is_invalid():
    with pytest.raises(InvalidInput) as err:
        parse_page_ranges(None, 0)
    assert err.value.code == "invalid_pages"
