"""``/v1/jobs``: asynchronous parses that survive replicas (docling-serve's task ids
404 on another replica; ours live in the shared store when ``redis_url`` is set).

``POST`` takes exactly the body of ``/v1/document/parse`` and answers 202 with the job
and a ``Location``. ``Idempotency-Key``: the same key with the same body returns the same
job (header ``Idempotent-Replayed: true``), with another body 409. ``GET`` reports the
queue position while queued, per-page progress while running, and the result (kept
``job_ttl_s``) when done. ``DELETE`` cancels: at once when queued, at the next page when
running.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import JSONResponse

from docparser_runtime.errors import InvalidInput
from docparser_runtime.jobs import Job, JobStatus, JobStore, request_fingerprint
from docparser_runtime.jobs.store import not_found
from docparser_runtime.preprocess.page_estimate import estimate_pages
from docparser_runtime.server.endpoints.parse.api_router import request_body_schema
from docparser_runtime.server.endpoints.parse.request_input import read_parse_request
from docparser_runtime.server.state import runtime_state

router = APIRouter(tags=["jobs"])

_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, like Stripe's keys
_JOB_ID = Path(description="job id from POST /v1/jobs", max_length=100)


_JOB_SCHEMA = {
    "type": "object",
    "required": ["id", "status"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["job"]},
        "status": {"type": "string", "enum": [s.value for s in JobStatus]},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
        "queue_position": {"type": ["integer", "null"], "description": "jobs ahead (0 = next)"},
        "progress": {
            "type": "object",
            "properties": {
                "pages_done": {"type": "integer"},
                "pages_total": {"type": ["integer", "null"]},
            },
        },
        "result": {"type": "object", "description": "the /v1/document/parse reply"},
        "error": {"type": "object"},
    },
}
_JOB_REPLY = {"content": {"application/json": {"schema": _JOB_SCHEMA}}}
_ERROR = {"description": "error", "content": {"application/json": {}}}


def _store(request: Request) -> JobStore:
    store = runtime_state(request.app).job_store
    assert store is not None  # created at start-up, before the app takes requests
    return store


def _owner(request: Request) -> str | None:
    """The caller's API key id when keys are configured (jobs are private to it)."""
    principal = getattr(request.state, "principal", None)
    return principal.key_id if principal is not None and principal.authenticated else None


async def _owned_job(request: Request, job_id: str) -> Job:
    """The job, or 404 also when another API key submitted it (no existence oracle)."""
    job = await _store(request).get(job_id)
    if job.owner is not None and job.owner != _owner(request):
        raise not_found(job_id)
    return job


async def _public(store: JobStore, job: Job) -> dict[str, Any]:
    position = await store.queue_position(job.id) if job.status is JobStatus.QUEUED else None
    return job.to_public(queue_position=position)


@router.post(
    "/v1/jobs",
    status_code=202,
    summary="Queue a document parse; poll GET /v1/jobs/{id} for the result",
    openapi_extra={"requestBody": request_body_schema(include_stream=False)},
    responses={
        202: {"description": "queued (or the job named by Idempotency-Key)", **_JOB_REPLY},
        **{s: _ERROR for s in (400, 401, 403, 409, 413, 415, 429, 503)},
    },
)
async def create_job(
    request: Request,
    idempotency_key: str | None = Header(
        None, description="retry-safe submit: same key + same body -> same job"
    ),
) -> JSONResponse:
    state = runtime_state(request.app)
    async with state.lifecycle.request_slot():
        if idempotency_key is not None and not _KEY_RE.match(idempotency_key):
            raise InvalidInput(
                "Idempotency-Key must be 1-255 visible ASCII characters",
                code="invalid_idempotency_key",
            )
        parsed = await read_parse_request(request, state.settings)
        if parsed.stream:
            raise InvalidInput("a job cannot stream; poll GET /v1/jobs/{id}", code="invalid_option")
        params = {
            "tier": "auto" if parsed.options.auto else parsed.options.tier,
            "mode": parsed.options.mode,
            "max_new_tokens": parsed.options.max_new_tokens,
            "pages": parsed.pages,
            "cache": parsed.cache,
            "tenant": parsed.tenant,  # the result cache is the owner's (result_cache.py)
        }
        store = _store(request)
        owner = _owner(request)
        if idempotency_key is not None and owner is not None:
            idempotency_key = f"{owner}/{idempotency_key}"  # one key space per API key
        # Every queued job holds its upload (memory or Redis): the store bounds the queue
        # and each key's share of it atomically with the enqueue (429 job_queue_full /
        # job_quota_exceeded); an Idempotency-Key replay still gets its existing job.
        job, created = await store.submit(
            data=parsed.data,
            params=params,
            fingerprint=request_fingerprint(parsed.data, params),
            idempotency_key=idempotency_key,
            owner=owner,
            pages_estimate=estimate_pages(
                parsed.data, parsed.pages, max_pages=state.settings.max_pages
            ),
        )
        headers = {"Location": f"/v1/jobs/{job.id}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return JSONResponse(await _public(store, job), status_code=202, headers=headers)


@router.get(
    "/v1/jobs/{job_id}",
    summary="Job status, queue position, progress and result",
    responses={200: _JOB_REPLY, 404: _ERROR},
)
async def get_job(request: Request, job_id: str = _JOB_ID) -> JSONResponse:
    job = await _owned_job(request, job_id)
    return JSONResponse(await _public(_store(request), job))


@router.delete(
    "/v1/jobs/{job_id}",
    summary="Cancel a job (queued: at once; running: at the next page)",
    responses={200: _JOB_REPLY, 404: _ERROR, 409: _ERROR},
)
async def cancel_job(request: Request, job_id: str = _JOB_ID) -> JSONResponse:
    await _owned_job(request, job_id)
    store = _store(request)
    job = await store.cancel(job_id)
    return JSONResponse(await _public(store, job))
