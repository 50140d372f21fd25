"""How many pages a queued job will parse, without opening the document.

The autoscaling backlog weighs queued jobs by pages (one 300-page PDF is not one unit of
work), but the server process never parses an untrusted PDF: the sandboxed decoder does,
when the job runs. So the estimate reads bytes only:

- images: 1 (a multi-frame TIFF or GIF is parsed as its first frame, see decode.py);
- PDFs: the page objects (``/Type /Page``, not ``/Pages``) visible in the file. Pages
  inside compressed object streams (PDF 1.5+) are invisible, so the count is a lower
  bound, at least 1;
- then the ``pages`` option caps it (a closed range selects a known number of pages) and
  so does ``max_pages``.

It is an estimate for a metric, never a limit: the real count comes from the decode.
"""

from __future__ import annotations

import re

from docparser_runtime.preprocess.page_ranges import parse_page_spec

# "/Type /Page" not followed by "s" (that is the page tree node); PDF allows any
# whitespace (or none) between the name tokens.
_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![A-Za-z])")


def estimate_pages(data: bytes, pages: str | None, *, max_pages: int) -> int:
    """A page count of ``data`` as the ``pages`` option selects it, in 1..max_pages.

    A closed range counts in full (the document has those pages, or the job fails on
    them); an open range ("5-") runs to the last visible page."""
    visible = len(_PAGE_OBJECT.findall(data)) if b"%PDF-" in data[:1024] else 1
    ranges = parse_page_spec(pages)
    if ranges is None:
        estimate = visible
    else:
        estimate = sum(
            (max(visible, first) if last is None else last) - first + 1 for first, last in ranges
        )
    return max(1, min(estimate, max_pages))
