"""Which job store a process uses: a module of its own, so that the store interface
(``store.py``) never imports its implementations and the two stores stay independent
(import-linter contracts in pyproject.toml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .store import JobStore

if TYPE_CHECKING:
    from ..settings import Settings


def create_job_store(settings: Settings) -> JobStore:
    """Redis when ``settings.redis_url`` is set (any replica answers for any job),
    else the in-memory store (single replica)."""
    if settings.redis_url:
        from .redis_store import RedisJobStore

        return RedisJobStore.from_url(
            settings.redis_url,
            ttl_s=settings.job_ttl_s,
            max_attempts=settings.job_max_attempts,
            max_queued=settings.max_queued_jobs,
            max_queued_per_owner=settings.max_queued_jobs_per_key,
            write_retries=settings.redis_write_retries,
            prefix=settings.redis_prefix,
            revision=settings.revision,
            orphan_after_s=2 * settings.job_lease_s,
        )
    from .memory_store import MemoryJobStore

    return MemoryJobStore(
        ttl_s=settings.job_ttl_s,
        max_queued=settings.max_queued_jobs,
        max_queued_per_owner=settings.max_queued_jobs_per_key,
        max_finished_bytes=settings.max_finished_job_bytes,
    )
