"""Where a parse gets its pages from: the sandboxed decoder pool, or (development and
tests) the server process itself.

WHY an interface with ``open`` + ``page``: a PDF is rendered page by page as the
pipeline needs it (``ParseService`` keeps a bounded look-ahead), never all selected pages
up front, so a 200-page document of huge pages costs a few pages of memory, not 48 GB.
``open`` only sniffs the format and reads the page tree; the deadline of every call is the
request's, so a decode never outlives the request that asked for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, TypeVarTuple

from PIL import Image

from docparser_runtime.engines.base import PageImage
from docparser_runtime.errors import DeadlineExceeded, DocParserError, InvalidInput
from docparser_runtime.preprocess.page_size import PageSize
from docparser_runtime.preprocess.pipeline import (
    DecodeLimits,
    DocumentPlan,
    plan_document,
    render_page,
    to_page_image,
    validate_tier,
)
from docparser_runtime.preprocess.sandbox import DecodePool, SandboxLimits
from docparser_runtime.settings import Settings
from docparser_runtime.sizing.host_memory import HostBudget

# (data, tier, pages) -> decoded pages; blocking. The test hook that replaces decoding.
DocumentLoader = Callable[[bytes, int, str | None], list[PageImage]]
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@dataclass
class OpenDocument:
    """A document whose pages are known but not yet decoded."""

    data: bytes
    tier: int
    plan: DocumentPlan
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    decoded: list[PageImage] | None = None  # a test loader's pages, decoded at open
    auto: bool = False  # ``tier`` is the cap; each page gets the selector's tier

    @property
    def page_count(self) -> int:
        return len(self.plan.indices)


class Decoder(Protocol):
    """What ``ParseService`` asks of a decoder: open a document, then decode its pages."""

    async def open(
        self, data: bytes, tier: int, pages: str | None, deadline: float, *, auto: bool = False
    ) -> OpenDocument: ...
    async def page(self, doc: OpenDocument, position: int, deadline: float) -> PageImage: ...
    def start(self) -> None: ...
    async def wait_started(self) -> None: ...
    def close(self) -> None: ...


async def planned(doc: OpenDocument, index: int, image: Image.Image) -> PageImage:
    """The decoded page with its tiling plan. ``auto`` runs the tier selector (numpy, a few
    ms) on a worker thread, so the event loop never waits on it."""
    if doc.auto:
        return await asyncio.to_thread(to_page_image, index, image, doc.tier, auto=True)
    return to_page_image(index, image, doc.tier)


def _classified(exc: Exception) -> DocParserError:
    """A decoder error the preprocessing layer did not classify is still the input's
    fault (the bytes would not decode), never a server error."""
    if isinstance(exc, DocParserError):
        return exc
    return InvalidInput(
        f"the document could not be decoded ({type(exc).__name__})", code="undecodable_document"
    )


class _ThreadDecoding:
    """Shared by the in-process decoders: blocking calls on a small thread pool."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preprocess")

    async def _run(self, deadline: float, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool, fn, *args), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            raise DeadlineExceeded("the deadline passed while decoding the document") from None
        except DocParserError:
            raise
        except Exception as exc:
            raise _classified(exc) from None

    def start(self) -> None:
        """Nothing to start: threads are created on demand."""

    async def wait_started(self) -> None:
        """Always ready."""

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class InProcessDecoder(_ThreadDecoding):
    """``decode_workers = 0``: no sandbox (a hostile PDF can stall or exhaust the server)."""

    def __init__(self, limits: DecodeLimits, workers: int) -> None:
        super().__init__(workers)
        self.limits = limits

    async def open(
        self, data: bytes, tier: int, pages: str | None, deadline: float, *, auto: bool = False
    ) -> OpenDocument:
        validate_tier(tier)
        plan = await self._run(deadline, plan_document, data, pages, self.limits)
        return OpenDocument(data, tier, plan, auto=auto)

    async def page(self, doc: OpenDocument, position: int, deadline: float) -> PageImage:
        index = doc.plan.indices[position]
        image = await self._run(deadline, render_page, doc.data, doc.plan.fmt, index, self.limits)
        return await planned(doc, index, image)


class LoaderDecoder(_ThreadDecoding):
    """Adapts a ``DocumentLoader`` (tests replace decoding with it): decodes at open."""

    def __init__(self, loader: DocumentLoader, workers: int) -> None:
        super().__init__(workers)
        self.loader = loader

    async def open(
        self, data: bytes, tier: int, pages: str | None, deadline: float, *, auto: bool = False
    ) -> OpenDocument:
        decoded = await self._run(deadline, self.loader, data, tier, pages)
        plan = DocumentPlan("preloaded", tuple(p.index for p in decoded))
        return OpenDocument(data, tier, plan, decoded=list(decoded), auto=auto)

    async def page(self, doc: OpenDocument, position: int, deadline: float) -> PageImage:
        assert doc.decoded is not None
        page = doc.decoded[position]
        return await planned(doc, page.index, page.image) if doc.auto else page


class SandboxDecoder:
    """The production decoder: every page decoded in a limited worker process."""

    def __init__(self, limits: DecodeLimits, pool: DecodePool) -> None:
        self.limits = limits
        self.pool = pool

    async def open(
        self, data: bytes, tier: int, pages: str | None, deadline: float, *, auto: bool = False
    ) -> OpenDocument:
        validate_tier(tier)
        doc = OpenDocument(data, tier, DocumentPlan("", ()), auto=auto)
        doc.plan = await self.pool.plan(doc.token, data, pages, self.limits, deadline)
        return doc

    async def page(self, doc: OpenDocument, position: int, deadline: float) -> PageImage:
        index = doc.plan.indices[position]
        image = await self.pool.render(
            doc.token, doc.data, doc.plan.fmt, index, self.limits, deadline
        )
        return await planned(doc, index, image)

    def start(self) -> None:
        """Spawn the workers now."""
        self.pool.start()

    async def wait_started(self) -> None:
        """Until a worker has finished its imports (the app is not ready before)."""
        await self.pool.wait_started()

    def close(self) -> None:
        self.pool.close()


def create_decoder(
    settings: Settings,
    loader: DocumentLoader | None = None,
    *,
    workers: int = 2,
    on_replace: Callable[[str], None] | None = None,
    budget: HostBudget | None = None,
    page: PageSize | None = None,
) -> Decoder:
    """The decoder the settings ask for (``loader`` wins: it is the tests' hook);
    ``on_replace(reason)`` hears of every sandboxed decoder killed and replaced;
    ``budget`` (the host memory budget) sets the header's pixel limit when the settings leave
    it unset and each sandboxed decoder's address space (at most the settings'); ``page`` is
    the engine's size: no page is decoded larger."""
    max_pixels = None if budget is None else budget.max_decode_pixels()
    limits = DecodeLimits.from_settings(settings, max_pixels=max_pixels, page=page)
    if loader is not None:
        return LoaderDecoder(loader, workers)
    if settings.decode_workers <= 0:
        return InProcessDecoder(limits, workers)
    sandbox = SandboxLimits(
        timeout_s=settings.decode_timeout_s,
        cpu_s=settings.decode_cpu_s,
        memory_bytes=settings.decode_memory_bytes
        if budget is None
        else budget.decoder_address_space(settings.decode_workers, settings.decode_memory_bytes),
    )
    return SandboxDecoder(limits, DecodePool(settings.decode_workers, sandbox, on_replace))
