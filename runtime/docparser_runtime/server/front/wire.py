"""What crosses the wire between the CPU front and a GPU pod (proxy.py forwards a parse).

The caller's ``Authorization`` and request id go with the forward (the pod authenticates the
same key and scopes its result cache to the same tenant), the resolved options go as the query
of the raw-body parse every pod accepts, and a streamed reply comes back as Server-Sent Events.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from docparser_runtime.result_cache import CacheableRequest, KeyedOptions

# The request headers a forwarded parse carries (set per request by ``ForwardHeaders``).
_forwarded: ContextVar[tuple[tuple[str, str], ...]] = ContextVar(
    "docparser_front_forwarded", default=()
)


def forwarded_headers() -> tuple[tuple[str, str], ...]:
    """The headers the current request's forward carries."""
    return _forwarded.get()


class ForwardHeaders:
    """ASGI middleware (front only): remembers the caller's ``Authorization`` and request id
    for the parse it forwards, without threading them through every route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [
            ("Authorization", value.decode("latin-1"))
            for name, value in scope.get("headers") or []
            if name.lower() == b"authorization"
        ][:1]
        request_id = (scope.get("state") or {}).get("request_id")
        if request_id:
            headers.append(("X-Request-ID", str(request_id)))
        token = _forwarded.set(tuple(headers))
        try:
            await self.app(scope, receive, send)
        finally:
            _forwarded.reset(token)


def options_query(options: KeyedOptions, pages: str | None) -> dict[str, str]:
    """The options that change a parse's output as the query of a raw-body parse, so the
    pod it is sent to reads the same document the same way (``tier: auto`` stays auto).
    Shared by the front's forward and the shadow's copy (server/shadow/sender.py)."""
    query = {
        "tier": "auto" if options.auto else str(options.tier),
        "mode": options.mode,
        "max_new_tokens": str(options.max_new_tokens),
    }
    if pages:
        query["pages"] = pages
    return query


def forward_query(request: CacheableRequest, *, stream: bool) -> dict[str, str]:
    """The request's resolved options as the query of a raw-body parse."""
    query = options_query(request.options, request.pages)
    if not request.cache:
        query["cache"] = "false"
    if stream:
        query["stream"] = "true"
    return query


def sse_event(raw: bytes) -> tuple[str, Any]:
    """One Server-Sent Event of a pod's stream: its kind and its JSON data."""
    kind, data = "message", b""
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data += line[5:].strip()
    return kind, json.loads(data) if data else None
