"""The batch API through the official ``openai`` client against live servers (rapidocr on
127.0.0.1, real Redis, files under a tmp dir through fsspec): upload, create, poll, read the
output in line order; bad lines in the error file with their custom_id and code; ``uri``
lines only under the caller's allowed prefix; another API key gets 404; the limits answer
4xx naming the setting; cancel.
"""

from __future__ import annotations

import base64
import io
import json
import time

import httpx
import openai
import pytest
from docparser_runtime.server.guards.auth import key_id_of
from live_server import LiveServer, start_all
from PIL import Image, ImageDraw, ImageFont
from redis_server import RedisServer

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
KEY_A, KEY_B = "batch-key-a-0123456789", "batch-key-b-0123456789"
CHAT, PARSE = "/v1/chat/completions", "/v1/document/parse"

pytestmark = pytest.mark.slow


def png(words: str) -> bytes:
    img = Image.new("RGB", (460, 120), "white")
    ImageDraw.Draw(img).text((20, 30), words, fill="black", font=ImageFont.truetype(FONT, 44))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def chat_line(custom_id: str, words: str) -> dict:
    url = "data:image/png;base64," + base64.b64encode(png(words)).decode()
    content = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Free OCR."},
    ]
    body = {"model": "rapidocr", "messages": [{"role": "user", "content": content}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def jsonl(lines: list[dict | str]) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    keys = root / "keys"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    docs = root / "docs" / key_id_of(KEY_A.encode())
    docs.mkdir(parents=True)
    (docs / "page.png").write_bytes(png("Receipt 42"))
    (root / "docs" / "elsewhere.png").write_bytes(png("Secret 7"))
    with RedisServer() as redis:
        base = {
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_API_KEYS_FILE": str(keys),
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_POLL_S": "0.1",
            "DOCPARSER_BATCH_URI_PREFIXES": json.dumps([f"file://{root}/docs/{{key_id}}/"]),
        }
        main = LiveServer(env={**base, "DOCPARSER_BATCH_STORAGE_URI": f"file://{root}/store"})
        # No batch worker and small limits: batches stay unfinished, limits are reached.
        small = LiveServer(
            env={
                **base,
                "DOCPARSER_REDIS_PREFIX": "small:",
                "DOCPARSER_BATCH_STORAGE_URI": f"file://{root}/small",
                "DOCPARSER_BATCH_WORKERS": "0",
                "DOCPARSER_BATCH_MAX_FILE_BYTES": "4096",
                "DOCPARSER_BATCH_MAX_LINES": "3",
                "DOCPARSER_BATCH_MAX_ACTIVE_PER_KEY": "1",
            }
        )
        start_all(main, small)
        try:
            yield {"main": main, "small": small, "root": root}
        finally:
            main.stop()
            small.stop()


def client(server: LiveServer, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def wait_done(sdk: openai.OpenAI, batch_id: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        batch = sdk.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}: {batch}"
        time.sleep(0.2)


def lines_of(sdk: openai.OpenAI, file_id: str | None) -> list[dict]:
    assert file_id is not None
    return [json.loads(x) for x in sdk.files.content(file_id).text.splitlines()]


def test_sdk_round_trip_outputs_every_line_in_order_and_bad_lines_in_the_error_file(env):
    sdk = client(env["main"])
    data = jsonl(
        [
            chat_line("first", "Invoice 2026"),
            "{not json",
            {**chat_line("wrong-url", "x"), "url": PARSE},
            chat_line("second", "Total 31"),
            {**chat_line("bad-model", "x"), "body": {"model": "gpt-4o", "messages": []}},
        ]
    )
    uploaded = sdk.files.create(file=("in.jsonl", data), purpose="batch")
    assert uploaded.bytes == len(data) and uploaded.purpose == "batch"
    assert sdk.files.retrieve(uploaded.id).filename == "in.jsonl"
    assert sdk.files.content(uploaded.id).content == data
    batch = sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata={"project": "t"},
    )
    assert batch.status == "validating" and batch.metadata == {"project": "t"}
    done = wait_done(sdk, batch.id)
    assert done.status == "completed", done
    assert done.request_counts.total == 5
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 3)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    out = lines_of(sdk, done.output_file_id)
    assert [o["custom_id"] for o in out] == ["first", "second"]
    texts = [o["response"]["body"]["choices"][0]["message"]["content"] for o in out]
    assert "Invoice" in texts[0] and "31" in texts[1]
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in out)
    errors = lines_of(sdk, done.error_file_id)
    got = [(e["custom_id"], e["error"]["code"]) for e in errors]
    assert got == [
        (None, "invalid_json_line"),
        ("wrong-url", "mismatched_url"),
        ("bad-model", "invalid_request"),
    ]
    assert all(e["response"] is None for e in errors)
    listed = sdk.batches.list(limit=10)
    assert done.id in [b.id for b in listed.data]
    assert sdk.files.retrieve(done.output_file_id).purpose == "batch_output"
    assert sdk.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(uploaded.id)


