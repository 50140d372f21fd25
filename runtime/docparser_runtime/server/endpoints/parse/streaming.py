"""Streaming parses as Server-Sent Events (``stream: true`` on ``/v1/document/parse``).

``ParseEvents`` runs one parse as a task and turns ``ParseService``'s callbacks into an
ordered stream of events; the parse route formats them as SSE here, the OpenAI route as
``chat.completion.chunk`` objects. Events:

- ``page``   ``{"index"}``: a page starts (before its first delta),
- ``delta``  ``{"page", "text"}``: text as the engine generates it (``Engine.stream_page``),
- ``page_end`` the finished page (``PageResult.to_dict()`` without ``content``),
- ``result`` the full reply of ``/v1/document/parse`` (a ``ParseReply``; always last on
  success),
- ``error``  ``{"error": {"code", "message"}}`` (always last on failure).

Errors that happen before the first event (bad input, queue full, draining) are raised
instead, so the client gets a normal 4xx/5xx JSON reply rather than a 200 stream that
fails. When the client disconnects, Starlette cancels the body iterator; cancelling the
parse task makes ``ParseService`` stop the generation (the engine's ``on_delta`` returns
True).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from docparser_runtime.errors import DocParserError, EngineFailure
from docparser_runtime.server.endpoints.parse.api_router import (
    ClientDisconnected,
    run_until_disconnect,
)
from docparser_runtime.server.error_mapping import CLIENT_CLOSED_STATUS, error_body
from docparser_runtime.server.protocol import ParseReply, ParseRequest
from docparser_runtime.server.state import runtime_state

log = logging.getLogger("docparser.stream")

Event = tuple[str, Any]
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ParseEvents:
    """One streaming parse: ``await start()`` then ``async for kind, data in events``."""

    def __init__(self, app: FastAPI, parse_request: ParseRequest) -> None:
        self._app = app
        self._request = parse_request
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._started: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._first: Event | None = None
        self.result: ParseReply | None = None  # the reply, once the stream has sent it

    def _page_start(self, index: int) -> None:
        if index not in self._started:
            self._started.add(index)
            self._queue.put_nowait(("page", {"index": index}))

    def _on_delta(self, index: int, text: str) -> None:
        self._page_start(index)
        if text:
            self._queue.put_nowait(("delta", {"page": index, "text": text}))

    def _on_page(self, page: dict[str, Any]) -> None:
        self._page_start(page["index"])
        self._queue.put_nowait(("page_end", {k: v for k, v in page.items() if k != "content"}))

    async def _run(self) -> None:
        service = runtime_state(self._app).parser
        try:
            result = await service.parse(
                self._request, on_page=self._on_page, on_delta=self._on_delta
            )
        except DocParserError as exc:
            self._queue.put_nowait(("error", exc))
        except Exception as exc:
            log.exception("streaming parse failed")
            self._queue.put_nowait(
                ("error", EngineFailure(f"internal error ({type(exc).__name__})"))
            )
        else:
            self._queue.put_nowait(("result", result))

    async def start(self, request: Request) -> None:
        """Start the parse and wait for its first event; raise early errors as-is."""
        self._task = asyncio.ensure_future(self._run())
        try:
            self._first = await run_until_disconnect(request, self._queue.get())
        except BaseException:
            await self.aclose()
            raise
        if self._first[0] == "error":
            await self.aclose()
            raise self._first[1]

    async def __aiter__(self) -> AsyncIterator[Event]:
        assert self._first is not None, "call start() first"
        kind, data = self._first
        while True:
            if kind == "error":
                yield kind, error_body(data.code, data.message)
                return
            yield kind, data
            if kind == "result":
                self.result = data
                return
            kind, data = await self._queue.get()

    async def aclose(self) -> None:
        """Stop the parse (client gone or stream finished); idempotent."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def sse_event(event: str, data: Any) -> bytes:
    payload = data.body() if isinstance(data, ParseReply) else data
    return f"event: {event}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


# Turns the event stream into the bytes of one wire format (SSE events, OpenAI chunks).
Framer = Callable[[ParseEvents], AsyncGenerator[bytes, None]]


async def streaming_response(
    request: Request, parse_request: ParseRequest, frame: Framer
) -> Response:
    """Start a streaming parse and answer with ``frame``'s bytes as ``text/event-stream``.

    Errors before the first event propagate (a normal 4xx/5xx reply); a client gone before
    it gets 499. The route's in-flight slot ends when it returns this response, so the
    stream holds its own: a drain waits for the stream to finish.
    """
    app = request.app
    events = ParseEvents(app, parse_request)
    try:
        await events.start(request)
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED_STATUS)

    async def body() -> AsyncIterator[bytes]:
        state = runtime_state(app)
        async with state.lifecycle.request_slot(check=False):
            try:
                async with contextlib.aclosing(frame(events)) as chunks:
                    async for chunk in chunks:
                        yield chunk
            finally:
                await events.aclose()
        if events.result is not None and state.shadow is not None:
            state.shadow.offer(parse_request, events.result.body())  # the stream has ended

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


async def _sse_frames(events: ParseEvents) -> AsyncGenerator[bytes, None]:
    async for kind, data in events:
        yield sse_event(kind, data)


async def stream_parse(request: Request, parse_request: ParseRequest) -> Response:
    """The ``stream_responder`` of ``/v1/document/parse``."""
    return await streaming_response(request, parse_request, _sse_frames)


def install_streaming(app: FastAPI) -> None:
    runtime_state(app).stream_responder = stream_parse
