"""Deadlines for clients that send slowly: request headers, and request bodies.

Why: uvicorn bounds only the idle time between keep-alive requests. A connection that sends
its headers a byte at a time, or stops half-way through an upload, stays open for ever,
counts against ``max_connections`` and against a drain (which waits for it). A few dozen
such connections (a few kilobytes in all) made the server unreachable. So:

- ``header_timeout_protocol``: uvicorn's h11 protocol with a deadline for each request's
  headers, from the moment the connection opens or the previous response ends; past it the
  connection is closed (nothing was accepted, so nothing is lost);
- ``BodyDeadline``: ASGI middleware that gives a request body an idle limit per chunk and a
  total limit; past either it answers ``408 request_timeout`` itself and tells the
  application the client went away (``http.disconnect``), so a half-read upload never
  reaches the engine. Once the body is complete, ``receive`` is left alone: it then only
  waits for a disconnect (streaming responses, long parses).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from docparser_runtime import errors
from docparser_runtime.server.error_mapping import error_response

log = logging.getLogger("docparser.server")


def header_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing connections whose request headers take too long."""

    class HeaderDeadlineProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._cycle_seen: Any = None
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()  # no request under way: nothing accepted is lost

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle  # a request's headers arrived in time
                self._disarm()

        def on_response_complete(self) -> None:
            self._arm()  # the next request on this connection gets the same deadline
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadlineProtocol


class BodyDeadline:
    """A request body must keep coming (``idle_s`` per chunk) and end within ``total_s``."""

    def __init__(self, app: ASGIApp, *, idle_s: float, total_s: float) -> None:
        self.app = app
        self.idle_s = idle_s
        self.total_s = total_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total_s
        body_done = False
        answered = False  # we sent the 408: the application's own reply is dropped
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done, answered
            if body_done or answered:
                return await receive() if not answered else {"type": "http.disconnect"}
            wait = min(self.idle_s, deadline - loop.time())
            try:
                async with asyncio.timeout(max(0.0, wait)):
                    message = await receive()
            except TimeoutError:
                if not started:
                    answered = True
                    limit = "stalled" if wait == self.idle_s else "took longer than"
                    seconds = self.idle_s if wait == self.idle_s else self.total_s
                    await error_response(
                        errors.RequestTimeout(f"request body {limit} {seconds:g} s")
                    )(scope, receive, send)
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, timed_receive, guarded_send)
