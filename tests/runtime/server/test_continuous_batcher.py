"""ContinuousBatcher on the tiny real-architecture DeepSeek-OCR-2: admission, leaving,
deadlines, disconnects, priorities, the cache budget and out-of-memory evictions.

Nothing is timed: orderings and counts only (how long a step takes is bench/runtime.py's).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.engines.deepseek_ocr2.engine import DeepseekOcr2Engine
from docparser_runtime.engines.deepseek_ocr2.running import DeepseekRunningBatch
from docparser_runtime.errors import DeadlineExceeded, EngineFailure, GpuOutOfMemory
from docparser_runtime.server.inference.batcher import MicroBatcher
from docparser_runtime.server.inference.continuous import ContinuousBatcher, make_batcher
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.settings import Settings
from tiny_deepseek import make_page

pytestmark = pytest.mark.torch

SHORT = ParseOptions(tier=0, mode="text", max_new_tokens=4, min_new_tokens=4)
LONG = ParseOptions(tier=0, max_new_tokens=400, min_new_tokens=400)
# Past a 0.5 s deadline on any CPU: an idle machine decoded LONG's 400 tokens inside it once.
DOOMED = ParseOptions(tier=0, max_new_tokens=2000, min_new_tokens=2000)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = DeepseekOcr2Engine(tiny_model_dir, device="cpu", version="tiny")
    engine.load()
    yield engine
    engine.close()


async def make(engine, **kw) -> ContinuousBatcher:
    params = {"max_batch_size": 8, "max_queue_pages": 64, "audit": False, **kw}
    batcher = ContinuousBatcher(engine, **params)
    batcher.start()
    return batcher


async def wait_until(predicate, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.002)


def running(batcher: ContinuousBatcher) -> list[int]:
    return [item.page.index for item in batcher._running]


async def test_pages_of_different_options_share_the_running_batch(engine):
    batcher = await make(engine)
    specs = [
        (make_page(0, 900, 1200, 2), ParseOptions(tier=2, max_new_tokens=12)),
        (make_page(1, 500, 400, 0), ParseOptions(tier=0, mode="text", max_new_tokens=6)),
        (make_page(2, 640, 480, 0), ParseOptions(tier=0, mode="grounding", max_new_tokens=9)),
    ]
    try:
        results = await asyncio.gather(*(batcher.submit([p], o) for p, o in specs))
    finally:
        await batcher.close()
    for (page, options), [result] in zip(specs, results, strict=True):
        assert result == engine.infer_batch([page], options)[0]
    assert batcher.slot_steps > batcher.steps  # some steps decoded several pages


async def test_a_short_page_does_not_wait_for_a_long_one(engine):
    """Head of line: the short page joins the running batch and ends while the long one
    still has most of its tokens to go."""
    batcher = await make(engine)
    try:
        long = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG))
        await wait_until(lambda: batcher.steps >= 5)
        [short] = await batcher.submit([make_page(1, 640, 480, 0)], SHORT)
        assert not long.done()
        [run] = [item.run for item in batcher._running]
        assert len(run.generated) < 100
        assert short.output_tokens == 4
        long.cancel()
        await asyncio.gather(long, return_exceptions=True)
        await wait_until(lambda: not batcher._running)  # a gone client's page leaves
    finally:
        await batcher.close()
    assert len(run.generated) < LONG.max_new_tokens


async def test_deadline_passing_mid_generation_fails_that_page_only(engine):
    batcher = await make(engine)
    mate_page, mate_opts = make_page(1, 640, 480, 0), ParseOptions(tier=0, max_new_tokens=30)
    try:
        mate = asyncio.create_task(batcher.submit([mate_page], mate_opts))
        doomed = asyncio.create_task(
            batcher.submit([make_page(0, 500, 400, 0)], DOOMED, deadline=time.monotonic() + 0.5)
        )
        with pytest.raises(DeadlineExceeded):
            await doomed
        [result] = await mate
    finally:
        await batcher.close()
    assert result == engine.infer_batch([mate_page], mate_opts)[0]


async def test_a_stream_joins_the_batch_and_stops_when_its_client_leaves(engine):
    batcher = await make(engine)
    deltas: list[str] = []
    try:
        long = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG))
        await wait_until(lambda: batcher.steps >= 3)
        streamed = await batcher.submit_stream(
            make_page(1, 640, 480, 0),
            ParseOptions(tier=0, max_new_tokens=200, min_new_tokens=200),
            lambda d: deltas.append(d) or len(deltas) >= 5,
        )
        assert running(batcher) == [0]  # it ran beside the long page, which goes on
        long.cancel()
        await asyncio.gather(long, return_exceptions=True)
    finally:
        await batcher.close()
    assert len(deltas) == 5 and streamed.truncated and streamed.output_tokens < 200


async def test_sync_pages_go_before_jobs_and_jobs_before_background(engine):
    batcher = await make(engine, max_batch_size=1)
    order: list[int] = []
    try:
        first = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG))
        await wait_until(lambda: running(batcher) == [0])
        tasks = [
            asyncio.create_task(
                batcher.submit(
                    [make_page(i, 500, 400, 0)],
                    SHORT,
                    priority=prio,
                    on_result=lambda r: order.append(r.index),
                )
            )
            for i, prio in [(1, Priority.BACKGROUND), (2, Priority.JOB), (3, Priority.INTERACTIVE)]
        ]
        await asyncio.sleep(0)
        first.cancel()  # frees the one slot with all three waiting
        await asyncio.gather(*tasks)
        await asyncio.gather(first, return_exceptions=True)
    finally:
        await batcher.close()
    assert order == [3, 2, 1]


async def test_a_job_waiting_past_the_bound_goes_before_newer_sync_pages(engine):
    batcher = await make(engine, max_batch_size=1, priority_max_wait_s=0.2)
    order: list[int] = []
    try:
        first = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG))
        await wait_until(lambda: running(batcher) == [0])
        report = {"on_result": lambda r: order.append(r.index)}
        job = asyncio.create_task(
            batcher.submit([make_page(1, 500, 400, 0)], SHORT, priority=Priority.JOB, **report)
        )
        await asyncio.sleep(0.3)  # the job has waited past the bound
        sync = asyncio.create_task(batcher.submit([make_page(2, 500, 400, 0)], SHORT, **report))
        await asyncio.sleep(0)
        first.cancel()  # frees the slot: both wait, the aged job is admitted first
        await asyncio.gather(job, sync)
        await asyncio.gather(first, return_exceptions=True)
    finally:
        await batcher.close()
    assert order == [1, 2]


async def test_a_batch_line_waiting_past_the_bound_still_goes_after_jobs_and_sync(engine):
    """Batch lines are never aged: a 24 h window, not a client waiting on a connection."""
    batcher = await make(engine, max_batch_size=1, priority_max_wait_s=0.2)
    order: list[int] = []
    try:
        first = asyncio.create_task(batcher.submit([make_page(0, 500, 400, 0)], LONG))
        await wait_until(lambda: running(batcher) == [0])
        report = {"on_result": lambda r: order.append(r.index)}
        line = asyncio.create_task(
            batcher.submit([make_page(1, 500, 400, 0)], SHORT, priority=Priority.BATCH, **report)
        )
        await asyncio.sleep(0.3)  # the batch line has waited past the bound
        job = asyncio.create_task(
            batcher.submit([make_page(2, 500, 400, 0)], SHORT, priority=Priority.JOB, **report)
        )
        sync = asyncio.create_task(batcher.submit([make_page(3, 500, 400, 0)], SHORT, **report))
        await asyncio.sleep(0)
        first.cancel()  # frees the slot: all three wait, the batch line goes last
        await asyncio.gather(line, job, sync)
        await asyncio.gather(first, return_exceptions=True)
    finally:
        await batcher.close()
    assert order == [3, 2, 1]


async def test_the_cache_budget_stops_admission_instead_of_running_out(engine):
    page = make_page(0, 500, 400, 0)
    alone = engine.new_run(page, SHORT, None).prompt_tokens + SHORT.max_new_tokens + 1
    batcher = await make(engine)
    batcher.budget_tokens = alone + 2  # room for one page, not two
    widest = 0

    def watch(_result) -> None:
        nonlocal widest
        widest = max(widest, len(batcher._running))

    try:
        pages = [make_page(i, 500, 400, 0) for i in range(4)]
        results = await asyncio.gather(
            *(batcher.submit([p], SHORT, on_result=watch) for p in pages)
        )
    finally:
        await batcher.close()
    assert [r.index for [r] in results] == [0, 1, 2, 3]
    assert batcher.slot_steps == batcher.steps  # never two pages at once
    assert widest <= 1


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError (how the scheduler recognises it)."""


