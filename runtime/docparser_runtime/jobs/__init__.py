"""Asynchronous jobs: a store (memory or Redis) and workers that run queued parses."""

from .factory import create_job_store
from .models import Job, JobStatus, request_fingerprint
from .store import ClaimedJob, JobStore
from .worker import JobRunner, JobStopped, JobWorker

__all__ = [
    "ClaimedJob",
    "Job",
    "JobRunner",
    "JobStatus",
    "JobStopped",
    "JobStore",
    "JobWorker",
    "create_job_store",
    "request_fingerprint",
]
