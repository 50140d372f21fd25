"""Both job stores against the same contract; the Redis one against a real redis-server."""

from __future__ import annotations

import asyncio
import time

import pytest
from docparser_runtime.errors import Conflict, NotFound, Unavailable
from docparser_runtime.jobs.memory_store import MemoryJobStore
from docparser_runtime.jobs.models import Job, JobStatus, request_fingerprint
from docparser_runtime.jobs.redis_store import RedisJobStore
from redis_server import RedisServer

PARAMS = {"tier": 0, "mode": "markdown", "max_new_tokens": 64, "pages": None}


@pytest.fixture(params=["memory", "redis"])
async def store(request):
    if request.param == "memory":
        s = MemoryJobStore(ttl_s=1)
        s.replica = lambda: s  # one process: the "other replica" is the same store
    else:
        url = request.getfixturevalue("redis_url")
        s = RedisJobStore.from_url(url, ttl_s=1, max_attempts=2)
        s.replica = lambda: RedisJobStore.from_url(url, ttl_s=1)
    yield s
    await s.close()


async def submit(store, data=b"doc", key=None, params=PARAMS):
    return await store.submit(
        data=data, params=params, fingerprint=request_fingerprint(data, params), idempotency_key=key
    )


def test_job_round_trips_through_flat_fields():
    job = Job(id="job_x", params=PARAMS, pages_total=3, result={"content": "é"}, owner="k1")
    job.error = {"code": "c", "message": "m"}
    assert Job.from_fields(job.to_fields()) == job


def test_fingerprint_depends_on_bytes_and_options():
    a = request_fingerprint(b"x", {"tier": 1})
    assert a == request_fingerprint(b"x", {"tier": 1})
    assert a != request_fingerprint(b"y", {"tier": 1})
    assert a != request_fingerprint(b"x", {"tier": 2})


async def test_queue_is_fifo_with_positions(store):
    first, created = await submit(store, b"a")
    second, _ = await submit(store, b"b")
    assert created and first.status is JobStatus.QUEUED
    assert await store.queue_position(first.id) == 0
    assert await store.queue_position(second.id) == 1
    assert await store.queue_depth() == 2

    claimed = await store.claim("w1", timeout_s=1)
    assert claimed.job.id == first.id and claimed.data == b"a"
    assert claimed.job.status is JobStatus.RUNNING and claimed.job.attempts == 1
    assert await store.queue_position(first.id) is None
    assert await store.queue_position(second.id) == 0
    assert (await store.get(first.id)).worker == "w1"


async def test_claim_times_out_when_empty(store):
    t0 = time.monotonic()
    assert await store.claim("w1", timeout_s=0.3) is None
    assert time.monotonic() - t0 < 2


async def test_claim_wakes_up_on_submit(store):
    waiter = asyncio.create_task(store.claim("w1", timeout_s=5))
    await asyncio.sleep(0.1)
    job, _ = await submit(store)
    claimed = await asyncio.wait_for(waiter, 5)
    assert claimed.job.id == job.id


async def test_idempotency_same_body_same_job_other_body_conflict(store):
    job, created = await submit(store, b"a", key="k1")
    again, created_again = await submit(store, b"a", key="k1")
    assert created and not created_again and again.id == job.id
    with pytest.raises(Conflict) as exc:
        await submit(store, b"other", key="k1")
    assert exc.value.code == "idempotency_conflict"
    other, created_other = await submit(store, b"a", key="k2")
    assert created_other and other.id != job.id


