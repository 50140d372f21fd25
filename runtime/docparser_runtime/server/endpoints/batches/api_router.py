"""``/v1/batches``: create, read, list and cancel batches (OpenAI's routes and shapes).

A batch runs the lines of an uploaded ``purpose=batch`` file against one endpoint
(``/v1/chat/completions`` or ``/v1/document/parse``) within a 24 h window; its lifecycle
and limits are in docs/api.md. Batches belong to the API key that created them: another
key gets 404. The per-key limit on unfinished batches is checked atomically with the create.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from docparser_runtime.batches.backend import BatchBackend, not_configured
from docparser_runtime.batches.models import COMPLETION_WINDOW_S, Batch, BatchStatus, new_id
from docparser_runtime.errors import Conflict, InvalidInput
from docparser_runtime.server.endpoints.batches.protocol import (
    BATCH_SCHEMA,
    CREATE_BODY,
    MAX_BODY_BYTES,
    MAX_LIST,
    CreateBatchRequest,
)
from docparser_runtime.server.endpoints.batches.serving import batch_lifespan
from docparser_runtime.server.endpoints.parse.request_input import read_body, tenant_of
from docparser_runtime.server.state import runtime_state

router = APIRouter(tags=["batch"], lifespan=batch_lifespan)
_BATCH_ID = Path(description="batch id from POST /v1/batches", max_length=100)
_ERROR = {"description": "error", "content": {"application/json": {}}}
_BATCH_REPLY = {"content": {"application/json": {"schema": BATCH_SCHEMA}}}


def _backend(request: Request) -> BatchBackend:
    backend = runtime_state(request.app).batch_backend
    if backend is None:
        raise not_configured()
    return backend


@router.post(
    "/v1/batches",
    summary="Run the lines of an uploaded JSONL file within 24 h",
    openapi_extra={"requestBody": CREATE_BODY},
    responses={200: _BATCH_REPLY, **{s: _ERROR for s in (400, 401, 403, 404, 429, 503)}},
)
async def create_batch(request: Request) -> JSONResponse:
    backend = _backend(request)
    settings = backend.settings
    raw = await read_body(request, MAX_BODY_BYTES)
    try:
        body = CreateBatchRequest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise InvalidInput(f"{where}: {first.get('msg')}", code="invalid_request") from None
    owner = tenant_of(request)
    record = await backend.store.get_file(body.input_file_id, owner)
    if record.purpose != "batch":
        raise InvalidInput(
            f"file {record.id!r} has purpose {record.purpose!r}, not 'batch'",
            code="invalid_input_file",
        )
    if record.lines > settings.batch_max_lines:
        raise InvalidInput(
            f"the file has {record.lines} lines, over {settings.batch_max_lines} "
            "(DOCPARSER_BATCH_MAX_LINES)",
            code="batch_too_many_lines",
        )
    now = int(time.time())
    batch = Batch(
        id=new_id("batch_"),
        endpoint=body.endpoint,
        input_file_id=record.id,
        owner=owner,
        status=BatchStatus.VALIDATING,
        created_at=now,
        expires_at=now + COMPLETION_WINDOW_S,
        metadata=body.metadata,
    )
    await backend.store.create_batch(batch, limit=settings.batch_max_active_per_key)
    return JSONResponse(batch.to_public())


@router.get(
    "/v1/batches/{batch_id}",
    summary="A batch: status, request counts, output and error file ids",
    responses={200: _BATCH_REPLY, 404: _ERROR},
)
async def get_batch(request: Request, batch_id: str = _BATCH_ID) -> JSONResponse:
    batch = await _backend(request).store.get_batch(batch_id, tenant_of(request))
    return JSONResponse(batch.to_public())


@router.get("/v1/batches", summary="This API key's batches, newest first")
async def list_batches(
    request: Request,
    after: str | None = Query(None, max_length=100, description="a batch id: list those after it"),
    limit: int = Query(20, ge=1, le=MAX_LIST),
) -> JSONResponse:
    store = _backend(request).store
    batches, more = await store.list_batches(tenant_of(request), after=after, limit=limit)
    data = [b.to_public() for b in batches]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }
    )


@router.post(
    "/v1/batches/{batch_id}/cancel",
    summary="Cancel a batch: lines not yet run are dropped; what ran is kept",
    responses={200: _BATCH_REPLY, 404: _ERROR, 409: _ERROR},
)
async def cancel_batch(request: Request, batch_id: str = _BATCH_ID) -> JSONResponse:
    store = _backend(request).store
    owner = tenant_of(request)
    batch = await store.get_batch(batch_id, owner)
    stopping = (BatchStatus.CANCELLING, BatchStatus.CANCELLED)
    if not await store.cancel(batch) and batch.status not in stopping:
        batch = await store.get_batch(batch_id, owner)
        if batch.status not in stopping:
            raise Conflict(
                f"batch {batch_id!r} is already {batch.status}; nothing to cancel",
                code="batch_finished",
            )
    return JSONResponse((await store.get_batch(batch_id, owner)).to_public())
