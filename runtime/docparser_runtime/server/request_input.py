"""Turn an HTTP request body into a ``ParseRequest``; the one input parser for every route.

Accepted bodies: ``multipart/form-data`` (field ``file`` + option fields), JSON
``{"image": "<base64 or data URL>", ...options}``, or the raw document bytes with an
``image/*``/``application/pdf``/``application/octet-stream`` content type and options in
the query string. The upload limit is enforced while the body streams in, before any
decoding, so an oversized body costs neither memory nor CPU. Option validation lives here
too (``build_parse_request``) so jobs and the OpenAI route reuse it on their own bodies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.settings import Settings

MODES = ("markdown", "text", "grounding")
OPTION_FIELDS = frozenset({"tier", "mode", "max_new_tokens", "pages", "stream"})
_PAGES_RE = re.compile(r"^\s*\d+\s*(-\s*\d+\s*)?(,\s*\d+\s*(-\s*\d+\s*)?)*$")
_RAW_TYPES = ("image/", "application/pdf", "application/octet-stream")
_FORM_OVERHEAD = 1024 * 1024  # multipart boundaries + option fields
_INLINE_DECODE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ParseRequest:
    """A validated parse request: document bytes plus options."""

    data: bytes
    options: ParseOptions
    pages: str | None = None
    stream: bool = False
    filename: str | None = None


# -- options ---------------------------------------------------------------------------
def _as_int(value: Any, name: str, lo: int, hi: int, code: str) -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{name} must be an integer {lo}..{hi}", code=code)
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise InvalidInput(
            f"{name} must be an integer {lo}..{hi}, got {value!r}", code=code
        ) from None
    if not lo <= number <= hi:
        raise InvalidInput(f"{name} must be within {lo}..{hi}, got {number}", code=code)
    return number


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InvalidInput(f"{name} must be a boolean, got {value!r}", code="invalid_option")


def build_parse_request(
    data: bytes,
    fields: Mapping[str, Any],
    settings: Settings,
    *,
    filename: str | None = None,
    allowed_extra: frozenset[str] = frozenset(),
) -> ParseRequest:
    """Validate options (typos are errors, not silently ignored) and pair them with data."""
    unknown = set(fields) - OPTION_FIELDS - allowed_extra
    if unknown:
        raise InvalidInput(f"unknown field(s): {', '.join(sorted(unknown))}", code="unknown_field")
    if not data:
        raise InvalidInput("the document is empty", code="empty_document")
    tier = fields.get("tier")
    # The deployment's GPU memory is sized for max_tier: a higher tier is refused, not run.
    max_tier = settings.max_tier
    tier = (
        min(settings.default_tier, max_tier)
        if tier in (None, "")
        else _as_int(tier, "tier", 0, max_tier, "invalid_tier")
    )
    mode = fields.get("mode") or "markdown"
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}", code="invalid_mode")
    limit = settings.max_new_tokens_limit
    mnt = fields.get("max_new_tokens")
    if mnt in (None, ""):
        mnt = min(settings.default_max_new_tokens, limit)
    else:
        mnt = _as_int(mnt, "max_new_tokens", 1, limit, "invalid_max_new_tokens")
    pages = fields.get("pages")
    if pages in (None, ""):
        pages = None
    else:
        pages = str(pages)
        if not _PAGES_RE.match(pages):
            raise InvalidInput(f"pages must look like '1-3,7', got {pages!r}", code="invalid_pages")
    stream = _as_bool(fields.get("stream", False), "stream")
    return ParseRequest(
        data=data,
        options=ParseOptions(tier=tier, mode=mode, max_new_tokens=mnt),
        pages=pages,
        stream=stream,
        filename=filename,
    )


def decode_base64_document(value: Any) -> bytes:
    """Base64 or a ``data:...;base64,`` URL -> bytes (``invalid_base64`` otherwise)."""
    if not isinstance(value, str):
        raise InvalidInput("image must be a base64 string", code="invalid_base64")
    text = value.strip()
    if text.startswith("data:"):
        header, sep, text = text.partition(",")
        if not sep or ";base64" not in header:
            raise InvalidInput("data URL must be base64-encoded", code="invalid_base64")
    text = "".join(text.split())
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("image is not valid base64", code="invalid_base64") from None


# -- body reading ------------------------------------------------------------------------
async def _limited(request: Request, limit: int) -> AsyncIterator[bytes]:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the {limit}-byte limit")
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"body exceeds the {limit}-byte limit")
        yield chunk


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in _limited(request, limit)])


def _check_size(data: bytes, settings: Settings) -> None:
    if len(data) > settings.max_upload_bytes:
        raise PayloadTooLarge(f"document exceeds the {settings.max_upload_bytes}-byte limit")


async def _from_multipart(request: Request, settings: Settings, allowed_extra) -> ParseRequest:
    limit = settings.max_upload_bytes + _FORM_OVERHEAD
    parser = MultiPartParser(
        request.headers, _limited(request, limit), max_files=1, max_fields=16, max_part_size=65536
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(
            f"malformed multipart body: {exc.message}", code="invalid_multipart"
        ) from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput(
                "multipart field 'file' (a file part) is required", code="missing_file"
            )
        data = await upload.read()
        _check_size(data, settings)
        fields = {k: v for k, v in form.multi_items() if k != "file" and isinstance(v, str)}
        return build_parse_request(
            data, fields, settings, filename=upload.filename, allowed_extra=allowed_extra
        )
    finally:
        await form.close()


def _decode_json_document(body: bytes) -> tuple[dict, bytes]:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise InvalidInput("the JSON body must be an object", code="invalid_json")
    if "image" not in payload:
        raise InvalidInput("JSON field 'image' (base64) is required", code="missing_file")
    return payload, decode_base64_document(payload.pop("image"))


async def _from_json(request: Request, settings: Settings, allowed_extra) -> ParseRequest:
    limit = settings.max_upload_bytes * 4 // 3 + _FORM_OVERHEAD
    body = await read_body(request, limit)
    if not body.strip():
        raise InvalidInput("the request body is empty", code="empty_body")
    if len(body) > _INLINE_DECODE_BYTES:  # tens of MB of JSON + base64: off the event loop
        payload, data = await asyncio.to_thread(_decode_json_document, body)
    else:
        payload, data = _decode_json_document(body)
    _check_size(data, settings)
    return build_parse_request(data, payload, settings, allowed_extra=allowed_extra)


async def read_parse_request(
    request: Request, settings: Settings, *, allowed_extra: frozenset[str] = frozenset()
) -> ParseRequest:
    """Read and validate the body of a parse-like request (see module docstring)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        return await _from_multipart(request, settings, allowed_extra)
    if content_type == "application/json" or content_type.endswith("+json"):
        return await _from_json(request, settings, allowed_extra)
    if content_type.startswith(_RAW_TYPES):
        data = await read_body(request, settings.max_upload_bytes)
        return build_parse_request(
            data, dict(request.query_params), settings, allowed_extra=allowed_extra
        )
    body = await read_body(request, settings.max_upload_bytes)
    if not body:
        raise InvalidInput("the request body is empty", code="empty_body")
    raise UnsupportedMediaType(
        f"content type {content_type or '(none)'!r} is not accepted; send multipart/form-data "
        "with a 'file' field or JSON with a base64 'image'",
        code="unsupported_content_type",
    )