async def test_progress_finish_and_result_ttl(store):
    job, _ = await submit(store, key="k")
    claimed = await store.claim("w1", timeout_s=1)
    assert await store.progress(job.id, "w1", pages_done=1, pages_total=3) is False
    mid = await store.get(job.id)
    assert (mid.pages_done, mid.pages_total) == (1, 3)
    assert await store.finish(job.id, "w2", status=JobStatus.SUCCEEDED, result={}) is False
    assert await store.finish(claimed.job.id, "w1", status=JobStatus.SUCCEEDED, result={"x": 1})
    done = await store.get(job.id)
    assert done.status is JobStatus.SUCCEEDED and done.result == {"x": 1}
    if isinstance(store, RedisJobStore):
        assert await store.r.exists(store.keys.input(job.id)) == 0
        assert 0 < await store.r.ttl(store.keys.job(job.id)) <= 1
    await asyncio.sleep(1.3)
    with pytest.raises(NotFound):
        await store.get(job.id)
    fresh, created = await submit(store, key="k")  # the key expired with its job
    assert created and fresh.id != job.id


async def test_cancel_queued_is_immediate(store):
    job, _ = await submit(store)
    cancelled = await store.cancel(job.id)
    assert cancelled.status is JobStatus.CANCELLED
    assert await store.queue_depth() == 0
    assert await store.claim("w1", timeout_s=0.2) is None
    assert (await store.cancel(job.id)).status is JobStatus.CANCELLED  # idempotent


async def test_cancel_running_is_requested_then_worker_stops(store):
    job, _ = await submit(store)
    await store.claim("w1", timeout_s=1)
    requested = await store.cancel(job.id)
    assert requested.status is JobStatus.RUNNING and requested.cancel_requested
    assert await store.progress(job.id, "w1", pages_done=1, pages_total=2) is True
    assert await store.finish(job.id, "w1", status=JobStatus.CANCELLED)
    assert (await store.get(job.id)).status is JobStatus.CANCELLED


async def test_cancel_finished_conflicts_and_unknown_is_not_found(store):
    job, _ = await submit(store)
    await store.claim("w1", timeout_s=1)
    await store.finish(job.id, "w1", status=JobStatus.FAILED, error={"code": "x", "message": "y"})
    with pytest.raises(Conflict):
        await store.cancel(job.id)
    with pytest.raises(NotFound):
        await store.cancel("job_nope")
    with pytest.raises(NotFound):
        await store.get("job_nope")


async def test_release_puts_job_back_at_the_head(store):
    first, _ = await submit(store, b"a")
    second, _ = await submit(store, b"b")
    await store.claim("w1", timeout_s=1)
    await store.release(first.id, "w1")
    assert await store.queue_position(first.id) == 0
    assert await store.queue_position(second.id) == 1
    again = await store.claim("w2", timeout_s=1)
    assert again.job.id == first.id and again.job.attempts == 2


async def test_concurrent_workers_never_share_a_job(store):
    ids = {(await submit(store, bytes([i])))[0].id for i in range(20)}
    other = store.replica()  # Redis: a second replica with its own connections

    async def drain(s, wid):
        got = []
        while (c := await s.claim(wid, timeout_s=0.2)) is not None:
            got.append(c.job.id)
        return got

    a, b = await asyncio.gather(drain(store, "wa"), drain(other, "wb"))
    assert sorted(a + b) == sorted(ids) and not set(a) & set(b)
    if other is not store:
        await other.close()


async def test_memory_shutdown_fails_queued_jobs_clearly():
    store = MemoryJobStore(ttl_s=60)
    job, _ = await submit(store)
    assert await store.shutdown() == 1
    failed = await store.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.error["code"] == "unavailable"


@pytest.fixture
async def rstore(redis_url):
    s = RedisJobStore.from_url(redis_url, ttl_s=60, max_attempts=2)
    yield s
    await s.close()


async def test_redis_dead_worker_jobs_are_requeued(rstore):
    job, _ = await submit(rstore)
    await rstore.heartbeat("dead", lease_s=0.2)
    await rstore.heartbeat("alive", lease_s=30)
    await rstore.claim("dead", timeout_s=1)
    assert await rstore.reap() == 0  # lease still valid
    await asyncio.sleep(0.35)
    assert await rstore.reap() == 1
    requeued = await rstore.get(job.id)
    assert requeued.status is JobStatus.QUEUED and requeued.worker is None
    assert await rstore.queue_position(job.id) == 0
    assert await rstore.r.smembers(rstore.keys.workers) == {b"alive"}
    # The dead worker cannot write a late result over the new owner's run.
    claimed = await rstore.claim("alive", timeout_s=1)
    assert claimed.data == b"doc" and claimed.job.attempts == 2
    assert await rstore.finish(job.id, "dead", status=JobStatus.SUCCEEDED, result={}) is False
    assert await rstore.progress(job.id, "dead", pages_done=1, pages_total=1) is True


