"""``POST /v1/document/parse``: one document in, Markdown + blocks out.

The handler only reads the body, checks that the server accepts work, and delegates to
``ParseService``. It also watches the connection: when the client hangs up, the parse
task is cancelled, which takes the request's queued pages out of the micro-batcher.
Streaming (``stream: true``) is delegated to ``RuntimeState.stream_responder`` when the SSE
module installed one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from docparser_runtime.errors import InvalidInput
from docparser_runtime.server.endpoints.parse.request_input import read_parse_request
from docparser_runtime.server.error_mapping import CLIENT_CLOSED_STATUS
from docparser_runtime.server.ops.request_log import report_result
from docparser_runtime.server.protocol import ParseReply, options_schema
from docparser_runtime.server.state import runtime_state

router = APIRouter(tags=["parse"])
T = TypeVar("T")


def request_body_schema(*, include_stream: bool = True) -> dict[str, Any]:
    """The OpenAPI ``requestBody``, generated from the one ``RequestOptions`` model."""
    form = options_schema(form=True, include_stream=include_stream)
    json_options = options_schema(form=False, include_stream=include_stream)
    return {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}, **form},
                    "additionalProperties": False,
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string", "format": "byte"},
                        **json_options,
                    },
                    "additionalProperties": False,
                }
            },
        },
    }


_REQUEST_BODY = request_body_schema()
_ERROR = {"description": "error", "content": {"application/json": {}}}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ParseReply,
        "description": "the parsed document (text/event-stream of "
        "page, delta, page_end and result events with stream: true)",
    },
    **{s: _ERROR for s in (400, 401, 403, 413, 415, 422, 429, 500, 503, 504)},
}


class ClientDisconnected(Exception):
    """The client closed the connection before the reply was ready."""


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def run_until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; cancel it (and raise ``ClientDisconnected``) if the client leaves.

    Only valid once the body has been read completely: afterwards ``receive()`` yields
    nothing but ``http.disconnect``.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):  # the client is gone: nobody to report to
        await task
    raise ClientDisconnected()


@router.post(
    "/v1/document/parse",
    summary="Parse an image or PDF into Markdown, text or grounded blocks",
    openapi_extra={"requestBody": _REQUEST_BODY},
    responses=_RESPONSES,
)
async def parse_document(request: Request) -> Response:
    state = runtime_state(request.app)
    async with state.lifecycle.request_slot():
        parse_request = await read_parse_request(request, state.settings)
        if parse_request.stream:
            responder = state.stream_responder
            if responder is None:
                raise InvalidInput("streaming is not available", code="stream_unsupported")
            return await responder(request, parse_request)
        try:
            body = await run_until_disconnect(request, state.parser.parse(parse_request))
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED_STATUS)
    report_result(request.state, body)
    payload = body.body()
    shadow = state.shadow
    # The shadow canary's sample is taken once the reply is sent (a background task runs
    # after the body): it never delays the client and never sees a reply it could change.
    after = None if shadow is None else BackgroundTask(shadow.offer, parse_request, payload)
    return JSONResponse(payload, background=after)
