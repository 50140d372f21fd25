"""Result cache: the same document with the same options on the same model is parsed once.

Users re-send the same scans (retries, re-runs of a batch, the same letterhead); a GPU
minute saved per hit is the point. The key is the sha256 of the input bytes plus
everything that changes the output: options, page range, PDF render DPI, engine name,
model version and the pinned weights digest, so a new model never serves stale results
(``tier: auto`` adds the cap and the selector's version: a new rule re-parses);
and the caller's API key id, so one tenant never learns (or receives) what another parsed
(``DOCPARSER_CACHE_SHARED`` shares it deliberately). A request can opt out (``cache: false``).

Two backends behind one small async interface: an in-memory LRU bounded in bytes (one
replica) and Redis (``SET ... EX ttl``, JSON values) shared by all replicas. The cache
is advisory: a Redis outage turns into misses, never into failed requests.

``CachedParseService`` wraps ``ParseService`` with the same ``parse`` signature, so the
parse route, jobs, streaming and the OpenAI route all share it; a hit replays the pages
to ``on_page``/``on_delta`` callbacks, so streaming clients see the same event shapes.

WHY a ``Parser`` protocol rather than ``ParseService`` itself: the cache sits below the
server (import-linter layers), so it names what it needs from the service it wraps (the
``parse`` signature, the engine's identity, the stage clock), what it reads from a
request (``CacheableRequest``) and what it does with a reply (``CacheableReply``: store it,
load it, replay its pages, answer it as a hit), and mypy checks ``ParseService`` and the
server's ``ParseReply`` against them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from docparser_runtime.preprocess.tier_select import SELECTOR_VERSION
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.cache")

KEY_SPACE = "result:v1:"  # under DOCPARSER_REDIS_PREFIX

# Called on the event loop as each page finishes, with ``PageResult.to_dict()``.
PageCallback = Callable[[dict[str, Any]], None]
# Called on the event loop with (page index, text delta) while a page generates.
PageDeltaCallback = Callable[[int, str], None]
# Called once with the number of pages the parse will produce (job progress).
TotalCallback = Callable[[int], None]


class KeyedOptions(Protocol):
    """The options that change a parse's output (``engines.base.ParseOptions``)."""

    @property
    def tier(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def max_new_tokens(self) -> int: ...
    @property
    def auto(self) -> bool: ...


class DocumentRequest(Protocol):
    """A document and the options that shape its answer (``ParseRequest``): what a forward or
    a shadow copy sends again."""

    @property
    def data(self) -> bytes: ...
    @property
    def options(self) -> KeyedOptions: ...
    @property
    def pages(self) -> str | None: ...


class CacheableRequest(DocumentRequest, Protocol):
    """What the key is made of: the document, its options and whose cache it is."""

    @property
    def tenant(self) -> str: ...
    @property
    def cache(self) -> bool: ...


class EngineIdentity(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


class StageClock(Protocol):
    def observe_stage(self, stage: str, seconds: float) -> None: ...


class CacheableReply(Protocol):
    """What the cache does with a reply (the server's ``protocol.ParseReply``)."""

    def page_events(self) -> list[dict[str, Any]]:
        """The pages as ``on_page`` gets them."""
        ...

    def cache_bytes(self) -> bytes: ...

    def replayed(self, total_ms: float) -> Self:
        """The reply as a hit answers it: a new id, marked cached, only the total time."""
        ...


RequestT = TypeVar("RequestT", bound=CacheableRequest, contravariant=True)
ReplyT = TypeVar("ReplyT", bound=CacheableReply, covariant=True)
ReplyV = TypeVar("ReplyV", bound=CacheableReply)  # invariant: the cache also loads it


class Parser(Protocol[RequestT, ReplyT]):
    """The parse use case the cache wraps (``ParseService``), and offers in turn."""

    @property
    def engine(self) -> EngineIdentity: ...
    @property
    def metrics(self) -> StageClock: ...

    async def parse(
        self,
        request: RequestT,
        *,
        on_page: PageCallback | None = None,
        on_delta: PageDeltaCallback | None = None,
        deadline: float | None = None,
        on_total: TotalCallback | None = None,
    ) -> ReplyT: ...

    def close(self) -> None: ...


def cache_key(request: CacheableRequest, *, engine: str, version: str, settings: Settings) -> str:
    """Key of one parse: input digest + every input of the output (see module doc)."""
    opts = request.options
    material = {
        "input": hashlib.sha256(request.data).hexdigest(),
        "tier": opts.tier,
        "mode": opts.mode,
        "max_new_tokens": opts.max_new_tokens,
        "pages": request.pages,
        "pdf_dpi": settings.pdf_dpi,
        "engine": engine,
        "version": version,
        "weights": settings.weights_sha256,
        # Jobs are private per API key and so are their results: one key's cache never
        # answers another's request unless the deployment shares it on purpose.
        "tenant": "" if settings.cache_shared else request.tenant,
    }
    if opts.auto:  # per-page tiers come from the selector: its version decides them
        material.update(tier="auto", max_tier=opts.tier, selector=SELECTOR_VERSION)
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return settings.redis_prefix + KEY_SPACE + hashlib.sha256(canonical.encode()).hexdigest()


class ResultCache(Protocol):
    async def get(self, key: str) -> bytes | None: ...
    async def set(self, key: str, value: bytes) -> None: ...
    async def close(self) -> None: ...


class CacheMetrics:
    """Hit/miss counters on the app's own registry (``docparser_cache_*``)."""

    def __init__(self, registry: CollectorRegistry, backend: str) -> None:
        self.hits = Counter("docparser_cache_hits", "Result cache hits.", registry=registry)
        self.misses = Counter("docparser_cache_misses", "Result cache misses.", registry=registry)
        self.bypassed = Counter(
            "docparser_cache_bypassed", "Requests that opted out (cache: false).", registry=registry
        )
        self.errors = Counter(
            "docparser_cache_errors",
            "Cache backend failures (treated as misses).",
            registry=registry,
        )
        self.bytes = Gauge(
            "docparser_cache_bytes", "Bytes held by the in-memory result cache.", registry=registry
        )
        self.backend = backend


class MemoryCache:
    """LRU over JSON bytes, bounded by total bytes, entries expiring after ``ttl_s``."""

    def __init__(
        self, *, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.used_bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    async def get(self, key: str) -> bytes | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            expires, value = item
            if self._clock() >= expires:
                self._drop(key)
                return None
            self._items.move_to_end(key)
            return value

    async def set(self, key: str, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return  # larger than the whole budget: caching it would evict everything
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (self._clock() + self.ttl_s, value)
            self.used_bytes += len(value)
            while self.used_bytes > self.max_bytes:
                self._drop(next(iter(self._items)))

    def _drop(self, key: str) -> None:
        _expires, value = self._items.pop(key)
        self.used_bytes -= len(value)

    async def close(self) -> None:
        with self._lock:
            self._items.clear()
            self.used_bytes = 0


class RedisCache:
    """Shared cache in Redis: ``SET key json EX ttl``; values above ``max_bytes`` skipped."""

    def __init__(self, url: str, *, ttl_s: int, max_bytes: int) -> None:
        import redis.asyncio as aioredis

        self._client = aioredis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes

    async def get(self, key: str) -> bytes | None:
        value = await self._client.get(key)  # bytes (no decode_responses); typed bytes | str
        return value.encode() if isinstance(value, str) else value

    async def set(self, key: str, value: bytes) -> None:
        if len(value) <= self.max_bytes:
            await self._client.set(key, value, ex=self.ttl_s)  # SETEX semantics

    async def close(self) -> None:
        await self._client.aclose()


def create_cache(settings: Settings) -> ResultCache | None:
    """Redis when ``redis_url`` is set, else memory; ``cache_max_bytes=0`` disables."""
    if settings.cache_max_bytes <= 0:
        return None
    if settings.redis_url:
        return RedisCache(
            settings.redis_url, ttl_s=settings.cache_ttl_s, max_bytes=settings.cache_max_bytes
        )
    return MemoryCache(max_bytes=settings.cache_max_bytes, ttl_s=settings.cache_ttl_s)


class CachedParseService(Generic[RequestT, ReplyV]):
    """``ParseService`` with a result cache in front; everything else is delegated.
    ``load`` turns stored bytes back into a reply (``ParseReply.from_cache``)."""

    def __init__(
        self,
        inner: Parser[RequestT, ReplyV],
        cache: ResultCache,
        settings: Settings,
        registry: CollectorRegistry,
        load: Callable[[bytes], ReplyV],
    ) -> None:
        self._inner = inner
        self._cache = cache
        self._settings = settings
        self._load = load
        backend = "redis" if isinstance(cache, RedisCache) else "memory"
        self.cache_metrics = CacheMetrics(registry, backend)
        self._close_task: asyncio.Task[None] | None = None

    @property
    def engine(self) -> EngineIdentity:
        return self._inner.engine

    @property
    def metrics(self) -> StageClock:
        return self._inner.metrics

    def key_for(self, request: RequestT) -> str:
        engine = self._inner.engine
        return cache_key(
            request, engine=engine.name, version=engine.version, settings=self._settings
        )

    async def parse(
        self,
        request: RequestT,
        *,
        on_page: PageCallback | None = None,
        on_delta: PageDeltaCallback | None = None,
        deadline: float | None = None,
        on_total: TotalCallback | None = None,
    ) -> ReplyV:
        if not request.cache:  # the caller asked for a fresh parse
            self.cache_metrics.bypassed.inc()
            return await self._inner.parse(
                request, on_page=on_page, on_delta=on_delta, deadline=deadline, on_total=on_total
            )
        t0 = time.monotonic()
        key = self.key_for(request)
        stored = await self._lookup(key)
        if stored is not None:
            self.cache_metrics.hits.inc()
            pages = stored.page_events()
            if on_total is not None:
                on_total(len(pages))
            for page in pages:
                if on_delta is not None:
                    on_delta(page["index"], page["content"])
                if on_page is not None:
                    on_page(page)
            body = stored.replayed(round((time.monotonic() - t0) * 1000, 2))
            # The request's latency as the client saw it: a track answering from its cache is
            # fast, and a canary analysis comparing p99s must see that, not no answer at all.
            self._inner.metrics.observe_stage("total", time.monotonic() - t0)
            return body
        self.cache_metrics.misses.inc()
        body = await self._inner.parse(
            request, on_page=on_page, on_delta=on_delta, deadline=deadline, on_total=on_total
        )
        await self._store(key, body)
        return body

    async def _lookup(self, key: str) -> ReplyV | None:
        try:
            raw = await self._cache.get(key)
            return None if raw is None else self._load(raw)
        except Exception as exc:
            self.cache_metrics.errors.inc()
            log.warning("result cache read failed (%s): serving a miss", type(exc).__name__)
            return None

    async def _store(self, key: str, body: ReplyV) -> None:
        try:
            await self._cache.set(key, body.cache_bytes())
        except Exception as exc:
            self.cache_metrics.errors.inc()
            log.warning("result cache write failed (%s)", type(exc).__name__)
        self._update_gauge()

    def _update_gauge(self) -> None:
        if isinstance(self._cache, MemoryCache):
            self.cache_metrics.bytes.set(self._cache.used_bytes)

    def close(self) -> None:
        """Sync like ``ParseService.close``; the backend closes on the running loop."""
        self._inner.close()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._close_task = loop.create_task(self._cache.close())


def with_result_cache(
    service: Parser[RequestT, ReplyV],
    settings: Settings,
    registry: CollectorRegistry,
    load: Callable[[bytes], ReplyV],
) -> Parser[RequestT, ReplyV]:
    """Wrap ``service`` when caching is enabled; otherwise return it unchanged."""
    cache = create_cache(settings)
    if cache is None:
        return service
    return CachedParseService(service, cache, settings, registry, load)
