"""Everything one app instance holds, as one typed object instead of loose ``app.state``
attributes.

``create_app`` builds a ``RuntimeState`` and stores it as ``app.state.runtime``; every
module reads it through ``runtime_state(app)``. Attributes that appear later in the app's
life (the batcher once the engine is warm, the job worker once it starts) are declared
here with ``None`` until then, so a reader sees every field, its type and what "not yet"
looks like in one place, and a typo is an AttributeError, not a silent ``None``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette

if TYPE_CHECKING:
    from docparser_runtime.engines.base import Engine
    from docparser_runtime.jobs import JobStore, JobWorker
    from docparser_runtime.server.guards.auth import ApiKeyStore
    from docparser_runtime.server.guards.ratelimit import RateLimiter
    from docparser_runtime.server.inference.batcher import MicroBatcher
    from docparser_runtime.server.ops.lifecycle import Lifecycle
    from docparser_runtime.server.ops.metrics import Metrics
    from docparser_runtime.server.ops.tracing import Tracing
    from docparser_runtime.settings import Settings


@dataclass
class RuntimeState:
    settings: Settings
    metrics: Metrics
    lifecycle: Lifecycle
    api_keys: ApiKeyStore | None
    rate_limiter: RateLimiter | None
    tracing: Tracing
    engine: Engine | None = None  # created in the background when not given
    owns_engine: bool = True  # False: the caller loaded it and closes it
    document_loader: Any = None  # tests replace the preprocessing pipeline
    batcher: MicroBatcher | None = None  # once the engine is warm
    # ParseService, or CachedParseService around it (result_cache.py): the same parse interface.
    parse_service: Any = None
    # set by install_streaming (endpoints/parse/streaming.py)
    stream_responder: Callable[..., Any] | None = None
    drain_deadline: float | None = None  # monotonic; set by server/ops/drain.py on SIGTERM
    stop_on_load_failure: Callable[[], None] | None = None  # set by run_server
    job_store: JobStore | None = None
    job_worker: JobWorker | None = None  # once the engine is ready and the store answers
    job_metrics_task: asyncio.Task[None] | None = None
    job_starter: asyncio.Task[None] | None = None


def runtime_state(app: Starlette) -> RuntimeState:
    """The app's state (``request.app`` in a route)."""
    state: RuntimeState = app.state.runtime
    return state
