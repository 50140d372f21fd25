"""Every bad input gets a 4xx with a clear error code, and the server stays ready."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest
from app_for_tests import make_settings, serving
from engines_for_tests import png_bytes

PARSE = "/v1/document/parse"
LIMIT = 64 * 1024  # max_upload_bytes for these tests


def png_bomb(width: int = 60_000, height: int = 60_000) -> bytes:
    """A few hundred bytes whose header announces 3.6 gigapixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    rows = zlib.compress(b"\x00" + b"\xff" * 1000)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def file_part(data: bytes, name: str = "doc.png", ctype: str = "image/png") -> dict:
    return {"files": {"file": (name, data, ctype)}}


SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
HTML = b"<!DOCTYPE html><html><body><img src=x></body></html>"

# (case id, request kwargs, expected status, expected error code)
CASES = [
    ("empty_file", file_part(b""), 400, "empty_document"),
    ("empty_json_body", {"content": b"", "headers": {"content-type": "application/json"}},
     400, "empty_body"),
    ("empty_body_no_type", {"content": b""}, 400, "empty_body"),
    ("random_bytes", file_part(bytes(range(256)) * 8), 415, "unsupported_media_type"),
    ("truncated_png", file_part(png_bytes(300, 200)[:200]), 400, "corrupt_image"),
    ("decompression_bomb", file_part(png_bomb()), 413, "image_too_large"),
    ("text_as_png", file_part(b"hello, I am plain text pretending to be a PNG\n" * 4),
     415, "unsupported_media_type"),
    ("svg_as_png", file_part(SVG), 415, "unsupported_media_type"),
    ("html_as_png", file_part(HTML, "page.jpg", "image/jpeg"), 415, "unsupported_media_type"),
    ("corrupt_pdf", file_part(b"%PDF-1.7\n1 0 obj <<>> garbage", "a.pdf", "application/pdf"),
     400, "corrupt_pdf"),
    ("tier_out_of_range", {**file_part(png_bytes()), "data": {"tier": "9"}}, 400, "invalid_tier"),
    ("tier_not_a_number", {**file_part(png_bytes()), "data": {"tier": "max"}},
     400, "invalid_tier"),
    ("tier_negative_json", {"json": {"image": base64.b64encode(png_bytes()).decode(),
                                     "tier": -1}}, 400, "invalid_tier"),
    ("tier_bool_json", {"json": {"image": base64.b64encode(png_bytes()).decode(),
                                 "tier": True}}, 400, "invalid_tier"),
    ("bad_mode", {**file_part(png_bytes()), "data": {"mode": "poetry"}}, 400, "invalid_mode"),
    ("max_new_tokens_zero", {**file_part(png_bytes()), "data": {"max_new_tokens": "0"}},
     400, "invalid_max_new_tokens"),
    ("max_new_tokens_huge", {**file_part(png_bytes()), "data": {"max_new_tokens": "99999999"}},
     400, "invalid_max_new_tokens"),
    ("bad_pages_syntax", {**file_part(png_bytes()), "data": {"pages": "one-two"}},
     400, "invalid_pages"),
    ("pages_out_of_range", {**file_part(png_bytes()), "data": {"pages": "3"}},
     400, "invalid_pages"),
    ("bad_base64", {"json": {"image": "not//base64!!"}}, 400, "invalid_base64"),
    ("base64_of_garbage", {"json": {"image": base64.b64encode(b"\x00" * 64).decode()}},
     415, "unsupported_media_type"),
    ("bad_json", {"content": b'{"image": ', "headers": {"content-type": "application/json"}},
     400, "invalid_json"),
    ("json_not_object", {"json": ["image"]}, 400, "invalid_json"),
    ("json_without_image", {"json": {"tier": 1}}, 400, "missing_file"),
    ("multipart_without_file", {"files": {"other": ("a.png", png_bytes(), "image/png")}},
     400, "missing_file"),
    ("unknown_option", {**file_part(png_bytes()), "data": {"teir": "2"}}, 400, "unknown_field"),
    ("broken_multipart", {"content": b"--xyz\r\nContent-Disposition: form-data; name=\"file\"",
                          "headers": {"content-type": "multipart/form-data; boundary=xyz"}},
     400, "missing_file"),
    ("wrong_content_type", {"content": png_bytes(), "headers": {"content-type": "text/plain"}},
     415, "unsupported_content_type"),
    ("too_large_multipart", file_part(b"\x89PNG" + b"\x00" * (LIMIT + 10)), 413,
     "payload_too_large"),
    ("too_large_json", {"json": {"image": base64.b64encode(b"\x00" * (LIMIT * 2)).decode()}},
     413, "payload_too_large"),
    ("too_large_raw", {"content": b"\x00" * (LIMIT + 1),
                       "headers": {"content-type": "application/octet-stream"}},
     413, "payload_too_large"),
    ("too_large_decoded_json", {"json": {"image": base64.b64encode(b"\x00" * (LIMIT + 1))
                                         .decode()}}, 413, "payload_too_large"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "status", "code"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
async def test_bad_input_is_a_clear_4xx_and_server_stays_ready(kwargs, status, code):
    async with serving(make_settings(max_upload_bytes=LIMIT)) as (_, client, engine):
        resp = await client.post(PARSE, **kwargs)
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert set(error) == {"code", "message"} and error["message"]
        assert error["code"] == code
        assert "Traceback" not in resp.text
        assert (await client.get("/readyz")).status_code == 200
        assert engine.batches == []  # nothing bad reached the engine
        ok = await client.post(PARSE, **file_part(png_bytes()))
        assert ok.status_code == 200


async def test_body_limit_is_enforced_while_streaming_without_content_length():
    """A chunked upload without Content-Length is cut off at the limit, not buffered whole."""
    pulled = 0

    async def chunks():
        nonlocal pulled
        for _ in range(1000):  # would be 64 MiB if read to the end
            pulled += 1
            yield b"\x00" * 65536

    async with serving(make_settings(max_upload_bytes=LIMIT)) as (_, client, _engine):
        resp = await client.post(
            PARSE, content=chunks(), headers={"content-type": "application/octet-stream"}
        )
        assert resp.status_code == 413
        assert resp.json()["error"]["code"] == "payload_too_large"
        assert (await client.get("/readyz")).status_code == 200
    assert pulled < 10


async def test_decompression_bomb_with_small_pixel_limit_also_rejected():
    settings = make_settings(max_image_pixels=100 * 100)
    async with serving(settings) as (_, client, _engine):
        resp = await client.post(PARSE, **file_part(png_bytes(200, 200)))
    assert resp.status_code == 413
