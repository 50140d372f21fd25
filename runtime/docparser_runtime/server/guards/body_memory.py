"""Request bodies are charged to the host-memory budget before they are read.

Why: admission charged each page's decode and pixels, but not the upload itself. Thirty
concurrent 45 MB uploads were all read (and answered 200) while the server's RSS reached
2.9 GB under a budget set from a 2 GiB limit; one more and the kernel kills the pod. So a
body reader (``endpoints/parse/request_input.py``: every parse-like route, on pods and on
the CPU front) charges, before it reads a byte, the body's ``Content-Length`` times what
reading and parsing such a body costs (``host_memory.body_bytes_per_byte``); a chunked body
without ``Content-Length`` is charged as its chunks arrive, the charge growing with them.

- The budget is short: ``503 upload_memory_busy`` with ``Retry-After`` at once (nothing is
  read; waiting would hold the connection and the client's bytes in kernel buffers).
- The body alone could never fit: ``413 host_memory_limit`` naming the limit.

``BodyMemory`` (ASGI middleware) hands each HTTP request its ``BodyCharge`` in the scope and
releases it when the request ends, however it ends: reply sent (a stream to its last event),
error, client gone. The charge stays while the request runs, so the document's bytes that
the parse still holds stay counted too.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from docparser_runtime.errors import Unavailable
from docparser_runtime.sizing.host_memory import MIB, MemoryBudget, body_bytes_per_byte

SCOPE_KEY = "docparser.body_charge"
RETRY_AFTER_S = 2.0  # bodies read elsewhere end within seconds (the body deadline bounds them)


class BodyCharge:
    """The host memory one request's body holds: ``cover(n)`` before its first ``n`` bytes
    are read; ``release`` at the end. On the event loop, like the budget."""

    def __init__(self, budget: MemoryBudget | None, per_byte: int) -> None:
        self.budget = budget  # None: no budget (yet): nothing is charged
        self.per_byte = per_byte
        self.covered = 0  # body bytes the charge covers
        self.held = 0  # bytes of the budget it holds (covered x per_byte)

    def cover(self, body_bytes: int) -> None:
        """Grow the charge to ``body_bytes`` of body, or refuse (413 / 503)."""
        if self.budget is None or body_bytes <= self.covered:
            return
        self.budget.check(body_bytes * self.per_byte, f"a request body of {body_bytes} bytes")
        need = (body_bytes - self.covered) * self.per_byte
        if not self.budget.try_reserve(need):
            budget = self.budget
            raise Unavailable(
                f"host memory budget busy ({budget.used / MIB:.0f} of {budget.total / MIB:.0f} "
                f"MiB held); a request body of {body_bytes} bytes needs {need / MIB:.0f} MiB "
                "more to be read; retry later",
                code="upload_memory_busy",
                retry_after_s=RETRY_AFTER_S,
            )
        self.held += need
        self.covered = body_bytes

    def release(self) -> None:
        if self.budget is not None and self.held:
            self.budget.release(self.held)
        self.held = 0
        self.covered = 0


def body_charge(request: Request) -> BodyCharge:
    """The request's charge (one that charges nothing outside ``BodyMemory``: tests that
    call a reader directly)."""
    charge = request.scope.get(SCOPE_KEY)
    return charge if isinstance(charge, BodyCharge) else BodyCharge(None, 1)


class BodyMemory:
    """Gives each HTTP request a ``BodyCharge`` against ``budget()`` (None until the
    server has one) and releases it when the request ends."""

    def __init__(self, app: ASGIApp, *, budget: Callable[[], MemoryBudget | None]) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        content_type = ""
        for name, value in scope.get("headers", ()):
            if name == b"content-type":
                content_type = value.decode("latin-1")
        charge = BodyCharge(self.budget(), body_bytes_per_byte(content_type))
        scope[SCOPE_KEY] = charge
        try:
            await self.app(scope, receive, send)
        finally:
            charge.release()
