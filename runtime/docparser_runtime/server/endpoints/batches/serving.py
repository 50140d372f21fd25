"""The batch line runner and the batch worker's life in the server.

A line becomes a ``ParseRequest`` the way its endpoint's own route makes one (the OpenAI chat
shape through the OpenAI route's parser, ``/v1/document/parse`` through ``build_parse_request``)
and runs through the same parse service, at ``Priority.BATCH``: below interactive requests and
jobs, and never aged above them; a batch within ``DOCPARSER_BATCH_URGENT_S`` of the end of its
window runs at job priority instead. A ``uri`` line reads only under a prefix the admin allowed
(``DOCPARSER_BATCH_URI_PREFIXES``), bounded in size. The worker starts with the engine, and a
leaving or draining pod claims no new line; the lines it holds finish within its drain
deadline, and only those left then go back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError

from docparser_runtime.batches.backend import BatchBackend, create_batch_backend
from docparser_runtime.batches.lines import LineError, RequestLine, uri_allowed
from docparser_runtime.batches.models import Batch
from docparser_runtime.batches.storage import read_uri
from docparser_runtime.batches.worker import BatchLimits, BatchWorker, LineRunner
from docparser_runtime.errors import Overloaded, PayloadTooLarge
from docparser_runtime.jobs.worker import default_worker_id
from docparser_runtime.server.endpoints.batches.metrics import BatchMetrics
from docparser_runtime.server.endpoints.openai.api_router import (
    completion_reply,
    model_ids,
    to_parse_request,
)
from docparser_runtime.server.endpoints.openai.protocol import ChatCompletionRequest
from docparser_runtime.server.endpoints.parse.request_input import (
    build_parse_request,
    decode_base64_document,
)
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.ops.lifecycle import State
from docparser_runtime.server.protocol import ParseReply, ParseRequest
from docparser_runtime.server.state import RuntimeState, runtime_state
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.batches")
CHAT = "/v1/chat/completions"


def _invalid(exc: ValidationError) -> LineError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return LineError(f"body.{where}: {first.get('msg')}", code="invalid_request")


async def document_request(body: dict[str, Any], settings: Settings, key_id: str) -> ParseRequest:
    """A ``/v1/document/parse`` line: ``image`` (base64) or ``uri``, plus the route's options."""
    fields = dict(body)
    image, uri = fields.pop("image", None), fields.pop("uri", None)
    if (image is None) == (uri is None):
        raise LineError("give exactly one of 'image' (base64) or 'uri'", code="missing_file")
    if fields.get("stream"):
        raise LineError("a batch line cannot stream", code="invalid_option")
    limit = settings.max_upload_bytes
    if uri is not None:
        if not isinstance(uri, str) or not uri_allowed(uri, settings.batch_uri_prefixes, key_id):
            raise LineError(
                "uri is not under a prefix this API key may read (DOCPARSER_BATCH_URI_PREFIXES)",
                code="uri_not_allowed",
            )
        try:
            data = await read_uri(uri, limit, "DOCPARSER_MAX_UPLOAD_BYTES")
        except (OSError, ValueError) as exc:
            message = f"uri cannot be read ({type(exc).__name__})"
            raise LineError(message, code="uri_unreadable") from None
    else:
        data = decode_base64_document(image)
        if len(data) > limit:
            raise PayloadTooLarge(f"document exceeds the {limit}-byte limit")
    return build_parse_request(data, fields, settings)


async def _parse(state: RuntimeState, request: ParseRequest) -> ParseReply:
    """Through the parse service with a job's deadline; a full batcher means wait, not fail."""
    deadline = time.monotonic() + state.settings.job_timeout_s
    async with state.lifecycle.request_slot(check=False):
        while True:
            try:
                return await state.parser.parse(request, deadline=deadline)
            except Overloaded as exc:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(min(max(exc.retry_after_s, 0.1), 5.0))


def make_line_runner(app: FastAPI) -> LineRunner:
    state = runtime_state(app)

    async def run(batch: Batch, line: RequestLine) -> dict[str, Any]:
        settings = state.settings
        chat: ChatCompletionRequest | None = None
        if batch.endpoint == CHAT:
            try:
                chat = ChatCompletionRequest.model_validate(line.body)
            except ValidationError as exc:
                raise _invalid(exc) from None
            if chat.stream:
                raise LineError("a batch line cannot stream", code="invalid_option")
            if chat.model not in model_ids(state):
                raise LineError(f"model {chat.model!r} is not served here", code="model_not_found")
            request = await to_parse_request(chat, settings)
        else:
            request = await document_request(line.body, settings, batch.owner)
        urgent = batch.expires_at - time.time() < settings.batch_urgent_s
        priority = Priority.JOB if urgent else Priority.BATCH
        result = await _parse(state, replace(request, tenant=batch.owner, priority=priority))
        if chat is None:
            return result.body()
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        return completion_reply(result, cid=cid, model=chat.model, created=int(time.time()))

    return run


def batch_limits(settings: Settings) -> BatchLimits:
    return BatchLimits(
        max_lines=settings.batch_max_lines,
        # a base64 document of the upload limit, its options and the line's envelope
        max_line_bytes=settings.max_upload_bytes * 4 // 3 + 1024 * 1024,
        ttl_s=settings.batch_ttl_s,
    )


async def _start_when_ready(app: FastAPI, backend: BatchBackend) -> None:
    state = runtime_state(app)
    while state.lifecycle.state is State.STARTING:
        await asyncio.sleep(0.05)
    if not state.lifecycle.is_ready:
        return  # an engine that failed runs no batch line (other replicas will)
    settings = state.settings
    worker = BatchWorker(
        backend.store,
        backend.storage,
        make_line_runner(app),
        batch_limits(settings),
        worker_id=default_worker_id(),
        accepting=lambda: state.lifecycle.is_ready and not state.leaving,
        concurrency=settings.batch_workers,
        lease_s=settings.job_lease_s,
        poll_s=settings.batch_poll_s,
        revision=settings.revision,
    )
    while True:  # Redis may not be up yet (pods start in any order)
        try:
            await worker.start()
            break
        except Exception as exc:
            log.warning("batch store unreachable (%s); retrying in 2s", type(exc).__name__)
            await asyncio.sleep(2.0)
    state.batch_worker = worker
    log.info("batch worker %s started (%d slots)", worker.worker_id, settings.batch_workers)


@contextlib.asynccontextmanager
async def batch_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The batch routes' part of the app's life (a router lifespan: FastAPI runs it inside
    the app's, so the engine's bring-up has begun and the batcher outlives the worker)."""
    state = runtime_state(app)
    settings = state.settings
    backend = create_batch_backend(settings)
    state.batch_backend = backend
    starter = gauges = None
    if backend is not None and settings.role != "front" and settings.batch_workers > 0:
        starter = asyncio.create_task(_start_when_ready(app, backend), name="batch-start")
    if settings.redis_url:  # the backlog, on every pod that shares the batches' Redis
        refresh = BatchMetrics(state.metrics.registry).refresh
        gauges = asyncio.create_task(
            refresh(settings.redis_url, settings.redis_prefix), name="batch-metrics"
        )
    try:
        yield
    finally:
        for task in (starter, gauges):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if state.batch_worker is not None:
            # The lines claimed finish within the pod's drain (one deadline, set at SIGTERM:
            # the grace period is sized from it); what is left then goes back to the queue.
            deadline = state.drain_deadline or time.monotonic() + settings.drain_timeout_s
            await state.batch_worker.stop(deadline)
            state.batch_worker = None
        if backend is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(backend.close(), 3.0)
