"""Batch lines step aside for interactive pages (``DOCPARSER_BATCH_YIELD``, issue 35).

On the tiny real-architecture DeepSeek-OCR-2, rows and counts only (what it buys in latency
is bench/batch.py's): under ``rows`` (a CPU device) every decode step of an interactive
page has that page alone, the batch pages keep their cache and tokens while parked and
resume without a second prefill, ending with the result they would have had; under
``slots`` (a GPU) they decode beside it. With no interactive page nothing parks.
"""

from __future__ import annotations

import asyncio

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.server.inference.batch_yield import resolve_batch_yield
from docparser_runtime.server.inference.continuous import make_batcher
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.settings import Settings
from pydantic import ValidationError
from test_continuous_batcher import engine as engine  # the module's loaded tiny engine
from test_continuous_batcher import make, running, wait_until
from tiny_deepseek import make_page

pytestmark = pytest.mark.torch

LINE = ParseOptions(tier=0, max_new_tokens=160, min_new_tokens=160)
ASK = ParseOptions(tier=0, max_new_tokens=30, min_new_tokens=30)
INTERACTIVE = 9  # the interactive page's index


class Watch:
    """Every running batch the engine makes, seen through its public interface: the pages
    of each decode step, the pages each join prefills, and park / resume calls."""

    def __init__(self, engine, monkeypatch) -> None:
        self.steps: list[list[int]] = []
        self.joined: list[int] = []
        self.parks: list[list[int]] = []
        self.resumes: list[list[int]] = []
        new_batch = engine.new_batch
        monkeypatch.setattr(engine, "new_batch", lambda: self.wrap(new_batch()))

    def wrap(self, batch):
        step, join, park, resume = batch.step, batch.join, batch.park, batch.resume

        def stepping():
            self.steps.append(sorted(run.page.index for run in batch.runs))
            step()

        def joining(runs):
            self.joined += [run.page.index for run in runs]
            join(runs)

        def parking(runs):
            self.parks.append(sorted(run.page.index for run in runs))
            park(runs)

        def resuming(runs):
            self.resumes.append(sorted(run.page.index for run in runs))
            resume(runs)

        batch.step, batch.join, batch.park, batch.resume = stepping, joining, parking, resuming
        return batch


async def _lines_then_interactive(batcher, engine):
    """Two batch lines running, then an interactive page; every result, in end order."""
    pages = [make_page(i, 500, 400, 0) for i in range(2)]
    order: list[int] = []
    report = {"on_result": lambda r: order.append(r.index)}
    try:
        lines = [
            asyncio.create_task(batcher.submit([p], LINE, priority=Priority.BATCH, **report))
            for p in pages
        ]
        await wait_until(lambda: sorted(running(batcher)) == [0, 1] and batcher.steps >= 3)
        ask = make_page(INTERACTIVE, 640, 480, 0)
        [answer] = await batcher.submit([ask], ASK, **report)
        results = await asyncio.gather(*lines)
    finally:
        await batcher.close()
    assert answer == engine.infer_batch([ask], ASK)[0]
    for page, [result] in zip(pages, results, strict=True):  # same tokens as never parked
        assert result == engine.infer_batch([page], LINE)[0]
    return order


async def test_rows_batch_lines_step_aside_while_an_interactive_page_decodes(engine, monkeypatch):
    """Two slots, both held by batch lines: the interactive page still runs at once (parked
    pages hold no slot), every one of its decode steps has it alone, and the batch lines
    come back where they stopped: one prefill each, nobody preempted."""
    watch = Watch(engine, monkeypatch)
    batcher = await make(engine, max_batch_size=2, batch_yield="rows")
    order = await _lines_then_interactive(batcher, engine)
    assert order[0] == INTERACTIVE
    with_it = [rows for rows in watch.steps if INTERACTIVE in rows]
    assert len(with_it) == ASK.max_new_tokens - 1  # its first token comes from its prefill
    assert all(rows == [INTERACTIVE] for rows in with_it)
    assert watch.parks == [[0, 1]] and watch.resumes == [[0, 1]]
    assert sorted(watch.joined) == [0, 1, INTERACTIVE]  # parked lines were not prefilled again
    assert batcher.preempted == 0
    first = watch.steps.index(with_it[0])
    assert [0, 1] in watch.steps[:first] and [0, 1] in watch.steps[first:]  # before and after


