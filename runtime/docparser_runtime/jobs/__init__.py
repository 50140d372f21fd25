"""Asynchronous jobs: a store (memory or Redis) and workers that run queued parses."""

from .factory import create_job_store
from .models import Job, JobStatus, request_fingerprint
from .store import Backlog, ClaimedJob, JobStore
from .worker import JobRunner, JobStopped, JobWorker

__all__ = [
    "Backlog",
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
