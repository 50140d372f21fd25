"""The Redis job store's key layout (pure): every key name in one place.

Kept apart from the store so the layout reads as one table, and so tests that look at Redis
directly (a job's input deleted, a worker's processing list) name keys through the same
public object the store uses instead of its private methods.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    """Key names under ``prefix`` for a pod of ``revision`` ("" for a pod without one)."""

    prefix: str = "docparser:"
    revision: str = ""

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def input(self, job_id: str) -> str:
        return f"{self.prefix}input:{job_id}"

    def idem(self, key: str) -> str:
        return f"{self.prefix}idem:{key}"

    def processing(self, worker_id: str) -> str:
        return f"{self.prefix}processing:{worker_id}"

    def lease(self, worker_id: str) -> str:
        return f"{self.prefix}lease:{worker_id}"

    @property
    def owner_prefix(self) -> str:
        return f"{self.prefix}queued_by:"

    @property
    def queue_base(self) -> str:
        return f"{self.prefix}queue"

    def queue_for(self, revision: str) -> str:
        return f"{self.queue_base}:{revision}" if revision else self.queue_base

    @property
    def queue(self) -> str:
        """This pod's revision's queue: the only one its workers claim from."""
        return self.queue_for(self.revision)

    @property
    def worker_revision(self) -> str:
        return f"{self.prefix}worker_revision"

    @property
    def revision_seen(self) -> str:
        return f"{self.prefix}revision_seen"

    @property
    def revision_accepted(self) -> str:
        return f"{self.prefix}revision_accepted"

    @property
    def workers(self) -> str:
        return f"{self.prefix}workers"
