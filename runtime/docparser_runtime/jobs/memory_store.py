"""In-process job store for a single replica (no ``redis_url`` configured).

Everything lives in dicts guarded by one ``asyncio.Condition`` (all callers are on the
event loop). Jobs do not survive the process: on shutdown, queued jobs are failed with
a clear error instead of silently vanishing.

Finished jobs are bounded by bytes, not only by the TTL: a flood of (cheap, cached)
submissions would otherwise keep every result for a day and exhaust the process. Past
``max_finished_bytes`` the oldest finished jobs are forgotten first (their ids then
answer 404, exactly as after the TTL); queued and running jobs are never evicted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any

from .models import Job, JobStatus, new_job_id
from .store import (
    Backlog,
    ClaimedJob,
    JobStore,
    already_finished,
    conflict_for_key,
    not_found,
    queue_full,
    quota_exceeded,
)

# What a finished job costs besides its result and error: the record, its dict entries,
# ids and params. Counted so that a flood of jobs without results is bounded as well.
JOB_OVERHEAD_BYTES = 1024


def finished_size(job: Job) -> int:
    """Bytes a finished job is charged for (its result as JSON, the largest part)."""
    size = JOB_OVERHEAD_BYTES
    for part in (job.result, job.error):
        if part is not None:
            size += len(json.dumps(part, separators=(",", ":")))
    return size


class MemoryJobStore(JobStore):
    def __init__(
        self,
        *,
        ttl_s: float,
        max_queued: int = 0,
        max_queued_per_owner: int = 0,
        max_finished_bytes: int = 0,
    ) -> None:
        """Limits of 0 mean unlimited. ``max_finished_bytes`` may be exceeded by the one
        most recent result alone (it is kept until the next job finishes, so a client
        polling for a large result still gets it)."""
        self.ttl_s = ttl_s
        self.max_queued = max_queued
        self.max_queued_per_owner = max_queued_per_owner
        self.max_finished_bytes = max_finished_bytes
        self._jobs: dict[str, Job] = {}
        self._inputs: dict[str, bytes] = {}
        # Terminal jobs only, in the order they finished (= expiry order, one TTL).
        self._expires: dict[str, float] = {}
        self._sizes: dict[str, int] = {}
        self.finished_bytes = 0
        self._queue: deque[str] = deque()
        self._idem: dict[str, str] = {}  # idempotency key -> job id
        self._cond = asyncio.Condition()

    def _forget(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        del self._expires[job_id]
        self.finished_bytes -= self._sizes.pop(job_id, 0)
        if job and job.idempotency_key and self._idem.get(job.idempotency_key) == job_id:
            del self._idem[job.idempotency_key]

    def _sweep(self) -> None:
        """Drop finished jobs older than the TTL (lazy: on every access)."""
        now = time.time()
        for job_id in [j for j, t in self._expires.items() if t <= now]:
            self._forget(job_id)

    def _terminate(self, job: Job, status: JobStatus) -> None:
        job.status = status
        job.updated_at = time.time()
        job.worker = None
        self._inputs.pop(job.id, None)
        self._expires[job.id] = job.updated_at + self.ttl_s
        size = finished_size(job)
        self._sizes[job.id] = size
        self.finished_bytes += size
        if self.max_finished_bytes:
            # Oldest first; bounded by the number of finished jobs; never the newest.
            while self.finished_bytes > self.max_finished_bytes and len(self._expires) > 1:
                self._forget(next(iter(self._expires)))

    async def submit(
        self,
        *,
        data: bytes,
        params: dict[str, Any],
        fingerprint: str,
        idempotency_key: str | None = None,
        owner: str | None = None,
        pages_estimate: int = 1,
    ) -> tuple[Job, bool]:
        async with self._cond:
            self._sweep()
            if idempotency_key is not None and idempotency_key in self._idem:
                existing = self._jobs[self._idem[idempotency_key]]
                if existing.fingerprint != fingerprint:
                    raise conflict_for_key(idempotency_key)
                return existing, False
            if self.max_queued and len(self._queue) >= self.max_queued:
                raise queue_full(self.max_queued)
            if owner is not None and self.max_queued_per_owner:
                # O(queue) and the queue is bounded by max_queued: simple and exact.
                mine = sum(1 for j in self._queue if self._jobs[j].owner == owner)
                if mine >= self.max_queued_per_owner:
                    raise quota_exceeded(self.max_queued_per_owner)
            job = Job(
                id=new_job_id(),
                params=dict(params),
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                owner=owner,
                pages_estimate=max(int(pages_estimate), 1),
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

    async def backlog(self) -> Backlog:
        """One process runs every job it holds: its own queue, one worker."""
        pages = sum(self._jobs[j].pages_estimate for j in self._queue)
        return Backlog(jobs=len(self._queue), pages=pages, workers=1)

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
