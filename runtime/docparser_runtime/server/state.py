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
    from ..engines.base import Engine
    from ..jobs import JobStore, JobWorker
    from ..settings import Settings
    from .auth import ApiKeyStore
    from .batcher import MicroBatcher
    from .lifecycle import Lifecycle
    from .metrics import Metrics
    from .ratelimit import RateLimiter
    from .tracing import Tracing


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
    # ParseService, or CachedParseService around it (cache.py): the same parse interface.
    parse_service: Any = None
    stream_responder: Callable[..., Any] | None = None  # set by install_streaming (sse.py)
    drain_deadline: float | None = None  # monotonic; set by server/drain.py on SIGTERM
    stop_on_load_failure: Callable[[], None] | None = None  # set by run_server
    job_store: JobStore | None = None
    job_worker: JobWorker | None = None  # once the engine is ready and the store answers
    job_metrics_task: asyncio.Task[None] | None = None
    job_starter: asyncio.Task[None] | None = None


def runtime_state(app: Starlette) -> RuntimeState:
    """The app's state (``request.app`` in a route)."""
    state: RuntimeState = app.state.runtime
    return state