class CappedBatch(DeepseekRunningBatch):
    """A step over ``cap`` cache slots fails like CUDA running out of memory."""

    cap = 0

    def step(self) -> None:
        if self.padded_tokens > self.cap:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        super().step()


class SmallDevice(DeepseekOcr2Engine):
    """The tiny model on a device that holds fewer cache slots than the budget claims."""

    cap = 0

    def new_batch(self):
        batch = super().new_batch()
        batch.__class__ = CappedBatch  # the engine's own batch, with the device's limit
        batch.cap = self.cap
        return batch


async def test_out_of_memory_evicts_the_newest_pages_and_resumes_them(tiny_model_dir):
    engine = SmallDevice(tiny_model_dir, device="cpu")
    engine.load()
    specs = [(make_page(i, 500 + 40 * i, 400, 0), ParseOptions(tier=0, max_new_tokens=20))
             for i in range(4)]  # fmt: skip
    one = engine.new_run(*specs[0], None).prompt_tokens + 20
    engine.cap = 2 * one  # two pages fit, four do not
    metrics = Metrics()
    batcher = await make(engine, metrics=metrics)
    try:
        results = await asyncio.gather(*(batcher.submit([p], o) for p, o in specs))
    finally:
        await batcher.close()
    for (page, options), [result] in zip(specs, results, strict=True):
        assert result == engine.infer_batch([page], options)[0]
    assert metrics.registry.get_sample_value("docparser_evicted_pages_total") >= 1
    assert metrics.registry.get_sample_value("docparser_gpu_oom_total") >= 1
    assert batcher.budget_tokens < engine.kv_budget_tokens()  # it learnt the device's size
    engine.cap = 1  # nothing fits, not even one page alone
    batcher = await make(engine, metrics=metrics)
    try:
        with pytest.raises(GpuOutOfMemory, match="lower tier"):
            await batcher.submit([specs[0][0]], specs[0][1])
    finally:
        await batcher.close()


