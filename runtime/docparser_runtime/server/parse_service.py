"""The parse use case: bytes + options -> the reply body of ``/v1/document/parse``.

One place that decodes a document (on a thread pool), sends its pages through the
micro-batcher, accounts the outstanding work and stage timings in metrics, and assembles
the reply. The parse route, jobs, the cache and the OpenAI-compatible route all call
``ParseService.parse`` so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from docparser_runtime.engines.base import Engine, PageImage, PageResult
from docparser_runtime.errors import DeadlineExceeded, DocParserError, InvalidInput, Overloaded
from docparser_runtime.server.batcher import MicroBatcher, SubmitTimings
from docparser_runtime.server.metrics import Metrics
from docparser_runtime.server.request_input import ParseRequest
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.parse")

# Between pages in ``content``; the convention of DeepSeek-OCR's own tooling.
PAGE_SEPARATOR = "\n\n<--- Page Split --->\n\n"

# (data, tier, pages) -> decoded pages; blocking, runs on the preprocessing pool.
DocumentLoader = Callable[[bytes, int, str | None], list[PageImage]]
# Called on the event loop as each page finishes, with ``PageResult.to_dict()``.
PageCallback = Callable[[dict], None]
# Called on the event loop with (page index, text delta) while a page generates.
PageDeltaCallback = Callable[[int, str], None]


def default_loader(settings: Settings) -> DocumentLoader:
    """The production loader: ``preprocess.pipeline.load_document`` with settings' limits."""
    from docparser_runtime.preprocess.pipeline import DecodeLimits, load_document

    limits = DecodeLimits(
        max_pixels=settings.max_image_pixels,
        max_pages=settings.max_pages,
        pdf_dpi=settings.pdf_dpi,
    )

    def load(data: bytes, tier: int, pages: str | None) -> list[PageImage]:
        return load_document(data, tier=tier, pages=pages, limits=limits)

    return load


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
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.batcher = batcher
        self.metrics = metrics
        self._loader = loader
        workers = preprocess_workers or max(1, min(4, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preprocess")
        self._decoding = 0  # documents handed to the decode pool and not back yet

    @property
    def loader(self) -> DocumentLoader:
        if self._loader is None:
            self._loader = default_loader(self.settings)
        return self._loader

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def parse(
        self,
        request: ParseRequest,
        *,
        on_page: PageCallback | None = None,
        on_delta: PageDeltaCallback | None = None,
        deadline: float | None = None,
    ) -> dict:
        """Parse one document. ``deadline`` (``time.monotonic()``) defaults to
        now + ``request_timeout_s``. With ``on_delta`` pages are generated one at a time
        through ``engine.stream_page`` (streaming), otherwise batched."""
        m = self.metrics
        t0 = time.monotonic()
        if deadline is None:
            deadline = t0 + self.settings.request_timeout_s
        m.outstanding_requests.inc()
        try:
            pages = await self._preprocess(request, deadline)
            t1 = time.monotonic()
            tokens = sum(p.vision_tokens for p in pages)
            m.outstanding_pages.inc(len(pages))
            m.outstanding_vision_tokens.inc(tokens)
            try:
                timings = SubmitTimings()
                if on_delta is not None:
                    results = await self._stream(
                        pages, request, on_page, on_delta, deadline, timings
                    )
                else:
                    results = await self._batch(pages, request, on_page, deadline, timings)
            finally:
                m.outstanding_pages.dec(len(pages))
                m.outstanding_vision_tokens.dec(tokens)
        finally:
            m.outstanding_requests.dec()
        t2 = time.monotonic()
        m.observe_stage("preprocess", t1 - t0)
        m.observe_stage("queue", timings.queue_s)
        audit_s = sum(r.audit_s for r in results)
        m.observe_stage("inference", timings.inference_s - audit_s)
        m.observe_stage("audit", audit_s)
        m.observe_stage("total", t2 - t0)
        output_tokens = sum(r.output_tokens for r in results)
        m.pages.inc(len(results))
        m.vision_tokens.inc(tokens)
        m.output_tokens.inc(output_tokens)
        self._count_warnings(results)
        return self._reply(results, tokens, output_tokens, t0, t1, t2, timings)

    async def _preprocess(self, request: ParseRequest, deadline: float) -> list[PageImage]:
        # Documents waiting for the decode pool hold their upload in memory: bound them
        # like the page queue, so a burst of large uploads gets 429s instead of an OOM.
        if self._decoding >= self.settings.max_queue_pages:
            self.metrics.rejected.labels(code="overloaded").inc()
            raise Overloaded(
                f"{self._decoding} documents are being decoded; retry shortly",
                retry_after_s=1.0,
            )
        loop = asyncio.get_running_loop()
        call = (self._load, request.data, request.options.tier, request.pages)
        self._decoding += 1
        try:
            pages = await asyncio.wait_for(
                loop.run_in_executor(self._pool, *call), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            raise DeadlineExceeded("the deadline passed while decoding the document") from None
        finally:
            self._decoding -= 1
        if not pages:
            raise InvalidInput("the document has no pages to parse", code="no_pages")
        return pages

    def _load(self, data: bytes, tier: int, pages: str | None) -> list[PageImage]:
        try:
            return self.loader(data, tier, pages)
        except DocParserError:
            raise
        except Exception as exc:
            # A decoder error the preprocessing layer did not classify is still the
            # input's fault (the bytes would not decode), never a server error.
            log.warning("unclassified decode failure: %s", exc, exc_info=True)
            raise InvalidInput(
                f"the document could not be decoded ({type(exc).__name__})",
                code="undecodable_document",
            ) from None

    async def _batch(self, pages, request, on_page, deadline, timings) -> list[PageResult]:
        on_result = None if on_page is None else (lambda r: on_page(r.to_dict()))
        return await self.batcher.submit(
            pages, request.options, deadline=deadline, timings=timings, on_result=on_result
        )

    async def _stream(
        self,
        pages: Sequence[PageImage],
        request: ParseRequest,
        on_page: PageCallback | None,
        on_delta: PageDeltaCallback,
        deadline: float,
        timings: SubmitTimings,
    ) -> list[PageResult]:
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        results = []
        try:
            for page in pages:

                def delta(text: str, index: int = page.index) -> bool:
                    loop.call_soon_threadsafe(on_delta, index, text)
                    return stop.is_set()

                one = SubmitTimings()
                result = await self.batcher.submit_stream(
                    page, request.options, delta, deadline=deadline, timings=one
                )
                timings.queue_s += one.queue_s
                timings.inference_s += one.inference_s
                results.append(result)
                if on_page is not None:
                    on_page(result.to_dict())
        finally:
            stop.set()  # the client went away or failed: stop generating
        return results

    def _count_warnings(self, results: Sequence[PageResult]) -> None:
        engine = self.engine.name
        for r in results:
            for warning in r.warnings:
                self.metrics.audit_warnings.labels(engine=engine, code=warning.code).inc()
            if r.warnings or r.truncated:
                self.metrics.incomplete_pages.labels(engine=engine).inc()

    def _reply(self, results, tokens, output_tokens, t0, t1, t2, timings) -> dict:
        audit_s = sum(r.audit_s for r in results)
        warnings = sum(len(r.warnings) for r in results)
        return {
            "id": f"parse-{uuid.uuid4().hex}",
            "model": {"engine": self.engine.name, "version": self.engine.version},
            "content": PAGE_SEPARATOR.join(r.content for r in results),
            "pages": [r.to_dict() for r in results],
            "vision_tokens": tokens,
            "complete": warnings == 0 and not any(r.truncated for r in results),
            "warnings": warnings,
            "usage": {
                "vision_tokens": tokens,
                "output_tokens": output_tokens,
                "pages": len(results),
            },
            "timings_ms": {
                "queue": round(timings.queue_s * 1000, 2),
                "preprocess": round((t1 - t0) * 1000, 2),
                "inference": round((timings.inference_s - audit_s) * 1000, 2),
                "audit": round(audit_s * 1000, 2),
                "total": round((t2 - t0) * 1000, 2),
            },
            "cached": False,
        }
