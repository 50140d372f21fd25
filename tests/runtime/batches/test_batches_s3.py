"""The Batch API on a real S3-compatible server (SeaweedFS's S3 gateway, ``seaweed_s3``), a
real Redis and the production app in a real process: batch files and outputs in
``s3://``, ``uri`` lines read from an allowed S3 prefix, ``batch submit`` from one bucket into
another, and a Redis crash mid-batch with the append-only file on.

The servers and the CLI run from ``.venv/cloud`` (the runtime with its ``cloud`` extra, s3fs,
as in the runtime image): botocore pins ``python-dateutil<3``, which the test venv's Kubernetes
client cannot share. What they wrote is read back through ``S3Client``, a second S3 client,
so an object is checked on the server, not in the library that wrote it. The engine is the
deterministic test engine (``serve_test_engine.py``: production app, worker and storage; the
page text names the page's size), so each output can be matched to its own document.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import time
from pathlib import Path

import openai
import pytest
from docparser_runtime.server.guards.auth import key_id_of
from live_server import LiveServer, start_all
from PIL import Image
from redis_server import REDIS_BIN, RedisServer

REPO = Path(__file__).resolve().parents[3]
CLOUD_PYTHON = REPO / ".venv" / "cloud" / "bin" / "python"
KEY_A, KEY_B = "s3-batch-key-a-0123456789", "s3-batch-key-b-0123456789"
PARSE = "/v1/document/parse"
STORE, DOCS, SRC, DST = "dp-store", "dp-docs", "dp-src", "dp-dst"

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def image(width: int, height: int = 40, fmt: str = "PNG") -> bytes:
    """A blank page whose size the test engine writes into its text ("page 0 WxH")."""
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format=fmt)
    return buf.getvalue()


def parse_line(custom_id: str, **body: object) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": PARSE, "body": {**body, "tier": 0}}


def jsonl(lines: list[dict]) -> bytes:
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def client(server: LiveServer, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def wait_done(sdk: openai.OpenAI, batch_id: str, timeout: float = 180.0, log=lambda: ""):
    """Polls until the batch ends; a 5xx or a refused connection (Redis down) is retried.
    ``log``: the server's log, for the failure message."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = sdk.batches.retrieve(batch_id)
        except (openai.InternalServerError, openai.APIConnectionError) as exc:
            last = exc
        else:
            if last.status in ("completed", "failed", "expired", "cancelled"):
                return last
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} not done in {timeout}s; last: {last}\n{log()}")


def lines_of(sdk: openai.OpenAI, file_id: str | None) -> list[dict]:
    assert file_id is not None
    return [json.loads(x) for x in sdk.files.content(file_id).text.splitlines()]


@pytest.fixture(scope="module")
def cloud_python() -> str:
    if not CLOUD_PYTHON.exists():
        pytest.skip(f"{CLOUD_PYTHON} missing: `make seaweedfs` installs the runtime with s3fs")
    if not Path(REDIS_BIN).exists():
        pytest.skip("redis-server not installed (make system-deps)")
    return str(CLOUD_PYTHON)


@pytest.fixture(scope="module")
def s3(seaweed_s3):
    for bucket in (STORE, DOCS, SRC, DST):
        seaweed_s3.client.create_bucket(bucket)
    return seaweed_s3


@pytest.fixture(scope="module")
def env(s3, cloud_python, tmp_path_factory):
    keys = tmp_path_factory.mktemp("s3-batches") / "keys"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    with RedisServer() as redis:
        base = {
            **s3.env,
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_API_KEYS_FILE": str(keys),
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_POLL_S": "0.1",
            "DOCPARSER_BATCH_URI_PREFIXES": json.dumps([f"s3://{DOCS}/{{key_id}}/"]),
            "DOCPARSER_BATCH_STORAGE_URI": f"s3://{STORE}/batches",
        }
        server = LiveServer(python=cloud_python, gated_delay_s=0.1, env=base)
        start_all(server)
        try:
            yield {"server": server, "s3": s3, "base": base}
        finally:
            server.stop()


