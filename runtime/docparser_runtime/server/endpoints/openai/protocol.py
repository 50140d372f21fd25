"""Request model of ``POST /v1/chat/completions`` (the OpenAI chat format, image parts).

Validated by hand after a size-limited body read (FastAPI would read unbounded bodies),
so its JSON schema is inlined into the route's OpenAPI ``requestBody`` by ``BODY_SCHEMA``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ImageURL(BaseModel):
    url: str = Field(description="data:image/png;base64,... (or an allow-listed URL)")
    detail: str | None = None


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL

    @field_validator("image_url", mode="before")
    @classmethod
    def _plain_string_url(cls, value: Any) -> Any:
        """Some OpenAI-compatible clients send ``"image_url": "data:..."`` (a bare string)
        instead of ``{"url": ...}``; accept both."""
        return {"url": value} if isinstance(value, str) else value


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """Unknown OpenAI fields (temperature, top_p, ...) are accepted and ignored:
    OCR decoding is greedy."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(description="an id from GET /v1/models")
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    tier: Annotated[int, Field(ge=0, le=6)] | Literal["auto"] | None = Field(
        None, description="docparser: most local tiles (0..6), or auto"
    )


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI cannot resolve pydantic's local ``#/$defs`` refs inside a request body."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.rsplit("/", 1)[1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema)
    return inlined


BODY_SCHEMA = _inline_refs(ChatCompletionRequest.model_json_schema())
