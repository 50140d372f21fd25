"""Graceful drain on SIGTERM, in the order Kubernetes needs.

Uvicorn's own SIGTERM handling closes the listening socket at once; a pod whose
endpoint is still listed would then refuse connections for a few seconds. We instead:

1. mark the lifecycle ``draining`` at once: ``/readyz`` answers 503, new ``/v1`` work
   gets 503 ``draining``, the job worker claims nothing new;
2. keep serving for ``drain_grace_s`` (the preStop window in which the endpoint is
   removed from Services), so probes and late clients get a clear answer;
3. then let uvicorn stop accepting and wait (``timeout_graceful_shutdown`` =
   ``drain_timeout_s``) for in-flight requests; the lifespan shutdown then waits for
   running jobs until the same deadline. Queued jobs stay in Redis for other replicas.

A second SIGINT/SIGTERM skips the grace window (uvicorn's usual "press again").

Before all that, the pod's preStop hook sends ``LEAVING_SIGNAL`` (SIGUSR1, through tini)
and then sleeps while endpoints drop the pod. The pod keeps answering requests in that
window (a late client must not be refused), but it claims no new job: a job taken then would
run on a pod that is going away, and when the last pod leaves (scale to zero) a job it took
woke nothing, since the queue the operator watches looked empty.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import signal
import socket
import time
from types import FrameType

import uvicorn
from fastapi import FastAPI

from docparser_runtime.server.guards.slow_clients import header_timeout_protocol
from docparser_runtime.server.ops import log_limits
from docparser_runtime.server.ops.lifecycle import State
from docparser_runtime.server.state import runtime_state
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.drain")
HANG_REPORT_S = 10.0  # past the drain deadline: write every thread's stack to stderr
LEAVING_SIGNAL = signal.SIGUSR1  # what the pod's preStop hook sends (core/render/deployment.py)


def begin_leaving(app: FastAPI) -> None:
    """The pod is being deleted: claim no new jobs, keep serving requests. Idempotent.

    ``state.leaving`` also stops a worker that starts later (a pod deleted while loading)."""
    state = runtime_state(app)
    if state.leaving:
        return
    state.leaving = True
    log.info("%s: the pod is leaving: no new jobs claimed", LEAVING_SIGNAL.name)
    if state.job_worker is not None:  # queued jobs stay in the store for other replicas
        state.job_worker.stop_claiming()


def begin_drain(app: FastAPI, reason: str = "SIGTERM received") -> None:
    """Step 1: refuse new work, report not-ready, stop claiming jobs. Idempotent."""
    state = runtime_state(app)
    if state.drain_deadline is None:
        settings = state.settings
        state.drain_deadline = time.monotonic() + settings.drain_grace_s + settings.drain_timeout_s
    state.lifecycle.start_draining(reason)
    state.metrics.ready.set(0)
    if state.job_worker is not None:  # queued jobs stay in the store for other replicas
        state.job_worker.stop_claiming()


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose exit signal first drains (see module docstring)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, *, grace_s: float) -> None:
        super().__init__(config)
        self.app = app
        self.grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False
        self._leaving_early = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        if self._leaving_early:
            begin_leaving(self.app)
        await super().serve(sockets)

    def handle_leaving(self, sig: int, frame: FrameType | None) -> None:
        """The ``LEAVING_SIGNAL`` handler: the work runs on the event loop (as for SIGTERM);
        a signal before the loop runs is remembered (its default action would kill us)."""
        if self._loop is None:
            self._leaving_early = True
        else:
            self._loop.call_soon_threadsafe(begin_leaving, self.app)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._draining = True
        # A signal handler may interrupt code holding the lifecycle's lock: do the work
        # on the event loop instead of here.
        self._loop.call_soon_threadsafe(self._start_drain, sig)

    def _start_drain(self, sig: int) -> None:
        log.info(
            "%s: draining (readyz 503), stop accepting in %.1fs",
            signal.Signals(sig).name,
            self.grace_s,
        )
        begin_drain(self.app, f"{signal.Signals(sig).name} received")
        # Past its deadline the process should be gone; if it is not, its log says where
        # every thread waits (the kubelet's SIGKILL at the end of the grace period would
        # leave no trace of why).
        faulthandler.dump_traceback_later(
            self.grace_s + runtime_state(self.app).settings.drain_timeout_s + HANG_REPORT_S,
            exit=False,
        )
        assert self._loop is not None
        self._loop.call_later(self.grace_s, super().handle_exit, sig, None)


def write_termination_message(path: str, message: str) -> None:
    """Best effort: Kubernetes shows this file's text as the container's termination
    message (and the operator reports it as FailedToLoad); nothing else depends on it."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(message[:4000])
    except OSError as exc:
        log.warning("could not write the termination message to %s: %s", path, exc)


def run_server(app: FastAPI, settings: Settings) -> int:
    """Serve ``app`` until a signal, then drain (used by ``docparser-runtime serve``).

    Returns the exit status: 1 when the engine could not load (the lifespan stops the
    server at once and the reason goes to ``settings.termination_log``), else 0."""
    log_limits.install()  # no log flood when the process runs out of file descriptors
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=int(settings.drain_timeout_s) or None,
        access_log=False,
        # Proxy headers only from configured proxies (uvicorn trusts 127.0.0.1 by default).
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or "",
        limit_concurrency=settings.max_connections,
        # uvicorn types it int but uses it as seconds in asyncio's call_later (a float is fine)
        timeout_keep_alive=settings.keep_alive_timeout_s,  # type: ignore[arg-type]
        http=header_timeout_protocol(settings.header_timeout_s),
    )
    server = DrainingServer(config, app, grace_s=settings.drain_grace_s)
    signal.signal(LEAVING_SIGNAL, server.handle_leaving)  # uvicorn captures SIGINT/SIGTERM only
    runtime_state(app).stop_on_load_failure = lambda: setattr(server, "should_exit", True)
    server.run()
    lifecycle = runtime_state(app).lifecycle
    if lifecycle.state is State.FAILED:
        reason = f"serve: engine failed to load: {lifecycle.reason}"
        write_termination_message(settings.termination_log, reason)
        log.error("%s", reason)
        return 1
    return 0
