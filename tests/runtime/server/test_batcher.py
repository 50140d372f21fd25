"""MicroBatcher: flush rules, grouping, backpressure, deadlines, cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import (
    DeadlineExceeded,
    EngineFailure,
    GpuOutOfMemory,
    InvalidInput,
    Overloaded,
    PayloadTooLarge,
    Unavailable,
)
from docparser_runtime.server.inference.batcher import MicroBatcher, SubmitTimings
from docparser_runtime.server.ops.metrics import Metrics
from engines_for_tests import GatedEngine, page

OPTS = ParseOptions(tier=0, mode="markdown", max_new_tokens=16)


async def make(engine, **kw) -> MicroBatcher:
    params = {"max_batch_size": 4, "max_wait_ms": 5.0, "max_queue_pages": 64, **kw}
    batcher = MicroBatcher(engine, **params)
    batcher.start()
    return batcher


async def wait_until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def hold_engine(engine: GatedEngine, batcher: MicroBatcher) -> asyncio.Task:
    """Start a 1-page request and wait until it sits inside the (closed) engine."""
    engine.gate.clear()
    engine.entered.clear()
    task = asyncio.create_task(batcher.submit([page(99)], OPTS))
    await asyncio.to_thread(engine.entered.wait, 5)
    return task


async def test_concurrent_requests_share_one_batch_when_size_reached():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=4, max_wait_ms=60_000)
    results = await asyncio.gather(*(batcher.submit([page(i)], OPTS) for i in range(4)))
    assert [len(b) for b in engine.batches] == [4]
    assert [r[0].index for r in results] == [0, 1, 2, 3]
    await batcher.close()


async def test_partial_batch_flushes_after_max_wait():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=8, max_wait_ms=80)
    start = time.monotonic()
    results = await batcher.submit([page(0), page(1)], OPTS)
    assert time.monotonic() - start >= 0.075
    assert engine.batches == [[0, 1]]
    assert [r.index for r in results] == [0, 1]
    await batcher.close()


async def test_large_request_split_into_batches_keeps_page_order():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=2)
    timings = SubmitTimings()
    results = await batcher.submit([page(i, width=10 + i) for i in range(5)], OPTS, timings=timings)
    assert engine.batches == [[0, 1], [2, 3], [4]]
    assert [(r.index, r.width) for r in results] == [(i, 10 + i) for i in range(5)]
    assert timings.queue_s >= 0 and timings.inference_s >= 0
    await batcher.close()


async def test_pages_with_different_options_never_share_a_batch():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=4, max_wait_ms=20)
    other = ParseOptions(tier=6, mode="text", max_new_tokens=16)
    engine.gate.clear()
    first = asyncio.create_task(batcher.submit([page(0), page(1)], OPTS))
    second = asyncio.create_task(batcher.submit([page(2), page(3)], other))
    third = asyncio.create_task(batcher.submit([page(4)], OPTS))
    await wait_until(lambda: engine.entered.is_set())
    engine.gate.set()
    await asyncio.gather(first, second, third)
    for indices, options in zip(engine.batches, engine.batch_options, strict=True):
        expected = other if indices[0] in (2, 3) else OPTS
        assert options == expected
        assert all((i in (2, 3)) == (expected == other) for i in indices)
    assert sorted(i for b in engine.batches for i in b) == [0, 1, 2, 3, 4]
    await batcher.close()


async def test_full_queue_raises_overloaded_with_retry_after():
    engine = GatedEngine()
    metrics = Metrics()
    batcher = await make(engine, max_batch_size=2, max_queue_pages=4, metrics=metrics)
    held = await hold_engine(engine, batcher)
    queued = asyncio.create_task(batcher.submit([page(i) for i in range(4)], OPTS))
    await wait_until(lambda: batcher.queued_pages == 4)
    assert metrics.registry.get_sample_value("docparser_queue_pages") == 4
    with pytest.raises(Overloaded) as info:
        await batcher.submit([page(5)], OPTS)
    assert info.value.retry_after_s >= 1
    assert (
        metrics.registry.get_sample_value(
            "docparser_rejected_total", {"code": "overloaded", "model": "", "version": ""}
        )
        == 1
    )
    engine.gate.set()
    assert len(await queued) == 4
    await held
    assert metrics.registry.get_sample_value("docparser_queue_pages") == 0
    await batcher.close()


async def test_request_larger_than_queue_is_admitted_into_an_empty_queue():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=2, max_queue_pages=2)
    results = await batcher.submit([page(i) for i in range(5)], OPTS)
    assert len(results) == 5
    await batcher.close()


async def test_queue_is_bounded_by_decoded_pixels_not_only_pages():
    """Memory follows pixels: two 4000x3000 pages fill a 30 Mpx budget that 64 pages would
    not; a third waits for room (429), and the gauge shows what is held."""
    engine = GatedEngine()
    metrics = Metrics()
    batcher = await make(engine, max_queue_pixels=30_000_000, metrics=metrics)
    held = await hold_engine(engine, batcher)
    big = [page(i, 4000, 3000) for i in range(2)]  # 24 Mpx
    queued = asyncio.create_task(batcher.submit(big, OPTS))
    await wait_until(lambda: batcher.queued_pages == 2)
    assert metrics.registry.get_sample_value("docparser_queue_pixels") == 24_000_000
    with pytest.raises(Overloaded) as info:
        await batcher.submit([page(5, 4000, 3000)], OPTS)
    assert "Mpx" in str(info.value) and info.value.retry_after_s >= 1
    small = asyncio.create_task(batcher.submit([page(7)], OPTS))  # small pages still fit
    await wait_until(lambda: batcher.queued_pages == 3)
    engine.gate.set()
    assert len(await queued) == 2 and len(await small) == 1
    await held
    assert metrics.registry.get_sample_value("docparser_queue_pixels") == 0
    await batcher.close()


async def test_a_page_larger_than_the_whole_pixel_budget_is_413():
    engine = GatedEngine()
    batcher = await make(engine, max_queue_pixels=1_000_000)
    with pytest.raises(PayloadTooLarge) as info:
        await batcher.submit([page(0, 2000, 1000)], OPTS)
    assert "DOCPARSER_MAX_QUEUE_PIXELS" in str(info.value)
    await batcher.close()


async def test_deadline_exceeded_while_queued_removes_the_pages():
    engine = GatedEngine()
    batcher = await make(engine)
    held = await hold_engine(engine, batcher)
    with pytest.raises(DeadlineExceeded):
        await batcher.submit([page(1), page(2)], OPTS, deadline=time.monotonic() + 0.05)
    assert batcher.queued_pages == 0
    engine.gate.set()
    await held
    assert engine.batches == [[99]]
    await batcher.close()


async def test_cancelled_request_takes_its_pages_out_of_the_queue():
    engine = GatedEngine()
    batcher = await make(engine)
    held = await hold_engine(engine, batcher)
    gone = asyncio.create_task(batcher.submit([page(1), page(2), page(3)], OPTS))
    stays = asyncio.create_task(batcher.submit([page(4)], OPTS))
    await wait_until(lambda: batcher.queued_pages == 4)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert batcher.queued_pages == 1
    engine.gate.set()
    await held
    assert [r.index for r in await stays] == [4]
    assert engine.batches == [[99], [4]]
    await batcher.close()


async def test_engine_exception_fails_every_request_of_the_batch_as_engine_failure():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=2, max_wait_ms=60_000)
    engine.fail_with = RuntimeError("CUDA exploded at 0xdeadbeef")
    outcomes = await asyncio.gather(
        batcher.submit([page(0)], OPTS), batcher.submit([page(1)], OPTS), return_exceptions=True
    )
    assert all(isinstance(o, EngineFailure) for o in outcomes)
    assert "0xdeadbeef" not in outcomes[0].message
    # Taxonomy errors raised by an engine pass through unchanged.
    engine.fail_with = InvalidInput("page is blank", code="blank_page")
    with pytest.raises(InvalidInput) as info:
        await batcher.submit([page(0), page(1)], OPTS)
    assert info.value.code == "blank_page"
    # The worker survives engine failures.
    engine.fail_with = None
    assert len(await batcher.submit([page(0), page(1)], OPTS)) == 2
    await batcher.close()


async def test_inference_does_not_block_the_event_loop():
    engine = GatedEngine(delay_s=0.3)
    batcher = await make(engine)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    await batcher.submit([page(0)], OPTS)
    tick_task.cancel()
    assert ticks >= 10  # ~30 expected; 0-1 if the loop had been blocked for 0.3 s
    await batcher.close()


async def test_on_result_reports_each_page_and_metrics_count_batches():
    engine = GatedEngine()
    metrics = Metrics()
    batcher = await make(engine, max_batch_size=2, metrics=metrics)
    seen = []
    await batcher.submit(
        [page(i) for i in range(3)], OPTS, on_result=lambda r: seen.append(r.index)
    )
    await asyncio.sleep(0)  # done-callbacks run on the next loop iteration
    assert sorted(seen) == [0, 1, 2]
    assert metrics.registry.get_sample_value("docparser_batch_size_count") == 2
    assert metrics.registry.get_sample_value("docparser_batch_size_sum") == 3
    await batcher.close()


async def test_submit_stream_runs_alone_and_reports_deltas():
    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=8, max_wait_ms=60_000)
    deltas: list[str] = []
    result = await batcher.submit_stream(page(3), OPTS, lambda d: deltas.append(d) and False)
    assert "".join(deltas) == result.content
    assert engine.batches == [[3]]
    await batcher.close()


async def test_close_fails_queued_work_with_unavailable():
    engine = GatedEngine()
    batcher = await make(engine)
    held = await hold_engine(engine, batcher)
    queued = asyncio.create_task(batcher.submit([page(1)], OPTS))
    await wait_until(lambda: batcher.queued_pages == 1)
    await batcher.close()
    engine.gate.set()
    for task in (queued, held):
        with pytest.raises(Unavailable):
            await task
    with pytest.raises(Unavailable):
        await batcher.submit([page(2)], OPTS)


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError (the batcher recognises it by name)."""


