"""Jobs and tracks on one real Redis: a job runs on the revision whose pod accepted it, any
pod of the DocParser answers for it, a revision that leaves strands nothing (its queued
jobs go to the revision serving traffic, never to a dark canary), and the backlog each
pod reports is its share of its own revision's queue."""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import pytest
from docparser_runtime.jobs.models import JobStatus, request_fingerprint
from docparser_runtime.jobs.redis_store import RedisJobStore
from live_server import LiveServer, poll_job, start_all
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.redis

PARAMS = {"tier": 0, "mode": "markdown", "max_new_tokens": 64, "pages": None}
ORPHAN_AFTER_S = 0.6


@pytest.fixture
async def stores(redis_url):
    """``stores(revision)`` -> a store of one DocParser's pod of that revision."""
    made: list[RedisJobStore] = []

    def make(revision: str) -> RedisJobStore:
        store = RedisJobStore.from_url(
            redis_url,
            ttl_s=60,
            prefix="docparser:ns:dp:",
            revision=revision,
            orphan_after_s=ORPHAN_AFTER_S,
        )
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


async def submit(store, data: bytes = b"doc", pages: int = 1):
    job, _ = await store.submit(
        data=data,
        params=PARAMS,
        fingerprint=request_fingerprint(data, PARAMS),
        pages_estimate=pages,
    )
    return job


async def test_a_job_runs_on_the_revision_that_accepted_it(stores):
    stable, canary = stores("aaa111"), stores("bbb222")
    await stable.heartbeat("s1", lease_s=30)
    await canary.heartbeat("c1", lease_s=30)
    job = await submit(canary, b"for the canary")
    assert job.revision == "bbb222"
    # Stable is idle and asks first: it must not take the canary's job.
    assert await stable.claim("s1", timeout_s=0.3) is None
    # Any pod of the DocParser answers for the job, with its place in its own queue.
    assert (await stable.get(job.id)).status is JobStatus.QUEUED
    assert await stable.queue_position(job.id) == 0
    assert await stable.queue_depth() == 0 and await canary.queue_depth() == 1
    claimed = await canary.claim("c1", timeout_s=1)
    assert claimed is not None and claimed.job.id == job.id
    # Given back (a drain ran out of time), it returns to the canary's queue, not stable's.
    await canary.release(job.id, "c1")
    assert await canary.queue_position(job.id) == 0 and await stable.queue_depth() == 0
    # Cancelled from a stable pod, it leaves the canary's queue.
    assert (await stable.cancel(job.id)).status is JobStatus.CANCELLED
    assert await canary.queue_depth() == 0


async def test_a_dead_pods_job_goes_back_to_its_own_revision(stores):
    stable, canary = stores("aaa111"), stores("bbb222")
    await stable.heartbeat("s1", lease_s=30)
    await canary.heartbeat("c-dies", lease_s=0.2)
    await canary.heartbeat("c-lives", lease_s=30)
    job = await submit(canary)
    await canary.claim("c-dies", timeout_s=1)
    await asyncio.sleep(0.3)
    assert await stable.reap() == 1  # any pod's reaper notices the dead lease
    assert await canary.queue_position(job.id) == 0 and await stable.queue_depth() == 0
    claimed = await canary.claim("c-lives", timeout_s=1)
    assert claimed is not None and claimed.job.attempts == 2


async def test_a_revision_gone_leaves_its_jobs_to_the_serving_one_never_a_dark_canary(stores):
    """The old stable was promoted away with two jobs queued: the new stable (which serves
    traffic: it accepted a job) adopts them oldest first; a dark canary (accepted nothing)
    never does."""
    old, new, dark = stores("old000"), stores("new111"), stores("dark22")
    await old.heartbeat("o1", lease_s=0.2)
    first, second = await submit(old, b"first"), await submit(old, b"second")
    await new.heartbeat("n1", lease_s=30)
    await dark.heartbeat("d1", lease_s=30)
    served = await submit(new, b"served by new")
    assert await new.reap() == 0  # the old revision may still be starting a heartbeat
    await asyncio.sleep(ORPHAN_AFTER_S + 0.2)
    for live in (new, dark):  # keep both live revisions fresh
        await live.heartbeat("n1" if live is new else "d1", lease_s=30)
    assert await dark.reap() == 0
    assert await dark.queue_depth() == 0
    assert await new.reap() == 2
    assert (await new.get(first.id)).revision == "new111"
    order = [(await new.claim("n1", timeout_s=1)).job.id for _ in range(3)]
    assert order == [first.id, second.id, served.id]
    assert await dark.claim("d1", timeout_s=0.2) is None


