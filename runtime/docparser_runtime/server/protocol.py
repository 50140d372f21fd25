"""What a parse takes and gives, shared by every endpoint, the front, the shadow and the state.

It sits at the server's floor (the other endpoints keep their own ``protocol.py``, as vLLM's
``entrypoints/openai/<endpoint>/`` do) because everything that holds or forwards a parse names
these types: ``ParseRequest`` (a document and its resolved options) and ``ParseReply``, the
body of ``/v1/document/parse`` as a pydantic model (the ``result`` of a stream, a job's result,
what the cache stores and what the front relays). Its fields are declared in the order they go
on the wire, and ``body()`` is the dict every route sends, so the JSON stays byte for byte what
it was when the reply was a hand-built dict.

The options of every parse-like request are ONE pydantic model.

WHY one model: multipart fields, JSON keys, the query string of a raw upload, stored job
parameters and the OpenAI route's mapped fields used to be checked by hand-written
converters, and the OpenAPI schema was written separately; the two drifted (``mode: []``
became markdown, ``pages=5-`` was refused although documented). Here the model is the
single source of the accepted names, types, bounds and the schema, and every validation
failure keeps the runtime's error codes (``invalid_tier``, ``unknown_field``, ...).

Two input shapes, two strictness levels:
- form fields and query strings are text by nature: validated in pydantic's lax mode
  (``"2"`` -> 2, ``"yes"`` -> True); an empty field means "not given"; a repeated field
  is an error (``duplicate_field``) rather than last-one-wins;
- JSON (and stored job parameters) carry real types: validated strictly, so a list, an
  object, a float or a bool where an integer belongs is refused; ``null`` means "not given".
Messages never echo the offending value (it could be megabytes, or nested 100,000 deep).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from docparser_runtime.engines.base import PageResult, ParseOptions
from docparser_runtime.errors import InvalidInput
from docparser_runtime.preprocess.page_ranges import (
    MAX_SPEC_CHARS,
    PAGE_SPEC_PATTERN,
    parse_page_spec,
)
from docparser_runtime.preprocess.tiling import MAX_TIER

Mode = Literal["markdown", "text", "grounding"]
MODES: tuple[str, ...] = get_args(Mode)

# Error code per option: the codes clients already rely on (docs/api.md).
_CODE_BY_FIELD = {
    "tier": "invalid_tier",
    "mode": "invalid_mode",
    "max_new_tokens": "invalid_max_new_tokens",
    "pages": "invalid_pages",
    "stream": "invalid_option",
    "cache": "invalid_option",
}
_MAX_MESSAGES = 5


class RequestOptions(BaseModel):
    """Options of ``/v1/document/parse`` and ``/v1/jobs``; None = the server default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Annotated[int, Field(ge=0, le=MAX_TIER)] | Literal["auto"] | None = Field(
        None,
        description="most local 768x768 tiles per page (0..DOCPARSER_MAX_TIER), or auto: each "
        "page the smallest tier that still reads it, at most DOCPARSER_MAX_TIER; "
        "default DOCPARSER_DEFAULT_TIER",
    )
    mode: Mode | None = Field(
        None, description="markdown (default) | text | grounding (text with located blocks)"
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="generation cap per page (1..DOCPARSER_MAX_NEW_TOKENS_LIMIT)"
    )
    pages: str | None = Field(
        None,
        max_length=MAX_SPEC_CHARS,
        description="1-based PDF page ranges: N, N-M, N- (to the end), comma-separated, or all",
        json_schema_extra={"pattern": PAGE_SPEC_PATTERN, "examples": ["1-3,7", "5-", "all"]},
    )
    stream: bool | None = Field(None, description="reply as Server-Sent Events")
    cache: bool | None = Field(
        None,
        description="false: parse again and leave the result cache untouched (default true "
        "where DOCPARSER_CACHE_TTL_S enables the cache)",
    )

    @field_validator("pages", mode="before")
    @classmethod
    def _page_number_as_spec(cls, value: Any) -> Any:
        """``"pages": 3`` in JSON means page 3 (a bool is not a page number)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("pages")
    @classmethod
    def _page_grammar(cls, value: str | None) -> str | None:
        try:
            parse_page_spec(value)
        except InvalidInput as exc:
            raise PydanticCustomError("invalid_pages", exc.message) from None
        return value


@dataclass(frozen=True)
class ParseRequest:
    """A validated parse request: document bytes plus options (built by
    ``endpoints/parse/request_input.py``)."""

    data: bytes
    options: ParseOptions
    pages: str | None = None
    stream: bool = False
    filename: str | None = None
    tenant: str = ""  # the caller's API key id ("" without auth): scopes the result cache
    cache: bool = True  # False: the request opted out of the result cache
    priority: int = 0  # server.inference.priorities.Priority: jobs set JOB (not a request option)


def _error_code(errors: Sequence[ErrorDetails]) -> str:
    first = errors[0]
    if first.get("type") == "extra_forbidden":
        return "unknown_field"
    loc = first.get("loc") or ("",)
    return _CODE_BY_FIELD.get(str(loc[0]), "invalid_option")


def _error_message(errors: Sequence[ErrorDetails]) -> str:
    unknown = sorted(str(e["loc"][0]) for e in errors if e.get("type") == "extra_forbidden")
    if unknown:
        return f"unknown field(s): {', '.join(unknown[:_MAX_MESSAGES])}"
    parts = []
    for err in errors[:_MAX_MESSAGES]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "options"
        parts.append(f"{where}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts)


def _validate(fields: Mapping[str, Any], *, strict: bool) -> RequestOptions:
    try:
        return RequestOptions.model_validate(dict(fields), strict=strict)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        raise InvalidInput(_error_message(errors), code=_error_code(errors)) from None


def options_from_json(fields: Mapping[str, Any]) -> RequestOptions:
    """Options from decoded JSON (or stored job parameters): strict types."""
    return _validate(fields, strict=True)


def options_from_form(items: Iterable[tuple[str, str]]) -> RequestOptions:
    """Options from form fields or a query string: text values, each name at most once."""
    fields: dict[str, str] = {}
    for name, value in items:
        if name in fields:
            raise InvalidInput(
                f"field {name!r} is given more than once; send each option once",
                code="duplicate_field",
            )
        fields[name] = value
    return _validate({k: v for k, v in fields.items() if v.strip() != ""}, strict=False)


def options_schema(*, form: bool, include_stream: bool = True) -> dict[str, dict[str, Any]]:
    """The options' JSON schema properties for the OpenAPI request bodies.

    A form field cannot be null, so the form variant drops the ``null`` alternative.
    """
    properties = RequestOptions.model_json_schema()["properties"]
    result = {}
    for name, prop in properties.items():
        if name == "stream" and not include_stream:
            continue
        prop = dict(prop)
        prop.pop("default", None)
        prop.pop("title", None)
        if "anyOf" in prop:
            variants = [dict(v) for v in prop.pop("anyOf") if not (form and v["type"] == "null")]
            if "pattern" in prop:  # the pattern describes the string alternative only
                pattern = prop.pop("pattern")
                for variant in variants:
                    if variant["type"] == "string":
                        variant["pattern"] = pattern
            prop.update(variants[0] if len(variants) == 1 else {"anyOf": variants})
        result[name] = prop
    return result


# -- the reply ---------------------------------------------------------------------------
# Between pages in ``content``; the convention of DeepSeek-OCR's own tooling.
PAGE_SEPARATOR = "\n\n<--- Page Split --->\n\n"


class _Wire(BaseModel):
    """A part of the reply. Fields a newer pod adds are kept (``extra``), so the front and the
    result cache pass a reply on without dropping what this version does not know."""

    model_config = ConfigDict(extra="allow")


class BlockReply(_Wire):
    text: str
    bbox: list[float]  # x1, y1, x2, y2 in page pixels
    type: str


class WarningReply(_Wire):
    code: str  # uncovered_text: ink at bbox that no block accounts for
    bbox: list[float]


class PageReply(_Wire):
    """One page (``PageResult.to_dict()``; a stream's ``page_end`` event less ``content``)."""

    index: int
    content: str
    width: int
    height: int
    tier: int | None  # the tier the page was read at
    tiles: int
    vision_tokens: int
    blocks: list[BlockReply]
    output_tokens: int
    truncated: bool
    repetition_guarded: bool
    warnings: list[WarningReply]


class ModelRef(_Wire):
    engine: str
    version: str


class Usage(_Wire):
    vision_tokens: int
    output_tokens: int
    pages: int


class StageTimings(_Wire):
    """Milliseconds per stage; a cache hit has only the total."""

    queue: float
    preprocess: float
    inference: float
    audit: float
    total: float


def new_reply_id() -> str:
    return f"parse-{uuid.uuid4().hex}"


class ParseReply(_Wire):
    """The body of ``/v1/document/parse``."""

    id: str
    model: ModelRef
    content: str  # the pages' content joined by PAGE_SEPARATOR
    pages: list[PageReply]
    vision_tokens: int
    complete: bool  # no page truncated and no coverage warning
    warnings: int
    usage: Usage
    timings_ms: StageTimings
    cached: bool

    @classmethod
    def of(
        cls,
        results: Sequence[PageResult],
        *,
        engine: ModelRef,
        vision_tokens: int,
        timings_ms: StageTimings,
    ) -> ParseReply:
        """The reply of a parse's pages (``ParseService``): complete when no page was
        truncated and no coverage warning was raised."""
        warnings = sum(len(r.warnings) for r in results)
        output_tokens = sum(r.output_tokens for r in results)
        return cls(
            id=new_reply_id(),
            model=engine,
            content=PAGE_SEPARATOR.join(r.content for r in results),
            pages=[PageReply.model_validate(r.to_dict()) for r in results],
            vision_tokens=vision_tokens,
            complete=warnings == 0 and not any(r.truncated for r in results),
            warnings=warnings,
            usage=Usage(
                vision_tokens=vision_tokens, output_tokens=output_tokens, pages=len(results)
            ),
            timings_ms=timings_ms,
            cached=False,
        )

    def body(self) -> dict[str, Any]:
        """The JSON body every route sends and a job stores."""
        return self.model_dump()

    # -- what the result cache needs (result_cache.CacheableReply) -----------------------
    def page_events(self) -> list[dict[str, Any]]:
        """The pages as ``on_page`` callbacks get them while a parse runs."""
        return [page.model_dump() for page in self.pages]

    def replayed(self, total_ms: float) -> Self:
        """This reply as a cache hit answers it: a new id, ``cached``, only the total time."""
        timings = StageTimings(queue=0.0, preprocess=0.0, inference=0.0, audit=0.0, total=total_ms)
        return self.model_copy(update={"id": new_reply_id(), "cached": True, "timings_ms": timings})

    def cache_bytes(self) -> bytes:
        return json.dumps(self.body(), separators=(",", ":")).encode()

    @classmethod
    def from_cache(cls, raw: bytes) -> ParseReply:
        return cls.model_validate_json(raw)
