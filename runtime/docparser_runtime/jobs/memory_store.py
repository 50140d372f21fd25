"""In-process job store for a single replica (no ``redis_url`` configured).

Everything lives in dicts guarded by one ``asyncio.Condition`` (all callers are on the
event loop). Jobs do not survive the process: on shutdown, queued jobs are failed with
a clear error instead of silently vanishing.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from .models import Job, JobStatus, new_job_id
from .store import ClaimedJob, JobStore, already_finished, conflict_for_key, not_found


class MemoryJobStore(JobStore):
    def __init__(self, *, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._jobs: dict[str, Job] = {}
        self._inputs: dict[str, bytes] = {}
        self._expires: dict[str, float] = {}  # terminal jobs only
        self._queue: deque[str] = deque()
        self._idem: dict[str, str] = {}  # idempotency key -> job id
        self._cond = asyncio.Condition()

    def _sweep(self) -> None:
        """Drop finished jobs older than the TTL (lazy: on every access)."""
        now = time.time()
        for job_id in [j for j, t in self._expires.items() if t <= now]:
            job = self._jobs.pop(job_id, None)
            del self._expires[job_id]
            if job and job.idempotency_key and self._idem.get(job.idempotency_key) == job_id:
                del self._idem[job.idempotency_key]

    def _terminate(self, job: Job, status: JobStatus) -> None:
        job.status = status
        job.updated_at = time.time()
        job.worker = None
        self._inputs.pop(job.id, None)
        self._expires[job.id] = job.updated_at + self.ttl_s

    async def submit(
        self,
        *,
        data: bytes,
        params: dict[str, Any],
        fingerprint: str,
        idempotency_key: str | None = None,
        owner: str | None = None,
    ) -> tuple[Job, bool]:
        async with self._cond:
            self._sweep()
            if idempotency_key is not None and idempotency_key in self._idem:
                existing = self._jobs[self._idem[idempotency_key]]
                if existing.fingerprint != fingerprint:
                    raise conflict_for_key(idempotency_key)
                return existing, False
            job = Job(
                id=new_job_id(),
                params=dict(params),
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                owner=owner,
            )
            self._jobs[job.id] = job
            self._inputs[job.id] = data
            self._queue.append(job.id)
            if idempotency_key is not None:
                self._idem[idempotency_key] = job.id
            self._cond.notify()
            return job, True

    async def get(self, job_id: str) -> Job:
        self._sweep()
        job = self._jobs.get(job_id)
        if job is None:
            raise not_found(job_id)
        return job

    async def queue_position(self, job_id: str) -> int | None:
        try:
            return self._queue.index(job_id)
        except ValueError:
            return None

    async def queue_depth(self) -> int:
        return len(self._queue)

    async def cancel(self, job_id: str) -> Job:
        async with self._cond:
            job = await self.get(job_id)
            if job.status is JobStatus.QUEUED:
                self._queue.remove(job_id)
                self._terminate(job, JobStatus.CANCELLED)
            elif job.status is JobStatus.RUNNING:
                job.cancel_requested = True
                job.updated_at = time.time()
            elif job.status is not JobStatus.CANCELLED:
                raise already_finished(job)
            return job

    async def claim(self, worker_id: str, *, timeout_s: float) -> ClaimedJob | None:
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(lambda: bool(self._queue)), timeout_s)
            except TimeoutError:
                return None
            job = self._jobs[self._queue.popleft()]
            job.status = JobStatus.RUNNING
            job.worker = worker_id
            job.attempts += 1
            job.updated_at = time.time()
            return ClaimedJob(job=job, data=self._inputs[job.id])

    def _owned(self, job_id: str, worker_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.status is not JobStatus.RUNNING or job.worker != worker_id:
            return None
        return job

    async def progress(
        self, job_id: str, worker_id: str, *, pages_done: int, pages_total: int
    ) -> bool:
        job = self._owned(job_id, worker_id)
        if job is None:
            return True
        job.pages_done, job.pages_total = pages_done, pages_total
        job.updated_at = time.time()
        return job.cancel_requested

    async def finish(
        self,
        job_id: str,
        worker_id: str,
        *,
        status: JobStatus,
        result: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> bool:
        job = self._owned(job_id, worker_id)
        if job is None:
            return False
        job.result, job.error = result, error
        self._terminate(job, status)
        return True

    async def release(self, job_id: str, worker_id: str) -> None:
        async with self._cond:
            job = self._owned(job_id, worker_id)
            if job is None:
                return
            job.status, job.worker, job.pages_done = JobStatus.QUEUED, None, 0
            job.updated_at = time.time()
            self._queue.appendleft(job_id)
            self._cond.notify()

    async def shutdown(self) -> int:
        """Nobody else will ever run these: fail them so clients get a clear answer
        (until the process exits) rather than a job stuck in ``queued``."""
        async with self._cond:
            failed = 0
            while self._queue:
                job = self._jobs[self._queue.popleft()]
                job.error = {
                    "code": "unavailable",
                    "message": "the server shut down before this job started; submit it again",
                }
                self._terminate(job, JobStatus.FAILED)
                failed += 1
            return failed
