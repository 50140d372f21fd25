"""OpenAI-compatible surface: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Lets the official ``openai`` clients (and tools built on them) drive the parser:
the image travels as an ``image_url`` content part holding a ``data:`` URL (remote URLs
are refused unless ``url_fetch_allowlist`` allows them: no SSRF surface by default), a
text part selects the mode the way DeepSeek-OCR prompts do ("Free OCR" -> ``text``,
"<|grounding|>" -> ``grounding``, anything else -> ``markdown``), ``max_tokens`` becomes
``max_new_tokens``, and ``stream: true`` answers ``chat.completion.chunk`` SSE ending in
``data: [DONE]``. ``usage.prompt_tokens`` counts vision tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.background import BackgroundTask

from docparser_runtime.errors import InvalidInput, NotFound, PayloadTooLarge, UnsupportedMediaType
from docparser_runtime.server.endpoints.openai.protocol import (
    BODY_SCHEMA,
    ChatCompletionRequest,
    TextPart,
)
from docparser_runtime.server.endpoints.parse.api_router import (
    ClientDisconnected,
    run_until_disconnect,
)
from docparser_runtime.server.endpoints.parse.request_input import (
    build_parse_request,
    decode_base64_document,
    read_body,
    tenant_of,
)
from docparser_runtime.server.endpoints.parse.streaming import ParseEvents, streaming_response
from docparser_runtime.server.error_mapping import CLIENT_CLOSED_STATUS
from docparser_runtime.server.guards.url_allowlist import check_url_allowed
from docparser_runtime.server.protocol import PAGE_SEPARATOR, ParseReply, ParseRequest
from docparser_runtime.server.state import RuntimeState, runtime_state
from docparser_runtime.settings import Settings

router = APIRouter(tags=["openai"])
_STARTED = int(time.time())


_ERROR = {"description": "error", "content": {"application/json": {}}}


# -- pure helpers ----------------------------------------------------------------------
def mode_from_prompt(text: str) -> str:
    lowered = text.lower()
    if "grounding" in lowered:
        return "grounding"
    if "free ocr" in lowered:
        return "text"
    return "markdown"


def _parts(body: ChatCompletionRequest) -> tuple[list[str], list[str]]:
    texts, images = [], []
    for message in body.messages:
        if isinstance(message.content, str):
            texts.append(message.content)
        elif message.content:
            for part in message.content:
                if isinstance(part, TextPart):
                    texts.append(part.text)
                else:
                    images.append(part.image_url.url)
    return texts, images


async def fetch_allowed_image(url: str, settings: Settings) -> bytes:
    """GET an allow-listed URL: no redirects (a hop could leave the allow-list), bounded
    time and size; every failure is the caller's input problem (4xx), never a 5xx."""
    check_url_allowed(url, settings.url_fetch_allowlist)
    import aiohttp  # lazy: costs seconds of import time and is rarely used

    limit = settings.max_upload_bytes
    try:
        timeout = aiohttp.ClientTimeout(total=30)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                raise InvalidInput(
                    f"fetching image_url answered HTTP {resp.status}", code="url_fetch_failed"
                )
            chunks: list[bytes] = []
            total = 0
            async for chunk in resp.content.iter_chunked(65536):
                total += len(chunk)
                if total > limit:
                    raise PayloadTooLarge(f"image_url content exceeds the {limit}-byte limit")
                chunks.append(chunk)
            return b"".join(chunks)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise InvalidInput(
            f"fetching image_url failed ({type(exc).__name__})", code="url_fetch_failed"
        ) from None


async def _image_bytes(url: str, settings: Settings) -> bytes:
    if url.startswith("data:"):
        return decode_base64_document(url)
    return await fetch_allowed_image(url, settings)


def _served(state: RuntimeState) -> tuple[str, str | None]:
    """The engine name and, once ready, its version: the parse service's (a pod's engine,
    or what the CPU front forwards to, which knows the version only when it is set)."""
    service = state.parse_service
    if service is not None and state.lifecycle.is_ready:
        return service.engine.name, service.engine.version or None
    return state.settings.engine, None


def model_ids(state: RuntimeState) -> list[str]:
    name, version = _served(state)
    return [name] if version is None else [name, f"{name}:{version}"]


