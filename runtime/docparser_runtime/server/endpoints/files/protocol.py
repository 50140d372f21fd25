"""The shapes of ``/v1/files`` (OpenAI's file object), for the OpenAPI document."""

from __future__ import annotations

from typing import Any

PURPOSE = "batch"  # the only purpose an upload may have here

FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "object", "bytes", "created_at", "filename", "purpose"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["file"]},
        "bytes": {"type": "integer"},
        "created_at": {"type": "integer"},
        "expires_at": {"type": "integer"},
        "filename": {"type": "string"},
        "purpose": {"type": "string", "enum": ["batch", "batch_output"]},
        "status": {"type": "string"},
    },
}
DELETED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["file"]},
        "deleted": {"type": "boolean"},
    },
}
UPLOAD_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file", "purpose"],
                "properties": {
                    "file": {"type": "string", "format": "binary", "description": "JSONL"},
                    "purpose": {"type": "string", "enum": [PURPOSE]},
                },
            }
        }
    },
}
