"""The FastAPI application factory.

``create_app`` wires settings, metrics, the lifecycle, the micro-batcher and the parse
service into one app. The engine is created, loaded and warmed up on a background thread
inside the lifespan, so the server answers ``/livez`` and ``/readyz`` (503 "starting")
while a multi-GB model loads; ``/readyz`` turns 200 only after warm-up.

``app.state.runtime`` holds one typed ``RuntimeState`` (state.py): read it with
``runtime_state(app)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docparser_runtime.engines.base import Engine
from docparser_runtime.engines.registry import create_engine
from docparser_runtime.result_cache import with_result_cache
from docparser_runtime.server.endpoints.batches import api_router as batches_api
from docparser_runtime.server.endpoints.files import api_router as files_api
from docparser_runtime.server.endpoints.health import api_router as health_api
from docparser_runtime.server.endpoints.jobs import api_router as jobs_api
from docparser_runtime.server.endpoints.jobs.serving import start_jobs, stop_jobs
from docparser_runtime.server.endpoints.openai import api_router as openai_api
from docparser_runtime.server.endpoints.parse import api_router as parse_api
from docparser_runtime.server.endpoints.parse.serving import ParseService
from docparser_runtime.server.endpoints.parse.streaming import install_streaming
from docparser_runtime.server.endpoints.shadow import api_router as shadow_api
from docparser_runtime.server.error_mapping import install_error_handlers
from docparser_runtime.server.front.proxy import Front
from docparser_runtime.server.front.wire import ForwardHeaders
from docparser_runtime.server.guards.auth import PASSED, auth_outcome, create_key_store
from docparser_runtime.server.guards.body_memory import BodyMemory
from docparser_runtime.server.guards.internal_auth import SecretFile
from docparser_runtime.server.guards.ratelimit import RateLimiter, admission, is_protected_path
from docparser_runtime.server.guards.slow_clients import BodyDeadline
from docparser_runtime.server.inference.continuous import make_batcher
from docparser_runtime.server.inference.document_loader import DocumentLoader
from docparser_runtime.server.ops.lifecycle import Lifecycle
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.server.ops.request_log import RequestLogMiddleware
from docparser_runtime.server.ops.tracing import install_tracing
from docparser_runtime.server.protocol import ParseReply
from docparser_runtime.server.shadow.sender import ShadowMirror
from docparser_runtime.server.state import RuntimeState, runtime_state
from docparser_runtime.settings import Settings
from docparser_runtime.sizing.host_memory import MemoryBudget, front_budget, settings_budget

log = logging.getLogger("docparser.server")


class RequestMetricsMiddleware:
    """Counts every HTTP request by route template (not raw path) and status.

    A ``/v1`` request counts as a client request (and restarts the idleness clock scale to
    zero reads) only once it passed routing and the API-key check (guards/auth.py); the
    others count by reason in ``docparser_unauthorized_requests_total`` and nowhere else,
    so keyless or mistyped calls can neither keep GPU pods awake nor pass for traffic.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        client = is_protected_path(scope.get("path", ""))

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or "unmatched"
            outcome = auth_outcome(scope) if client else PASSED
            if outcome != PASSED:
                self.metrics.count_unauthorized(outcome)
            else:
                if client:
                    self.metrics.client_request()  # the clock restarts as it ends, too
                self.metrics.count_request(
                    route=label, method=scope.get("method", ""), status=str(status), client=client
                )


async def _bring_up(app: FastAPI, engine: Engine | None, engine_loaded: bool) -> None:
    """Create, load and warm up the engine off the event loop, then open for traffic."""
    state = runtime_state(app)
    settings: Settings = state.settings
    try:
        if engine is None:
            engine = await asyncio.to_thread(create_engine, settings)
        state.engine = engine
        if not engine_loaded:
            log.info("loading engine %s", engine.name)
            await asyncio.to_thread(engine.load)
        await asyncio.to_thread(engine.warmup)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("engine failed to start")
        state.lifecycle.mark_failed(f"{type(exc).__name__}: {exc}")
        stop = state.stop_on_load_failure
        if stop is not None and settings.exit_on_load_failure:
            stop()  # `serve` then exits non-zero with the reason (server/drain.run_server)
        return
    budget = settings_budget(settings, engine.name)
    log.info("host memory: %s", budget.describe())
    batcher = make_batcher(engine, settings, state.metrics)
    batcher.start()
    state.batcher = batcher
    service = ParseService(
        settings,
        engine,
        batcher,
        state.metrics,
        loader=state.document_loader,
        tracing=state.tracing,
        host_budget=budget,
    )
    state.parse_service = with_result_cache(
        service, settings, state.metrics.registry, ParseReply.from_cache
    )
    state.uncached_parser = service
    state.host_memory = service.memory  # request bodies are charged to it too
    if state.shadow is not None:
        state.shadow.memory = service.memory  # copies held for comparison count in it
    await service.decoder.wait_started()
    state.metrics.set_engine(engine.name, engine.version)
    state.metrics.ready.set(1)
    state.lifecycle.mark_ready()
    log.info("engine %s %s ready", engine.name, engine.version)


