"""Host memory: what a runtime pod needs, and the budget its admission hands out.

WHY one module: the operator sizes a runtime pod's memory limit and the runtime admits
work inside that limit; if the two used different numbers, a pod the operator sized
"right" would still be OOM-killed (or refuse work it could do). Both sides use the
numbers below (the operator keeps a copy, ``docparser_operator`` may not import the
runtime; ``tests/operator/core/plan/test_sizing.py`` checks that they are equal):

    pod limit = base(engine) + decoders * DECODER_BYTES + work
    base      = SERVER_BYTES[engine] (the process with its engine loaded, at rest)
    work      = what admission hands out: decodes in flight (each charged its full-size
                decode before it starts), decoded pages waiting or being inferred
                (PAGE_BYTES_PER_PIXEL each) and the engine's working set on the page it
                runs (ENGINE_BYTES_PER_PIXEL[engine] x its page size, one page at a time)

and the runtime, given the limit its cgroup sets (``cgroup_memory.host_memory_limit``),
solves the same equation for ``work`` after keeping HEADROOM of the limit free (allocator
slack, sockets). Request bodies being read and parsed are work too: each is charged
``body_bytes_per_byte`` per byte before it is read (server/guards/body_memory.py). The
figures were measured as PSS over the process tree (docs/benchmarks.md, "Host memory").
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from docparser_runtime.errors import DeadlineExceeded, Overloaded, PayloadTooLarge
from docparser_runtime.preprocess.page_size import PAGE_BYTES_PER_PIXEL, PageSize
from docparser_runtime.preprocess.pipeline import DocumentPlan
from docparser_runtime.settings import Settings
from docparser_runtime.sizing.cgroup_memory import MemoryLimit, host_memory_limit

MIB = 2**20
GIB = 2**30

# PSS of a ready server process at rest, engine loaded (deepseek-ocr2: its host side after
# the weights went to the GPU; the load itself reads them through the page cache).
SERVER_BYTES = {"rapidocr": 650 * MIB, "deepseek-ocr2": 1536 * MIB}
DECODER_BYTES = 70 * MIB  # one idle sandboxed decoder process (Python, Pillow, PDFium)
HEADROOM = 0.10  # of the limit, never handed out
# The size each engine really uses; no page is decoded larger. RapidOCR shrinks every
# input to 2000 px on its longest side (the wheel's Global.max_side_len); DeepSeek-OCR-2's
# processor resizes to a canvas of at most 6 tiles of 768 px (plus the 1024 px global
# view): twice that area keeps the tiling plan of the page as sent.
ENGINE_PAGE = {
    "rapidocr": PageSize(max_side=2000),
    "deepseek-ocr2": PageSize(max_pixels=2 * 6 * 768 * 768),
}
# The engine's own working set per pixel of the page it runs (rapidocr: the detector's
# float tensors and feature maps, crops, grey copies; deepseek-ocr2: the processor's
# tensors on the host), one page at a time.
ENGINE_BYTES_PER_PIXEL = {"rapidocr": 100, "deepseek-ocr2": 16}
DEFAULT_ENGINE = "rapidocr"  # the figures used for an engine not listed (test engines)
DEFAULT_WORK_BYTES = GIB  # what the operator sizes a pod's admission for
DECODER_ADDRESS_BYTES = 256 * MIB  # address space an idle decoder maps (Python, Pillow, PDFium)
MIN_DECODER_ADDRESS_BYTES = 512 * MIB
MIN_WORK_BYTES = 64 * MIB  # below this no page could be admitted: a configuration error
MAX_DECODE_PIXELS = 1_000_000_000  # never more, whatever the memory (Pillow, decode time)
# Host memory one byte of request body costs while it is read and parsed. A raw or a
# multipart body: its chunks, then their join (a multipart file part spools to a temporary
# file: memory too, on a tmpfs), 2x. A JSON body with a base64 document: the chunks and
# their join, the decoded JSON string, a data URL's tail and its whitespace-free copy, and
# the decoded bytes (3/4): 4.75x at its peak, so 5x.
RAW_BODY_BYTES_PER_BYTE = 2
JSON_BODY_BYTES_PER_BYTE = 5
FRONT_SERVER_BYTES = 200 * MIB  # the CPU front's process at rest: no engine, no decoders


def engine_page(engine: str) -> PageSize:
    return ENGINE_PAGE.get(engine, ENGINE_PAGE[DEFAULT_ENGINE])


def engine_page_pixels(engine: str) -> int:
    """Pixels of the engine's largest page."""
    page = engine_page(engine)
    return page.max_pixels or page.max_side * page.max_side


