"""One log line per request, with a request id the client can quote.

``X-Request-ID`` from the client (or a proxy) is kept when it is a plain token of at most
128 characters, else one is generated; it is echoed in the response and logged with the
route template, status, latency, the caller's key id (a hash, never the key), and what the
route reported in ``request.state.log_fields`` (pages, vision and output tokens, timings by
stage, cached). Error replies add their ``error.code``. Documents and their text are never
logged. Probes and ``/metrics`` log at DEBUG only, so they do not drown the requests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docparser_runtime.server.protocol import ParseReply

log = logging.getLogger("docparser.access")

HEADER = "x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
QUIET_ROUTES = frozenset({"/livez", "/readyz", "/health", "/metrics"})
_ERROR_BODY_LIMIT = 4096


def report_result(state: Any, reply: ParseReply) -> None:
    """What a parse route adds to its request's log line (sizes and timings, no text)."""
    state.log_fields = {
        "pages": len(reply.pages),
        "vision_tokens": reply.vision_tokens,
        "output_tokens": reply.usage.output_tokens,
        "cached": reply.cached,
        "timings_ms": reply.timings_ms.model_dump(),
    }


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == HEADER.encode():
            candidate = value.decode("latin-1").strip()
            if _VALID_ID.match(candidate):
                return candidate
    return uuid.uuid4().hex


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        request_id = request_id_from(scope.get("headers") or [])
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        status, error_body = 500, b""

        async def send_wrapper(message: Message) -> None:
            nonlocal status, error_body
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers") or [])
                headers.append((HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and status >= 400:
                room = _ERROR_BODY_LIMIT - len(error_body)
                if room > 0:
                    error_body += (message.get("body") or b"")[:room]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self._log(scope, state, status, error_body, time.monotonic() - started)

    @staticmethod
    def _log(
        scope: Scope, state: dict[str, Any], status: int, error_body: bytes, seconds: float
    ) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        fields: dict[str, Any] = {
            "request_id": state.get("request_id"),
            "method": scope.get("method"),
            "route": route,
            "status": status,
            "latency_ms": round(seconds * 1000, 1),
        }
        principal = state.get("principal")
        if principal is not None:
            fields["key_id"] = principal.key_id
        fields.update(state.get("log_fields") or {})
        if status >= 400 and error_body:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                fields["error_code"] = json.loads(error_body)["error"]["code"]
        level = logging.DEBUG if route in QUIET_ROUTES else logging.INFO
        log.log(level, "%s %s %s", fields["method"], route, status, extra={"fields": fields})
