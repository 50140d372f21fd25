"""Background workers that run queued jobs inside the server process.

Each replica runs ``settings.job_workers`` claim loops plus, for shared stores, a
heartbeat (renews this replica's lease) and a reaper (requeues jobs of replicas whose
lease expired: a pod killed mid-job loses nothing). Workers call the same parse use
case as ``POST /v1/document/parse`` through a ``JobRunner``, reporting per-page
progress; the progress call is also where cancellation is noticed, so a running job
stops at the next page boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import DocParserError, public_message
from .models import JobStatus
from .store import ClaimedJob, JobStore

log = logging.getLogger(__name__)

# (pages_done, pages_total) -> None; raises JobStopped when the job must stop.
ProgressFn = Callable[[int, int], Awaitable[None]]
# (input bytes, job params, progress) -> the reply body of /v1/document/parse.
JobRunner = Callable[[bytes, dict[str, Any], ProgressFn], Awaitable[dict[str, Any]]]


T = TypeVar("T")

CLEANUP_S = 3.0  # each store call a drain makes after its deadline


async def _bounded(what: str, step: Awaitable[T], timeout_s: float) -> T | None:
    """``step``'s result, or None when it failed or took longer than ``timeout_s`` (logged:
    a drain goes on to its next step either way)."""
    try:
        return await asyncio.wait_for(step, timeout_s)
    except TimeoutError:
        log.warning("drain: %s took over %.1fs; going on without it", what, timeout_s)
    except Exception:
        log.exception("drain: %s failed; going on without it", what)
    return None


class JobStopped(Exception):
    """Raised from the progress callback: cancelled, or this replica lost the job."""


def default_worker_id() -> str:
    """Unique per process (a restarted pod must not inherit the dead one's lease)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class JobWorker:
    def __init__(
        self,
        store: JobStore,
        runner: JobRunner,
        *,
        concurrency: int = 1,
        lease_s: float = 15.0,
        worker_id: str | None = None,
        poll_s: float = 1.0,
        on_finished: Callable[[JobStatus], None] = lambda status: None,
        cleanup_s: float = CLEANUP_S,
    ) -> None:
        self.store = store
        self.runner = runner
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.worker_id = worker_id or default_worker_id()
        self.poll_s = poll_s
        self.on_finished = on_finished  # metrics hook
        self.cleanup_s = cleanup_s
        self._accepting = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[None]] = []
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stopped_claiming: asyncio.Future[None] | None = None

    @property
    def running_jobs(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        await self.store.heartbeat(self.worker_id, lease_s=self.lease_s)
        self._accepting.set()
        self._background = [
            asyncio.create_task(self._heartbeat_loop(), name="jobs-heartbeat"),
            asyncio.create_task(self._reaper_loop(), name="jobs-reaper"),
        ]
        self._loops = [
            asyncio.create_task(self._claim_loop(), name=f"jobs-worker-{i}")
            for i in range(self.concurrency)
        ]

    def stop_claiming(self) -> None:
        """Take no new jobs (first step of a drain); running jobs go on. A claim cut
        short mid-flight may have moved a job to us without starting it: hand such
        jobs straight back so other replicas need not wait for this drain."""
        if self._stopped_claiming is not None:
            return
        self._accepting.clear()
        for task in self._loops:
            task.cancel()

        async def settle() -> None:
            await asyncio.gather(*self._loops, return_exceptions=True)
            try:
                await self.store.return_unstarted(self.worker_id)
            except Exception:
                log.exception("could not return unstarted jobs (the reaper will)")

        self._stopped_claiming = asyncio.ensure_future(settle())

    async def drain(self, timeout_s: float) -> None:
        """Stop taking jobs, let running ones finish within ``timeout_s``, give the
        rest back to the queue, then leave (a shared store keeps queued jobs for
        other replicas; the memory store fails them clearly).

        Every store call here is bounded too (``cleanup_s`` past the deadline at most): the
        pod's grace period ends soon after the deadline, and a store that stopped answering
        must not hold the process until the kubelet kills it. What a bound cuts short, the
        other replicas' reapers redo once this replica's lease expires."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)

        def left() -> float:
            return max(deadline - loop.time(), self.cleanup_s)

        self.stop_claiming()
        assert self._stopped_claiming is not None
        await _bounded("handing back unstarted jobs", self._stopped_claiming, left())
        running = list(self._running.values())
        if running:
            _, pending = await asyncio.wait(running, timeout=max(deadline - loop.time(), 0.001))
            for task in pending:
                task.cancel()
            await _bounded(
                "releasing unfinished jobs",
                asyncio.gather(*pending, return_exceptions=True),
                self.cleanup_s,
            )
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        cleanup = self.cleanup_s
        await _bounded("deregistering", self.store.deregister(self.worker_id), cleanup)
        failed = await _bounded("closing the queue", self.store.shutdown(), cleanup)
        if failed:
            log.warning("failed %d queued jobs that no other replica can run", failed)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.store.heartbeat(self.worker_id, lease_s=self.lease_s)
            except Exception:
                log.exception("job lease heartbeat failed")

    async def _reaper_loop(self) -> None:
        while True:
            try:
                requeued = await self.store.reap()
                if requeued:
                    log.warning("requeued %d jobs of replicas that went away", requeued)
            except Exception:
                log.exception("job reaper failed")
            await asyncio.sleep(self.lease_s / 2)

    async def _claim_loop(self) -> None:
        while self._accepting.is_set():
            try:
                claimed = await self.store.claim(self.worker_id, timeout_s=self.poll_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claiming a job failed; retrying")
                await asyncio.sleep(self.poll_s)
                continue
            if claimed is None:
                continue
            # The job runs in its own task so that drain can wait for it while the
            # claim loops (blocked in the store) are cancelled.
            task = asyncio.create_task(self._run(claimed), name=f"job-{claimed.job.id}")
            self._running[claimed.job.id] = task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The store failed while recording the outcome: give the job back so it
                # runs again rather than staying "running" under our live lease.
                log.exception("job %s could not be completed; requeueing", claimed.job.id)
                with contextlib.suppress(Exception):
                    await self.store.release(claimed.job.id, self.worker_id)

    async def _run(self, claimed: ClaimedJob) -> None:
        job_id = claimed.job.id
        try:
            await self._execute(claimed)
        except asyncio.CancelledError:
            # Drain ran out of time: another replica (or a restart) runs it again.
            with contextlib.suppress(Exception):
                await self.store.release(job_id, self.worker_id)
            raise
        finally:
            self._running.pop(job_id, None)

    async def _execute(self, claimed: ClaimedJob) -> None:
        job_id, wid = claimed.job.id, self.worker_id

        async def progress(pages_done: int, pages_total: int) -> None:
            stop = await self.store.progress(
                job_id, wid, pages_done=pages_done, pages_total=pages_total
            )
            if stop:
                raise JobStopped(job_id)

        result, error = None, None
        try:
            await progress(0, claimed.job.pages_total or 0)
            result = await self.runner(claimed.data, claimed.job.params, progress)
            status = JobStatus.SUCCEEDED
        except JobStopped:
            if not (await self.store.get(job_id)).cancel_requested:
                return  # another replica owns the job now: it reports the outcome
            status = JobStatus.CANCELLED
        except DocParserError as exc:
            message = public_message(exc.message)
            status, error = JobStatus.FAILED, {"code": exc.code, "message": message}
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("job %s failed", job_id)
            # Like the HTTP layer: no internals (tracebacks, paths) in what clients see.
            message = f"internal error ({type(exc).__name__})"
            status, error = JobStatus.FAILED, {"code": "internal_error", "message": message}
        if result is not None:
            total = len(result.get("pages") or []) or claimed.job.pages_total or 0
            await self.store.progress(job_id, wid, pages_done=total, pages_total=total)
        if await self.store.finish(job_id, wid, status=status, result=result, error=error):
            self.on_finished(status)
