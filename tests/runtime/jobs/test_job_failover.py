"""A job accepted by replica A survives A's death: two real server processes share one
real Redis; the one running the job is SIGKILLed mid-job (no drain, no goodbye), the
other's reaper notices the dead lease, requeues the job and completes it. Every wait is
bounded."""

from __future__ import annotations

import asyncio
import io
import signal
import time

import httpx
import pytest
from docparser_runtime.jobs.redis_store import RedisJobStore
from live_server import LiveServer, poll_job, start_all
from PIL import Image

pytestmark = [pytest.mark.slow, pytest.mark.redis]

PAGES = 4
PAGE_S = 0.6  # engine time per page: the job runs ~2.4 s on one replica
LEASE_S = 1.5


def pdf(pages: int) -> bytes:
    images = [Image.new("RGB", (320, 240 + i), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:])
    return buf.getvalue()


def test_job_of_a_killed_replica_is_completed_by_another(redis_url):
    env = {
        "DOCPARSER_REDIS_URL": redis_url,
        "DOCPARSER_JOB_LEASE_S": LEASE_S,
        "DOCPARSER_MAX_BATCH_SIZE": 1,
        "DOCPARSER_CACHE_MAX_BYTES": 0,
    }
    servers = [LiveServer(env=env, gated_delay_s=PAGE_S) for _ in range(2)]
    try:
        start_all(*servers)
        reply = httpx.post(f"{servers[0].url}/v1/jobs", files={"file": ("d.pdf", pdf(PAGES))})
        assert reply.status_code == 202
        job_id = reply.json()["id"]
        mid = poll_job(
            servers[0].url, job_id, lambda j: j["progress"]["pages_done"] >= 1, timeout=30
        )
        assert mid["status"] == "running" and mid["progress"]["pages_done"] < PAGES

        # Whichever replica claimed it dies (its worker id names its pid).
        owner = asyncio.run(job_owner(redis_url, job_id))
        victim = next(s for s in servers if f"-{s.proc.pid}-" in owner)
        survivor = next(s for s in servers if s is not victim)
        victim.signal(signal.SIGKILL)
        assert victim.wait_exit(timeout=10) == -signal.SIGKILL
        t_killed = time.monotonic()
        done = poll_job(
            survivor.url, job_id, lambda j: j["status"] in ("succeeded", "failed"), timeout=60
        )
        recovered_s = time.monotonic() - t_killed
    finally:
        for server in servers:
            server.stop()
    assert done["status"] == "succeeded", done
    assert done["progress"] == {"pages_done": PAGES, "pages_total": PAGES}
    assert [p["index"] for p in done["result"]["pages"]] == list(range(PAGES))
    print(f"failover: job completed {recovered_s:.1f}s after its replica was killed")


async def job_owner(redis_url: str, job_id: str) -> str:
    store = RedisJobStore.from_url(redis_url, ttl_s=60)
    try:
        return (await store.get(job_id)).worker
    finally:
        await store.close()
