"""``POST /internal/v1/shadow/parse`` and ``GET /admin/v1/shadow/worst``.

Neither is under ``/v1/``, so API keys and per-key limits never apply to them (a mirrored
request spends no client's quota, and a client's key opens neither) and their requests are
not in the ``/v1/`` series of ``docparser_requests_total`` the canary analysis counts as live
traffic. Each has its own credential (``guards/internal_auth.py``): the internal token the
operator mounts in every pod of the DocParser, and the admin key. Both stay out of the
OpenAPI schema: they are not the client API.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from docparser_runtime.server.endpoints.parse.api_router import (
    ClientDisconnected,
    run_until_disconnect,
)
from docparser_runtime.server.endpoints.shadow.serving import parse_mirrored, read_mirrored
from docparser_runtime.server.error_mapping import CLIENT_CLOSED_STATUS
from docparser_runtime.server.guards.internal_auth import INTERNAL_TOKEN_HEADER, bearer
from docparser_runtime.server.ops.request_log import report_result
from docparser_runtime.server.shadow.sender import MIRROR_PATH, REVISION_HEADER
from docparser_runtime.server.state import runtime_state

router = APIRouter(tags=["internal"], include_in_schema=False)
WORST_PATH = "/admin/v1/shadow/worst"


@router.post(MIRROR_PATH)
async def mirror_parse(request: Request) -> Response:
    state = runtime_state(request.app)
    state.internal_token.check(request.headers.get(INTERNAL_TOKEN_HEADER))  # before the body
    async with state.lifecycle.request_slot():
        mirrored = await read_mirrored(request)
        try:
            body = await run_until_disconnect(request, parse_mirrored(request, mirrored))
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED_STATUS)
    report_result(request.state, body)
    revision = state.settings.revision  # the mirror compares only the revision it judges
    headers = {REVISION_HEADER: revision} if revision else None
    return JSONResponse(body.body(), headers=headers)


@router.get(WORST_PATH)
async def worst_disagreements(request: Request) -> JSONResponse:
    state = runtime_state(request.app)
    state.admin_key.check(bearer(request.headers.get("authorization")))
    shadow = state.shadow
    body = shadow.worst.snapshot() if shadow is not None else {"pages": []}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