class SmallGpuEngine(GatedEngine):
    """A fault hook: batches above ``fits`` pages, or containing a page in ``never``, run
    out of GPU memory as CUDA would."""

    def __init__(self, fits: int, never: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.fits, self.never = fits, never
        self.released = 0

    def infer_batch(self, pages, options):
        if len(pages) > self.fits or any(p.index in self.never for p in pages):
            self.batches.append([p.index for p in pages])
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().infer_batch(pages, options)

    def release_cached_memory(self) -> None:
        self.released += 1


async def test_an_out_of_memory_batch_is_split_and_every_page_that_fits_is_served():
    engine = SmallGpuEngine(fits=2, never=frozenset({5}))
    metrics = Metrics()
    batcher = await make(engine, max_batch_size=8, max_wait_ms=50.0, metrics=metrics)
    tasks = [asyncio.create_task(batcher.submit([page(i)], OPTS)) for i in range(8)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failed = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
    assert set(failed) == {5}  # only the page that does not fit alone
    assert isinstance(failed[5], GpuOutOfMemory) and "lower tier" in str(failed[5])
    assert [r[0].index for i, r in enumerate(results) if i != 5] == [0, 1, 2, 3, 4, 6, 7]
    assert max(len(b) for b in engine.batches if 5 not in b) <= 8
    ooms = metrics.registry.get_sample_value("docparser_gpu_oom_total")
    assert ooms is not None and ooms >= 3 and engine.released == ooms
    await batcher.close()


async def test_batch_lines_wait_behind_every_other_page_and_never_share_its_call():
    """The static batcher (the CPU engine's path) ranks /v1/batches lines last, as the
    continuous scheduler does: pages queued behind a backlog of batch lines run first, and a
    batch line never rides in their engine call (a static call lasts as long as its longest
    page). Requests, jobs and background pages keep their arrival order among themselves."""
    from docparser_runtime.server.inference.priorities import Priority

    engine = GatedEngine()
    batcher = await make(engine, max_batch_size=4, max_wait_ms=1)
    held = await hold_engine(engine, batcher)
    lines = [
        asyncio.create_task(batcher.submit([page(10 + i)], OPTS, priority=Priority.BATCH))
        for i in range(3)
    ]
    await wait_until(lambda: batcher.queued_pages == 3)
    job = asyncio.create_task(batcher.submit([page(1)], OPTS, priority=Priority.JOB))
    await wait_until(lambda: batcher.queued_pages == 4)
    request = asyncio.create_task(batcher.submit([page(2)], OPTS))
    await wait_until(lambda: batcher.queued_pages == 5)
    engine.gate.set()
    await asyncio.gather(held, job, request, *lines)
    assert engine.batches == [[99], [1, 2], [10, 11, 12]]
    await batcher.close()
