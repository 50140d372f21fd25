"""The CPU front's parse: hold a synchronous parse until a GPU pod is ready, then forward it.

A DocParser scaled to zero GPU pods keeps one small CPU process, the front
(``DOCPARSER_ROLE=front``), behind its Service. It is the same app as a pod: the same
routes, API keys, rate limits, job store, result cache and error mapping. Only the parse
service differs: instead of ``ParseService`` (decode, batch, engine) the routes call
``ProxyParser``, which meets the same ``result_cache.Parser`` protocol, so the parse route,
streaming, the OpenAI route and the result cache run unchanged on top of it.

``ProxyParser.parse``:

1. admits the parse against the hold bound (``front_max_held_requests`` parses and
   ``front_max_held_bytes`` document bytes held or being forwarded): over it, ``503`` with
   ``Retry-After`` at once, so a burst at zero costs bounded memory;
2. waits up to ``front_hold_seconds`` for ``BackendWatch`` to see the backend ready (0: no
   wait); past it, ``503`` + ``Retry-After: front_retry_after_seconds``. A ``ready`` no recent
   poll backs is confirmed by a poll first (the DocParser may have gone back to zero since):
   every parse that waits for capacity, first or after a failed forward, counts in
   ``docparser_front_held_requests``, which is what wakes the DocParser (and stamps
   ``docparser_front_capacity_wanted_timestamp_seconds``, which wakes it too when the parse
   is answered 503 at once: ``holdSeconds: 0`` or over the bound). A drain (SIGTERM)
   shortens the wait so every held parse is answered before the process exits;
3. forwards the document bytes (``application/octet-stream``, options in the query: the
   raw-body form every pod accepts) with the caller's ``Authorization`` and request id, so
   the pod authenticates the same key and scopes its cache to the same tenant. A pod that
   refuses the connection, does not take it within ``FORWARD_CONNECT_S`` (a Service whose pods
   went away), closes it before answering or answers ``503 starting/draining`` did no work:
   the parse waits again within its hold time. Replies are bounded in bytes; streamed parses
   relay the pod's events to the caller's callbacks as they arrive (wire.py: the
   headers, query and events of a forward).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from docparser_runtime.errors import (
    DeadlineExceeded,
    DocParserError,
    EngineFailure,
    Unavailable,
)
from docparser_runtime.result_cache import (
    CacheableRequest,
    PageCallback,
    PageDeltaCallback,
    TotalCallback,
)
from docparser_runtime.server.error_mapping import error_from_reply
from docparser_runtime.server.front.backend_watch import PROBE_TIMEOUT_S, BackendWatch
from docparser_runtime.server.front.wire import (
    forward_query,
    forwarded_headers,
    sse_event,
)
from docparser_runtime.server.ops.metrics import FrontMetrics, Metrics
from docparser_runtime.server.protocol import ParseReply
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.front")

NOT_STARTED = frozenset({"starting", "draining", "engine_unavailable"})
DRAIN_MARGIN_S = 1.0  # a held parse is answered this long before the drain deadline
# The front's own failures to relay (the rest are the backend's answers, relayed as given).
FAILED_CODES = frozenset({"deadline_exceeded", "backend_failed", "backend_reply_too_large"})
MAX_ATTEMPTS = 20  # forwards of one parse that found no pod (each after a good poll)
FORWARD_CONNECT_S = 2.0  # a connect not taken by then found no pod (the total is the parse's)
CONFIRM_S = PROBE_TIMEOUT_S + 0.5  # a stale ready is confirmed by a poll, even with hold 0
_WAIT_SLICE_S = 1.0
_READ_CHUNK = 65536


@dataclass(frozen=True)
class BackendIdentity:
    """What the front serves, as the pods name it (the result cache's key needs it)."""

    name: str
    version: str


class _NoPod(Exception):
    """The forward found no pod to take it (connection refused, 503 before any work)."""


class ProxyParser:
    """``result_cache.Parser`` that holds and forwards (module docstring)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        watch: BackendWatch,
        session: aiohttp.ClientSession,
        *,
        drain_deadline: Callable[[], float | None],
    ) -> None:
        assert metrics.front is not None and settings.front_backend_url
        self.settings = settings
        self.metrics = metrics
        self.front: FrontMetrics = metrics.front
        self.engine = BackendIdentity(settings.engine, settings.model_version or "")
        self.watch = watch
        self._session = session
        self._url = settings.front_backend_url.rstrip("/") + "/v1/document/parse"
        self._drain_deadline = drain_deadline
        self.held_requests = 0
        self.held_bytes = 0

    def close(self) -> None:
        """Nothing of its own: the app closes the watch and the session."""

    def _refuse(self, message: str, code: str) -> Unavailable:
        return Unavailable(
            message, code=code, retry_after_s=float(self.settings.front_retry_after_seconds)
        )

    @contextlib.contextmanager
    def _admitted(self, size: int) -> Iterator[None]:
        s = self.settings
        if (
            self.held_requests >= s.front_max_held_requests
            or self.held_bytes + size > s.front_max_held_bytes
        ):
            self.front.forwarded.labels(outcome="busy").inc()
            self.front.wanted.set_to_current_time()
            raise self._refuse(
                f"the front already holds {self.held_requests} requests "
                f"({self.held_bytes} bytes) while capacity comes up; retry later",
                "front_busy",
            )
        self.held_requests += 1
        self.held_bytes += size
        try:
            yield
        finally:
            self.held_requests -= 1
            self.held_bytes -= size

    def _hold_cap(self, hold_until: float) -> float:
        drain = self._drain_deadline()
        return hold_until if drain is None else min(hold_until, drain - DRAIN_MARGIN_S)

    async def _wait_backend(self, hold_until: float) -> bool:
        """True once the backend is ready; False past the hold (or the drain's) deadline."""
        if self.watch.fresh():
            return True
        # Marked before the hold, so a parse answered 503 at once (holdSeconds 0) still wakes
        # the DocParser: the held gauge would never show it.
        self.front.wanted.set_to_current_time()
        if self.watch.ready.is_set():
            self.watch.unconfirm()
            hold_until = max(hold_until, time.monotonic() + CONFIRM_S)
        self.front.held.inc()
        try:
            while True:  # slices: a drain that starts mid-wait shortens it
                left = self._hold_cap(hold_until) - time.monotonic()
                if left <= 0:
                    return False
                if await self.watch.wait_ready(min(left, _WAIT_SLICE_S)):
                    return True
        finally:
            self.front.held.dec()

    async def parse(
        self,
        request: CacheableRequest,
        *,
        on_page: PageCallback | None = None,
        on_delta: PageDeltaCallback | None = None,
        deadline: float | None = None,
        on_total: TotalCallback | None = None,
    ) -> ParseReply:
        hold_until = time.monotonic() + self.settings.front_hold_seconds
        with self._admitted(len(request.data)):
            for _attempt in range(MAX_ATTEMPTS):
                if not await self._wait_backend(hold_until):
                    break
                try:
                    reply = await self._forward(request, on_page, on_delta, deadline)
                except _NoPod:
                    self.watch.mark_down()
                    continue
                except DocParserError as exc:
                    failed = exc.code in FAILED_CODES
                    self.front.forwarded.labels(outcome="failed" if failed else "answered").inc()
                    raise
                self.front.forwarded.labels(outcome="answered").inc()
                if on_total is not None:
                    on_total(len(reply.pages))
                return reply
        self.front.forwarded.labels(outcome="timeout").inc()
        raise self._refuse(
            "no parsing capacity is ready yet (the DocParser is scaling up from zero); "
            "retry later, or submit an asynchronous job (POST /v1/jobs)",
            "no_capacity",
        )

    async def _forward(
        self,
        request: CacheableRequest,
        on_page: PageCallback | None,
        on_delta: PageDeltaCallback | None,
        deadline: float | None,
    ) -> ParseReply:
        stream = on_delta is not None
        limit = deadline or time.monotonic() + self.settings.sync_deadline_s
        timeout = aiohttp.ClientTimeout(
            total=max(limit - time.monotonic(), 0.001),
            connect=FORWARD_CONNECT_S + PROBE_TIMEOUT_S,  # with the name's lookup
            sock_connect=FORWARD_CONNECT_S,
        )
        headers = {"Content-Type": "application/octet-stream", **dict(forwarded_headers())}
        answered = False
        try:
            async with self._session.post(
                self._url,
                params=forward_query(request, stream=stream),
                data=request.data,
                headers=headers,
                timeout=timeout,
            ) as resp:
                answered = True
                if resp.status == 200 and stream:
                    return await self._relay(resp, on_page, on_delta)
                body = await self._read(resp)
                if resp.status == 200:
                    reply = ParseReply.model_validate_json(body)  # ValueError: backend_failed
                    if on_page is not None:
                        for page in reply.page_events():
                            on_page(page)
                    return reply
                raise self._error(resp, body)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
            raise _NoPod() from None
        except aiohttp.ServerDisconnectedError:
            if not answered:
                raise _NoPod() from None
            raise self._refuse("the backend broke off the reply; retry", "backend_failed") from None
        except TimeoutError:
            raise DeadlineExceeded(
                "the backend did not answer within the request timeout", code="deadline_exceeded"
            ) from None
        except (aiohttp.ClientError, ValueError) as exc:
            log.warning("forwarding to %s failed: %s", self._url, type(exc).__name__)
            raise self._refuse(
                f"the backend broke off the reply ({type(exc).__name__}); retry",
                "backend_failed",
            ) from None

    def _error(self, resp: aiohttp.ClientResponse, body: bytes) -> Exception:
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        error = error_from_reply(resp.status, payload, retry_after=resp.headers.get("Retry-After"))
        if resp.status == 503 and error.code in NOT_STARTED:
            return _NoPod()  # a pod leaving or still loading did nothing: wait again
        return error

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self.settings.front_max_reply_bytes
        chunks: list[bytes] = []
        total = 0
        async for chunk in resp.content.iter_chunked(_READ_CHUNK):
            total += len(chunk)
            if total > limit:
                raise EngineFailure(
                    f"the backend's reply exceeds {limit} bytes (DOCPARSER_FRONT_MAX_REPLY_BYTES)",
                    code="backend_reply_too_large",
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def _relay(
        self,
        resp: aiohttp.ClientResponse,
        on_page: PageCallback | None,
        on_delta: PageDeltaCallback | None,
    ) -> ParseReply:
        """Relay the pod's Server-Sent Events to the callbacks; the ``result`` event is the
        reply. Each event is bounded by ``front_max_reply_bytes``."""
        limit = self.settings.front_max_reply_bytes
        texts: dict[int, list[str]] = {}
        buffer = bytearray()
        scanned = 0  # the separator is looked for in new bytes only: a large event is linear
        async for chunk in resp.content.iter_any():
            buffer += chunk
            while (end := buffer.find(b"\n\n", max(scanned - 1, 0))) >= 0:
                kind, data = sse_event(bytes(buffer[:end]))
                del buffer[: end + 2]
                scanned = 0
                if kind == "delta":
                    texts.setdefault(data["page"], []).append(data["text"])
                    if on_delta is not None:
                        on_delta(data["page"], data["text"])
                elif kind == "page_end" and on_page is not None:
                    on_page({**data, "content": "".join(texts.pop(data["index"], []))})
                elif kind == "result":
                    return ParseReply.model_validate(data)
                elif kind == "error":
                    detail = data.get("error") or {}
                    raise DocParserError(
                        str(detail.get("message", "the backend failed")),
                        code=str(detail.get("code", "backend_failed")),
                    )
            scanned = len(buffer)
            if len(buffer) > limit:
                raise EngineFailure(
                    f"a streamed event of the backend exceeds {limit} bytes",
                    code="backend_reply_too_large",
                )
        raise self._refuse("the backend ended the stream without a result; retry", "backend_failed")


class Front:
    """What the front runs besides the routes: the HTTP session, the backend poller and
    the parser (``start`` in the lifespan, ``close`` at shutdown)."""

    def __init__(
        self, settings: Settings, metrics: Metrics, drain_deadline: Callable[[], float | None]
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.drain_deadline = drain_deadline
        self.session: aiohttp.ClientSession | None = None
        self.watch: BackendWatch | None = None

    def start(self) -> ProxyParser:
        assert self.settings.front_backend_url
        # Limits per pod Service: connections are pooled, a burst never opens thousands.
        connector = aiohttp.TCPConnector(limit=self.settings.front_max_held_requests + 4)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        self.watch = BackendWatch(
            self.settings.front_backend_url,
            interval_s=self.settings.front_poll_interval_s,
            session=self.session,
        )
        self.watch.start()
        return ProxyParser(
            self.settings,
            self.metrics,
            self.watch,
            self.session,
            drain_deadline=self.drain_deadline,
        )

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.close()
        if self.session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.session.close(), 5.0)
