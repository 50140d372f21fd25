"""A stable pod's side of the shadow: sample answered requests, mirror them to the canary
after the client has its answer, compare the two replies and record the figures.

``offer`` is called on the event loop once a reply is final (the sync parse and chat routes run
it as the response's background task, so after the body is sent; streams after their last
event; jobs once their result is in). It never waits and never touches the reply: it decides (shadow
on for this pod's revision, not a cache hit, the percentage, the internal credential, room
in the bounded queue, the page budget, room in the host memory budget) and either queues a
copy or counts a drop. ``shadow_max_in_flight`` workers send the copies; nothing a client
waits on ever waits on them.

A copy holds the document's bytes and references to stable's page texts until the canary has
answered and the pages are compared; those bytes (and then the canary's reply) are charged
to the host memory budget admission uses (``host_memory.MemoryBudget``), and never more than
``MEMORY_SHARE`` of it, so live pages always keep the rest. Over that, the copy is dropped
(``busy``), as it is when the queue is full or the canary answers 429/503/504 or times out.

The mirror request carries the internal credential (``X-Docparser-Internal-Token``), never
the client's API key, and goes to the canary's ``/internal/v1/shadow/parse``, which neither
caches, nor creates a job, nor counts against a key's quota. Nothing here logs a document or
its text: only counts and exception class names.

The canary says which revision answered (``REVISION_HEADER``), and a reply from another
revision is not compared (``revision``): the canary Service can still reach the pods of the
release before (a rolled-back canary in its preStop window, which the Service keeps while no
new pod is Ready, or a node's rules not yet rewritten), and their text counted against the new
revision failed an identical release once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from docparser_runtime.result_cache import DocumentRequest
from docparser_runtime.server.front.wire import options_query
from docparser_runtime.server.guards.internal_auth import INTERNAL_TOKEN_HEADER, SecretFile
from docparser_runtime.server.shadow.compare import (
    PageComparison,
    PageDigest,
    compare_pages,
    digest_reply,
    reply_seconds,
)
from docparser_runtime.server.shadow.config import ConfigWatcher, ShadowConfig
from docparser_runtime.server.shadow.metrics import ShadowMetrics
from docparser_runtime.server.shadow.sampler import PageBudget, sampled
from docparser_runtime.server.shadow.worst import WorstStore
from docparser_runtime.settings import Settings
from docparser_runtime.sizing.host_memory import MemoryBudget

log = logging.getLogger("docparser.shadow")

MIRROR_PATH = "/internal/v1/shadow/parse"
REVISION_HEADER = "X-Docparser-Revision"  # on the mirror's reply: the answering pod's revision
MEMORY_SHARE = 0.25  # of the host memory budget copies may hold at most
MAX_REPLY_BYTES = 32 * 2**20
PAGE_OVERHEAD_BYTES = 512  # a digest's objects besides its text
_BUSY = frozenset({429, 503, 504})
_CREDENTIAL = frozenset({401, 403, 404})


def mirror_params(request: DocumentRequest) -> dict[str, str]:
    """The request's options as query parameters of a raw-bytes body: the canary reads
    the same document with the same options (the front's forward does the same)."""
    return options_query(request.options, request.pages)


@dataclass
class _Copy:
    config: ShadowConfig
    data: bytes
    params: dict[str, str]
    stable: list[PageDigest]
    stable_seconds: float
    held: int  # bytes charged to the memory budget


def _compare(raw: bytes, stable: list[PageDigest]) -> tuple[list[PageComparison], float]:
    reply = json.loads(raw)
    if not isinstance(reply, dict):
        raise ValueError("the canary's reply is not a JSON object")
    return compare_pages(stable, digest_reply(reply)), reply_seconds(reply)


class ShadowMirror:
    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        token: SecretFile | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        self.settings = settings
        self.revision = settings.revision
        self.metrics = ShadowMetrics(registry)
        self.worst = WorstStore()
        self.budget = PageBudget()
        self.memory = memory
        self.token = token or SecretFile(settings.internal_token_file, "internal token")
        self.watcher = ConfigWatcher(settings.shadow_config_file, self._on_change)
        self._limit = settings.shadow_max_in_flight + settings.shadow_queue
        self._pending = 0  # copies queued or in flight
        self._queue: asyncio.Queue[_Copy] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.watcher.refresh()

    # -- config ------------------------------------------------------------------------
    def _on_change(self, old: ShadowConfig, new: ShadowConfig) -> None:
        on = new.mirrors(self.revision)
        if not on or new.canary_revision != old.canary_revision:
            self.worst.clear(new)  # kept pages belong to the canary they came from
        if on:
            self.metrics.export_pair(new)
            self.budget.set_rate(new.max_pages_per_minute)

    @property
    def config(self) -> ShadowConfig:
        return self.watcher.current

    @property
    def active(self) -> bool:
        return self.config.mirrors(self.revision)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.shadow_poll_s)
            try:
                self.watcher.refresh()
            except Exception as exc:  # a poll must never die: the next one retries
                log.warning("shadow config check failed (%s)", type(exc).__name__)

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.settings.shadow_max_in_flight)
        )
        self._tasks = [asyncio.create_task(self._poll(), name="shadow-config")]
        for n in range(self.settings.shadow_max_in_flight):
            self._tasks.append(asyncio.create_task(self._work(), name=f"shadow-{n}"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        queue, self._queue = self._queue, None
        while queue is not None and not queue.empty():
            self._release(queue.get_nowait().held)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the hot path: on the event loop, never waits ---------------------------------
    def offer(self, request: DocumentRequest, reply: dict[str, Any]) -> None:
        """Maybe mirror one answered request (see module docstring)."""
        config = self.config
        if not config.mirrors(self.revision) or self._queue is None or reply.get("cached"):
            return
        pages = reply.get("pages") or []
        if not pages or not sampled(config.percent):
            return
        if self.token.value() is None:
            self.metrics.drop(config, "credential")
            return
        if self._pending >= self._limit:
            self.metrics.drop(config, "busy")
            return
        if not self.budget.take(len(pages)):
            self.metrics.drop(config, "budget")
            return
        stable = digest_reply(reply)
        held = len(request.data) + sum(
            sys.getsizeof(p.content) + PAGE_OVERHEAD_BYTES for p in stable
        )
        if self.memory is None or not self.memory.try_reserve(held, share=MEMORY_SHARE):
            self.budget.give_back(len(pages))
            self.metrics.drop(config, "busy")
            return
        self._pending += 1
        self._queue.put_nowait(
            _Copy(config, request.data, mirror_params(request), stable, reply_seconds(reply), held)
        )

    # -- workers -----------------------------------------------------------------------
    def _release(self, held: int) -> None:
        if self.memory is not None and held:
            self.memory.release(held)

    async def _work(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            copy = await queue.get()
            try:
                await self._mirror(copy)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("shadow comparison failed (%s)", type(exc).__name__)
                self.metrics.drop(copy.config, "error")
            finally:
                self._pending -= 1
                self._release(copy.held)

    async def _mirror(self, copy: _Copy) -> None:
        config = copy.config
        if self.config != config:
            return  # the canary or the shadow changed while this copy waited: not for it
        token = self.token.value()
        if token is None:
            self.metrics.drop(config, "credential")
            return
        raw = await self._send(copy, token)
        if raw is None:
            return
        extra = 2 * len(raw)  # the reply and what is parsed from it, until compared
        if self.memory is None or not self.memory.try_reserve(extra, share=MEMORY_SHARE):
            self.metrics.drop(config, "busy")
            return
        try:
            pages, canary_s = await asyncio.to_thread(_compare, raw, copy.stable)
        finally:
            self.memory.release(extra)
        ratio = None
        if copy.stable_seconds > 0 and canary_s > 0:
            ratio = canary_s / copy.stable_seconds
        self.metrics.record(config, pages, ratio)
        if self.config == config:
            self.worst.offer(pages, ratio)

    async def _send(self, copy: _Copy, token: str) -> bytes | None:
        """The canary's reply body, or None (the drop counted)."""
        assert self._session is not None
        config = copy.config
        self.metrics.mirrored_pages.labels(**config.labels).inc(len(copy.stable))
        timeout = aiohttp.ClientTimeout(total=self.settings.shadow_timeout_s)
        headers = {INTERNAL_TOKEN_HEADER: token, "content-type": "application/octet-stream"}
        try:
            async with self._session.post(
                config.target + MIRROR_PATH,
                data=copy.data,
                params=copy.params,
                headers=headers,
                timeout=timeout,
            ) as resp:
                if resp.status != 200:
                    reason = (
                        "busy"
                        if resp.status in _BUSY
                        else "credential"
                        if resp.status in _CREDENTIAL
                        else "error"
                    )
                    self.metrics.drop(config, reason)
                    return None
                answered_by = resp.headers.get(REVISION_HEADER, "")
                if answered_by and config.canary_revision not in ("", answered_by):
                    self.metrics.drop(config, "revision")  # not the release being judged
                    return None
                return await _read_limited(resp, MAX_REPLY_BYTES)
        except TimeoutError:
            self.metrics.drop(config, "busy")
        except (aiohttp.ClientError, ValueError) as exc:
            log.debug("shadow mirror failed (%s)", type(exc).__name__)
            self.metrics.drop(config, "error")
        return None


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    if resp.content_length is not None and resp.content_length > limit:
        raise ValueError("the canary's reply is too large")
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise ValueError("the canary's reply is too large")
        chunks.append(chunk)
    return b"".join(chunks)
