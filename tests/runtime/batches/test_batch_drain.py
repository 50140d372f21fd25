"""A rollout mid-batch on real server processes (the test engine: every page takes 2 s), real
Redis and files: SIGTERM reaches a pod of revision ``old`` while it runs a batch line; the pod
claims nothing more, finishes that line within its drain (recorded once, not handed back) and
exits; a pod of revision ``new`` runs the rest. The output names the revision of each line,
so a batch that spanned a rollout says which revision wrote what."""

from __future__ import annotations

import base64
import io
import json
import signal
import time

import openai
import pytest
import redis
from live_server import LiveServer
from PIL import Image
from redis_server import RedisServer

pytestmark = pytest.mark.slow
PARSE = "/v1/document/parse"
PAGE_S = 2.0


def line(custom_id: str) -> dict:
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), "white").save(buf, format="PNG")
    body = {"image": base64.b64encode(buf.getvalue()).decode()}
    return {"custom_id": custom_id, "method": "POST", "url": PARSE, "body": body}


def server(redis_url: str, root: str, revision: str) -> LiveServer:
    env = {
        "DOCPARSER_REDIS_URL": redis_url,
        "DOCPARSER_BATCH_STORAGE_URI": f"file://{root}",
        "DOCPARSER_BATCH_POLL_S": "0.1",
        "DOCPARSER_REVISION": revision,
        "DOCPARSER_DRAIN_TIMEOUT_S": "30",
    }
    return LiveServer(gated_delay_s=PAGE_S, env=env)


def test_a_pod_leaving_mid_line_finishes_it_and_the_next_revision_runs_the_rest(tmp_path):
    with RedisServer() as store:
        r = redis.Redis.from_url(store.url)
        old = server(store.url, str(tmp_path / "store"), "old").start().wait_ready()
        try:
            sdk = openai.OpenAI(base_url=f"{old.url}/v1", api_key="-", max_retries=0, timeout=60)
            data = "".join(json.dumps(line(f"doc-{i}")) + "\n" for i in range(3)).encode()
            uploaded = sdk.files.create(file=("in.jsonl", data), purpose="batch")
            batch = sdk.batches.create(
                input_file_id=uploaded.id, endpoint=PARSE, completion_window="24h"
            )
            inflight = f"docparser:batch:inflight:{batch.id}"
            deadline = time.monotonic() + 60
            while int(r.get(inflight) or 0) < 1:  # the old pod runs line 0
                assert time.monotonic() < deadline, old.log()
                time.sleep(0.05)
            old.signal(signal.SIGTERM)  # the rollout replaces it mid-line
            # uvicorn re-raises the signal once its graceful shutdown is done
            assert old.wait_exit(40) in (0, -signal.SIGTERM), old.log()
        finally:
            old.stop()
        results = f"docparser:batch:results:{batch.id}"
        done = sorted(int(i) for i in r.hkeys(results))
        assert done == [0], old.log()  # finished, not handed back; nothing more claimed
        queue = [x.decode() for x in r.lrange("docparser:batch:queue", 0, -1)]
        assert queue == [f"{batch.id}:1", f"{batch.id}:2"]
        new = server(store.url, str(tmp_path / "store"), "new").start().wait_ready()
        try:
            sdk = openai.OpenAI(base_url=f"{new.url}/v1", api_key="-", max_retries=0, timeout=60)
            deadline = time.monotonic() + 90
            while (got := sdk.batches.retrieve(batch.id)).status != "completed":
                assert time.monotonic() < deadline, (got, new.log())
                time.sleep(0.2)
            out = [json.loads(x) for x in sdk.files.content(got.output_file_id).text.splitlines()]
        finally:
            new.stop()
        assert [(o["custom_id"], o["revision"]) for o in out] == [
            ("doc-0", "old"),
            ("doc-1", "new"),
            ("doc-2", "new"),
        ]
        assert got.request_counts.completed == 3 and got.error_file_id is None
