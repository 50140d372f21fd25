"""The job record: what a client sees through ``GET /v1/jobs/{id}``.

A job is the asynchronous form of one ``POST /v1/document/parse`` call. The record is
plain data (no I/O) so both stores can persist it: the memory store keeps the object,
the Redis store flattens it into a hash with ``to_fields`` / ``from_fields``.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def new_job_id() -> str:
    """Opaque, unguessable id (a job id is as good as a result's read capability)."""
    return "job_" + uuid.uuid4().hex


def request_fingerprint(data: bytes, params: dict[str, Any]) -> str:
    """sha256 over the input bytes and the options: decides "same body" for idempotency."""
    h = hashlib.sha256()
    h.update(data)
    h.update(b"\0")
    h.update(json.dumps(params, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


@dataclass
class Job:
    """One asynchronous parse. ``params`` are the parse options (tier, mode, ...)."""

    id: str
    status: JobStatus = JobStatus.QUEUED
    params: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    pages_done: int = 0
    pages_total: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    idempotency_key: str | None = None
    fingerprint: str | None = None
    owner: str | None = None  # API key id of the submitter; other keys get 404
    cancel_requested: bool = False
    worker: str | None = None
    attempts: int = 0
    # The revision (track) whose pod accepted the job: only pods of that revision run it
    # (a canary's jobs never run on stable, a dark canary runs no production job).
    revision: str = ""
    pages_estimate: int = 1  # for the autoscaling backlog while queued (page_estimate.py)

    def to_public(self, *, queue_position: int | None = None) -> dict[str, Any]:
        """The JSON body of ``GET /v1/jobs/{id}`` (and of the 202 reply)."""
        body: dict[str, Any] = {
            "id": self.id,
            "object": "job",
            "status": str(self.status),
            "created_at": round(self.created_at, 3),
            "updated_at": round(self.updated_at, 3),
            "progress": {"pages_done": self.pages_done, "pages_total": self.pages_total},
        }
        if self.status is JobStatus.QUEUED:
            body["queue_position"] = queue_position
        if self.status is JobStatus.RUNNING and self.cancel_requested:
            body["cancel_requested"] = True
        if self.status is JobStatus.SUCCEEDED:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error
        return body

    # Flat string form for a Redis hash ------------------------------------------------
    def to_fields(self) -> dict[str, str]:
        return {
            "id": self.id,
            "status": str(self.status),
            "params": json.dumps(self.params),
            "created_at": repr(self.created_at),
            "updated_at": repr(self.updated_at),
            "pages_done": str(self.pages_done),
            "pages_total": "" if self.pages_total is None else str(self.pages_total),
            "result": "" if self.result is None else json.dumps(self.result),
            "error": "" if self.error is None else json.dumps(self.error),
            "idempotency_key": self.idempotency_key or "",
            "fingerprint": self.fingerprint or "",
            "owner": self.owner or "",
            "cancel_requested": "1" if self.cancel_requested else "0",
            "worker": self.worker or "",
            "attempts": str(self.attempts),
            "revision": self.revision,
            "pages_estimate": str(self.pages_estimate),
        }

    @classmethod
    def from_fields(cls, f: dict[str, str]) -> Job:
        def opt_json(key: str) -> Any:
            raw = f.get(key) or ""
            return json.loads(raw) if raw else None

        return cls(
            id=f["id"],
            status=JobStatus(f["status"]),
            params=opt_json("params") or {},
            created_at=float(f.get("created_at") or 0),
            updated_at=float(f.get("updated_at") or 0),
            pages_done=int(f.get("pages_done") or 0),
            pages_total=int(f["pages_total"]) if f.get("pages_total") else None,
            result=opt_json("result"),
            error=opt_json("error"),
            idempotency_key=f.get("idempotency_key") or None,
            fingerprint=f.get("fingerprint") or None,
            owner=f.get("owner") or None,
            cancel_requested=f.get("cancel_requested") == "1",
            worker=f.get("worker") or None,
            attempts=int(f.get("attempts") or 0),
            revision=f.get("revision") or "",
            pages_estimate=int(f.get("pages_estimate") or 1),
        )