async def test_redis_job_that_keeps_killing_workers_fails(rstore):
    job, _ = await submit(rstore)
    for attempt in range(2):
        wid = f"w{attempt}"
        await rstore.heartbeat(wid, lease_s=0.1)
        assert (await rstore.claim(wid, timeout_s=1)).job.id == job.id
        await asyncio.sleep(0.2)
        await rstore.reap()
    failed = await rstore.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.error["code"] == "worker_lost"
    assert await rstore.r.exists(rstore.keys.input(job.id)) == 0


async def test_redis_cancel_between_move_and_start(rstore):
    job, _ = await submit(rstore)
    # A worker's BLMOVE took the id, but it has not marked the job running yet.
    await rstore.r.lmove(rstore.keys.queue, rstore.keys.processing("w1"), "RIGHT", "LEFT")
    assert (await rstore.cancel(job.id)).status is JobStatus.CANCELLED
    # ... then it runs its start step: the job must not run, the id must not linger.
    keys = [rstore.keys.job(job.id), rstore.keys.processing("w1")]
    assert await rstore._start(keys=keys, args=[job.id, "w1", time.time()]) == 0
    assert await rstore.r.llen(rstore.keys.processing("w1")) == 0
    assert (await rstore.get(job.id)).status is JobStatus.CANCELLED


async def test_redis_deregister_gives_back_moved_but_unstarted_jobs(rstore):
    job, _ = await submit(rstore)
    await rstore.heartbeat("w1", lease_s=30)
    await rstore.r.lmove(rstore.keys.queue, rstore.keys.processing("w1"), "RIGHT", "LEFT")
    await rstore.deregister("w1")
    assert await rstore.queue_position(job.id) == 0
    assert (await rstore.get(job.id)).attempts == 0


async def test_redis_unstarted_jobs_go_back_at_once_running_ones_stay(rstore):
    running, _ = await submit(rstore, b"a")
    moved, _ = await submit(rstore, b"b")
    await rstore.heartbeat("w1", lease_s=30)
    await rstore.claim("w1", timeout_s=1)
    await rstore.r.lmove(rstore.keys.queue, rstore.keys.processing("w1"), "RIGHT", "LEFT")
    assert await rstore.return_unstarted("w1") == 1
    assert await rstore.queue_position(moved.id) == 0
    assert await rstore.r.lrange(rstore.keys.processing("w1"), 0, -1) == [running.id.encode()]
    assert (await rstore.get(running.id)).status is JobStatus.RUNNING


async def test_redis_unreachable_is_unavailable_not_a_crash():
    with RedisServer() as server:
        store = RedisJobStore.from_url(server.url, ttl_s=60)
        job, _ = await submit(store)
    try:  # the server is gone now
        for call in (store.get(job.id), submit(store), store.cancel(job.id)):
            with pytest.raises(Unavailable) as exc:
                await call
            assert exc.value.code == "job_store_unavailable"
    finally:
        await store.close()


async def test_backlog_sums_the_page_estimates_of_queued_jobs(store):
    for i, pages in enumerate((3, 5)):
        data = f"doc {i}".encode()
        await store.submit(
            data=data,
            params=PARAMS,
            fingerprint=request_fingerprint(data, PARAMS),
            pages_estimate=pages,
        )
    await store.heartbeat("w1", lease_s=30)
    backlog = await store.backlog()
    assert (backlog.jobs, backlog.pages, backlog.workers) == (2, 8, 1)
    await store.claim("w1", timeout_s=1)  # a running job is no longer backlog
    assert (await store.backlog()).pages == 5
