"""Hostile request bodies and options over HTTP: every one a 4xx with a clear code, no
internals (tracebacks, object reprs, memory addresses) in the message, nothing reaching
the engine, and the server ready afterwards. Complements test_bad_inputs (malformed
documents) with malformed *structure*: deep nesting, wrong JSON types, repeated fields."""

from __future__ import annotations

import base64
import re

import pytest
from app_for_tests import make_settings, serving
from engines_for_tests import png_bytes
from hostile_docs import blank_pdf

PARSE = "/v1/document/parse"
JOBS = "/v1/jobs"
CHAT = "/v1/chat/completions"
IMAGE = base64.b64encode(png_bytes()).decode()
DEEP = 100_000
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}|object at|Traceback")


def deep_json(depth: int, *, key: str = "mode") -> bytes:
    """``{"image": ..., "<key>": [[[[...]]]]}`` nested ``depth`` lists deep."""
    return (f'{{"image": "{IMAGE}", "{key}": ' + "[" * depth + "]" * depth + "}").encode()


def json_body(raw: bytes) -> dict:
    return {"content": raw, "headers": {"content-type": "application/json"}}


def form(*fields: tuple[str, str], data: bytes | None = None) -> dict:
    """Multipart with a PNG ``file`` part plus the given (possibly repeated) text fields."""
    parts = [("file", ("a.png", data or png_bytes(), "image/png"))]
    parts += [(name, (None, value)) for name, value in fields]
    return {"files": parts}


def as_json(**options) -> dict:
    return {"json": {"image": IMAGE, **options}}


CASES = [
    ("deep_array_option", PARSE, json_body(deep_json(DEEP)), 400, "invalid_json"),
    ("deep_object_option", PARSE,
     json_body(f'{{"image": "{IMAGE}", "x": '.encode() + b'{"a":' * DEEP + b"1" + b"}" * DEEP
               + b"}"), 400, "invalid_json"),
    ("deep_unknown_key", PARSE, json_body(deep_json(5000, key="zzz")), 400, "invalid_json"),
    ("moderately_deep_option", PARSE, json_body(deep_json(500)), 400, "invalid_mode"),
    ("deep_job", JOBS, json_body(deep_json(DEEP)), 400, "invalid_json"),
    ("deep_chat", CHAT, json_body(b'{"model": "gated", "messages": ' + b"[" * DEEP
                                  + b"]" * DEEP + b"}"), 400, "invalid_request"),
    ("mode_list", PARSE, as_json(mode=[]), 400, "invalid_mode"),
    ("mode_object", PARSE, as_json(mode={"a": 1}), 400, "invalid_mode"),
    ("mode_number", PARSE, as_json(mode=3), 400, "invalid_mode"),
    ("tier_string_json", PARSE, as_json(tier="2"), 400, "invalid_tier"),
    ("tier_float_json", PARSE, as_json(tier=1.0), 400, "invalid_tier"),
    ("tier_list_json", PARSE, as_json(tier=[0]), 400, "invalid_tier"),
    ("max_new_tokens_bool", PARSE, as_json(max_new_tokens=True), 400, "invalid_max_new_tokens"),
    ("max_new_tokens_huge_int", PARSE, as_json(max_new_tokens=10**400), 400,
     "invalid_max_new_tokens"),
    ("pages_object", PARSE, as_json(pages={"from": 1}), 400, "invalid_pages"),
    ("pages_bool", PARSE, as_json(pages=True), 400, "invalid_pages"),
    ("stream_string_json", PARSE, as_json(stream="true"), 400, "invalid_option"),
    ("stream_list_job", JOBS, as_json(stream=[True]), 400, "invalid_option"),
    ("duplicate_json_key", PARSE,
     json_body(f'{{"image": "{IMAGE}", "mode": "text", "mode": "grounding"}}'.encode()),
     400, "duplicate_field"),
    ("duplicate_image_key", PARSE,
     json_body(f'{{"image": "{IMAGE}", "image": "{IMAGE}"}}'.encode()), 400, "duplicate_field"),
    ("repeated_form_field", PARSE, form(("tier", "0"), ("tier", "6")), 400, "duplicate_field"),
    ("repeated_form_field_job", JOBS, form(("mode", "text"), ("mode", "text")), 400,
     "duplicate_field"),
    ("repeated_file_part", PARSE,
     {"files": [("file", ("a.png", png_bytes(), "image/png")), ("file", (None, "x"))]},
     400, "duplicate_field"),
    ("option_as_file_part", PARSE,
     {"files": [("file", ("a.png", png_bytes(), "image/png")), ("mode", ("m", b"text"))]},
     400, "invalid_multipart"),
    ("repeated_query_option", f"{PARSE}?tier=0&tier=1",
     {"content": png_bytes(), "headers": {"content-type": "image/png"}}, 400, "duplicate_field"),
    ("unknown_query_option", f"{PARSE}?teir=1",
     {"content": png_bytes(), "headers": {"content-type": "image/png"}}, 400, "unknown_field"),
    ("png_magic_then_garbage", PARSE, form(data=b"\x89PNG\r\n\x1a\n" + b"\x07" * 64), 400,
     "corrupt_image"),
    ("tiff_magic_then_garbage", PARSE, form(data=b"II*\x00" + b"\xff" * 64), 400,
     "corrupt_image"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "kwargs", "status", "code"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
async def test_hostile_structure_is_a_clear_4xx_without_internals(path, kwargs, status, code):
    settings = make_settings(max_upload_bytes=4 * 1024 * 1024)
    async with serving(settings) as (_, client, engine):
        resp = await client.post(path, **kwargs)
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert error["code"] == code, error
        assert not _ADDRESS.search(error["message"]), error["message"]
        assert len(error["message"]) < 500
        assert engine.batches == []
        assert (await client.get("/readyz")).status_code == 200
        ok = await client.post(PARSE, **form(("mode", "text")))
        assert ok.status_code == 200


@pytest.mark.parametrize("spec", ["5-", "all", "2-", "1,3-"])
async def test_documented_open_ranges_are_served(spec):
    async with serving(make_settings()) as (_, client, _engine):
        resp = await client.post(
            PARSE, files={"file": ("d.pdf", blank_pdf(6), "application/pdf")}, data={"pages": spec}
        )
        assert resp.status_code == 200, resp.text
    expected = {"5-": [4, 5], "all": [0, 1, 2, 3, 4, 5], "2-": [1, 2, 3, 4, 5],
                "1,3-": [0, 2, 3, 4, 5]}[spec]  # fmt: skip
    assert [p["index"] for p in resp.json()["pages"]] == expected
