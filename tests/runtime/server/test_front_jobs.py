"""The CPU front with jobs, API keys, quotas and the result cache, as real processes.

Jobs submitted at zero GPU pods wait in the DocParser's Redis (the front holds no job state:
a restarted front answers for them) and complete once a GPU-role server (rapidocr) starts
and works the queue. Auth, per-key job quotas and the per-key result cache behave at the
front as on the pods, because they are the same code on the same Redis.
"""

from __future__ import annotations

import signal

import httpx
import pytest
from documents import png_bytes, single_column, two_columns
from front_processes import FrontAndBackend, metric, post_parse, wait_for
from live_server import poll_job

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def _submit(url: str, document: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/jobs",
        files={"file": ("page.png", document, "image/png")},
        headers=headers,
        timeout=30,
    )


def test_jobs_at_zero_survive_a_front_restart_and_complete_on_a_backend(redis_url):
    page = png_bytes(single_column().image)
    other = png_bytes(two_columns().image)
    # The front has no revision; the pods do (the operator's labels): the pod's revision
    # adopts the front's queue when it starts, as it adopts any queue without a live pod.
    with FrontAndBackend(redis_url, backend_env={"DOCPARSER_REVISION": "r1"}) as fb:
        first = _submit(fb.front.url, page)
        second = _submit(fb.front.url, other, **{"Idempotency-Key": "batch-7"})
        assert first.status_code == second.status_code == 202, (first.text, second.text)
        ids = [first.json()["id"], second.json()["id"]]
        assert first.headers["Location"] == f"/v1/jobs/{ids[0]}"
        wait_for(
            "the queued gauge", lambda: metric(fb.front.url, "docparser_front_queued_jobs") == 2
        )

        fb.front.signal(signal.SIGKILL)  # no drain: whatever it held in memory is gone
        fb.front.wait_exit(10)
        fb.front = fb.new_front()
        for job_id in ids:
            job = httpx.get(f"{fb.front.url}/v1/jobs/{job_id}").json()
            assert job["status"] == "queued", job
        replay = _submit(fb.front.url, other, **{"Idempotency-Key": "batch-7"})
        assert replay.json()["id"] == ids[1] and replay.headers["Idempotent-Replayed"] == "true"
        wait_for(
            "the queued gauge", lambda: metric(fb.front.url, "docparser_front_queued_jobs") == 2
        )

        fb.start_backend()
        done = [
            poll_job(fb.front.url, job_id, lambda b: b["status"] in ("succeeded", "failed"), 120)
            for job_id in ids
        ]
        assert [d["status"] for d in done] == ["succeeded", "succeeded"], done
        assert "Quarterly Report" in done[0]["result"]["content"]
        assert done[1]["progress"]["pages_done"] == 1
        wait_for("an empty queue", lambda: metric(fb.front.url, "docparser_front_queued_jobs") == 0)
        backend = fb.backend.url
        wait_for("an idle pod", lambda: metric(backend, "docparser_jobs_running") == 0)
        assert metric(backend, "docparser_jobs_queued") == 0


def test_auth_quotas_and_the_cache_hold_at_the_front(redis_url, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-alpha\nkey-beta\n")
    alpha = {"Authorization": "Bearer key-alpha"}
    beta = {"Authorization": "Bearer key-beta"}
    shared = {
        "DOCPARSER_API_KEYS_FILE": keys,
        "DOCPARSER_MAX_QUEUED_JOBS_PER_KEY": 1,
        "DOCPARSER_MODEL_VERSION": "rapidocr-test-1",
    }
    page = png_bytes(single_column().image)
    with FrontAndBackend(
        redis_url, shared_env=shared, front_env={"DOCPARSER_FRONT_HOLD_SECONDS": 90}
    ) as fb:
        front = fb.front.url
        assert post_parse(front, page).status_code == 401
        bad = post_parse(front, page, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 403 and bad.json()["error"]["code"] == "invalid_api_key"
        assert (
            httpx.get(
                f"{front}/v1/jobs/job_x", headers={"Authorization": "Bearer nope"}
            ).status_code
            == 403
        )

        # Per-key quota of queued jobs, counted in Redis like on the pods.
        mine = _submit(front, page, **alpha)
        assert mine.status_code == 202, mine.text
        over = _submit(front, page, **alpha)
        assert over.status_code == 429 and over.json()["error"]["code"] == "job_quota_exceeded"
        assert _submit(front, page, **beta).status_code == 202
        job_id = mine.json()["id"]
        assert httpx.get(f"{front}/v1/jobs/{job_id}", headers=beta).status_code == 404

        fb.start_backend()
        fresh = post_parse(front, page, headers=alpha)  # held until the pod is ready
        assert fresh.status_code == 200 and fresh.json()["cached"] is False, fresh.text
        again = post_parse(front, page, headers=alpha)
        assert again.status_code == 200 and again.json()["cached"] is True
        other_key = post_parse(front, page, headers=beta)
        assert other_key.status_code == 200 and other_key.json()["cached"] is False
        wait_for(
            "alpha's job to run on the pod",
            lambda: (
                httpx.get(f"{front}/v1/jobs/{job_id}", headers=alpha).json()["status"]
                == "succeeded"
            ),
            120,
        )
        # With no pod at all, the front still answers a cached parse from the shared cache,
        # for the key that parsed it only.
        assert fb.backend is not None
        fb.backend.stop()
        hit = post_parse(front, page, headers=alpha)
        assert hit.status_code == 200 and hit.json()["cached"] is True
        assert hit.json()["content"] == fresh.json()["content"]
