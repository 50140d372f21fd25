"""Option validation and base64 decoding shared by the parse, jobs and OpenAI routes."""

from __future__ import annotations

import base64
import re

import pytest
from docparser_runtime.engines.base import ParseOptions
from docparser_runtime.errors import InvalidInput
from docparser_runtime.server.endpoints.parse.request_input import (
    build_parse_request,
    decode_base64_document,
)
from docparser_runtime.server.protocol import options_from_form, options_schema
from docparser_runtime.settings import Settings

SETTINGS = Settings(default_tier=4, default_max_new_tokens=1000, max_new_tokens_limit=2000)


def test_defaults_come_from_settings():
    req = build_parse_request(b"x", {}, SETTINGS)
    assert req.options == ParseOptions(tier=4, mode="markdown", max_new_tokens=1000)
    assert (req.pages, req.stream) == (None, False)


def test_default_max_new_tokens_is_capped_by_the_limit():
    settings = Settings(default_max_new_tokens=9000, max_new_tokens_limit=512)
    assert build_parse_request(b"x", {}, settings).options.max_new_tokens == 512


def test_form_text_values_are_converted():
    options = options_from_form(
        [("tier", " 2 "), ("mode", "grounding"), ("max_new_tokens", "2000"), ("pages", "3"),
         ("stream", "yes")]
    )  # fmt: skip
    req = build_parse_request(b"x", options, SETTINGS)
    assert req.options == ParseOptions(tier=2, mode="grounding", max_new_tokens=2000)
    assert (req.pages, req.stream) == ("3", True)


def test_empty_form_fields_mean_not_given():
    req = build_parse_request(b"x", options_from_form([("tier", ""), ("mode", " ")]), SETTINGS)
    assert req.options == ParseOptions(tier=4, mode="markdown", max_new_tokens=1000)


def test_json_native_values_are_accepted_and_null_means_default():
    req = build_parse_request(
        b"x", {"tier": 2, "mode": "text", "pages": 3, "stream": False, "max_new_tokens": None},
        SETTINGS,
    )  # fmt: skip
    assert req.options == ParseOptions(tier=2, mode="text", max_new_tokens=1000)
    assert req.pages == "3"
    assert build_parse_request(b"x", {"pages": "1-3, 7"}, SETTINGS).pages == "1-3, 7"


@pytest.mark.parametrize("spec", ["5-", "all", "ALL", " 1-3 , 7 ", "2-"])
def test_documented_page_grammar_is_accepted(spec):
    assert build_parse_request(b"x", {"pages": spec}, SETTINGS).pages == spec


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"tier": 7}, "invalid_tier"),
        ({"tier": "2"}, "invalid_tier"),  # JSON: a string is not an integer
        ({"tier": 1.0}, "invalid_tier"),
        ({"tier": False}, "invalid_tier"),
        ({"tier": [1]}, "invalid_tier"),
        ({"tier": "AUTO"}, "invalid_tier"),
        ({"mode": "MARKDOWN"}, "invalid_mode"),
        ({"mode": []}, "invalid_mode"),
        ({"mode": {}}, "invalid_mode"),
        ({"mode": 1}, "invalid_mode"),
        ({"max_new_tokens": 2001}, "invalid_max_new_tokens"),
        ({"max_new_tokens": "5"}, "invalid_max_new_tokens"),
        ({"max_new_tokens": True}, "invalid_max_new_tokens"),
        ({"pages": "1--"}, "invalid_pages"),
        ({"pages": "0x3"}, "invalid_pages"),
        ({"pages": "0"}, "invalid_pages"),
        ({"pages": "3-1"}, "invalid_pages"),
        ({"pages": True}, "invalid_pages"),
        ({"pages": [1, 2]}, "invalid_pages"),
        ({"stream": "maybe"}, "invalid_option"),
        ({"stream": "true"}, "invalid_option"),  # JSON: a string is not a boolean
        ({"stream": 1}, "invalid_option"),
        ({"temperature": 0.2}, "unknown_field"),
    ],
)
def test_invalid_json_options(fields, code):
    with pytest.raises(InvalidInput) as info:
        build_parse_request(b"x", fields, SETTINGS)
    assert info.value.code == code


@pytest.mark.parametrize(
    ("items", "code"),
    [
        ([("tier", "1.5")], "invalid_tier"),
        ([("tier", "max")], "invalid_tier"),
        ([("tier", "Auto")], "invalid_tier"),
        ([("mode", "poetry")], "invalid_mode"),
        ([("stream", "maybe")], "invalid_option"),
        ([("pages", "a-b")], "invalid_pages"),
        ([("teir", "2")], "unknown_field"),
        ([("tier", "1"), ("tier", "2")], "duplicate_field"),
        ([("mode", "text"), ("mode", "text")], "duplicate_field"),
    ],
)
def test_invalid_form_options(items, code):
    with pytest.raises(InvalidInput) as info:
        options_from_form(items)
    assert info.value.code == code


def test_messages_never_echo_the_value():
    huge = "x" * 100_000
    with pytest.raises(InvalidInput) as info:
        build_parse_request(b"x", {"mode": [huge], "tier": {"a": huge}}, SETTINGS)
    assert huge[:100] not in info.value.message and len(info.value.message) < 300


def test_schema_is_generated_from_the_model():
    form = options_schema(form=True)
    assert form["tier"]["anyOf"] == [
        {"type": "integer", "minimum": 0, "maximum": 6},
        {"type": "string", "const": "auto"},
    ]
    assert form["mode"]["enum"] == ["markdown", "text", "grounding"]
    assert re.fullmatch(form["pages"]["pattern"], "1-3, 7,9-")
    assert not re.fullmatch(form["pages"]["pattern"], "1-3-4")
    json_tier = options_schema(form=False)["tier"]
    assert [v["type"] for v in json_tier["anyOf"]] == ["integer", "string", "null"]
    assert "stream" not in options_schema(form=True, include_stream=False)


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


def test_auto_from_form_json_or_the_default_caps_at_max_tier():
    settings = Settings(default_tier="auto", max_tier=3)
    for req in (
        build_parse_request(b"x", options_from_form([("tier", "auto")]), SETTINGS),
        build_parse_request(b"x", {"tier": "auto"}, SETTINGS),
    ):
        assert (req.options.auto, req.options.tier) == (True, 6)
    assert build_parse_request(b"x", {}, settings).options == ParseOptions(
        tier=3, max_new_tokens=4096, auto=True
    )
    named = build_parse_request(b"x", {"tier": 2}, settings).options
    assert (named.auto, named.tier) == (False, 2)


def test_tier_above_the_deployments_max_tier_is_refused_and_default_is_capped():
    settings = Settings(default_tier=6, max_tier=3)
    assert build_parse_request(b"x", {}, settings).options.tier == 3
    assert build_parse_request(b"x", {"tier": 2}, settings).options.tier == 2
    with pytest.raises(InvalidInput) as err:
        build_parse_request(b"x", {"tier": 4}, settings)
    assert err.value.code == "invalid_tier"
    assert "0..3" in err.value.message
