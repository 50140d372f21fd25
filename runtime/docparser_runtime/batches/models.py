"""The records of the batch API (pure): a stored file and a batch, in OpenAI's shapes.

WHY the public shapes live here and not in the routes: the worker writes the same records
(output and error files are files too), and the official ``openai`` client parses them, so
one definition keeps every writer schema-compatible with it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

ENDPOINTS = ("/v1/chat/completions", "/v1/document/parse")
COMPLETION_WINDOW = "24h"
COMPLETION_WINDOW_S = 24 * 3600


class BatchStatus(StrEnum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (self.COMPLETED, self.FAILED, self.EXPIRED, self.CANCELLED)


# status -> the timestamp field OpenAI sets when a batch enters it
STAMP = {
    BatchStatus.IN_PROGRESS: "in_progress_at",
    BatchStatus.FINALIZING: "finalizing_at",
    BatchStatus.COMPLETED: "completed_at",
    BatchStatus.FAILED: "failed_at",
    BatchStatus.EXPIRED: "expired_at",
    BatchStatus.CANCELLING: "cancelling_at",
    BatchStatus.CANCELLED: "cancelled_at",
}


def new_id(kind: str) -> str:
    """``file-...`` / ``batch_...``: unguessable (24 hex), like OpenAI's."""
    return f"{kind}{secrets.token_hex(12)}"


@dataclass
class FileRecord:
    id: str
    bytes: int
    created_at: int
    expires_at: int
    filename: str
    purpose: str  # batch (uploads) | batch_output (what a batch wrote)
    owner: str  # the API key id ("" without auth)
    lines: int = 0

    def to_public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }

    def to_redis(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_redis(cls, raw: dict[str, str]) -> FileRecord:
        ints = ("bytes", "created_at", "expires_at", "lines")
        return cls(**{k: int(v) if k in ints else v for k, v in raw.items()})  # type: ignore[arg-type]


@dataclass
class Batch:
    id: str
    endpoint: str
    input_file_id: str
    owner: str
    status: BatchStatus
    created_at: int
    expires_at: int
    total: int = 0
    completed: int = 0
    failed: int = 0
    metadata: dict[str, str] | None = None
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    stamps: dict[str, int] = field(default_factory=dict)

    def to_public(self) -> dict[str, Any]:
        reply: dict[str, Any] = {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if not self.errors else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": COMPLETION_WINDOW,
            "status": str(self.status),
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }
        for name in STAMP.values():
            reply[name] = self.stamps.get(name)
        return reply

    def to_redis(self) -> dict[str, str]:
        raw = {
            "id": self.id,
            "endpoint": self.endpoint,
            "input_file_id": self.input_file_id,
            "owner": self.owner,
            "status": str(self.status),
            "created_at": str(self.created_at),
            "expires_at": str(self.expires_at),
            "total": str(self.total),
            "metadata": json.dumps(self.metadata),
            "errors": json.dumps(self.errors),
        }
        raw.update({k: str(v) for k, v in self.stamps.items()})
        return raw

    @classmethod
    def from_redis(cls, raw: dict[str, str], counts: dict[str, str]) -> Batch:
        return cls(
            id=raw["id"],
            endpoint=raw["endpoint"],
            input_file_id=raw["input_file_id"],
            owner=raw["owner"],
            status=BatchStatus(raw["status"]),
            created_at=int(raw["created_at"]),
            expires_at=int(raw["expires_at"]),
            total=int(raw.get("total") or 0),
            completed=int(counts.get("completed") or 0),
            failed=int(counts.get("failed") or 0),
            metadata=json.loads(raw.get("metadata") or "null"),
            errors=json.loads(raw.get("errors") or "null"),
            output_file_id=raw.get("output_file_id") or None,
            error_file_id=raw.get("error_file_id") or None,
            stamps={n: int(raw[n]) for n in STAMP.values() if raw.get(n)},
        )