def engine_work_bytes(engine: str) -> int:
    """The engine's working set on its largest page (reserved, never handed out)."""
    per_pixel = ENGINE_BYTES_PER_PIXEL.get(engine, ENGINE_BYTES_PER_PIXEL[DEFAULT_ENGINE])
    return engine_page_pixels(engine) * per_pixel


def server_bytes(engine: str) -> int:
    return SERVER_BYTES.get(engine, SERVER_BYTES[DEFAULT_ENGINE])


def pod_memory_bytes(engine: str, decoders: int, work_bytes: int) -> int:
    """The memory limit a pod needs to give ``work_bytes`` to admission (the operator's
    side of the equation)."""
    need = server_bytes(engine) + decoders * DECODER_BYTES + engine_work_bytes(engine)
    return math.ceil((need + work_bytes) / (1 - HEADROOM))


@dataclass(frozen=True)
class HostBudget:
    """What a server under ``limit`` may hand out to admission (``work_bytes``)."""

    limit: MemoryLimit
    reserved_bytes: int  # server, decoders, the engine's working set, headroom
    work_bytes: int

    def describe(self) -> str:
        return (
            f"{self.work_bytes / MIB:.0f} MiB for decoding and pages of the host memory limit "
            f"{self.limit.describe()}"
        )

    def decoder_address_space(self, decoders: int, configured: int) -> int:
        """RLIMIT_AS of one sandboxed decoder: its share of the budget on top of what an idle
        one maps (DECODER_ADDRESS_BYTES), never more than ``configured``; all decoders at
        their limit (a hostile PDF in each) then stay inside the pod's limit, and the worker,
        not the kernel's OOM killer, says no (422 naming the limit)."""
        share = self.work_bytes // max(1, decoders)
        return max(MIN_DECODER_ADDRESS_BYTES, min(configured, DECODER_ADDRESS_BYTES + share))

    def max_decode_pixels(self) -> int:
        """The header's pixel limit: the largest image whose full-size decode could fit the
        budget (1 byte a pixel: greyscale); the budget then checks each decode's bytes for
        its real mode. At most MAX_DECODE_PIXELS."""
        return max(1, min(MAX_DECODE_PIXELS, self.work_bytes))


def plan_budget(limit: MemoryLimit, engine: str, decoders: int) -> HostBudget:
    """The budget a server running ``engine`` with ``decoders`` sandboxed decoders has
    under ``limit``; ``work_bytes`` is at least MIN_WORK_BYTES (a smaller limit is the
    operator's mistake, and refusing every page would hide it: the log says so)."""
    reserved = (
        int(limit.bytes * HEADROOM)
        + server_bytes(engine)
        + decoders * DECODER_BYTES
        + engine_work_bytes(engine)
    )
    return HostBudget(limit, reserved, max(MIN_WORK_BYTES, limit.bytes - reserved))


def budget_for(limit_bytes: int, engine: str, decoders: int) -> HostBudget:
    """The budget of a server whose settings say ``limit_bytes`` (0: its cgroup's limit,
    else the machine's RAM)."""
    limit = MemoryLimit(limit_bytes, "DOCPARSER_MEMORY_LIMIT_BYTES") if limit_bytes else None
    return plan_budget(limit or host_memory_limit(), engine, decoders)


def settings_budget(settings: Settings, engine: str) -> HostBudget:
    """``budget_for`` with the settings' limit override and decoder count."""
    return budget_for(settings.memory_limit_bytes, engine, settings.decode_workers)


def front_budget(settings: Settings) -> HostBudget:
    """The CPU front's budget (role front): what its limit leaves after HEADROOM and its
    own process; request bodies are all it charges (it decodes no page)."""
    limit_bytes = settings.memory_limit_bytes
    limit = MemoryLimit(limit_bytes, "DOCPARSER_MEMORY_LIMIT_BYTES") if limit_bytes else None
    limit = limit or host_memory_limit()
    reserved = int(limit.bytes * HEADROOM) + FRONT_SERVER_BYTES
    return HostBudget(limit, reserved, max(MIN_WORK_BYTES, limit.bytes - reserved))


