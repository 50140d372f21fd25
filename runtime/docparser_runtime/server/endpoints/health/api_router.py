"""Probes and metrics: never authenticated, never blocked by the engine.

``/livez`` answers while the process is alive (the event loop turns) and the engine is not
stuck in one call for longer than ``engine_stall_s``; ``/readyz`` is
200 only when the engine is loaded and warmed up and the server is not draining, so
Kubernetes sends traffic only to replicas that can serve it. The CPU front
(``DOCPARSER_ROLE=front``) has no engine: it is ready while not draining and its Redis
answers a ping within a second.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from docparser_runtime.server.state import RuntimeState, runtime_state

REDIS_PING_TIMEOUT_S = 1.0

router = APIRouter(tags=["health"])


@router.get(
    "/livez",
    summary="Liveness: the process is alive and the engine is not wedged",
    responses={503: {"description": "one engine call has run longer than engine_stall_s"}},
)
async def livez(request: Request) -> JSONResponse:
    """A hung GPU call (driver fault, deadlock) never returns and every request would
    time out; reporting it here lets Kubernetes restart the container."""
    state = runtime_state(request.app)
    body: dict[str, object] = {"status": "alive", "state": state.lifecycle.state.value}
    batcher = state.batcher
    limit = state.settings.engine_stall_s
    if batcher is not None and limit and batcher.busy_for_s > limit:
        body["status"] = "stalled"
        body["engine_busy_s"] = round(batcher.busy_for_s, 1)
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)


@router.get(
    "/readyz",
    summary="Readiness: engine loaded, warmed up, not draining",
    responses={503: {"description": "starting, draining or failed"}},
)
@router.get(
    "/health",
    summary="Health as the deployment guides' load balancers expect: 200 once ready "
    "(the same answer as /readyz)",
    responses={503: {"description": "starting, draining or failed"}},
)
async def readyz(request: Request) -> JSONResponse:
    state = runtime_state(request.app)
    body = state.lifecycle.snapshot()
    if state.settings.role == "front":
        return await _front_ready(state, body)
    engine = state.engine
    if engine is not None:
        body["engine"] = engine.name
    if state.lifecycle.is_ready:
        assert engine is not None  # ready means the engine is loaded
        body["version"] = engine.version
        return JSONResponse(body)
    return JSONResponse(body, status_code=503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    m = runtime_state(request.app).metrics
    return Response(m.render(), media_type=m.content_type)


async def _front_ready(state: RuntimeState, body: dict[str, object]) -> JSONResponse:
    """The CPU front is ready while its Redis answers: every job it accepts waits there."""
    body["role"] = "front"
    if not state.lifecycle.is_ready:
        return JSONResponse(body, status_code=503)
    store = state.job_store
    try:
        if store is None:
            raise ConnectionError("no job store")
        await asyncio.wait_for(store.ping(), REDIS_PING_TIMEOUT_S)
    except Exception as exc:
        body["status"] = "redis_unreachable"
        body["reason"] = f"Redis did not answer ({type(exc).__name__})"
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)