async def _bring_up_front(app: FastAPI) -> None:
    """The CPU front (role front) has nothing to load: it opens for traffic at once. Its
    parse service holds and forwards (server/front/proxy.py); jobs go to Redis."""
    state = runtime_state(app)
    settings: Settings = state.settings
    front = Front(settings, state.metrics, lambda: state.drain_deadline)
    state.front = front
    budget = front_budget(settings)
    log.info("host memory: %s", budget.describe())
    state.host_memory = MemoryBudget(budget)  # what the bodies it reads are charged to
    proxy = front.start()
    # The pods' result cache answers here too when the front knows the identity they key it
    # by (the operator sets DOCPARSER_MODEL_VERSION on both): a hit wakes no GPU.
    state.parse_service = (
        with_result_cache(proxy, settings, state.metrics.registry, ParseReply.from_cache)
        if settings.model_version
        else proxy
    )
    state.lifecycle.mark_ready()
    log.info("front ready: jobs to Redis, parses held for %s", settings.front_backend_url)


async def _shut_down(app: FastAPI, bring_up: asyncio.Task[None]) -> None:
    state = runtime_state(app)
    state.lifecycle.start_draining()
    state.metrics.ready.set(0)
    bring_up.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await bring_up
    # Running jobs finish (or go back to the queue) before the batcher closes. One deadline
    # for every wait (set at SIGTERM): the pod's grace period is sized from it, and a wait
    # that started its own full timeout here would outlive it and be SIGKILLed.
    deadline = state.drain_deadline or time.monotonic() + state.settings.drain_timeout_s
    await stop_jobs(app, deadline=deadline)
    if state.shadow is not None:
        await state.shadow.close()  # copies not yet compared are dropped, not waited for
    await state.lifecycle.wait_idle(max(0.0, deadline - time.monotonic()))
    if state.batcher is not None:
        await state.batcher.close()
    if state.parse_service is not None:
        state.parse_service.close()
    if state.engine is not None and state.owns_engine:
        await asyncio.to_thread(state.engine.close)
    if state.front is not None:
        await state.front.close()
    await asyncio.to_thread(state.tracing.shutdown)  # flush the last spans


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    *,
    engine_loaded: bool = False,
    document_loader: DocumentLoader | None = None,
    tracer_provider: Any = None,
) -> FastAPI:
    """Build the app. ``engine``: use this engine instead of ``settings.engine``
    (``engine_loaded=True`` skips ``load()`` and leaves ``close()`` to the caller, e.g. a
    model shared by tests or benchmarks);
    ``document_loader``: replaces the preprocessing pipeline (tests only);
    ``tracer_provider``: an OpenTelemetry provider for ``settings.tracing`` instead of the
    OTLP exporter's (tests)."""
    settings = settings or Settings()
    problem = settings.role_problem()
    if problem is not None:
        raise ValueError(problem)
    front = settings.role == "front"

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bring_up = _bring_up_front(app) if front else _bring_up(app, engine, engine_loaded)
        task = asyncio.create_task(bring_up, name="bring-up")
        await start_jobs(app)
        shadow = runtime_state(app).shadow
        if shadow is not None:
            await shadow.start()
        try:
            yield
        finally:
            await _shut_down(app, task)

    metrics = Metrics(model=settings.engine, version=settings.model_version or "", front=front)
    api_keys = create_key_store(settings.api_keys_file)
    rate_limiter = RateLimiter.from_settings(settings)
    app = FastAPI(
        title="docparser runtime",
        version="0.1.0",
        summary="Document parsing with DeepSeek-OCR-2-class models",
        lifespan=lifespan,
        # API keys and per-key limits on every /v1 route; probes and /metrics stay open.
        dependencies=[Depends(admission(api_keys, rate_limiter, metrics))],
    )
    state = RuntimeState(
        settings=settings,
        metrics=metrics,
        lifecycle=Lifecycle(),
        tracing=install_tracing(
            app,
            enabled=settings.tracing,
            version=settings.model_version or "",
            provider=tracer_provider,
        ),
        internal_token=SecretFile(settings.internal_token_file, "internal token"),
        admin_key=SecretFile(settings.admin_key_file, "admin key"),
        engine=engine,
        owns_engine=not engine_loaded,
        document_loader=document_loader,
    )
    if not front:  # the pod that answers a forwarded parse is the one that mirrors it
        state.shadow = ShadowMirror(settings, state.metrics.registry, token=state.internal_token)
    app.state.runtime = state
    install_error_handlers(app)
    if front:  # innermost: the forwarded parse carries the caller's key and request id
        app.add_middleware(ForwardHeaders)
    app.add_middleware(BodyMemory, budget=lambda: state.host_memory)
    app.add_middleware(  # inside the metrics middleware, so its 408s are counted
        BodyDeadline, idle_s=settings.body_idle_timeout_s, total_s=settings.body_timeout_s
    )
    app.add_middleware(RequestMetricsMiddleware, metrics=state.metrics)
    app.add_middleware(RequestLogMiddleware)  # outermost: sees every reply, adds its id
    app.include_router(health_api.router)
    app.include_router(parse_api.router)
    app.include_router(jobs_api.router)
    app.include_router(openai_api.router)
    app.include_router(shadow_api.router)
    app.include_router(files_api.router)
    app.include_router(batches_api.router)  # with its lifespan: the batch worker
    install_streaming(app)
    return app
