"""Probes and metrics: never authenticated, never blocked by the engine.

``/livez`` answers while the process is alive (the event loop turns); ``/readyz`` is
200 only when the engine is loaded and warmed up and the server is not draining, so
Kubernetes sends traffic only to replicas that can serve it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

router = APIRouter(tags=["health"])


@router.get("/livez", summary="Liveness: the process is alive")
async def livez(request: Request) -> JSONResponse:
    return JSONResponse({"status": "alive", "state": request.app.state.lifecycle.state.value})


@router.get(
    "/readyz",
    summary="Readiness: engine loaded, warmed up, not draining",
    responses={503: {"description": "starting, draining or failed"}},
)
async def readyz(request: Request) -> JSONResponse:
    state = request.app.state
    body = state.lifecycle.snapshot()
    engine = getattr(state, "engine", None)
    if engine is not None:
        body["engine"] = engine.name
    if state.lifecycle.is_ready:
        body["version"] = engine.version
        return JSONResponse(body)
    return JSONResponse(body, status_code=503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    m = request.app.state.metrics
    return Response(m.render(), media_type=m.content_type)