def test_sdk_batch_on_s3_reads_uris_under_the_allowed_prefix_only(env):
    """files.create / batches.create / retrieve / files.content with everything in S3; a
    ``uri`` under the caller's prefix is read from S3, one under another key's is refused
    into the error file, and so are a missing object and a climb out of the prefix."""
    s3, sdk = env["s3"], client(env["server"])
    mine = key_id_of(KEY_A.encode())
    s3.client.put(DOCS, f"{mine}/scans/receipt.png", image(111))
    s3.client.put(DOCS, f"{key_id_of(KEY_B.encode())}/theirs.png", image(222))
    s3.client.put(DOCS, "shared/outside.png", image(333))
    lines = [
        parse_line("mine", uri=f"s3://{DOCS}/{mine}/scans/receipt.png"),
        parse_line("other-key", uri=f"s3://{DOCS}/{key_id_of(KEY_B.encode())}/theirs.png"),
        parse_line("outside", uri=f"s3://{DOCS}/shared/outside.png"),
        parse_line("climb", uri=f"s3://{DOCS}/{mine}/../shared/outside.png"),
        parse_line("missing", uri=f"s3://{DOCS}/{mine}/nothing-here.png"),
        parse_line("inline", image=base64.b64encode(image(444)).decode()),
    ]
    data = jsonl(lines)
    uploaded = sdk.files.create(file=("uris.jsonl", data), purpose="batch")
    stored = s3.client.list(STORE, "batches/files/")
    assert f"batches/files/{uploaded.id}.jsonl" in stored, stored
    assert s3.client.get(STORE, f"batches/files/{uploaded.id}.jsonl") == data
    assert sdk.files.content(uploaded.id).content == data

    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint=PARSE, completion_window="24h")
    assert batch.status == "validating"
    done = wait_done(sdk, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed) == (6, 2)
    out = {o["custom_id"]: o["response"]["body"] for o in lines_of(sdk, done.output_file_id)}
    assert set(out) == {"mine", "inline"}
    assert "page 0 111x40" in out["mine"]["content"]  # the object under the prefix, from S3
    assert "page 0 444x40" in out["inline"]["content"]
    errors = {e["custom_id"]: e["error"]["code"] for e in lines_of(sdk, done.error_file_id)}
    assert errors == {
        "other-key": "uri_not_allowed",
        "outside": "uri_not_allowed",
        "climb": "uri_not_allowed",
        "missing": "uri_unreadable",
    }
    for file_id in (done.output_file_id, done.error_file_id):  # the results live in S3 too
        key = f"batches/files/{file_id}.jsonl"
        assert s3.client.get(STORE, key) == sdk.files.content(file_id).content


