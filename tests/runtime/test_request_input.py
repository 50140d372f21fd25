"""Option validation and base64 decoding shared by the parse, jobs and OpenAI routes."""

from __future__ import annotations

import base64

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import InvalidInput
from docparser_runtime.server.request_input import build_parse_request, decode_base64_document
from docparser_runtime.settings import Settings

SETTINGS = Settings(default_tier=4, default_max_new_tokens=1000, max_new_tokens_limit=2000)


def test_defaults_come_from_settings():
    req = build_parse_request(b"x", {}, SETTINGS)
    assert req.options == ParseOptions(tier=4, mode="markdown", max_new_tokens=1000)
    assert (req.pages, req.stream) == (None, False)


def test_default_max_new_tokens_is_capped_by_the_limit():
    settings = Settings(default_max_new_tokens=9000, max_new_tokens_limit=512)
    assert build_parse_request(b"x", {}, settings).options.max_new_tokens == 512


def test_string_and_native_values_are_accepted():
    req = build_parse_request(
        b"x",
        {"tier": " 2 ", "mode": "grounding", "max_new_tokens": 2000, "pages": 3, "stream": "yes"},
        SETTINGS,
    )
    assert req.options == ParseOptions(tier=2, mode="grounding", max_new_tokens=2000)
    assert (req.pages, req.stream) == ("3", True)
    assert build_parse_request(b"x", {"pages": "1-3, 7"}, SETTINGS).pages == "1-3, 7"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"tier": 7}, "invalid_tier"),
        ({"tier": "1.5"}, "invalid_tier"),
        ({"tier": False}, "invalid_tier"),
        ({"mode": "MARKDOWN"}, "invalid_mode"),
        ({"max_new_tokens": 2001}, "invalid_max_new_tokens"),
        ({"pages": "1-"}, "invalid_pages"),
        ({"pages": "0x3"}, "invalid_pages"),
        ({"stream": "maybe"}, "invalid_option"),
        ({"temperature": 0.2}, "unknown_field"),
    ],
)
def test_invalid_options(fields, code):
    with pytest.raises(InvalidInput) as info:
        build_parse_request(b"x", fields, SETTINGS)
    assert info.value.code == code


def test_extra_fields_can_be_allowed_by_other_routes():
    req = build_parse_request(b"x", {"model": "m"}, SETTINGS, allowed_extra=frozenset({"model"}))
    assert req.options.tier == 4


def test_empty_document_is_rejected():
    with pytest.raises(InvalidInput) as info:
        build_parse_request(b"", {}, SETTINGS)
    assert info.value.code == "empty_document"


def test_base64_plain_wrapped_and_data_url():
    raw = bytes(range(200))
    encoded = base64.b64encode(raw).decode()
    assert decode_base64_document(encoded) == raw
    wrapped = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    assert decode_base64_document(wrapped) == raw
    assert decode_base64_document("data:image/png;base64," + encoded) == raw


@pytest.mark.parametrize("value", ["abc$", "data:image/png,rawtext", 42, None, "YWJ"])
def test_bad_base64(value):
    with pytest.raises(InvalidInput) as info:
        decode_base64_document(value)
    assert info.value.code == "invalid_base64"


def test_tier_above_the_deployments_max_tier_is_refused_and_default_is_capped():
    settings = Settings(default_tier=6, max_tier=3)
    assert build_parse_request(b"x", {}, settings).options.tier == 3
    assert build_parse_request(b"x", {"tier": 2}, settings).options.tier == 2
    with pytest.raises(InvalidInput) as err:
        build_parse_request(b"x", {"tier": 4}, settings)
    assert err.value.code == "invalid_tier"
    assert "0..3" in err.value.message