async def to_parse_request(body: ChatCompletionRequest, settings: Settings) -> ParseRequest:
    texts, images = _parts(body)
    if len(images) != 1:
        raise InvalidInput(
            f"send exactly one image_url part (got {len(images)})", code="invalid_image_count"
        )
    max_new = body.max_completion_tokens or body.max_tokens
    fields: dict[str, Any] = {"mode": mode_from_prompt("\n".join(texts))}
    if max_new is not None:
        fields["max_new_tokens"] = max_new
    if body.tier is not None:
        fields["tier"] = body.tier
    return build_parse_request(await _image_bytes(images[0], settings), fields, settings)


def _usage(result: ParseReply) -> dict[str, int]:
    prompt, completion = result.vision_tokens, result.usage.output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(result: ParseReply) -> str:
    return "length" if any(p.truncated for p in result.pages) else "stop"


def completion_reply(result: ParseReply, *, cid: str, model: str, created: int) -> dict[str, Any]:
    """The ``chat.completion`` object of one parse (also a batch line's response body)."""
    message = {"role": "assistant", "content": result.content}
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(result),
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
        "system_fingerprint": f"{result.model.engine}:{result.model.version}",
    }


def _chunk(
    cid: str, model: str, created: int, delta: dict[str, str], finish: str | None
) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def _data(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


# -- routes ----------------------------------------------------------------------------
@router.post(
    "/v1/chat/completions",
    summary="OpenAI-compatible chat completion over one image",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": BODY_SCHEMA}}}
    },
    responses={s: _ERROR for s in (400, 401, 403, 404, 413, 415, 429, 503, 504)},
)
async def chat_completions(request: Request) -> Response:
    state = runtime_state(request.app)
    settings = state.settings
    async with state.lifecycle.request_slot():
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            raise UnsupportedMediaType("send application/json", code="unsupported_content_type")
        raw = await read_body(request, settings.max_upload_bytes * 4 // 3 + 1024 * 1024)
        try:
            body = ChatCompletionRequest.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise InvalidInput(f"{where}: {first.get('msg')}", code="invalid_request") from None
        if body.model not in model_ids(state):
            raise NotFound(
                f"model {body.model!r} is not served here; see GET /v1/models",
                code="model_not_found",
            )
        parse_request = replace(await to_parse_request(body, settings), tenant=tenant_of(request))
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await _stream(request, parse_request, cid, body.model, created, include_usage)
        try:
            result = await run_until_disconnect(request, state.parser.parse(parse_request))
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED_STATUS)
    reply = completion_reply(result, cid=cid, model=body.model, created=created)
    shadow = state.shadow  # the shadow canary's sample, once the reply is sent
    offered = result.body()
    after = None if shadow is None else BackgroundTask(shadow.offer, parse_request, offered)
    return JSONResponse(reply, background=after)


async def _stream(
    request: Request,
    parse_request: ParseRequest,
    cid: str,
    model: str,
    created: int,
    include_usage: bool,
) -> Response:
    async def chunks(events: ParseEvents) -> AsyncGenerator[bytes, None]:
        yield _data(_chunk(cid, model, created, {"role": "assistant", "content": ""}, None))
        pages_started = 0
        async for kind, data in events:
            if kind == "page":
                if pages_started:  # keep sum(deltas) == the non-streaming content
                    delta = {"content": PAGE_SEPARATOR}
                    yield _data(_chunk(cid, model, created, delta, None))
                pages_started += 1
            elif kind == "delta":
                yield _data(_chunk(cid, model, created, {"content": data["text"]}, None))
            elif kind == "error":
                yield _data(data)
            elif kind == "result":
                yield _data(_chunk(cid, model, created, {}, _finish_reason(data)))
                if include_usage:
                    last = _chunk(cid, model, created, {}, None)
                    last["choices"], last["usage"] = [], _usage(data)
                    yield _data(last)
        yield b"data: [DONE]\n\n"

    return await streaming_response(request, parse_request, chunks)


def _model_objects(state: RuntimeState) -> list[dict[str, Any]]:
    _name, version = _served(state)
    return [
        {
            "id": mid,
            "object": "model",
            "created": _STARTED,
            "owned_by": "docparser",
            "version": version,
        }
        for mid in model_ids(state)
    ]


@router.get("/v1/models", summary="OpenAI-compatible list of served models")
async def list_models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": _model_objects(runtime_state(request.app))})


@router.get(
    "/v1/models/{model_id}",
    summary="OpenAI-compatible model lookup",
    responses={404: _ERROR},
)
async def get_model(request: Request, model_id: str) -> JSONResponse:
    for model in _model_objects(runtime_state(request.app)):
        if model["id"] == model_id:
            return JSONResponse(model)
    raise NotFound(f"model {model_id!r} is not served here", code="model_not_found")
