"""The job store interface shared by the in-memory and the Redis implementation.

The HTTP routes and the worker only talk to ``JobStore``; which one runs is decided
by ``settings.redis_url`` in ``create_job_store``. The contract that matters for
correctness across replicas:

- ``submit`` is atomic with the idempotency check (same key + same fingerprint returns
  the existing job; same key + other fingerprint raises ``Conflict``).
- ``claim`` hands a queued job to exactly one worker and marks it running; a job whose
  worker dies (its lease expires) goes back to the queue through ``reap``.
- ``finish`` only succeeds for the worker that owns the job, so a worker that lost its
  lease cannot overwrite the result of the replica that took over.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from ..errors import Conflict, NotFound, Overloaded
from .models import Job, JobStatus


@dataclass(frozen=True)
class Backlog:
    """Queued work of this pod's revision, for the autoscaling signal: ``pages`` (the
    jobs' page estimates) shared by ``workers`` live pods of the revision (at least 1)."""

    jobs: int
    pages: int
    workers: int

    @property
    def pages_per_worker(self) -> float:
        return self.pages / max(self.workers, 1)


@dataclass
class ClaimedJob:
    """A job a worker now owns, with the input bytes it needs to run it."""

    job: Job
    data: bytes


class JobStore(abc.ABC):
    """Persistence and queueing of jobs. All methods are coroutines (event loop only)."""

    @abc.abstractmethod
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
        """Queue a new job on this pod's revision; returns ``(job, created)``.
        ``created`` is False when the idempotency key already names a job with the same
        fingerprint. Raises ``Conflict`` when the key names a job with another
        fingerprint. Callers scope ``idempotency_key`` per owner (two API keys never share
        a key space).

        Raises ``Overloaded`` (``job_queue_full``) when ``max_queued`` jobs are queued,
        or (``job_quota_exceeded``) when ``owner`` already has ``max_queued_per_owner``
        queued jobs. Both checks are atomic with the enqueue, so parallel submitters on
        any number of replicas never overshoot; an idempotent replay of an existing job
        is answered even when the queue is full (it adds nothing). ``pages_estimate``
        weighs the job in ``backlog`` while it waits."""

    @abc.abstractmethod
    async def get(self, job_id: str) -> Job:
        """The job, or ``NotFound`` (unknown id or result expired after the TTL)."""

    @abc.abstractmethod
    async def queue_position(self, job_id: str) -> int | None:
        """Jobs ahead of this one (0 = next to run); None when it is not queued."""

    @abc.abstractmethod
    async def queue_depth(self) -> int:
        """Number of queued jobs this pod's revision will run."""

    async def queued_total(self) -> int:
        """Queued jobs of every revision (what the CPU front reports: work waiting for
        any pod); a store of one process has one queue."""
        return await self.queue_depth()

    @abc.abstractmethod
    async def backlog(self) -> Backlog:
        """Queued jobs and pages of this pod's revision and the live pods sharing them."""

    @abc.abstractmethod
    async def cancel(self, job_id: str) -> Job:
        """Queued -> cancelled at once; running -> ``cancel_requested`` (the worker stops
        at the next page); cancelled -> unchanged. ``Conflict`` when already
        succeeded or failed, ``NotFound`` for an unknown id."""

    @abc.abstractmethod
    async def claim(self, worker_id: str, *, timeout_s: float) -> ClaimedJob | None:
        """Take the oldest queued job (marking it running), or None after ``timeout_s``."""

    @abc.abstractmethod
    async def progress(
        self, job_id: str, worker_id: str, *, pages_done: int, pages_total: int
    ) -> bool:
        """Record per-page progress. Returns True when the worker must stop: the job
        was cancelled, or this worker no longer owns it."""

    @abc.abstractmethod
    async def finish(
        self,
        job_id: str,
        worker_id: str,
        *,
        status: JobStatus,
        result: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> bool:
        """Store the outcome (results live ``job_ttl_s`` from now; the input is dropped).
        Returns False when this worker no longer owns the job (nothing is written)."""

    @abc.abstractmethod
    async def release(self, job_id: str, worker_id: str) -> None:
        """Give a running job back to the head of the queue (drain ran out of time)."""

    async def heartbeat(self, worker_id: str, *, lease_s: float) -> None:  # noqa: B027
        """Renew this worker's lease; only meaningful for shared stores."""

    async def reap(self) -> int:
        """Requeue jobs of workers whose lease expired; returns how many."""
        return 0

    async def return_unstarted(self, worker_id: str) -> int:
        """Requeue jobs this worker took but never started (a claim cut short)."""
        return 0

    async def deregister(self, worker_id: str) -> None:  # noqa: B027
        """The worker stops for good: give back whatever it still holds."""

    async def shutdown(self) -> int:
        """The process is going away. A shared store keeps queued jobs for other
        replicas (returns 0); a process-local store fails them with a clear error."""
        return 0

    async def ping(self) -> None:  # noqa: B027
        """Raise when the backing service is unreachable (readiness)."""

    async def close(self) -> None:  # noqa: B027
        """Release connections."""


def conflict_for_key(key: str) -> Conflict:
    return Conflict(
        f"Idempotency-Key {key!r} was already used with a different request body",
        code="idempotency_conflict",
    )


def not_found(job_id: str) -> NotFound:
    return NotFound(f"job {job_id!r} not found (unknown id or expired)", code="job_not_found")


def already_finished(job: Job) -> Conflict:
    return Conflict(f"job {job.id!r} already {job.status}; nothing to cancel", code="job_finished")


QUEUE_FULL_RETRY_AFTER_S = 5.0


def queue_full(limit: int) -> Overloaded:
    return Overloaded(
        f"the job queue is full ({limit} jobs); retry later",
        retry_after_s=QUEUE_FULL_RETRY_AFTER_S,
        code="job_queue_full",
    )


def quota_exceeded(limit: int) -> Overloaded:
    return Overloaded(
        f"this API key already has {limit} queued jobs (DOCPARSER_MAX_QUEUED_JOBS_PER_KEY); "
        "wait for some to start or cancel them",
        retry_after_s=QUEUE_FULL_RETRY_AFTER_S,
        code="job_quota_exceeded",
    )