def test_the_deepseek_engine_gets_continuous_batching_and_rapidocr_static(engine):
    from docparser_runtime.engines.rapidocr.engine import RapidOcrEngine

    settings = Settings()
    assert type(make_batcher(engine, settings, Metrics())) is ContinuousBatcher
    assert type(make_batcher(RapidOcrEngine(), settings, Metrics())) is MicroBatcher
    off = Settings(continuous_batching=False)
    assert type(make_batcher(engine, off, Metrics())) is MicroBatcher


class Faulty(DeepseekOcr2Engine):
    """Page 13 cannot be prepared; ``broken`` makes the next decode step fail."""

    broken = False

    def _prepare(self, pages, options):
        if any(p.index == 13 for p in pages):
            raise EngineFailure("DeepSeek-OCR-2 preprocessing failed: page 13")
        return super()._prepare(pages, options)

    def new_batch(self):
        batch = super().new_batch()
        batch.__class__ = FaultyBatch
        batch.engine = self
        return batch


class FaultyBatch(DeepseekRunningBatch):
    engine: Faulty

    def step(self) -> None:
        if self.engine.broken:
            self.engine.broken = False
            raise RuntimeError("device lost")
        super().step()


async def test_a_page_that_fails_to_join_fails_alone_and_a_failed_step_fails_the_batch(
    tiny_model_dir,
):
    engine = Faulty(tiny_model_dir, device="cpu")
    engine.load()
    batcher = await make(engine)
    options = ParseOptions(tier=0, max_new_tokens=6)
    try:
        pages = [make_page(i, 500, 400, 0) for i in (12, 13, 14)]
        outcomes = await asyncio.gather(
            *(batcher.submit([p], options) for p in pages), return_exceptions=True
        )
        assert isinstance(outcomes[1], EngineFailure) and "page 13" in str(outcomes[1])
        for page, outcome in zip(pages[::2], outcomes[::2], strict=True):
            assert outcome == [engine.infer_batch([page], options)[0]]
        engine.broken = True
        with pytest.raises(EngineFailure, match="RuntimeError"):
            await batcher.submit([pages[0]], options)
        assert not batcher._running
        [again] = await batcher.submit([pages[2]], options)  # a new batch serves on
        assert again.output_tokens == 6
    finally:
        await batcher.close()
