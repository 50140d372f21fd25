"""Turn an HTTP request body into a ``ParseRequest``; the one input parser for every route.

Accepted bodies: ``multipart/form-data`` (field ``file`` + option fields), JSON
``{"image": "<base64 or data URL>", ...options}``, or the raw document bytes with an
``image/*``/``application/pdf``/``application/octet-stream`` content type and options in
the query string. The upload limit is enforced while the body streams in, before any
decoding, so an oversized body costs neither memory nor CPU, and the body is charged to the
host-memory budget before it is read (503 when the budget is short). Option validation lives here
too (``build_parse_request``) so jobs and the OpenAI route reuse it on their own bodies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import AsyncGenerator, Mapping
from dataclasses import replace
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.server.guards.body_memory import body_charge
from docparser_runtime.server.protocol import (
    ParseRequest,
    RequestOptions,
    options_from_form,
    options_from_json,
)
from docparser_runtime.settings import Settings

_RAW_TYPES = ("image/", "application/pdf", "application/octet-stream")
_FORM_OVERHEAD = 1024 * 1024  # multipart boundaries + option fields
_INLINE_DECODE_BYTES = 1024 * 1024


# -- options ---------------------------------------------------------------------------
def build_parse_request(
    data: bytes,
    fields: RequestOptions | Mapping[str, Any],
    settings: Settings,
    *,
    filename: str | None = None,
    allowed_extra: frozenset[str] = frozenset(),
) -> ParseRequest:
    """Validate options (typos are errors, not silently ignored) and pair them with data.

    ``fields`` is either already validated ``RequestOptions`` (form input) or a mapping
    with JSON types (JSON bodies, stored job parameters, the OpenAI route), validated
    strictly here. The deployment-dependent bounds (``max_tier``, the token limit) and
    the defaults come from ``settings``.
    """
    if isinstance(fields, RequestOptions):
        opts = fields
    else:
        opts = options_from_json({k: v for k, v in fields.items() if k not in allowed_extra})
    if not data:
        raise InvalidInput("the document is empty", code="empty_document")
    # The deployment's GPU memory is sized for max_tier: a higher tier is refused, not run.
    # ``auto`` picks per page at or under it (the selector runs as each page is decoded).
    max_tier = settings.max_tier
    wanted = settings.default_tier if opts.tier is None else opts.tier
    auto = wanted == "auto"
    if auto:
        tier = max_tier
    elif not isinstance(wanted, int):  # the option models allow only ints and auto
        raise InvalidInput(f"tier must be 0..{max_tier} or auto", code="invalid_tier")
    elif opts.tier is None:
        tier = min(wanted, max_tier)
    elif wanted > max_tier:
        raise InvalidInput(
            f"tier must be within 0..{max_tier} on this deployment, got {opts.tier}",
            code="invalid_tier",
        )
    else:
        tier = wanted
    limit = settings.max_new_tokens_limit
    if opts.max_new_tokens is None:
        mnt = min(settings.default_max_new_tokens, limit)
    elif opts.max_new_tokens > limit:
        raise InvalidInput(
            f"max_new_tokens must be within 1..{limit}, got {opts.max_new_tokens}",
            code="invalid_max_new_tokens",
        )
    else:
        mnt = opts.max_new_tokens
    pages = opts.pages if opts.pages and opts.pages.strip() else None
    return ParseRequest(
        data=data,
        options=ParseOptions(
            tier=tier, mode=opts.mode or "markdown", max_new_tokens=mnt, auto=auto
        ),
        pages=pages,
        stream=bool(opts.stream),
        filename=filename,
        cache=opts.cache is not False,
    )


def decode_base64_document(value: object) -> bytes:
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
async def _limited(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks, within ``limit`` bytes, each charged to host memory before it is
    read (guards/body_memory.py): all of ``Content-Length`` at once, else chunk by chunk."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the {limit}-byte limit")
    charge = body_charge(request)
    if declared and declared.isdigit():
        charge.cover(int(declared))
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"body exceeds the {limit}-byte limit")
        charge.cover(total)
        yield chunk


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in _limited(request, limit)])


def _check_size(data: bytes, settings: Settings) -> None:
    if len(data) > settings.max_upload_bytes:
        raise PayloadTooLarge(f"document exceeds the {settings.max_upload_bytes}-byte limit")


async def _from_multipart(
    request: Request, settings: Settings, allowed_extra: frozenset[str]
) -> ParseRequest:
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
        if sum(1 for name, _ in form.multi_items() if name == "file") > 1:
            raise InvalidInput("field 'file' is given more than once", code="duplicate_field")
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput(
                "multipart field 'file' (a file part) is required", code="missing_file"
            )
        items = [(k, v) for k, v in form.multi_items() if k != "file" and k not in allowed_extra]
        fields = [(k, v) for k, v in items if isinstance(v, str)]
        if len(fields) != len(items):
            raise InvalidInput(
                "only 'file' may be a file part; options are plain form fields",
                code="invalid_multipart",
            )
        options = options_from_form(fields)
        data = await upload.read()
        _check_size(data, settings)
        return build_parse_request(data, options, settings, filename=upload.filename)
    finally:
        await form.close()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a key given twice is an error, not last-one-wins."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidInput(
                    f"JSON key {key!r} is given more than once", code="duplicate_field"
                )
            seen.add(key)
    return obj


def _decode_json_document(body: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        payload = json.loads(body, object_pairs_hook=_unique_keys)
    except RecursionError:
        # json's C scanner refuses to recurse past the interpreter's limit: a hostile
        # body (nested 100,000 deep) is the client's error, never an engine failure.
        raise InvalidInput("the JSON body is nested too deeply", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise InvalidInput("the JSON body must be an object", code="invalid_json")
    if "image" not in payload:
        raise InvalidInput("JSON field 'image' (base64) is required", code="missing_file")
    return payload, decode_base64_document(payload.pop("image"))


async def _from_json(
    request: Request, settings: Settings, allowed_extra: frozenset[str]
) -> ParseRequest:
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


def tenant_of(request: Request) -> str:
    """The caller's API key id, or "" without auth (what the result cache is scoped by)."""
    principal = getattr(request.state, "principal", None)
    return principal.key_id if principal is not None and principal.authenticated else ""


async def read_parse_request(
    request: Request, settings: Settings, *, allowed_extra: frozenset[str] = frozenset()
) -> ParseRequest:
    """Read and validate the body of a parse-like request (see module docstring), on
    behalf of its caller (``tenant``)."""
    parsed = await _read_parse_request(request, settings, allowed_extra)
    return replace(parsed, tenant=tenant_of(request))


async def _read_parse_request(
    request: Request, settings: Settings, allowed_extra: frozenset[str]
) -> ParseRequest:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        return await _from_multipart(request, settings, allowed_extra)
    if content_type == "application/json" or content_type.endswith("+json"):
        return await _from_json(request, settings, allowed_extra)
    if content_type.startswith(_RAW_TYPES):
        items = [(k, v) for k, v in request.query_params.multi_items() if k not in allowed_extra]
        options = options_from_form(items)
        data = await read_body(request, settings.max_upload_bytes)
        return build_parse_request(data, options, settings)
    body = await read_body(request, settings.max_upload_bytes)
    if not body:
        raise InvalidInput("the request body is empty", code="empty_body")
    raise UnsupportedMediaType(
        f"content type {content_type or '(none)'!r} is not accepted; send multipart/form-data "
        "with a 'file' field or JSON with a base64 'image'",
        code="unsupported_content_type",
    )
