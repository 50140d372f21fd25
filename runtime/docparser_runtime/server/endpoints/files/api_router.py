"""``/v1/files``: upload a batch input (JSONL), read a file's record or content, delete it.

OpenAI's routes and shapes, so ``client.files.create(file=..., purpose="batch")`` and
``client.files.content(id)`` work unchanged. Every file belongs to the API key that made it
(an upload, or a batch's output): another key gets 404, as for an unknown id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse

from docparser_runtime.batches.backend import BatchBackend, not_configured
from docparser_runtime.batches.models import FileRecord
from docparser_runtime.batches.redis_store import file_not_found
from docparser_runtime.server.endpoints.files.protocol import (
    DELETED_SCHEMA,
    FILE_SCHEMA,
    UPLOAD_BODY,
)
from docparser_runtime.server.endpoints.files.serving import upload
from docparser_runtime.server.endpoints.parse.request_input import tenant_of
from docparser_runtime.server.state import runtime_state

router = APIRouter(tags=["batch"])
_FILE_ID = Path(description="file id from POST /v1/files", max_length=100)
_ERROR = {"description": "error", "content": {"application/json": {}}}
_FILE_REPLY = {"content": {"application/json": {"schema": FILE_SCHEMA}}}


def backend_of(request: Request) -> BatchBackend:
    backend = runtime_state(request.app).batch_backend
    if backend is None:
        raise not_configured()
    return backend


async def _owned(request: Request, file_id: str) -> FileRecord:
    return await backend_of(request).store.get_file(file_id, tenant_of(request))


@router.post(
    "/v1/files",
    summary="Upload a JSONL batch input (multipart: file, purpose=batch)",
    openapi_extra={"requestBody": UPLOAD_BODY},
    responses={200: _FILE_REPLY, **{s: _ERROR for s in (400, 401, 403, 413, 415, 503)}},
)
async def create_file(request: Request) -> JSONResponse:
    state = runtime_state(request.app)
    async with state.lifecycle.request_slot():
        record = await upload(request, backend_of(request), tenant_of(request))
    return JSONResponse(record.to_public())


@router.get(
    "/v1/files/{file_id}",
    summary="A file's record",
    responses={200: _FILE_REPLY, 404: _ERROR},
)
async def get_file(request: Request, file_id: str = _FILE_ID) -> JSONResponse:
    return JSONResponse((await _owned(request, file_id)).to_public())


@router.get(
    "/v1/files/{file_id}/content",
    summary="A file's content (JSONL)",
    responses={200: {"content": {"application/jsonl": {}}}, 404: _ERROR},
)
async def file_content(request: Request, file_id: str = _FILE_ID) -> StreamingResponse:
    record = await _owned(request, file_id)
    storage = backend_of(request).storage
    if not await storage.exists(record.id):
        raise file_not_found(file_id)

    async def body() -> AsyncIterator[bytes]:
        async for chunk in storage.stream(record.id):
            yield chunk

    return StreamingResponse(body(), media_type="application/jsonl")


@router.delete(
    "/v1/files/{file_id}",
    summary="Delete a file (a batch still reading it fails its remaining lines)",
    responses={200: {"content": {"application/json": {"schema": DELETED_SCHEMA}}}, 404: _ERROR},
)
async def delete_file(request: Request, file_id: str = _FILE_ID) -> JSONResponse:
    record = await _owned(request, file_id)
    backend = backend_of(request)
    await backend.store.delete_file(record.id)
    await backend.storage.delete(backend.storage.object_name(record.id))
    return JSONResponse({"id": record.id, "object": "file", "deleted": True})
