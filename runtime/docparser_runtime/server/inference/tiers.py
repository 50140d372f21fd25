"""Per-page tiers on their way through the batcher (``tier: auto``, issue 25).

WHY: with ``auto`` the pages of one request get different tiers, and the engine reads one
tier per ``generate`` call (the processor's crop cap), so until continuous batching lands
pages go to static batches per tier: the parse service groups a chunk by these tiers and
tags every result with the tier it was read at (the reply's ``pages[].tier``).
"""

from __future__ import annotations

from collections.abc import Callable

from docparser_runtime.engines.base import PageResult, ParseOptions
from docparser_runtime.pages import PageImage


def page_tier(page: PageImage, options: ParseOptions) -> int:
    """The tier a page is read at: the selector's under ``auto``, else the request's."""
    return page.tier if options.auto and page.tier is not None else options.tier


def tag(result: PageResult, tier: int) -> PageResult:
    result.tier = tier
    return result


def tagging(
    tier: int, on_result: Callable[[PageResult], None] | None
) -> Callable[[PageResult], None] | None:
    """``on_result`` that sees each page result with its tier already set."""
    if on_result is None:
        return None

    def tagged(result: PageResult) -> None:
        on_result(tag(result, tier))

    return tagged
