"""The canary's end of the mirror: one mirrored document parsed as the stable pod's client
asked, through the parse service itself, never its result cache.

WHY not the cache: the cache is scoped by the caller's API key and the mirror has no caller;
a mirrored answer stored there could later answer a client (or one client's document could
answer another's), and a cached answer would not measure the canary at all. The parse runs
at background priority (a canary that also serves live traffic serves it first), creates no
job, and its reply carries sizes and timings to the request log, never text.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request

from docparser_runtime.errors import InvalidInput, Unavailable
from docparser_runtime.server.endpoints.parse.request_input import read_parse_request
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.protocol import ParseReply, ParseRequest
from docparser_runtime.server.state import runtime_state


async def read_mirrored(request: Request) -> ParseRequest:
    """The mirrored request: the same body as ``/v1/document/parse``, no caller, no cache."""
    state = runtime_state(request.app)
    parsed = await read_parse_request(request, state.settings)
    if parsed.stream:
        raise InvalidInput("the mirror path does not stream", code="stream_unsupported")
    return replace(parsed, tenant="", cache=False, priority=Priority.BACKGROUND)


async def parse_mirrored(request: Request, mirrored: ParseRequest) -> ParseReply:
    service = runtime_state(request.app).uncached_parser
    if service is None:
        raise Unavailable("the engine is still loading; retry shortly", code="starting")
    return await service.parse(mirrored)