async def test_slots_batch_lines_decode_beside_an_interactive_page(engine, monkeypatch):
    """The GPU policy: rows are nearly free there, so the batch lines go on decoding beside
    the interactive page (they give a slot back only when none is free)."""
    watch = Watch(engine, monkeypatch)
    batcher = await make(engine, max_batch_size=4, batch_yield="slots")
    order = await _lines_then_interactive(batcher, engine)
    assert order[0] == INTERACTIVE
    with_it = [rows for rows in watch.steps if INTERACTIVE in rows]
    assert with_it and all(rows == [0, 1, INTERACTIVE] for rows in with_it)
    assert watch.parks == [] and batcher.preempted == 0


async def test_rows_without_interactive_pages_nothing_parks(engine, monkeypatch):
    """With only batch lines the policy does nothing: they share steps, none parks."""
    watch = Watch(engine, monkeypatch)
    batcher = await make(engine, max_batch_size=4, batch_yield="rows")
    pages = [make_page(i, 500, 400, 0) for i in range(3)]
    short = ParseOptions(tier=0, max_new_tokens=20, min_new_tokens=20)
    try:
        await asyncio.gather(*(batcher.submit([p], short, priority=Priority.BATCH) for p in pages))
    finally:
        await batcher.close()
    assert watch.parks == [] and watch.resumes == []
    assert max(len(rows) for rows in watch.steps) == 3


def test_a_parked_page_keeps_its_cache_and_tokens(engine):
    """The running batch itself: a parked page takes no step, holds its cache (counted in
    ``padded_tokens``), and resumed it ends as if it had never left; a parked page that
    leaves is gone."""
    pages = [make_page(i, 500, 400, 0) for i in range(3)]
    opts = ParseOptions(tier=0, max_new_tokens=24, min_new_tokens=24)
    runs = [engine.new_run(p, opts, None) for p in pages]
    batch = engine.new_batch()
    batch.join(runs)
    for _ in range(5):
        batch.step()
    held = batch.padded_tokens
    batch.park(runs[1:])
    assert list(batch.runs) == runs[:1] and list(batch.parked) == runs[1:]
    assert batch.padded_tokens == held  # the parked rows still hold their cache (same sizes)
    parked_at = [len(run.generated) for run in runs[1:]]
    for _ in range(4):
        batch.step()
    assert [len(run.generated) for run in runs[1:]] == parked_at
    batch.leave(runs[2:])
    assert list(batch.parked) == runs[1:2]
    batch.resume(runs[1:2])
    assert list(batch.runs) == runs[:2] and not batch.parked
    while batch.runs:
        batch.step()
        batch.leave([run for run in batch.runs if engine.run_done(run)])
    for run, page in zip(runs[:2], pages, strict=False):
        assert engine.finish_run(run) == engine.infer_batch([page], opts)[0]


def test_the_policy_follows_the_device_unless_set(engine):
    assert resolve_batch_yield("auto", "cpu") == "rows"
    assert resolve_batch_yield("auto", None) == "rows"
    assert resolve_batch_yield("auto", "cuda:1") == "slots"
    assert resolve_batch_yield("slots", "cpu") == "slots"
    assert resolve_batch_yield("rows", "cuda") == "rows"
    with pytest.raises(ValueError, match="auto, rows or slots"):
        resolve_batch_yield("gpu", "cpu")
    with pytest.raises(ValidationError, match="'auto', 'rows' or 'slots'"):
        Settings(batch_yield="gpu")
    batcher = make_batcher(engine, Settings(), Metrics())  # the tiny engine runs on CPU
    assert batcher.batch_yield == "rows"
    assert make_batcher(engine, Settings(batch_yield="slots"), Metrics()).batch_yield == "slots"