def body_bytes_per_byte(content_type: str) -> int:
    """What one byte of a body of ``content_type`` costs while read and parsed."""
    media = content_type.split(";")[0].strip().lower()
    json = media == "application/json" or media.endswith("+json")
    return JSON_BODY_BYTES_PER_BYTE if json else RAW_BODY_BYTES_PER_BYTE


class MemoryBudget:
    """Bytes of host memory handed to requests, on the event loop (not thread-safe).

    ``reserve`` either grants at once, waits for releases (up to the deadline or
    ``wait_s``) or refuses: a need larger than the whole budget is ``PayloadTooLarge``
    (413) at once, naming the limit, before any memory is spent; a budget that stays busy
    is ``Overloaded`` (429). Smaller needs may pass a waiting larger one: normal pages keep
    flowing while a huge one waits for room.
    """

    def __init__(self, budget: HostBudget, *, wait_s: float = 30.0) -> None:
        self.budget = budget
        self.total = budget.work_bytes
        self.used = 0
        self.peak = 0
        self.wait_s = wait_s
        self._changed = asyncio.Event()

    def check(self, need: int, what: str) -> None:
        """Refuse now what could never fit (413 naming the limit)."""
        if need > self.total:
            raise PayloadTooLarge(
                f"{what} needs {need / MIB:.0f} MiB of host memory to decode and parse, above "
                f"this server's {self.budget.describe()}; send it smaller (fewer pixels, a "
                f"lower PDF resolution) or raise the pod's memory limit",
                code="host_memory_limit",
            )

    def check_plan(self, plan: DocumentPlan) -> None:
        """Refuse now a document with a page that could never fit, before any is decoded."""
        for index, (decode, pixels) in zip(plan.indices, plan.costs, strict=False):
            what = f"page {index + 1}" if plan.fmt == "pdf" else "the image"
            self.check(decode + pixels * PAGE_BYTES_PER_PIXEL, what)

    async def reserve_page(
        self, plan: DocumentPlan, position: int, deadline: float
    ) -> tuple[int, int]:
        """Charge the decode of page ``position`` and the page it yields: ``(decode bytes,
        page bytes)``; release the first when the page is back, the second when it is done
        (nothing is charged for a plan without costs: pages a test loader decoded)."""
        if not plan.costs:
            return 0, 0
        decode, pixels = plan.costs[position]
        page = pixels * PAGE_BYTES_PER_PIXEL
        await self.reserve(decode + page, f"page {plan.indices[position] + 1}", deadline)
        return decode, page

    async def reserve(self, need: int, what: str, deadline: float) -> int:
        """Take ``need`` bytes (returned, for ``release``); waits while others hold them."""
        self.check(need, what)
        give_up = min(deadline, time.monotonic() + self.wait_s)
        while self.used + need > self.total:
            left = give_up - time.monotonic()
            if left <= 0:
                if time.monotonic() >= deadline:
                    raise DeadlineExceeded("the deadline passed while waiting for host memory")
                raise Overloaded(
                    f"host memory budget busy ({self.used / MIB:.0f} of {self.total / MIB:.0f} "
                    f"MiB held by other documents); {what} needs {need / MIB:.0f} MiB",
                    retry_after_s=2.0,
                    code="host_memory_busy",
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                continue
        self.used += need
        self.peak = max(self.peak, self.used)
        return need

    def try_reserve(self, need: int, *, share: float = 1.0) -> bool:
        """Take ``need`` bytes now or not at all, and only while the budget's use stays
        within ``share`` of it: for work nobody waits on (the shadow canary's copies), which
        must never keep a live page waiting."""
        if self.used + need > self.total * share:
            return False
        self.used += need
        self.peak = max(self.peak, self.used)
        return True

    def release(self, held: int) -> None:
        """Give back bytes from ``reserve`` (or part of them, when a page shrank)."""
        self.used = max(0, self.used - held)
        self._changed.set()
