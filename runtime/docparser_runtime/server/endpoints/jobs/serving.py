"""Glue between the jobs package and the server: the job runner and its lifecycle.

The runner turns a stored job (bytes + options) back into a ``ParseRequest`` and runs it
through the same ``ParseService`` as the synchronous route. Progress is reported per
finished page; every report (and a poll while a long page generates) is also where a
``DELETE`` is noticed: the parse task is then cancelled, which takes the job's queued
pages out of the micro-batcher, so a running job stops at the next page boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

from fastapi import FastAPI

from docparser_runtime.errors import Overloaded
from docparser_runtime.jobs import Backlog, JobStopped, JobWorker, create_job_store
from docparser_runtime.jobs.worker import CLEANUP_S, JobRunner, ProgressFn
from docparser_runtime.server.endpoints.parse.request_input import build_parse_request
from docparser_runtime.server.inference.priorities import Priority
from docparser_runtime.server.ops.lifecycle import State
from docparser_runtime.server.ops.metrics import Metrics
from docparser_runtime.server.protocol import ParseReply
from docparser_runtime.server.state import runtime_state
from docparser_runtime.settings import Settings

log = logging.getLogger("docparser.jobs")

_POLL_S = 1.0
_NOT_OPTIONS = frozenset({"tenant"})  # stored with a job's options, not an option itself


def make_runner(app: FastAPI) -> JobRunner:
    """A ``JobRunner`` bound to the app's (lazily created) parse service."""
    state = runtime_state(app)

    async def run(data: bytes, params: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        settings: Settings = state.settings
        request = build_parse_request(data, params, settings, allowed_extra=_NOT_OPTIONS)
        # Someone waits on a synchronous request; a job yields decode slots to it
        # (within the scheduler's bound on waiting: server/inference/continuous.py).
        tenant = str(params.get("tenant") or "")
        request = replace(request, tenant=tenant, priority=Priority.JOB)
        # The page count comes from the parse itself (the sandboxed decoder opens the
        # document): the server process never parses an untrusted PDF to count pages.
        total = 0
        done = 0
        pages_changed = asyncio.Event()

        def on_total(count: int) -> None:
            nonlocal total
            total = count
            pages_changed.set()

        def on_page(_page: dict[str, Any]) -> None:
            nonlocal done
            done += 1
            pages_changed.set()

        await progress(0, total)

        async def attempt() -> ParseReply:
            # A job has its own deadline: long documents are what jobs are for, so the
            # synchronous request timeout does not apply (DOCPARSER_JOB_TIMEOUT_S).
            deadline = time.monotonic() + settings.job_timeout_s
            parse = asyncio.ensure_future(
                state.parser.parse(request, on_page=on_page, on_total=on_total, deadline=deadline)
            )
            try:
                while not parse.done():
                    changed = asyncio.ensure_future(pages_changed.wait())
                    await asyncio.wait(
                        {parse, changed}, timeout=_POLL_S, return_when="FIRST_COMPLETED"
                    )
                    changed.cancel()
                    pages_changed.clear()
                    if not parse.done():
                        await progress(done, max(total, done))
            finally:
                if not parse.done():  # cancelled, lost, or the worker is being stopped
                    parse.cancel()
                    with contextlib.suppress(BaseException):
                        await parse
            return parse.result()

        async with state.lifecycle.request_slot(check=False):
            while True:
                try:
                    result = (await attempt()).body()  # what the job store keeps (JSON)
                except Overloaded as exc:
                    # Synchronous traffic filled the batcher: a job waits, it does not fail.
                    await progress(0, total)
                    await asyncio.sleep(min(max(exc.retry_after_s, 0.1), 5.0))
                    continue
                if state.shadow is not None:
                    # Compared like a sync answer; the owner's result is not touched (the
                    # shadow keeps references to its page texts, never changes them).
                    state.shadow.offer(request, result)
                return result

    return run


class JobMetrics:
    """Job metrics in the app's registry. ``docparser_jobs_queued`` / ``_pages`` are the
    queue of this pod's revision (the same on each of its pods when Redis is used); the
    refresh also hands the app's ``Metrics`` this pod's share of those pages, which
    ``docparser_backlog_pages`` adds to the pages in flight."""

    def __init__(self, metrics: Metrics) -> None:
        from prometheus_client import Counter, Gauge

        registry = metrics.registry
        self.metrics = metrics
        self.queued = Gauge(
            "docparser_jobs_queued",
            "Jobs waiting in this revision's job queue.",
            registry=registry,
        )
        self.queued_pages = Gauge(
            "docparser_jobs_queued_pages",
            "Estimated pages of the jobs waiting in this revision's queue.",
            registry=registry,
        )
        self.running = Gauge(
            "docparser_jobs_running", "Jobs running on this replica.", registry=registry
        )
        self.finished = Counter(
            "docparser_jobs_finished",
            "Jobs this replica finished, by outcome.",
            ["status"],
            registry=registry,
        )

    async def refresh(self, app: FastAPI, *, every_s: float = 2.0) -> None:
        state = runtime_state(app)
        while True:
            worker, store = state.job_worker, state.job_store
            self.running.set(worker.running_jobs if worker is not None else 0)
            with contextlib.suppress(Exception):  # the store may be down: keep the last values
                backlog = await store.backlog() if store is not None else Backlog(0, 0, 1)
                self.queued.set(backlog.jobs)
                self.queued_pages.set(backlog.pages)
                self.metrics.queued_job_pages_share = backlog.pages_per_worker
            front = self.metrics.front
            if front is not None and store is not None:
                with contextlib.suppress(Exception):
                    front.queued_jobs.set(await store.queued_total())
            await asyncio.sleep(every_s)


async def start_jobs(app: FastAPI) -> None:
    """Create the store (routes need it at once) and start workers once the engine is
    ready; a replica whose engine failed never takes jobs (other replicas will)."""
    state = runtime_state(app)
    settings: Settings = state.settings
    store = create_job_store(settings)
    state.job_store = store
    state.job_worker = None
    metrics = JobMetrics(state.metrics)
    state.job_metrics_task = asyncio.create_task(metrics.refresh(app), name="jobs-metrics")
    if settings.job_workers <= 0 or settings.role == "front":
        return  # the front runs no jobs: the GPU pods' workers take them from Redis

    async def start_when_ready() -> None:
        while state.lifecycle.state is State.STARTING:
            await asyncio.sleep(0.05)
        if not state.lifecycle.is_ready or state.leaving:
            return
        worker = JobWorker(
            store,
            make_runner(app),
            concurrency=settings.job_workers,
            lease_s=settings.job_lease_s,
            on_finished=lambda status: metrics.finished.labels(status=str(status)).inc(),
        )
        while True:  # the shared store may not be up yet (pods start in any order)
            try:
                await worker.start()
                break
            except Exception as exc:
                log.warning("job store unreachable (%s); retrying in 2s", type(exc).__name__)
                await asyncio.sleep(2.0)
        state.job_worker = worker
        log.info("job worker %s started (%d slots)", worker.worker_id, settings.job_workers)
        if state.leaving:  # the pod was deleted while it loaded (server/drain.py)
            worker.stop_claiming()

    state.job_starter = asyncio.create_task(start_when_ready(), name="jobs-start")


async def stop_jobs(app: FastAPI, *, deadline: float | None = None) -> None:
    """Let running jobs finish until ``deadline`` (monotonic), then close the store."""
    state = runtime_state(app)
    for task in (state.job_starter, state.job_metrics_task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if deadline is None:
        deadline = time.monotonic() + state.settings.drain_timeout_s
    worker, store = state.job_worker, state.job_store
    if worker is not None:
        await worker.drain(deadline - time.monotonic())
    elif store is not None:
        with contextlib.suppress(Exception):  # a timeout too: the pod's grace period ends
            await asyncio.wait_for(store.shutdown(), CLEANUP_S)
    if store is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(store.close(), CLEANUP_S)


__all__ = ["JobStopped", "make_runner", "start_jobs", "stop_jobs"]
