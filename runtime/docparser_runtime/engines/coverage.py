"""The coverage audit as a serving stage: every engine's pages, after the engine.

WHY a stage and not a feature of each engine: the promise "every line of ink is read or
reported" must not depend on an engine remembering to check itself. The batcher runs
``audit_results`` on the engine thread right after ``infer_batch``/``stream_page``, for any
engine that says its results locate their text (``Engine.locates_text``). Ink left outside
the result's boxes becomes ``uncovered_text`` warnings on the page. For a DeepSeek page cut
at ``max_new_tokens`` (``truncated``) those warnings are exactly the regions that got no
output. Engines that can re-read a region (rapidocr) do so themselves before answering, so
what reaches this stage is what really could not be read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from docparser_runtime import audit
from docparser_runtime.engines.base import (
    BBox,
    Engine,
    PageImage,
    PageResult,
    PageWarning,
    ParseOptions,
)

log = logging.getLogger(__name__)

UNCOVERED_TEXT = "uncovered_text"


def covered_boxes(result: PageResult) -> list[BBox]:
    """What the engine says it read: its fine ``coverage`` boxes, else its blocks'."""
    if result.coverage is not None:
        return list(result.coverage)
    return [block.bbox for block in result.blocks]


def audit_page(page: PageImage, result: PageResult) -> PageResult:
    """Attach ``uncovered_text`` warnings (and the time spent) to ``result``."""
    start = time.perf_counter()
    regions = audit.audit(page.image, covered_boxes(result))
    result.warnings = [PageWarning(UNCOVERED_TEXT, r.bbox) for r in regions]
    result.audit_s = time.perf_counter() - start
    return result


def audit_results(
    engine: Engine,
    pages: Sequence[PageImage],
    results: Sequence[PageResult],
    options: ParseOptions,
) -> None:
    """Audit each page in place when the engine locates its text for ``options``.

    A failure of the audit itself is logged and leaves the page unaudited: it must never
    turn a good parse into an error.
    """
    if not engine.locates_text(options):
        return
    for page, result in zip(pages, results, strict=False):
        try:
            audit_page(page, result)
        except Exception:
            log.exception("coverage audit failed on page %d", page.index)
