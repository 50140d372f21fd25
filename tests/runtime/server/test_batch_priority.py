"""Batch lines in the continuous batch take only slots nobody else wants (issue 35).

On the tiny real-architecture DeepSeek-OCR-2, orderings and counts only (the latency the
rules buy is bench/batch.py's): a waiting interactive page takes a running batch page's
slot (or cache room) at once, and a batch page does not join beside a running interactive
page (its prefill would hold that page's next token). Batch pages that gave their slot
back resume with their tokens and end with the same result.
"""

from __future__ import annotations

import asyncio

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.server.inference.priorities import Priority
from test_continuous_batcher import LONG, SHORT, make, running, wait_until
from test_continuous_batcher import engine as engine  # the module's loaded tiny engine
from tiny_deepseek import make_page

pytestmark = pytest.mark.torch

MID = ParseOptions(tier=0, max_new_tokens=40, min_new_tokens=40)


@pytest.mark.parametrize(("limit", "policy"), [("slots", "slots"), ("cache", "slots"),
                                               ("cache", "rows")])  # fmt: skip
async def test_a_waiting_interactive_page_takes_a_running_batch_pages_place(engine, limit, policy):
    """Both batch pages hold the only room there is (two slots, or the cache budget of
    two); the interactive page still ends first, long before either batch page. Parked
    batch pages (``rows``) hold no slot but still their cache: with ``rows`` only the cache
    is a limit to preempt for (test_batch_yield.py has the slots case)."""
    batcher = await make(engine, max_batch_size=2 if limit == "slots" else 8, batch_yield=policy)
    pages = [make_page(i, 500, 400, 0) for i in range(2)]
    if limit == "cache":
        one = engine.new_run(pages[0], MID, None).prompt_tokens + MID.max_new_tokens + 1
        batcher.budget_tokens = 2 * one + 2  # two batch pages fit, a third page does not
    order: list[int] = []
    report = {"on_result": lambda r: order.append(r.index)}
    try:
        lines = [
            asyncio.create_task(batcher.submit([p], MID, priority=Priority.BATCH, **report))
            for p in pages
        ]
        await wait_until(lambda: sorted(running(batcher)) == [0, 1] and batcher.steps >= 3)
        await batcher.submit([make_page(2, 640, 480, 0)], SHORT, **report)
        assert order == [2]  # before either batch page, which were running first
        results = await asyncio.gather(*lines)
    finally:
        await batcher.close()
    assert batcher.preempted >= 1
    assert sorted(order) == [0, 1, 2]
    for page, [result] in zip(pages, results, strict=True):  # resumed with their tokens
        assert result == engine.infer_batch([page], MID)[0]


async def test_a_batch_page_does_not_join_beside_a_running_interactive_page(engine):
    """Free slots, but an interactive page is decoding: the short batch line waits for it
    (joining would prefill beside it) and then runs; alone, batch lines fill the slots, one
    prefill per iteration (a page arriving waits for one batch prefill at most)."""
    batcher = await make(engine, max_batch_size=4)
    joins: list[int] = []
    iterate = batcher._iterate

    def counting(joining, leaving, *moves):  # what each iteration on the engine thread prefills
        joins.append(len(joining))
        return iterate(joining, leaving, *moves)

    batcher._iterate = counting
    order: list[int] = []
    report = {"on_result": lambda r: order.append(r.index)}
    try:
        sync = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG, **report))
        await wait_until(lambda: running(batcher) == [0])
        line = batcher.submit([make_page(1, 640, 480, 0)], SHORT, priority=Priority.BATCH, **report)
        await asyncio.gather(sync, line)
        assert order == [0, 1]
        steps, slot_steps = batcher.steps, batcher.slot_steps
        joins.clear()
        pages = [make_page(3 + i, 500, 400, 0) for i in range(4)]
        await asyncio.gather(*(batcher.submit([p], MID, priority=Priority.BATCH) for p in pages))
    finally:
        await batcher.close()
    assert batcher.slot_steps - slot_steps > batcher.steps - steps  # shared decode steps
    assert max(joins) == 1 and sum(joins) == 4
    assert batcher.preempted == 0
