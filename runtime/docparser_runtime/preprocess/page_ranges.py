"""PDF page selection: the ``pages`` option ("1-3,7") to page indices.

Users count pages from 1 (as every PDF viewer does); the code counts from 0. This is
the single place that translates, so no other module deals with off-by-one errors.
"""

from __future__ import annotations

import re

from docparser_runtime.errors import InvalidInput

# "N", "N-M", "N-" (to the last page); whitespace around tokens is tolerated.
_TOKEN = re.compile(r"^(\d+)(?:\s*-\s*(\d*))?$")
_MAX_SPEC_CHARS = 1000


def parse_page_ranges(spec: str | None, page_count: int) -> list[int]:
    """Return the sorted, unique 0-based page indices that ``spec`` selects.

    ``spec`` is 1-based and inclusive: ``"1-3,7"`` -> ``[0, 1, 2, 6]``; ``"5-"`` runs to
    the last page; ``None``, ``""`` or ``"all"`` select every page. Raises
    ``InvalidInput`` (code ``invalid_pages``) for malformed specs, reversed ranges and
    pages beyond ``page_count``.
    """
    if page_count < 1:
        raise InvalidInput("the document has no pages", code="invalid_pages")
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(range(page_count))
    if len(spec) > _MAX_SPEC_CHARS:
        raise InvalidInput(
            f"pages spec is longer than {_MAX_SPEC_CHARS} characters", code="invalid_pages"
        )
    selected: set[int] = set()
    for raw in spec.split(","):
        token = raw.strip()
        match = _TOKEN.match(token)
        if not match:
            raise InvalidInput(
                f"invalid pages spec {spec!r}: {token!r} is not N, N-M or N- "
                f"(pages count from 1, e.g. '1-3,7')",
                code="invalid_pages",
            )
        first = int(match.group(1))
        last_text = match.group(2)
        if last_text is None:
            last = first
        elif last_text == "":
            last = page_count
        else:
            last = int(last_text)
        if first < 1:
            raise InvalidInput(
                f"invalid pages spec {spec!r}: pages count from 1", code="invalid_pages"
            )
        if last < first:
            raise InvalidInput(
                f"invalid pages spec {spec!r}: range {token!r} is reversed", code="invalid_pages"
            )
        if last > page_count:
            raise InvalidInput(
                f"pages spec {spec!r} asks for page {last} but the document has "
                f"{page_count} page(s)",
                code="invalid_pages",
            )
        selected.update(range(first - 1, last))
    return sorted(selected)
