"""``/v1/files`` and ``/v1/batches`` read as a hostile tenant would, in process (real Redis,
files under a tmp dir): every bad upload or body is a clear 4xx, an upload past the limit
leaves nothing behind, and a deployment without batch storage answers 404 saying so."""

from __future__ import annotations

import pytest
from app_for_tests import make_settings, serving

pytestmark = pytest.mark.asyncio

BOUNDARY = "b0undary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def form(*parts: tuple[str, str | None, bytes]) -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += data + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def configured(redis_url: str, root, **more):
    return make_settings(
        redis_url=redis_url,
        batch_storage_uri=f"file://{root}",
        batch_workers=0,
        batch_max_file_bytes=4096,
        **more,
    )


async def test_without_batch_storage_the_routes_answer_404_saying_so():
    async with serving(make_settings()) as (_app, client, _engine):
        for method, path in (("POST", "/v1/files"), ("GET", "/v1/batches"), ("GET", "/v1/files/x")):
            reply = await client.request(method, path)
            assert reply.status_code == 404, (path, reply.text)
            assert reply.json()["error"]["code"] == "batches_not_configured"


async def test_hostile_uploads_get_clear_4xx_and_leave_nothing_behind(redis_url, tmp_path):
    async with serving(configured(redis_url, tmp_path)) as (_app, client, _engine):

        async def post(body, content_type=MULTIPART, **kw):
            return await client.post(
                "/v1/files", content=body, headers={"content-type": content_type}, **kw
            )

        ok = form(("purpose", None, b"batch"), ("file", "a.jsonl", b'{"x": 1}\n'))
        assert (await post(ok)).status_code == 200
        cases = [
            (await post(ok, content_type="multipart/form-data"), 415, "unsupported_content_type"),
            (await post(ok, content_type="application/json"), 415, "unsupported_content_type"),
            (
                await post(
                    form(("file", "a", b"{}"), ("file", "b", b"{}"), ("purpose", None, b"batch"))
                ),
                400,
                "duplicate_field",
            ),
            (
                await post(form(*[(f"f{i}", None, b"x") for i in range(20)])),
                400,
                "invalid_multipart",
            ),
            (await post(form(("purpose", None, b"x" * 5000))), 400, "invalid_multipart"),
            (await post(form(("purpose", None, b"batch"))), 400, "missing_file"),
            (
                await post(form(("purpose", None, b"assistants"), ("file", "a", b"{}"))),
                400,
                "invalid_purpose",
            ),
            (
                await post(b"--" + BOUNDARY.encode() + b"\r\nnot a header line at all\r\n\r\n"),
                400,
                "invalid_multipart",
            ),
        ]

        async def chunks():  # no Content-Length: the limit is found while streaming
            yield form(("purpose", None, b"batch"))[: -len(BOUNDARY) - 6]
            head = 'Content-Disposition: form-data; name="file"; filename="big"'
            yield f"--{BOUNDARY}\r\n{head}\r\n\r\n".encode()
            for _ in range(10):
                yield b"y" * 1000

        big = await post(chunks())
        cases.append((big, 413, "batch_file_too_large"))
        for reply, status, code in cases:
            assert (reply.status_code, reply.json()["error"]["code"]) == (status, code), reply.text
        assert "DOCPARSER_BATCH_MAX_FILE_BYTES" in big.json()["error"]["message"]
        stored = sorted(p.name for p in (tmp_path / "files").iterdir())
        assert len(stored) == 2 and stored[0].endswith(".jsonl")  # the good upload and its index


async def test_bad_batch_bodies_are_400_and_unknown_ids_404(redis_url, tmp_path):
    async with serving(configured(redis_url, tmp_path)) as (_app, client, _engine):
        good = {
            "input_file_id": "file-nope",
            "endpoint": "/v1/document/parse",
            "completion_window": "24h",
        }
        for body in (
            b"{not json",
            b"[]",
            b'{"input_file_id": "f", "endpoint": "/v1/chat/completions",'
            b' "completion_window": "1h"}',
            b'{"input_file_id": "f", "endpoint": "/v1/document/parse", "completion_window": "24h",'
            b' "metadata": {"k": "' + b"v" * 600 + b'"}}',
        ):
            reply = await client.post("/v1/batches", content=body)
            assert reply.status_code == 400, body
        missing = await client.post("/v1/batches", json=good)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
        huge = await client.post("/v1/batches", content=b"{" + b" " * 70000 + b"}")
        assert huge.status_code == 413
        assert (await client.get("/v1/batches/batch_nope")).status_code == 404
        assert (await client.post("/v1/batches/batch_nope/cancel")).status_code == 404
        assert (await client.get("/v1/batches", params={"after": "batch_nope"})).status_code == 404
        assert (await client.get("/v1/batches", params={"limit": 0})).status_code == 422
        assert (await client.get("/v1/files/file-nope/content")).status_code == 404
        assert (await client.delete("/v1/files/file-nope")).status_code == 404
        listed = (await client.get("/v1/batches")).json()
        assert listed == {
            "object": "list",
            "data": [],
            "first_id": None,
            "last_id": None,
            "has_more": False,
        }
