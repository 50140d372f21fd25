"""PDF page selection: the ``pages`` option ("1-3,7") to page indices.

Users count pages from 1 (as every PDF viewer does); the code counts from 0. This is
the single place that translates, so no other module deals with off-by-one errors.
The grammar is checked in two steps: ``parse_page_spec`` needs no document (the request
options model calls it, so a malformed spec is refused before the upload is decoded),
and ``parse_page_ranges`` adds the checks that need the page count.
"""

from __future__ import annotations

import re

from docparser_runtime.errors import InvalidInput

# "N", "N-M", "N-" (to the last page); whitespace around tokens is tolerated.
_TOKEN = re.compile(r"^(\d+)(?:\s*-\s*(\d*))?$")
MAX_SPEC_CHARS = 1000
# The same grammar as one regular expression, for the OpenAPI schema (clients and
# fuzzers generate from it); ``parse_page_spec`` stays the authority.
PAGE_SPEC_PATTERN = r"^\s*([Aa][Ll][Ll]|\d+(\s*-\s*\d*)?(\s*,\s*\d+(\s*-\s*\d*)?)*)?\s*$"


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_pages")


def parse_page_spec(spec: str | None) -> list[tuple[int, int | None]] | None:
    """Check the syntax of a 1-based ``spec``; return its ranges, None for every page.

    Each range is ``(first, last)`` with ``last`` None for an open range ("5-"). Raises
    ``InvalidInput`` (code ``invalid_pages``) for malformed specs, page 0 and reversed
    ranges: everything that is wrong whatever the document.
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return None
    if len(spec) > MAX_SPEC_CHARS:
        raise _invalid(f"pages spec is longer than {MAX_SPEC_CHARS} characters")
    ranges: list[tuple[int, int | None]] = []
    for raw in spec.split(","):
        token = raw.strip()
        match = _TOKEN.match(token)
        if not match:
            raise _invalid(
                f"invalid pages spec {spec!r}: {token!r} is not N, N-M or N- "
                f"(pages count from 1, e.g. '1-3,7')"
            )
        first = int(match.group(1))
        last_text = match.group(2)
        last = first if last_text is None else (None if last_text == "" else int(last_text))
        if first < 1:
            raise _invalid(f"invalid pages spec {spec!r}: pages count from 1")
        if last is not None and last < first:
            raise _invalid(f"invalid pages spec {spec!r}: range {token!r} is reversed")
        ranges.append((first, last))
    return ranges


def parse_page_ranges(spec: str | None, page_count: int) -> list[int]:
    """Return the sorted, unique 0-based page indices that ``spec`` selects.

    ``spec`` is 1-based and inclusive: ``"1-3,7"`` -> ``[0, 1, 2, 6]``; ``"5-"`` runs to
    the last page; ``None``, ``""`` or ``"all"`` select every page. Raises
    ``InvalidInput`` (code ``invalid_pages``) for malformed specs, reversed ranges and
    pages beyond ``page_count``.
    """
    if page_count < 1:
        raise _invalid("the document has no pages")
    ranges = parse_page_spec(spec)
    if ranges is None:
        return list(range(page_count))
    selected: set[int] = set()
    for first, last in ranges:
        end = page_count if last is None else last
        if max(first, end) > page_count:
            raise _invalid(
                f"pages spec {spec!r} asks for page {max(first, end)} but the document has "
                f"{page_count} page(s)"
            )
        selected.update(range(first - 1, end))
    return sorted(selected)
