"""The parse use case: bytes + options -> the reply body of ``/v1/document/parse``.

One place that decodes a document (in the sandboxed decoder pool, page by page with a
bounded look-ahead: ``server/inference/document_loader.py``), sends its pages through the
micro-batcher, accounts the outstanding work and stage timings in metrics, and assembles the
reply. The parse route, jobs, the cache and the OpenAI-compatible route all call
``ParseService.parse`` so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial

from docparser_runtime.engines.base import Engine, PageImage, PageResult, ParseOptions
from docparser_runtime.errors import InvalidInput, Overloaded
from docparser_runtime.preprocess.sandbox import release_memory
from docparser_runtime.result_cache import PageCallback, PageDeltaCallback, TotalCallback
from docparser_runtime.server.endpoints.parse.timings import ParseTimings
from docparser_runtime.server.inference.batcher import MicroBatcher
from docparser_runtime.server.inference.document_loader import (
    DocumentLoader,
    OpenDocument,
    create_decoder,
)
from docparser_runtime.server.inference.queued import SubmitTimings
from docparser_runtime.server.inference.tiers import resolved, submit_by_tier, tag
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.server.ops.tracing import Tracing
from docparser_runtime.server.protocol import ModelRef, ParseReply, ParseRequest, StageTimings
from docparser_runtime.settings import Settings
from docparser_runtime.sizing.host_memory import (
    HostBudget,
    MemoryBudget,
    engine_page,
    settings_budget,
)

log = logging.getLogger("docparser.parse")

# A parsed page and its visual tokens.
Served = tuple[PageResult, int]
_OVERLOAD_POLL_S = 0.2
_TRIM_AFTER_PIXELS = 16_000_000


class ParseService:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        batcher: MicroBatcher,
        metrics: Metrics,
        *,
        loader: DocumentLoader | None = None,
        preprocess_workers: int | None = None,
        tracing: Tracing | None = None,
        host_budget: HostBudget | None = None,
    ) -> None:
        self.settings = settings
        self.tracing = tracing or Tracing()
        self.engine = engine
        self.batcher = batcher
        self.metrics = metrics
        workers = preprocess_workers or max(1, min(4, os.cpu_count() or 1))
        restarts = metrics.decoder_restarts
        self.memory = MemoryBudget(host_budget or settings_budget(settings, engine.name))
        self.decoder = create_decoder(
            settings, loader, workers=workers, on_replace=lambda r: restarts.labels(reason=r).inc(),
            budget=self.memory.budget, page=engine_page(engine.name),
        )  # fmt: skip
        self.decoder.start()
        self._decoding = 0  # documents being opened (their upload held, pages unknown)

    def close(self) -> None:
        self.decoder.close()

    async def parse(
        self,
        request: ParseRequest,
        *,
        on_page: PageCallback | None = None,
        on_delta: PageDeltaCallback | None = None,
        deadline: float | None = None,
        on_total: TotalCallback | None = None,
    ) -> ParseReply:
        """Parse one document. ``deadline`` (``time.monotonic()``) defaults to now +
        ``sync_deadline_s`` (the request timeout, within the drain window). Pages are
        decoded as the pipeline needs them, at most ``decode_lookahead`` ahead of inference.
        With ``on_delta`` pages are generated one at a time and streamed (in the running
        batch with continuous batching, else alone through ``engine.stream_page``),
        otherwise batched."""
        with self.tracing.span(
            "docparser.parse", tier=request.options.tier, mode=request.options.mode
        ) as span:
            reply = await self._parse(request, on_page, on_delta, deadline, on_total)
            span.set_attributes(
                {
                    "docparser.pages": len(reply.pages),
                    "docparser.vision_tokens": reply.vision_tokens,
                    "docparser.output_tokens": reply.usage.output_tokens,
                    **{f"docparser.{k}_ms": v for k, v in reply.timings_ms.model_dump().items()},
                }
            )
            return reply

    async def _parse(
        self,
        request: ParseRequest,
        on_page: PageCallback | None,
        on_delta: PageDeltaCallback | None,
        deadline: float | None,
        on_total: TotalCallback | None,
    ) -> ParseReply:
        m = self.metrics
        t0 = time.monotonic()
        if deadline is None:
            deadline = t0 + self.settings.sync_deadline_s
        timings = ParseTimings()
        m.outstanding_requests.inc()
        try:
            with self.tracing.span("docparser.decode", bytes=len(request.data)):
                doc = await self._open(request, deadline, timings)
            if on_total is not None:
                on_total(doc.page_count)
            # Every page of the plan is outstanding work for the autoscaler, decoded yet or
            # not; each page leaves the gauge when its engine call ends (``_outstanding``).
            m.pages_planned(doc.page_count)
            timings.planned = doc.page_count
            if on_delta is not None:
                streamed = self._timing_first_token(on_delta, t0)
                done = await self._stream(doc, request, on_page, streamed, deadline, timings)
            else:
                done = await self._batch(doc, request, on_page, deadline, timings)
        finally:
            self.memory.release(sum(timings.held.values()))  # pages that never reached the engine
            m.pages_settled(timings.planned - timings.settled)
            m.outstanding_requests.dec()
            if timings.pixels >= _TRIM_AFTER_PIXELS:
                # Large pages leave freed heap in glibc's arenas: hand it back to the OS
                # so one big document does not keep the replica's RSS up for good.
                await asyncio.to_thread(release_memory)
        results = [r for r, _ in done]
        tokens = sum(t for _, t in done)
        t2 = time.monotonic()
        audit_s = sum(r.audit_s for r in results)
        m.observe_stage("preprocess", timings.preprocess_s)
        m.observe_stage("queue", timings.queue_s or 0.0)
        m.observe_stage("inference", timings.inference_s - audit_s)
        m.observe_stage("audit", audit_s)
        m.observe_stage("total", t2 - t0)
        output_tokens = sum(r.output_tokens for r in results)
        m.count_parsed(pages=len(results), vision_tokens=tokens, output_tokens=output_tokens)
        for r in results:
            tier = request.options.tier if r.tier is None else r.tier
            m.count_tier(tier=tier, auto=request.options.auto, vision_tokens=r.vision_tokens)
        self._count_outcomes(results)
        return self._reply(results, tokens, t0, t2, timings)

    async def _open(
        self, request: ParseRequest, deadline: float, timings: ParseTimings
    ) -> OpenDocument:
        # Documents being opened hold their upload in memory: bound them like the page
        # queue, so a burst of large uploads gets 429s instead of an OOM.
        if self._decoding >= self.settings.max_queue_pages:
            self.metrics.reject("overloaded")
            raise Overloaded(
                f"{self._decoding} documents are being decoded; retry shortly",
                retry_after_s=1.0,
            )
        self._decoding += 1
        started = time.monotonic()
        try:
            doc = await self.decoder.open(
                request.data,
                request.options.tier,
                request.pages,
                deadline,
                auto=request.options.auto,
            )
        finally:
            self._decoding -= 1
            timings.preprocess_s += time.monotonic() - started
        if doc.page_count == 0:
            raise InvalidInput("the document has no pages to parse", code="no_pages")
        self.memory.check_plan(doc.plan)  # a page that could never fit: refused before decoding
        return doc

    async def _decode(
        self, doc: OpenDocument, position: int, deadline: float, timings: ParseTimings
    ) -> PageImage:
        """One page; its decode and the page are charged to the host memory budget first."""
        decode, page_bytes = await self.memory.reserve_page(doc.plan, position, deadline)
        timings.held[doc.plan.indices[position]] = page_bytes  # back in _outstanding or parse
        started = time.monotonic()
        try:
            page = await self.decoder.page(doc, position, deadline)
        finally:
            timings.preprocess_s += time.monotonic() - started
            self.memory.release(decode)  # the decoder's memory is back, whatever happened
        timings.pixels += page.width * page.height
        return page

    @contextlib.contextmanager
    def _outstanding(self, pages: list[PageImage], timings: ParseTimings) -> Iterator[None]:
        """Decoded pages on their way through the engine: their visual tokens are
        outstanding work (pages are counted from the plan on, in ``parse``)."""
        m = self.metrics
        tokens = sum(p.vision_tokens for p in pages)
        m.outstanding_vision_tokens.inc(tokens)
        try:
            yield
        finally:
            m.pages_settled(len(pages))
            timings.settled += len(pages)
            m.outstanding_vision_tokens.dec(tokens)
            self.memory.release(sum(timings.held.pop(p.index, 0) for p in pages))

    async def _decode_chunk(
        self, doc: OpenDocument, positions: range, deadline: float, timings: ParseTimings
    ) -> list[PageImage]:
        tasks = [asyncio.ensure_future(self._decode(doc, p, deadline, timings)) for p in positions]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _batch(
        self,
        doc: OpenDocument,
        request: ParseRequest,
        on_page: PageCallback | None,
        deadline: float,
        timings: ParseTimings,
    ) -> list[Served]:
        """Pages go to the batcher in chunks of ``decode_lookahead`` (so a document's pages
        still share engine batches); the next chunk decodes while this one is inferred, so
        at most two chunks of decoded pages exist per request."""
        on_result = None if on_page is None else (lambda r: on_page(r.to_dict()))
        size = self.settings.decode_lookahead
        chunks = [range(i, min(i + size, doc.page_count)) for i in range(0, doc.page_count, size)]
        done: list[Served] = []
        upcoming = asyncio.ensure_future(self._decode_chunk(doc, chunks[0], deadline, timings))
        try:
            for number in range(len(chunks)):
                pages = await upcoming
                if number + 1 < len(chunks):
                    upcoming = asyncio.ensure_future(
                        self._decode_chunk(doc, chunks[number + 1], deadline, timings)
                    )
                with self._outstanding(pages, timings):
                    submit = partial(self._submit, request=request, deadline=deadline,
                                     timings=timings, first=number == 0)  # fmt: skip
                    results = await submit_by_tier(pages, request.options, on_result, submit)
                done.extend((r, p.vision_tokens) for r, p in zip(results, pages, strict=True))
                del pages, results  # decoded pixels go as soon as their chunk is parsed
        finally:
            upcoming.cancel()
            await asyncio.gather(upcoming, return_exceptions=True)
        return done

    async def _submit(
        self,
        pages: list[PageImage],
        options: ParseOptions,
        on_result: Callable[[PageResult], None] | None,
        *,
        request: ParseRequest,
        deadline: float,
        timings: ParseTimings,
        first: bool,
    ) -> list[PageResult]:
        """One tier's pages of a chunk (``tiers.submit_by_tier`` groups them)."""
        while True:
            sub, submitted = SubmitTimings(), time.monotonic()
            try:
                results = await self.batcher.submit(
                    pages,
                    options,
                    deadline=deadline,
                    timings=sub,
                    on_result=on_result,
                    priority=request.priority,
                )
            except Overloaded:
                # The first chunk answers 429 at once; later chunks of an admitted document
                # wait for room instead of wasting the work already done.
                if first or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(_OVERLOAD_POLL_S)
                continue
            timings.add(submitted, sub)
            return results

    async def _stream(
        self,
        doc: OpenDocument,
        request: ParseRequest,
        on_page: PageCallback | None,
        on_delta: PageDeltaCallback,
        deadline: float,
        timings: ParseTimings,
    ) -> list[Served]:
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        results: list[Served] = []
        try:
            for position in range(doc.page_count):
                page = await self._decode(doc, position, deadline, timings)

                def delta(text: str, index: int = page.index) -> bool:
                    loop.call_soon_threadsafe(on_delta, index, text)
                    return stop.is_set()

                sub, submitted = SubmitTimings(), time.monotonic()
                tier, options = resolved(page, request.options)
                with self._outstanding([page], timings):
                    result = await self.batcher.submit_stream(
                        page,
                        options,
                        delta,
                        deadline=deadline,
                        timings=sub,
                        priority=request.priority,
                    )
                tag(result, tier)
                timings.add(submitted, sub)
                results.append((result, page.vision_tokens))
                if on_page is not None:
                    on_page(result.to_dict())
        finally:
            stop.set()  # the client went away or failed: stop generating
        return results

    def _timing_first_token(self, on_delta: PageDeltaCallback, t0: float) -> PageDeltaCallback:
        """``on_delta`` that observes the time to the request's first streamed text once."""
        first = True

        def timed(index: int, text: str) -> None:
            nonlocal first
            if first:
                first = False
                self.metrics.observe_first_token(time.monotonic() - t0)
            on_delta(index, text)

        return timed

    def _count_outcomes(self, results: Sequence[PageResult]) -> None:
        engine = self.engine.name
        for r in results:
            for warning in r.warnings:
                self.metrics.audit_warnings.labels(engine=engine, code=warning.code).inc()
            if r.warnings or r.truncated:
                self.metrics.incomplete_pages.labels(engine=engine).inc()
        self.metrics.count_page_outcomes(
            truncated=sum(r.truncated for r in results),
            empty=sum(not r.content.strip() for r in results),
            repetition=sum(r.repetition_trips > 0 for r in results),
        )

    def _reply(
        self, results: list[PageResult], tokens: int, t0: float, t2: float, timings: ParseTimings
    ) -> ParseReply:
        audit_s = sum(r.audit_s for r in results)
        stages = StageTimings(
            queue=round((timings.queue_s or 0.0) * 1000, 2),
            preprocess=round(timings.preprocess_s * 1000, 2),
            inference=round((timings.inference_s - audit_s) * 1000, 2),
            audit=round(audit_s * 1000, 2),
            total=round((t2 - t0) * 1000, 2),
        )
        engine = ModelRef(engine=self.engine.name, version=self.engine.version)
        return ParseReply.of(results, engine=engine, vision_tokens=tokens, timings_ms=stages)
