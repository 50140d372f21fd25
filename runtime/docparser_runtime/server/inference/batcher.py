"""Micro-batcher: many concurrent requests -> few engine calls.

Why: a GPU decodes a batch of pages almost as fast as one page, so pages from different
requests that share ``ParseOptions.batch_key()`` are merged into one ``infer_batch``.
A batch is flushed when ``max_batch_size`` pages of one key are waiting or the oldest
page has waited ``max_wait_ms``. The queue is bounded in *pages* and in decoded *pixels*
(what memory follows: one 8900x8900 page holds more than a hundred small ones), both
``Overloaded`` -> 429; a page larger than the whole pixel budget can never fit (413),
each request carries a deadline (``DeadlineExceeded`` -> 504), and a request whose
awaiting task is cancelled (client went away) takes its not-yet-started pages out of
the queue. The engine runs on one dedicated worker thread (one device, one model), so
the event loop never blocks on inference.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from docparser_runtime.engines.base import (
    DeltaCallback,
    Engine,
    PageImage,
    PageResult,
    ParseOptions,
)
from docparser_runtime.engines.coverage import audit_results
from docparser_runtime.errors import (
    DeadlineExceeded,
    DocParserError,
    EngineFailure,
    GpuOutOfMemory,
    Overloaded,
    PayloadTooLarge,
    Unavailable,
)
from docparser_runtime.server.inference.priorities import is_batch, static_order
from docparser_runtime.server.inference.queued import (
    SubmitTimings as SubmitTimings,  # public here too: callers time their submits with it
)
from docparser_runtime.server.inference.queued import (
    _Entry,
    _Item,
    _report_to,
    is_out_of_memory,
)
from docparser_runtime.server.inference.tiers import page_tier
from docparser_runtime.server.inference.wait_estimate import WaitEstimator
from docparser_runtime.server.ops.metrics import Metrics

log = logging.getLogger("docparser.batcher")
T = TypeVar("T")


class MicroBatcher:
    """Call ``start()`` inside the running loop, ``submit()`` from request handlers."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue_pages: int,
        max_queue_pixels: int = 0,
        metrics: Metrics | None = None,
        audit: bool = True,
    ) -> None:
        self.engine = engine
        self.audit = audit  # run engines.coverage.audit_results after each engine call
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_queue_pages = max_queue_pages
        self.max_queue_pixels = max_queue_pixels  # 0: pages only
        self.metrics = metrics
        self._queue: list[_Item] = []
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._worker: asyncio.Task[None] | None = None
        self._running: list[_Item] = []
        self._busy_since: float | None = None
        self._closed = False
        self._ewma_batch_s = 1.0  # for Retry-After; refined by observed batches
        # seconds per page per tier, measured (and exported: status.capacity's service time)
        self.wait = WaitEstimator(
            max_batch_size, record=metrics.observe_service if metrics else None
        )
        if metrics:
            metrics.decode_slots.set(max_batch_size)
            metrics.estimated_wait.set_function(self.estimated_wait_s)

    # -- public --------------------------------------------------------------------------
    @property
    def queued_pages(self) -> int:
        return len(self._queue)

    @property
    def queued_pixels(self) -> int:
        return sum(it.page.width * it.page.height for it in self._queue)

    def estimated_wait_s(self) -> float:
        """The queued pages' measured seconds per page over the slots (read at scrape)."""
        return self.wait.estimate([page_tier(it.page, it.options) for it in self._queue])

    @property
    def busy_for_s(self) -> float:
        """Seconds the current engine call has been running (0 when idle)."""
        return 0.0 if self._busy_since is None else time.monotonic() - self._busy_since

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="batcher")

    async def close(self) -> None:
        """Stop the worker; queued pages fail with ``Unavailable``."""
        self._closed = True
        for item in self._queue + self._running:
            if not item.future.done():
                item.future.set_exception(Unavailable("server shutting down", code="draining"))
        self._queue.clear()
        self._set_queue_gauge()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(
        self,
        pages: Sequence[PageImage],
        options: ParseOptions,
        *,
        deadline: float | None = None,
        timings: SubmitTimings | None = None,
        on_result: Callable[[PageResult], None] | None = None,
        priority: int = 0,
    ) -> list[PageResult]:
        """Parse ``pages`` (results in input order). ``deadline`` is ``time.monotonic()``-based;
        ``on_result`` is called on the loop as each page finishes (completion order)."""
        if not pages:
            return []
        items = self._enqueue([(p, None) for p in pages], options, deadline, priority)
        if on_result is not None:
            for it in items:
                it.future.add_done_callback(_report_to(on_result))
        return await self._await(items, deadline, timings)

    async def submit_stream(
        self,
        page: PageImage,
        options: ParseOptions,
        on_delta: DeltaCallback,
        *,
        deadline: float | None = None,
        timings: SubmitTimings | None = None,
        priority: int = 0,
    ) -> PageResult:
        """Parse one page, streaming (``engine.stream_page`` here, the running batch in
        ``ContinuousBatcher``); ``on_delta`` runs on the engine thread."""
        items = self._enqueue([(page, on_delta)], options, deadline, priority)
        return (await self._await(items, deadline, timings))[0]

    # -- admission -----------------------------------------------------------------------
    def _enqueue(
        self,
        entries: Sequence[_Entry],
        options: ParseOptions,
        deadline: float | None,
        priority: int = 0,
    ) -> list[_Item]:
        if self._closed:
            raise Unavailable("server shutting down", code="draining")
        queued = len(self._queue)
        budget = self.max_queue_pixels
        need = [page.width * page.height for page, _ in entries]
        if budget and max(need, default=0) > budget:
            raise PayloadTooLarge(
                f"a page of {max(need) / 1e6:.0f} Mpx is larger than the whole queue budget "
                f"({budget / 1e6:.0f} Mpx, DOCPARSER_MAX_QUEUE_PIXELS)",
                code="page_too_large",
            )
        # A request larger than the whole queue is still admitted into an empty queue,
        # otherwise it could never run at all.
        full = None
        if queued and queued + len(entries) > self.max_queue_pages:
            full = f"queue full ({queued} pages waiting, limit {self.max_queue_pages})"
        elif queued and budget and self.queued_pixels + sum(need) > budget:
            full = (
                f"queue memory budget full ({self.queued_pixels / 1e6:.0f} Mpx of decoded pages "
                f"waiting, this request needs {sum(need) / 1e6:.0f} Mpx more, "
                f"limit {budget / 1e6:.0f} Mpx)"
            )
        if full is not None:
            if self.metrics:
                self.metrics.reject("overloaded")
            raise Overloaded(full, retry_after_s=self._retry_after(queued))
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        items = [
            _Item(page, options, loop.create_future(), now, deadline, on_delta, priority)
            for page, on_delta in entries
        ]
        self._queue.extend(items)
        self._set_queue_gauge()
        self._wakeup.set()
        return items

    def _retry_after(self, queued: int) -> float:
        batches_ahead = queued / self.max_batch_size
        return max(1.0, min(60.0, batches_ahead * self._ewma_batch_s))

    async def _await(
        self, items: list[_Item], deadline: float | None, timings: SubmitTimings | None
    ) -> list[PageResult]:
        futures = [it.future for it in items]
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = await asyncio.wait(
                futures, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            for fut in done:
                if (error := fut.exception()) is not None:
                    raise error
            if pending:
                if self.metrics:
                    self.metrics.reject("deadline_exceeded")
                raise DeadlineExceeded("the request deadline passed before its pages were parsed")
        finally:
            self._withdraw(items)
        if timings is not None:
            first_start = min(it.started for it in items if it.started is not None)
            last_end = max(it.finished for it in items if it.finished is not None)
            timings.queue_s = first_start - items[0].enqueued
            timings.inference_s = last_end - first_start
        return [f.result() for f in futures]

    def _withdraw(self, items: list[_Item]) -> None:
        """Drop the request's pages that are still queued (cancelled, failed, timed out)."""
        mine = {id(it) for it in items if not it.future.done()}
        for it in items:
            if not it.future.done():
                it.future.cancel()
            elif not it.future.cancelled():
                it.future.exception()  # mark retrieved: one failure is reported once
        if mine:
            self._queue = [it for it in self._queue if id(it) not in mine]
            self._set_queue_gauge()

    def _set_queue_gauge(self) -> None:
        if self.metrics:
            self.metrics.queue_pages.set(len(self._queue))
            self.metrics.queue_pixels.set(self.queued_pixels)

    # -- worker --------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            batch = await self._next_batch()
            if batch:
                await self._execute(batch)

    async def _next_batch(self) -> list[_Item]:
        """Wait until a batch is due, then take it out of the queue."""
        while True:
            self._drop_dead()
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            head = min(self._queue, key=lambda it: static_order(it.priority, it.enqueued))
            batch_line = is_batch(head.priority)  # batch lines share a call only with their own
            same = [
                it
                for it in self._queue
                if it.key == head.key and is_batch(it.priority) == batch_line
            ]
            limit = 1 if head.on_delta is not None else self.max_batch_size
            due_in = head.enqueued + self.max_wait_s - time.monotonic()
            if len(same) >= limit or due_in <= 0:
                batch = same[:limit]
                taken = {id(it) for it in batch}
                self._queue = [it for it in self._queue if id(it) not in taken]
                self._set_queue_gauge()
                return batch
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), due_in)

    def _drop_dead(self) -> None:
        """Remove cancelled pages and fail pages whose deadline passed while queued."""
        now = time.monotonic()
        alive = []
        for it in self._queue:
            if it.future.done():
                continue
            if it.deadline is not None and now >= it.deadline:
                it.future.set_exception(DeadlineExceeded("deadline passed while queued"))
                continue
            alive.append(it)
        if len(alive) != len(self._queue):
            self._queue = alive
            self._set_queue_gauge()

    def _infer(
        self, pages: Sequence[PageImage], options: ParseOptions, on_delta: DeltaCallback | None
    ) -> list[PageResult | GpuOutOfMemory]:
        """On the engine thread: the engine, then the coverage audit of its pages. A page
        that does not fit in GPU memory even alone gets its error in place of a result."""
        results: list[PageResult | GpuOutOfMemory]
        if on_delta is not None:
            stream = self.engine.stream_page
            results = [self._call_engine(lambda: stream(pages[0], options, on_delta), options)]
        else:
            results = self._infer_splitting(pages, options)
        served = [(p, r) for p, r in zip(pages, results, strict=False) if isinstance(r, PageResult)]
        if self.audit and served and len(results) == len(pages):
            audit_results(self.engine, [p for p, _ in served], [r for _, r in served], options)
        return results

    def _infer_splitting(
        self, pages: Sequence[PageImage], options: ParseOptions
    ) -> list[PageResult | GpuOutOfMemory]:
        """A batch that runs out of GPU memory is split in halves and retried (after the
        engine returns its cached memory), down to single pages: only a page that does
        not fit alone fails (``GpuOutOfMemory``), its batch-mates are served."""
        try:
            return [*self._call_engine(lambda: self.engine.infer_batch(pages, options), options)]
        except GpuOutOfMemory as exc:
            if len(pages) == 1:
                return [exc]
            mid = len(pages) // 2
            return [
                *self._infer_splitting(pages[:mid], options),
                *self._infer_splitting(pages[mid:], options),
            ]

    def _call_engine(self, call: Callable[[], T], options: ParseOptions) -> T:
        try:
            return call()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            if self.metrics:
                self.metrics.gpu_oom.inc()
            log.warning("GPU out of memory; returning cached memory and retrying smaller")
            self.engine.release_cached_memory()
            raise GpuOutOfMemory(
                f"the page does not fit in GPU memory at tier {options.tier}; "
                "retry with a lower tier"
            ) from None

    async def _execute(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        pages = [it.page for it in batch]
        options = batch[0].options
        start = time.monotonic()
        for it in batch:
            it.started = start
        if self.metrics:
            self.metrics.batch_size.observe(len(batch))
        self._running = batch
        self._busy_since = start
        try:
            infer, on_delta = self._infer, batch[0].on_delta
            results = await loop.run_in_executor(self._executor, infer, pages, options, on_delta)
            if len(results) != len(batch):
                raise EngineFailure(f"engine returned {len(results)} results for {len(batch)}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the engine's failure is each waiting request's failure
            if not isinstance(exc, DocParserError):
                log.exception("engine %s failed on a batch of %d", self.engine.name, len(batch))
                exc = EngineFailure(f"engine {self.engine.name} failed: {type(exc).__name__}")
            for it in batch:
                if not it.future.done():
                    it.future.set_exception(exc)
            return
        finally:
            self._running = []
            self._busy_since = None
        end = time.monotonic()
        self._ewma_batch_s = 0.8 * self._ewma_batch_s + 0.2 * (end - start)
        for it, result in zip(batch, results, strict=True):
            it.finished = end
            if not isinstance(result, GpuOutOfMemory):
                self.wait.observe(page_tier(it.page, it.options), end - start)
            if it.future.done():
                continue
            if isinstance(result, GpuOutOfMemory):
                it.future.set_exception(result)
            else:
                it.future.set_result(result)
