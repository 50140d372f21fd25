"""Request model of ``POST /v1/batches`` (OpenAI's), validated after a bounded body read."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

MAX_BODY_BYTES = 64 * 1024
MAX_LIST = 100


class CreateBatchRequest(BaseModel):
    """Unknown OpenAI fields (``output_expires_after``, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    input_file_id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    endpoint: Literal["/v1/chat/completions", "/v1/document/parse"]
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = Field(None, description="up to 16 pairs, as OpenAI's")

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and (
            len(value) > 16 or any(len(k) > 64 or len(v) > 512 for k, v in value.items())
        ):
            raise ValueError("at most 16 pairs, keys up to 64 and values up to 512 characters")
        return value


BATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "object", "endpoint", "input_file_id", "status", "request_counts"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["batch"]},
        "endpoint": {"type": "string"},
        "input_file_id": {"type": "string"},
        "completion_window": {"type": "string"},
        "status": {"type": "string"},
        "output_file_id": {"type": ["string", "null"]},
        "error_file_id": {"type": ["string", "null"]},
        "errors": {"type": ["object", "null"]},
        "request_counts": {
            "type": "object",
            "properties": {
                "total": {"type": "integer"},
                "completed": {"type": "integer"},
                "failed": {"type": "integer"},
            },
        },
        "metadata": {"type": ["object", "null"]},
        "created_at": {"type": "integer"},
        "expires_at": {"type": "integer"},
    },
}
CREATE_BODY: dict[str, Any] = {
    "required": True,
    "content": {"application/json": {"schema": CreateBatchRequest.model_json_schema()}},
}
