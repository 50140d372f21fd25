"""Per-page tiers on their way through the batcher (``tier: auto``, issue 25).

WHY: with ``auto`` the pages of one request get different tiers. The static micro-batcher
reads one tier per engine call (the processor's crop cap), so the parse service submits a
chunk's pages grouped by tier, each group with its own options (the continuous batcher mixes
them in one running batch anyway), and tags every result with the tier it was read at (the
reply's ``pages[].tier``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from docparser_runtime.engines.base import PageResult, ParseOptions
from docparser_runtime.pages import PageImage


def page_tier(page: PageImage, options: ParseOptions) -> int:
    """The tier a page is read at: the selector's under ``auto``, else the request's."""
    return page.tier if options.auto and page.tier is not None else options.tier


def resolved(page: PageImage, options: ParseOptions) -> tuple[int, ParseOptions]:
    """The page's tier and the options to read it with (``auto`` resolved away)."""
    tier = page_tier(page, options)
    return tier, replace(options, tier=tier, auto=False)


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


SubmitGroup = Callable[
    [list[PageImage], ParseOptions, Callable[[PageResult], None] | None],
    Awaitable[list[PageResult]],
]


async def submit_by_tier(
    pages: list[PageImage],
    options: ParseOptions,
    on_result: Callable[[PageResult], None] | None,
    submit: SubmitGroup,
) -> list[PageResult]:
    """Submit ``pages`` one group per tier, all groups at once; results in page order, each
    tagged with its tier. One tier (always, without ``auto``) makes one plain call."""
    groups: dict[int, list[int]] = {}
    for position, page in enumerate(pages):
        groups.setdefault(page_tier(page, options), []).append(position)
    results: list[PageResult | None] = [None] * len(pages)

    async def run(tier: int, positions: list[int]) -> None:
        part = [pages[i] for i in positions]
        got = await submit(part, replace(options, tier=tier, auto=False), tagging(tier, on_result))
        for i, result in zip(positions, got, strict=True):
            results[i] = tag(result, tier)

    if len(groups) == 1:
        ((tier, positions),) = groups.items()
        await run(tier, positions)
    else:
        tasks = [asyncio.ensure_future(run(t, p)) for t, p in groups.items()]
        try:
            await asyncio.gather(*tasks)  # the first error as it is (a 4xx stays a 4xx)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return [r for r in results if r is not None]