async def test_backlog_is_this_revisions_pages_shared_by_its_live_pods(stores):
    stable_a, stable_b, canary = stores("aaa111"), stores("aaa111"), stores("bbb222")
    await stable_a.heartbeat("s1", lease_s=30)
    await stable_b.heartbeat("s2", lease_s=30)
    await stable_a.heartbeat("s-dead", lease_s=0.1)
    await canary.heartbeat("c1", lease_s=30)
    await submit(stable_a, b"a", pages=30)
    await submit(stable_b, b"b", pages=10)
    await submit(canary, b"c", pages=7)
    await asyncio.sleep(0.2)  # s-dead's lease is gone: it shares no work
    backlog = await stable_b.backlog()
    assert (backlog.jobs, backlog.pages, backlog.workers) == (2, 40, 2)
    assert backlog.pages_per_worker == 20
    mine = await canary.backlog()
    assert (mine.jobs, mine.pages, mine.workers) == (1, 7, 1)


async def test_page_estimates_of_a_long_queue_are_sampled(stores, monkeypatch):
    store = stores("aaa111")
    monkeypatch.setattr(store, "BACKLOG_SAMPLE", 3)
    for i in range(5):
        await submit(store, f"doc {i}".encode(), pages=4)
    backlog = await store.backlog()
    assert (backlog.jobs, backlog.pages) == (5, 20)


def scrape(url: str) -> dict[str, float]:
    """``name{labels}`` -> value of one /metrics scrape."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=5).text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


@pytest.mark.slow
def test_two_tracks_as_processes_run_their_own_jobs_and_scale_on_the_backlog(redis_url):
    """Stable and canary pods of one DocParser as real processes on one Redis: jobs
    accepted by the canary all run there while stable idles, stable answers for them, and
    while they wait the canary's ``docparser_backlog_pages`` counts their pages (stable's
    stays 0)."""
    common = {
        "DOCPARSER_REDIS_URL": redis_url,
        "DOCPARSER_REDIS_PREFIX": "docparser:ns:dp:",
        "DOCPARSER_MAX_BATCH_SIZE": 1,
        "DOCPARSER_CACHE_MAX_BYTES": 0,
    }
    stable = LiveServer(env={**common, "DOCPARSER_REVISION": "aaa111"}, gated_delay_s=0.8)
    canary = LiveServer(env={**common, "DOCPARSER_REVISION": "bbb222"}, gated_delay_s=0.8)
    servers = (stable, canary)
    try:
        start_all(*servers)
        ids = []
        for i in range(JOBS_N):
            files = {"file": (f"d{i}.pdf", pdf(PAGES_PER_JOB, seed=i))}
            reply = httpx.post(f"{canary.url}/v1/jobs", files=files, timeout=10)
            assert reply.status_code == 202, reply.text
            ids.append(reply.json()["id"])
        queued_seen = None
        deadline = time.monotonic() + 20
        while queued_seen is None and time.monotonic() < deadline:
            sample = scrape(canary.url)
            if sample.get("docparser_jobs_queued", 0) >= 1:
                queued_seen = sample
            time.sleep(0.2)
        assert queued_seen is not None, "the canary never reported its queued jobs"
        queued = queued_seen["docparser_jobs_queued"]
        assert queued_seen["docparser_jobs_queued_pages"] == queued * PAGES_PER_JOB
        assert queued_seen["docparser_backlog_pages"] >= queued * PAGES_PER_JOB
        idle = scrape(stable.url)
        assert idle["docparser_jobs_queued"] == 0 and idle["docparser_backlog_pages"] == 0
        for job_id in ids:  # stable answers for the canary's jobs
            done = poll_job(stable.url, job_id, lambda j: j["status"] in ("succeeded", "failed"))
            assert done["status"] == "succeeded", done
        ran = {
            s.url: scrape(s.url).get('docparser_jobs_finished_total{status="succeeded"}', 0)
            for s in servers
        }
    finally:
        for server in servers:
            server.stop()
    assert ran == {canary.url: JOBS_N, stable.url: 0}


JOBS_N = 3
PAGES_PER_JOB = 3


def pdf(pages: int, seed: int) -> bytes:
    images = [Image.new("RGB", (320 + seed, 240 + i), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:])
    return buf.getvalue()
