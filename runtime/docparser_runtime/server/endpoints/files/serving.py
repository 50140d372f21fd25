"""A ``/v1/files`` upload, streamed: multipart parts are parsed as the body arrives and the
``file`` part goes straight to object storage (``batches/storage.py``), so a 200 MB upload
never sits in server memory; past ``DOCPARSER_BATCH_MAX_FILE_BYTES`` the write stops and
what was written is removed (413 naming the limit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from docparser_runtime.batches.backend import BatchBackend
from docparser_runtime.batches.models import FileRecord, new_id
from docparser_runtime.batches.storage import Writer
from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.server.endpoints.files.protocol import PURPOSE

_FIELD_LIMIT = 4096  # bytes of one plain form field (purpose, expires_after[...]) or header
_MAX_FIELDS = 16
_FORM_OVERHEAD = 64 * 1024


@dataclass
class _Parts:
    """What the parser callbacks saw: the current part's headers, the fields, the file."""

    headers: dict[bytes, bytes] = field(default_factory=dict)
    header_field: bytes = b""
    name: str = ""
    filename: str | None = None
    fields: dict[str, bytes] = field(default_factory=dict)
    pending: list[bytes] = field(default_factory=list)
    files: int = 0
    error: str | None = None


def _callbacks(parts: _Parts) -> dict[str, object]:
    def on_part_begin() -> None:
        parts.headers, parts.name, parts.filename = {}, "", None

    def on_header_field(data: bytes, start: int, end: int) -> None:
        parts.header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        key = parts.header_field.lower()
        value = parts.headers.get(key, b"") + data[start:end]
        if len(value) > _FIELD_LIMIT or len(parts.headers) > _MAX_FIELDS:
            parts.error = "a multipart part header is too long"
        parts.headers[key] = value[:_FIELD_LIMIT]

    def on_header_end() -> None:
        parts.header_field = b""

    def on_headers_finished() -> None:
        _, options = parse_options_header(parts.headers.get(b"content-disposition", b""))
        parts.name = options.get(b"name", b"").decode("latin-1")
        raw = options.get(b"filename")
        parts.filename = None if raw is None else raw.decode("utf-8", "replace")[:255]
        if parts.name == "file":
            parts.files += 1
        elif parts.name:
            if len(parts.fields) >= _MAX_FIELDS:
                parts.error = f"more than {_MAX_FIELDS} form fields"
            parts.fields.setdefault(parts.name, b"")

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if parts.name == "file" and parts.files == 1:
            parts.pending.append(data[start:end])
        elif parts.name in parts.fields:
            value = parts.fields[parts.name] + data[start:end]
            if len(value) > _FIELD_LIMIT:
                parts.error = f"form field {parts.name!r} is too long"
            parts.fields[parts.name] = value[:_FIELD_LIMIT]

    return {
        "on_part_begin": on_part_begin,
        "on_header_field": on_header_field,
        "on_header_value": on_header_value,
        "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data,
    }


async def upload(request: Request, backend: BatchBackend, owner: str) -> FileRecord:
    """Store the ``file`` part of a ``purpose=batch`` multipart upload; returns its record."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UnsupportedMediaType(
            "send multipart/form-data with fields 'file' and 'purpose'",
            code="unsupported_content_type",
        )
    settings = backend.settings
    limit = settings.batch_max_file_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + _FORM_OVERHEAD:
        raise _too_large(limit)
    parts = _Parts()
    parser = MultipartParser(boundary, _callbacks(parts))  # type: ignore[arg-type]
    file_id = new_id("file-")
    writer: Writer = backend.storage.writer(file_id, limit=limit, limit_name=_LIMIT_NAME)
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit + _FORM_OVERHEAD:
                raise _too_large(limit)
            try:
                parser.write(chunk)
            except FormParserError:
                raise InvalidInput("malformed multipart body", code="invalid_multipart") from None
            if parts.error:
                raise InvalidInput(parts.error, code="invalid_multipart")
            if parts.files > 1:
                raise InvalidInput("field 'file' is given more than once", code="duplicate_field")
            for piece in parts.pending:
                await writer.write(piece)
            parts.pending.clear()
        purpose = parts.fields.get("purpose", b"").decode("utf-8", "replace")
        if purpose != PURPOSE:
            raise InvalidInput(
                f"purpose must be {PURPOSE!r} (got {purpose!r})", code="invalid_purpose"
            )
        if parts.files != 1:
            raise InvalidInput("multipart field 'file' is required", code="missing_file")
        ranges = await writer.commit()
    except BaseException:
        await writer.abort()
        raise
    if len(ranges) > settings.batch_max_lines:
        await writer.abort()
        raise PayloadTooLarge(
            f"the file has {len(ranges)} lines, over {settings.batch_max_lines} "
            "(DOCPARSER_BATCH_MAX_LINES)",
            code="batch_too_many_lines",
        )
    now = int(time.time())
    record = FileRecord(
        file_id,
        writer.size,
        now,
        now + settings.batch_ttl_s,
        parts.filename or "input.jsonl",
        PURPOSE,
        owner,
        len(ranges),
    )
    await backend.store.put_file(record)
    return record


_LIMIT_NAME = "DOCPARSER_BATCH_MAX_FILE_BYTES"


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the upload exceeds {limit} bytes ({_LIMIT_NAME})", code="batch_file_too_large"
    )
