"""Everything one app instance holds, as one typed object instead of loose ``app.state``
attributes.

``create_app`` builds a ``RuntimeState`` and stores it as ``app.state.runtime``; every
module reads it through ``runtime_state(app)``. Attributes that appear later in the app's
life (the batcher once the engine is warm, the job worker once it starts) are declared
here with ``None`` until then, so a reader sees every field, its type and what "not yet"
looks like in one place, and a typo is an AttributeError, not a silent ``None``.

It sits just below the endpoints and ``drain``, its only readers (import-linter's server
layers): it holds the parts below it and the parse's types from ``protocol``, and nothing
below it reads it (the guards are handed what they check by ``create_app``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.applications import Starlette

from docparser_runtime.errors import Unavailable

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from docparser_runtime.batches.backend import BatchBackend
    from docparser_runtime.batches.worker import BatchWorker
    from docparser_runtime.engines.base import Engine
    from docparser_runtime.jobs import JobStore, JobWorker
    from docparser_runtime.result_cache import Parser
    from docparser_runtime.server.front.proxy import Front
    from docparser_runtime.server.guards.internal_auth import SecretFile
    from docparser_runtime.server.inference.batcher import MicroBatcher
    from docparser_runtime.server.inference.document_loader import DocumentLoader
    from docparser_runtime.server.ops.lifecycle import Lifecycle
    from docparser_runtime.server.ops.metrics import Metrics
    from docparser_runtime.server.ops.tracing import Tracing
    from docparser_runtime.server.protocol import ParseReply, ParseRequest
    from docparser_runtime.server.shadow.sender import ShadowMirror
    from docparser_runtime.settings import Settings
    from docparser_runtime.sizing.host_memory import MemoryBudget


@dataclass
class RuntimeState:
    settings: Settings
    metrics: Metrics
    lifecycle: Lifecycle
    tracing: Tracing
    internal_token: SecretFile  # the shadow mirror's credential (guards/internal_auth.py)
    admin_key: SecretFile  # /admin/v1/ routes
    engine: Engine | None = None  # created in the background when not given
    owns_engine: bool = True  # False: the caller loaded it and closes it
    document_loader: DocumentLoader | None = None  # tests replace the preprocessing pipeline
    batcher: MicroBatcher | None = None  # once the engine is warm
    # ParseService, or CachedParseService around it (result_cache.py): the same parse interface.
    parse_service: Parser[ParseRequest, ParseReply] | None = None  # once the engine is warm
    # The ParseService itself, without the cache: the shadow mirror path parses through it.
    uncached_parser: Parser[ParseRequest, ParseReply] | None = None
    shadow: ShadowMirror | None = None  # the shadow canary's sampler and sender
    # set by install_streaming (endpoints/parse/streaming.py)
    stream_responder: Callable[[Request, ParseRequest], Awaitable[Response]] | None = None
    drain_deadline: float | None = None  # monotonic; set by server/drain.py on SIGTERM
    leaving: bool = False  # the pod's preStop hook signalled (server/drain.py): no new jobs
    stop_on_load_failure: Callable[[], None] | None = None  # set by run_server
    job_store: JobStore | None = None
    job_worker: JobWorker | None = None  # once the engine is ready and the store answers
    job_metrics_task: asyncio.Task[None] | None = None
    job_starter: asyncio.Task[None] | None = None
    front: Front | None = None  # role front: the backend poller and the forwarding session
    batch_backend: BatchBackend | None = None  # /v1/files and /v1/batches, when configured
    batch_worker: BatchWorker | None = None  # once the engine is ready (endpoints/batches)
    # What request bodies are charged to before they are read (guards/body_memory.py): the
    # parse service's budget on a pod, the front's own at the front; once brought up.
    host_memory: MemoryBudget | None = None

    @property
    def parser(self) -> Parser[ParseRequest, ParseReply]:
        """The parse service. Routes run only once the engine is ready (the lifecycle
        refuses them before), and then it is set."""
        if self.parse_service is None:
            raise Unavailable("the engine is still loading; retry shortly", code="starting")
        return self.parse_service


def runtime_state(app: Starlette) -> RuntimeState:
    """The app's state (``request.app`` in a route)."""
    state: RuntimeState = app.state.runtime
    return state
