"""Continuous (iteration-level) batching: pages join and leave the running batch per step.

Why: with static micro-batches a page waits for the longest page of its batch and for the
batch before it, and decode slots idle once short pages end (OCR outputs span ~100 to
3,000+ tokens). Here, as in vLLM's scheduler and TGI, every iteration:

1. takes out of the running batch the pages whose request is gone (client left, request
   cancelled) or whose deadline passed (``DeadlineExceeded``);
2. admits waiting pages while a slot (``max_batch_size``) is free and the cache budget
   holds (``engine.kv_budget_tokens()``, the worst case of the batch if every page runs to
   its ``max_new_tokens``: ``stepping.projected_peak_tokens``), so the scheduler stops
   admitting instead of running out of memory. Order: priority (``Priority``), then arrival;
   a page waiting ``priority_max_wait_s`` counts as interactive (no starvation). The head
   of that order is never skipped for a smaller page behind it (a large page would starve).
   Batch lines (``Priority.BATCH``) take only slots nobody else wants: a batch page joins
   only while no other page runs or waits, one per iteration (its prefill, the vision
   encoder, holds every running page's next token and a page arriving meanwhile: ~40
   decode steps of the tiny model on CPU). How running batch pages give way to others is
   ``batch_yield.py``'s: they park (``rows``, CPU) or give a slot back (``slots``, CUDA);
3. on the engine thread: prefills the admitted pages into the batch, runs one decode step
   for all pages, finishes the pages that ended (EOS, their own ``max_new_tokens``, their
   stream's client gone) with the coverage audit.

Any options share one batch (tiers, modes, ``max_new_tokens``), and streams are pages like
the others. An out-of-memory error that still happens evicts the newest half of the batch
(their tokens kept; they resume by recomputing their cache when admitted again), lowers the
budget to what failed, and counts ``docparser_evicted_pages``; a page that does not fit
alone fails with ``GpuOutOfMemory``. Queue bounds, 429/413 and withdrawal are the
``MicroBatcher``'s. Engines that cannot step (rapidocr) keep the static micro-batcher.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from docparser_runtime.engines.base import Engine, PageResult, ParseOptions
from docparser_runtime.engines.coverage import audit_results
from docparser_runtime.engines.stepping import (
    PageRun,
    RunningBatch,
    SteppingEngine,
    projected_peak_tokens,
)
from docparser_runtime.errors import DeadlineExceeded, DocParserError, EngineFailure, GpuOutOfMemory
from docparser_runtime.server.inference.batch_yield import (
    MAX_PREFILL_PAGES,
    BatchYield,
    _runs,
    resolve_batch_yield,
)
from docparser_runtime.server.inference.batcher import MicroBatcher
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.inference.queued import _Item, is_out_of_memory
from docparser_runtime.server.inference.tiers import page_tier
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.continuous")


@dataclass
class _Outcome:
    """What one iteration on the engine thread did, for the loop to settle."""

    finished: list[tuple[PageRun, PageResult]] = field(default_factory=list)
    failed: list[tuple[PageRun, BaseException]] = field(default_factory=list)
    evicted: list[PageRun] = field(default_factory=list)
    stepped: int = 0  # pages in the decode step (0: none ran)


class ContinuousBatcher(BatchYield, MicroBatcher):
    """``MicroBatcher``'s interface (``submit``, ``submit_stream``, ``close``) over a
    stepping engine's running batch."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_batch_size: int,
        max_queue_pages: int,
        max_queue_pixels: int = 0,
        metrics: Metrics | None = None,
        audit: bool = True,
        priority_max_wait_s: float = 30.0,
        batch_yield: str = "auto",
    ) -> None:
        if not isinstance(engine, SteppingEngine):
            raise TypeError(f"engine {engine.name} cannot step: use MicroBatcher")
        super().__init__(
            engine,
            max_batch_size=max_batch_size,
            max_wait_ms=0.0,
            max_queue_pages=max_queue_pages,
            max_queue_pixels=max_queue_pixels,
            metrics=metrics,
            audit=audit,
        )
        self.stepper: SteppingEngine = engine
        self.priority_max_wait_s = priority_max_wait_s
        self.budget_tokens = engine.kv_budget_tokens()
        self._batch: RunningBatch | None = None
        self._items: dict[int, _Item] = {}  # id(run) -> its queue item, while admitted
        self.steps = 0  # decode steps run, and pages summed over them (slot occupancy)
        self.slot_steps = 0
        self.preempted = 0  # batch pages that gave their slot back to a waiting page
        self.batch_yield = resolve_batch_yield(batch_yield, getattr(engine, "device", None))
        self._parked: set[int] = set()
        if metrics:
            metrics.cache_budget_tokens.set(self.budget_tokens)

    # -- worker ----------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._drop_dead()
            if not self._queue and not self._running:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            leaving = self._sweep()
            moves = self._step_aside()
            leaving += self._preempt()
            joining = self._admit()
            self._busy_since = time.monotonic()
            try:
                outcome = await loop.run_in_executor(
                    self._executor, self._iterate, joining, leaving, *moves
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the batch is lost: every page in it fails
                self._fail_all(exc)
                continue
            finally:
                self._busy_since = None
            self._settle(outcome)

    def _rank(self, item: _Item, now: float) -> tuple[int, float]:
        if item.priority >= Priority.BATCH:  # never aged above interactive work
            return (item.priority, item.enqueued)
        aged = now - item.enqueued >= self.priority_max_wait_s
        return (Priority.INTERACTIVE if aged else item.priority, item.enqueued)

    def _sweep(self) -> list[PageRun]:
        """Running pages nobody waits for any more, or past their deadline."""
        now = time.monotonic()
        gone = []
        for item in self._running:
            if not item.future.done() and item.deadline is not None and now >= item.deadline:
                item.future.set_exception(DeadlineExceeded("deadline passed while generating"))
                if self.metrics:
                    self.metrics.reject("deadline_exceeded")
            if item.future.done():
                gone.append(item)
        for item in gone:
            self._forget(item)
        return _runs(gone)

    def _admit(self) -> list[PageRun]:
        free = self.free_slots()
        if free <= 0 or not self._queue:
            return []
        now = time.monotonic()
        rows = [(run.length, run.remaining) for run in _runs(self._running)]
        others = any(it.priority < Priority.BATCH for it in self._running)
        chosen: list[_Item] = []
        for item in sorted(self._queue, key=lambda it: self._rank(it, now)):
            if len(chosen) >= min(free, MAX_PREFILL_PAGES):
                break
            if item.priority >= Priority.BATCH and (others or chosen):
                break  # a batch prefill would hold the others' next token; one at a time
            others = others or item.priority < Priority.BATCH
            if item.run is None:
                item.run = self.stepper.new_run(item.page, item.options, item.on_delta)
            run: PageRun = item.run
            row = (run.length + 1, run.remaining)
            alone = not rows
            if not alone and projected_peak_tokens([*rows, row]) > self.budget_tokens:
                break  # the head waits for room; nobody overtakes it
            rows.append(row)
            chosen.append(item)
        taken = {id(it) for it in chosen}
        self._queue = [it for it in self._queue if id(it) not in taken]
        self._set_queue_gauge()
        for item in chosen:
            item.started = item.started or now
            self._running.append(item)
            self._items[id(item.run)] = item
        return _runs(chosen)

    def _forget(self, item: _Item) -> None:
        self._running = [it for it in self._running if it is not item]
        self._parked.discard(id(item))
        self._items.pop(id(item.run), None)

    # -- engine thread ---------------------------------------------------------------
    def _iterate(
        self,
        joining: list[PageRun],
        leaving: list[PageRun],
        parking: Sequence[PageRun] = (),
        resuming: Sequence[PageRun] = (),
    ) -> _Outcome:
        if self._batch is None:
            self._batch = self.stepper.new_batch()
        batch, out = self._batch, _Outcome()
        batch.leave(leaving)
        if parking:
            batch.park(parking)
        if resuming:
            batch.resume(resuming)
        if joining:
            self._join(batch, joining, out)
        if batch.runs:
            try:
                batch.step()
                out.stepped = len(batch.runs)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                self._out_of_memory(batch, out)
        ended = [run for run in batch.runs if self.stepper.run_done(run)]
        batch.leave(ended)
        results = [self.stepper.finish_run(run) for run in ended]
        self._audit(ended, results)
        out.finished = list(zip(ended, results, strict=True))
        if self.metrics:
            self.metrics.cache_tokens.set(batch.padded_tokens)
        return out

    def _join(self, batch: RunningBatch, joining: list[PageRun], out: _Outcome) -> None:
        try:
            batch.join(joining)
        except Exception as exc:
            if is_out_of_memory(exc):
                self._out_of_memory(batch, out, joining=joining)
            elif len(joining) == 1:
                out.failed.append((joining[0], exc))
            else:  # find the page that failed; the others join
                for run in joining:
                    self._join(batch, [run], out)

    def _out_of_memory(
        self, batch: RunningBatch, out: _Outcome, joining: list[PageRun] | None = None
    ) -> None:
        """Give cached memory back, put the newest pages back in the queue and lower the
        budget to what did not fit; a page alone that does not fit fails."""
        if self.metrics:
            self.metrics.gpu_oom.inc()
        held = batch.padded_tokens
        self.stepper.release_cached_memory()
        if joining is None:
            running = list(batch.runs)
            victims = running[len(running) - max(1, len(running) // 2) :]
            batch.leave(victims)
        else:
            victims = joining
        if held:
            self.budget_tokens = min(self.budget_tokens, int(held * 0.9))
        log.warning("GPU out of memory with %d pages running: %d back in the queue, "
                    "cache budget now %d tokens", len(batch.runs) + len(victims), len(victims),
                    self.budget_tokens)  # fmt: skip
        if not batch.runs and len(victims) == 1:
            tier = victims[0].options.tier
            msg = f"the page does not fit in GPU memory at tier {tier}; retry with a lower tier"
            out.failed.append((victims[0], GpuOutOfMemory(msg)))
            return
        out.evicted.extend(victims)

    def _audit(self, runs: list[PageRun], results: list[PageResult]) -> None:
        if not self.audit or not runs:
            return
        groups: dict[ParseOptions, list[int]] = defaultdict(list)
        for i, run in enumerate(runs):
            groups[run.options].append(i)
        for options, rows in groups.items():
            pages = [runs[i].page for i in rows]
            audit_results(self.engine, pages, [results[i] for i in rows], options)

    # -- back on the loop --------------------------------------------------------------
    def _settle(self, outcome: _Outcome) -> None:
        now = time.monotonic()
        if outcome.stepped:
            self.steps += 1
            self.slot_steps += outcome.stepped
        for run, result in outcome.finished:
            self._resolve(run, now, result=result)
        for run, exc in outcome.failed:
            self._resolve(run, now, error=_as_failure(exc, self.engine.name))
        for run in outcome.evicted:
            item = self._items.get(id(run))
            if item is None:
                continue
            self._forget(item)
            self._queue.insert(0, item)
        m = self.metrics
        if m:
            if outcome.stepped:
                m.decode_steps.inc()
                m.decode_slot_steps.inc(outcome.stepped)
            m.evicted_pages.inc(len(outcome.evicted))
            m.running_pages.set(len(self._running) - len(self._parked))
            m.cache_budget_tokens.set(self.budget_tokens)
            self._set_queue_gauge()

    def _resolve(
        self,
        run: PageRun,
        now: float,
        *,
        result: PageResult | None = None,
        error: BaseException | None = None,
    ) -> None:
        item = self._items.get(id(run))
        if item is None:
            return
        self._forget(item)
        item.finished = now
        if item.started is not None:
            self._ewma_batch_s = 0.8 * self._ewma_batch_s + 0.2 * (now - item.started)
            if result is not None:
                self.wait.observe(page_tier(item.page, item.options), now - item.started)
        if item.future.done():
            return
        if error is not None:
            item.future.set_exception(error)
        elif result is not None:
            item.future.set_result(result)

    def _fail_all(self, exc: Exception) -> None:
        log.exception("engine %s failed on the running batch", self.engine.name)
        failure = _as_failure(exc, self.engine.name)
        for item in self._running:
            if not item.future.done():
                item.future.set_exception(failure)
        self._running, self._items, self._batch = [], {}, None
        self._parked.clear()

    def occupancy(self) -> float:
        """Busy decode slots over all slots of the steps run so far."""
        return self.slot_steps / (self.steps * self.max_batch_size) if self.steps else 0.0


def _as_failure(exc: BaseException, engine: str) -> BaseException:
    if isinstance(exc, DocParserError):
        return exc
    return EngineFailure(f"engine {engine} failed: {type(exc).__name__}")


def make_batcher(engine: Engine, settings: Settings, metrics: Metrics) -> MicroBatcher:
    """Continuous batching for an engine that can step (deepseek-ocr2), unless switched
    off; static micro-batches otherwise (rapidocr gains nothing from stepping: each page
    is one call of its own models, there is no decode loop to share)."""
    if settings.continuous_batching and isinstance(engine, SteppingEngine):
        return ContinuousBatcher(
            engine,
            max_batch_size=settings.max_batch_size,
            max_queue_pages=settings.max_queue_pages,
            max_queue_pixels=settings.max_queue_pixels,
            metrics=metrics,
            audit=settings.coverage_audit,
            priority_max_wait_s=settings.priority_max_wait_s,
            batch_yield=settings.batch_yield,
        )
    return MicroBatcher(
        engine,
        max_batch_size=settings.max_batch_size,
        max_wait_ms=settings.max_wait_ms,
        max_queue_pages=settings.max_queue_pages,
        max_queue_pixels=settings.max_queue_pixels,
        metrics=metrics,
        audit=settings.coverage_audit,
    )