def test_sdk_cancel_on_s3_keeps_what_ran(env):
    sdk = client(env["server"], KEY_B)
    lines = [
        parse_line(f"c{i}", image=base64.b64encode(image(100 + i)).decode()) for i in range(40)
    ]
    uploaded = sdk.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint=PARSE, completion_window="24h")
    deadline = time.monotonic() + 60
    while sdk.batches.retrieve(batch.id).request_counts.completed < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sdk.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait_done(sdk, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    ran, cancelled = lines_of(sdk, done.output_file_id), lines_of(sdk, done.error_file_id)
    assert 1 <= len(ran) < 40 and len(ran) + len(cancelled) == 40
    assert {e["error"]["code"] for e in cancelled} == {"batch_cancelled"}
    ids = [o["custom_id"] for o in ran] + [e["custom_id"] for e in cancelled]
    assert sorted(ids) == sorted(f"c{i}" for i in range(40))
    for o in ran:
        width = 100 + int(o["custom_id"][1:])
        assert f"page 0 {width}x40" in o["response"]["body"]["content"], o


def test_batch_submit_from_one_bucket_into_another(env, cloud_python):
    """``docparser-runtime batch submit s3://src/ --output s3://dst/``: one Markdown and one
    JSON object per document and a manifest, all in S3; a file that is not a document is left
    out and a broken one is a failed manifest row with no outputs."""
    s3, server = env["s3"], env["server"]
    docs = {"receipt.png": image(120), "2026/invoice.jpg": image(130, fmt="JPEG")}
    pdf = io.BytesIO()
    first, second = Image.new("RGB", (140, 40), "white"), Image.new("RGB", (150, 40), "white")
    first.save(pdf, format="PDF", save_all=True, append_images=[second])
    docs["2026/contract.pdf"] = pdf.getvalue()
    for name, data in docs.items():
        s3.client.put(SRC, f"scans/{name}", data)
    s3.client.put(SRC, "scans/broken.png", b"this is not a PNG at all")
    s3.client.put(SRC, "scans/notes.txt", b"not a document: never submitted")
    args = [cloud_python, "-m", "docparser_runtime", "batch", "submit", f"s3://{SRC}/scans/"]
    args += ["--output", f"s3://{DST}/out/", "--url", server.url, "--tier", "0", "--poll", "0.2"]
    run_env = {**os.environ, **env["s3"].env, "DOCPARSER_API_KEY": KEY_A}
    done = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr  # broken.png failed, the rest parsed
    assert "3 documents (4 pages) written, 1 failed" in done.stderr, done.stderr

    written = set(s3.client.list(DST, "out/"))
    expected = {f"out/{name}{ext}" for name in docs for ext in (".md", ".json")}
    assert written - {"out/.docparser-batch.json"} == expected | {"out/manifest.jsonl"}
    rows = [json.loads(x) for x in s3.client.get(DST, "out/manifest.jsonl").splitlines()]
    by_doc = {row["document"]: row for row in rows}
    assert len(rows) == 4 and set(by_doc) == {*docs, "broken.png"}
    for name, sizes in [
        ("receipt.png", ["120x40"]),
        ("2026/invoice.jpg", ["130x40"]),
        ("2026/contract.pdf", None),  # rendered pages: their size is the renderer's
    ]:
        row = by_doc[name]
        assert row["status"] == "completed" and row["error"] is None, row
        reply = json.loads(s3.client.get(DST, f"out/{name}.json"))
        assert len(reply["pages"]) == row["pages"] == (2 if name.endswith(".pdf") else 1)
        markdown = s3.client.get(DST, f"out/{name}.md").decode()
        assert markdown.strip() and reply["content"].strip()
        for size in sizes or []:
            assert f"page 0 {size}" in markdown and f"page 0 {size}" in reply["content"]
    assert by_doc["broken.png"]["status"] == "failed"
    assert by_doc["broken.png"]["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize("storage", ["s3", "file"])
def test_a_redis_crash_mid_batch_with_aof_loses_no_line(storage, request, tmp_path):
    """redis-server with the append-only file on is killed (SIGKILL) while a batch runs and
    comes back 8 s later from its AOF: the batch completes, every line has exactly one
    output, and each output is its own line's. Without the AOF the batch itself is gone
    (docs/operations.md recommends appendonly for batches); without the worker handing back
    a line whose record was lost to the outage, that line stayed held for ever (29 of 30).
    8 s outlasts redis-py's own retries (10, capped at 1 s), so the line's record fails; the
    60 s lease outlasts the outage and the next heartbeat, so only the hand-back can free it
    (the reaper frees only expired leases: with 2 to 20 s that mutant passed 1 run in 3).
    The ``file`` case runs the same without S3, where weed is not built."""
    if not Path(REDIS_BIN).exists():
        pytest.skip("redis-server not installed (make system-deps)")
    python, extra = None, {"DOCPARSER_BATCH_STORAGE_URI": f"file://{tmp_path}/store"}
    if storage == "s3":
        python = request.getfixturevalue("cloud_python")
        s3 = request.getfixturevalue("s3")
        extra = {**s3.env, "DOCPARSER_BATCH_STORAGE_URI": f"s3://{STORE}/restart"}
    count = 30
    with RedisServer(appendonly=True) as redis:
        server_env = {
            **extra,
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_POLL_S": "0.1",
            "DOCPARSER_JOB_LEASE_S": "60",
        }
        with LiveServer(python=python, gated_delay_s=0.2, env=server_env) as server:
            sdk = client(server, "unused")
            lines = [
                parse_line(f"r{i}", image=base64.b64encode(image(200 + i)).decode())
                for i in range(count)
            ]
            uploaded = sdk.files.create(file=("r.jsonl", jsonl(lines)), purpose="batch")
            batch = sdk.batches.create(
                input_file_id=uploaded.id, endpoint=PARSE, completion_window="24h"
            )
            deadline = time.monotonic() + 60
            while (before := sdk.batches.retrieve(batch.id)).request_counts.completed < 3:
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.05)
            redis.crash_and_restart(down_s=8.0)
            assert before.request_counts.completed < count  # the crash came mid-batch
            done = wait_done(sdk, batch.id, timeout=60, log=lambda: server.log(20000))
            assert done.status == "completed", (done, server.log())
            out = lines_of(sdk, done.output_file_id)
            assert done.request_counts.completed == count and done.request_counts.failed == 0
            ids = [o["custom_id"] for o in out]
            assert ids == [f"r{i}" for i in range(count)], ids  # each once, in line order
            for o in out:
                width = 200 + int(o["custom_id"][1:])
                assert f"page 0 {width}x40" in o["response"]["body"]["content"], o
            assert done.error_file_id is None or lines_of(sdk, done.error_file_id) == []