def test_uri_lines_read_only_under_the_callers_allowed_prefix(env):
    sdk = client(env["main"])
    root = env["root"]
    mine = f"file://{root}/docs/{key_id_of(KEY_A.encode())}"
    lines = [
        {"custom_id": "mine", "method": "POST", "url": PARSE, "body": {"uri": f"{mine}/page.png"}},
        {
            "custom_id": "up",
            "method": "POST",
            "url": PARSE,
            "body": {"uri": f"{mine}/../elsewhere.png"},
        },
        {
            "custom_id": "other",
            "method": "POST",
            "url": PARSE,
            "body": {"uri": f"file://{root}/docs/elsewhere.png"},
        },
        {
            "custom_id": "web",
            "method": "POST",
            "url": PARSE,
            "body": {"uri": "http://127.0.0.1:9/x.png"},
        },
        {
            "custom_id": "inline",
            "method": "POST",
            "url": PARSE,
            "body": {"image": base64.b64encode(png("Inline 5")).decode(), "tier": 0},
        },
    ]
    uploaded = sdk.files.create(file=("uris.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint=PARSE, completion_window="24h")
    done = wait_done(sdk, batch.id)
    out = {o["custom_id"]: o["response"]["body"] for o in lines_of(sdk, done.output_file_id)}
    assert set(out) == {"mine", "inline"}
    assert "Receipt" in out["mine"]["content"] and "Inline" in out["inline"]["content"]
    errors = {e["custom_id"]: e["error"]["code"] for e in lines_of(sdk, done.error_file_id)}
    assert errors == {"up": "uri_not_allowed", "other": "uri_not_allowed", "web": "uri_not_allowed"}


def test_another_api_key_gets_404_for_files_and_batches(env):
    a, b = client(env["main"], KEY_A), client(env["main"], KEY_B)
    uploaded = a.files.create(file=("in.jsonl", jsonl([chat_line("x", "Hi 1")])), purpose="batch")
    batch = a.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    for call in (
        lambda: b.files.retrieve(uploaded.id),
        lambda: b.files.content(uploaded.id),
        lambda: b.files.delete(uploaded.id),
        lambda: b.batches.retrieve(batch.id),
        lambda: b.batches.cancel(batch.id),
        lambda: b.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert batch.id not in [x.id for x in b.batches.list().data]
    assert wait_done(a, batch.id).status == "completed"


def test_limits_answer_4xx_naming_the_limit_and_cancel(env):
    sdk = client(env["small"])
    with pytest.raises(openai.APIStatusError) as big:
        sdk.files.create(file=("big.jsonl", b"x" * 5000 + b"\n"), purpose="batch")
    assert big.value.status_code == 413 and "DOCPARSER_BATCH_MAX_FILE_BYTES" in str(big.value)
    with pytest.raises(openai.APIStatusError) as many:
        sdk.files.create(file=("many.jsonl", b"{}\n" * 4), purpose="batch")
    assert many.value.status_code == 413 and "DOCPARSER_BATCH_MAX_LINES" in str(many.value)
    with pytest.raises(openai.BadRequestError):
        sdk.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    uploaded = sdk.files.create(file=("ok.jsonl", b"{}\n"), purpose="batch")
    first = sdk.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.RateLimitError) as active:
        sdk.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    assert "DOCPARSER_BATCH_MAX_ACTIVE_PER_KEY" in str(active.value)
    other = client(env["small"], KEY_B)  # the limit is per key
    theirs = other.files.create(file=("ok.jsonl", b"{}\n"), purpose="batch")
    other.batches.create(input_file_id=theirs.id, endpoint=CHAT, completion_window="24h")
    assert sdk.batches.cancel(first.id).status == "cancelling"
    bad = httpx.post(
        f"{env['small'].url}/v1/batches",
        headers={"Authorization": f"Bearer {KEY_A}"},
        json={
            "input_file_id": uploaded.id,
            "endpoint": "/v1/embeddings",
            "completion_window": "24h",
        },
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_cancel_stops_a_running_batch_and_keeps_what_ran(env):
    sdk = client(env["main"])
    lines = [chat_line(f"c{i}", f"Line {i}") for i in range(40)]
    uploaded = sdk.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 60
    while sdk.batches.retrieve(batch.id).request_counts.completed < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sdk.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait_done(sdk, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    ran = lines_of(sdk, done.output_file_id)
    cancelled = lines_of(sdk, done.error_file_id)
    assert 1 <= len(ran) < 40 and len(ran) + len(cancelled) == 40
    assert {e["error"]["code"] for e in cancelled} == {"batch_cancelled"}
    ids = [o["custom_id"] for o in ran] + [e["custom_id"] for e in cancelled]
    assert sorted(ids) == sorted(f"c{i}" for i in range(40))
    one = sdk.files.create(file=("one.jsonl", jsonl([chat_line("o", "One 1")])), purpose="batch")
    finished = sdk.batches.create(input_file_id=one.id, endpoint=CHAT, completion_window="24h")
    assert wait_done(sdk, finished.id).status == "completed"
    with pytest.raises(openai.ConflictError):
        sdk.batches.cancel(finished.id)


def test_a_leaving_pod_claims_no_line_and_another_pod_runs_the_batch(tmp_path):
    """The preStop signal (SIGUSR1): the pod still answers the batch routes but its worker
    claims nothing; a pod that stays runs the whole batch, each line once."""
    import signal

    import redis as redis_client

    with RedisServer() as redis:
        env = {
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_STORAGE_URI": f"file://{tmp_path}/store",
            "DOCPARSER_BATCH_POLL_S": "0.1",
        }
        with LiveServer(env=env) as leaving:
            leaving.signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while "the pod is leaving" not in leaving.log():
                assert time.monotonic() < deadline, leaving.log()
                time.sleep(0.1)
            sdk = client(leaving, "unused")
            lines = [chat_line(f"c{i}", f"Page {i}") for i in range(3)]
            uploaded = sdk.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
            batch = sdk.batches.create(
                input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
            )
            queue = redis_client.Redis.from_url(redis.url)
            deadline = time.monotonic() + 30
            while sdk.batches.retrieve(batch.id).status == "validating":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            time.sleep(2)  # 20 claim periods: every line is still queued, none held
            assert queue.llen("docparser:batch:queue") == 3
            assert sdk.batches.retrieve(batch.id).request_counts.completed == 0
            with LiveServer(env=env) as staying:
                done = wait_done(client(staying, "unused"), batch.id)
            assert done.status == "completed" and done.request_counts.completed == 3
            out = lines_of(sdk, done.output_file_id)
            assert [o["custom_id"] for o in out] == ["c0", "c1", "c2"]
