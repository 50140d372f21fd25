"""Bounded job state: the queue limit and per-key quotas (atomic in Redis), the byte
cap on finished jobs in the memory store, and Redis writes that survive a restart."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from app_for_tests import JOBS, make_settings, serving, upload
from docparser_runtime.errors import NotFound, Overloaded
from docparser_runtime.jobs.memory_store import MemoryJobStore, finished_size
from docparser_runtime.jobs.models import Job, JobStatus, request_fingerprint
from docparser_runtime.jobs.redis_store import RedisJobStore
from engines_for_tests import png_bytes
from redis.exceptions import ConnectionError as RedisConnectionError
from redis_server import REDIS_BIN, free_port

PARAMS = {"tier": 0, "mode": "markdown", "max_new_tokens": 64, "pages": None}


async def submit(store, data=b"doc", *, owner=None, key=None):
    return await store.submit(
        data=data,
        params=PARAMS,
        fingerprint=request_fingerprint(data, PARAMS),
        idempotency_key=key,
        owner=owner,
    )


@pytest.fixture(params=["memory", "redis"])
async def make_store(request):
    """A factory of stores sharing one backend; for Redis each call is another client
    (another replica), so parallel submits really race on the server."""
    made = []
    memory: dict[str, MemoryJobStore] = {}

    def make(**limits):
        if request.param == "memory":
            if "store" not in memory:
                memory["store"] = MemoryJobStore(ttl_s=60, **limits)
            return memory["store"]
        url = request.getfixturevalue("redis_url")
        s = RedisJobStore.from_url(url, ttl_s=60, **limits)
        made.append(s)
        return s

    yield make
    for s in made:
        await s.close()


async def outcomes(calls) -> list[str]:
    """'ok' or the error code of each call, run concurrently."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    codes = []
    for r in results:
        if isinstance(r, Overloaded):
            codes.append(r.code)
        elif isinstance(r, BaseException):
            raise r
        else:
            codes.append("ok")
    return codes


async def test_parallel_submitters_never_exceed_the_queue_limit(make_store):
    stores = [make_store(max_queued=5) for _ in range(8)]
    codes = await outcomes(submit(s, f"doc{i}".encode()) for i, s in enumerate(stores))
    assert sorted(codes) == ["job_queue_full"] * 3 + ["ok"] * 5
    assert await stores[0].queue_depth() == 5


async def test_full_queue_still_answers_an_idempotent_replay(make_store):
    store = make_store(max_queued=1)
    job, _ = await submit(store, key="k")
    with pytest.raises(Overloaded) as full:
        await submit(store, b"other")
    assert full.value.code == "job_queue_full" and full.value.retry_after_s > 0
    again, created = await submit(store, key="k")
    assert again.id == job.id and not created
    # A started job frees its slot.
    assert (await store.claim("w1", timeout_s=1)).job.id == job.id
    await submit(store, b"other")


async def test_one_key_cannot_take_the_queue_from_the_others(make_store):
    stores = [make_store(max_queued=10, max_queued_per_owner=3) for _ in range(8)]
    codes = await outcomes(submit(s, f"a{i}".encode(), owner="alice") for i, s in enumerate(stores))
    assert sorted(codes) == ["job_quota_exceeded"] * 5 + ["ok"] * 3
    store = stores[0]
    bob, _ = await submit(store, b"b", owner="bob")
    anonymous, _ = await submit(store, b"anon")  # no API key: only the global limit
    assert await store.queue_depth() == 5
    # Starting or cancelling one of alice's jobs gives her a slot back.
    claimed = await store.claim("w1", timeout_s=1)
    assert claimed.job.owner == "alice"
    await submit(store, b"a-next", owner="alice")
    with pytest.raises(Overloaded) as quota:
        await submit(store, b"a-more", owner="alice")
    assert quota.value.code == "job_quota_exceeded" and "3 queued jobs" in quota.value.message
    assert (await store.cancel(bob.id)).status is JobStatus.CANCELLED
    await submit(store, b"b2", owner="bob")
    assert anonymous.owner is None


@pytest.fixture
async def rstore(redis_url):
    s = RedisJobStore.from_url(redis_url, ttl_s=60, max_queued_per_owner=1)
    yield s
    await s.close()


async def test_redis_quota_follows_jobs_back_into_the_queue(rstore):
    job, _ = await submit(rstore, owner="alice")
    await rstore.heartbeat("w1", lease_s=30)
    await rstore.claim("w1", timeout_s=1)
    other, _ = await submit(rstore, b"second", owner="alice")  # the first one runs
    assert (await rstore.cancel(other.id)).status is JobStatus.CANCELLED
    await rstore.release(job.id, "w1")  # drain ran out of time: queued again, counts again
    with pytest.raises(Overloaded):
        await submit(rstore, b"third", owner="alice")
    # A replica that died holding it: the reaper requeues it, and it still counts.
    await rstore.heartbeat("dead", lease_s=0.05)
    await rstore.claim("dead", timeout_s=1)
    fourth, _ = await submit(rstore, b"fourth", owner="alice")  # hers runs: a free slot
    assert (await rstore.claim("w1", timeout_s=1)).job.id == fourth.id
    for _ in range(100):  # bounded: the 50 ms lease expires long before
        if await rstore.reap():
            break
        await asyncio.sleep(0.02)
    assert await rstore.queue_position(job.id) == 0
    with pytest.raises(Overloaded):
        await submit(rstore, b"fifth", owner="alice")


async def test_redis_quota_heals_stale_entries(rstore):
    # An id in the set whose job is gone (expired, deleted by hand) must not lock a key out.
    await rstore.r.sadd(rstore.keys.owner_prefix + "alice", "job_gone")
    job, created = await submit(rstore, owner="alice")
    assert created
    assert await rstore.r.smembers(rstore.keys.owner_prefix + "alice") == {job.id.encode()}


async def finish_one(store: MemoryJobStore, size: int, *, key=None) -> str:
    job, _ = await submit(store, f"doc{time.monotonic_ns()}".encode(), key=key)
    claimed = await store.claim("w1", timeout_s=1)
    assert claimed.job.id == job.id
    result = {"content": "x" * size}
    assert await store.finish(job.id, "w1", status=JobStatus.SUCCEEDED, result=result)
    return job.id


async def test_memory_finished_jobs_are_capped_by_bytes_oldest_first():
    one = finished_size(Job(id="j", result={"content": "x" * 1000}))
    store = MemoryJobStore(ttl_s=3600, max_finished_bytes=2 * one + 10)
    first = await finish_one(store, 1000, key="idem-first")
    running, _ = await submit(store, b"running")  # never evicted, however full
    await store.claim("w2", timeout_s=1)
    second = await finish_one(store, 1000)
    assert store.finished_bytes == 2 * one
    third = await finish_one(store, 1000)
    with pytest.raises(NotFound):
        await store.get(first)
    assert (await store.get(second)).result is not None
    assert (await store.get(third)).status is JobStatus.SUCCEEDED
    assert (await store.get(running.id)).status is JobStatus.RUNNING
    assert store.finished_bytes == 2 * one
    # The evicted job's Idempotency-Key is free again (a new job, not a dangling id).
    again, created = await submit(store, key="idem-first")
    assert created and again.id != first


async def test_memory_cap_counts_jobs_without_results_and_keeps_the_newest():
    store = MemoryJobStore(ttl_s=3600, max_finished_bytes=10_000)
    for i in range(100):  # bounded flood of cancelled jobs: no result, still charged
        job, _ = await submit(store, f"d{i}".encode())
        await store.cancel(job.id)
    assert store.finished_bytes <= 10_000
    assert len(store._expires) < 100
    big = await finish_one(store, 50_000)  # larger than the cap alone: kept until the next
    assert (await store.get(big)).result["content"] == "x" * 50_000
    await finish_one(store, 10)
    with pytest.raises(NotFound):
        await store.get(big)
    assert store.finished_bytes <= 10_000


async def test_memory_store_with_no_byte_cap_keeps_everything():
    store = MemoryJobStore(ttl_s=3600)
    ids = [await finish_one(store, 1000) for _ in range(5)]
    assert [(await store.get(i)).status for i in ids] == [JobStatus.SUCCEEDED] * 5


class PersistentRedis:
    """A redis-server that persists every write (appendonly, fsync always) and can be
    stopped and started again on the same port and data directory: a Redis restart."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.TemporaryDirectory(prefix="docparser-redis-aof-")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = [REDIS_BIN, "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir.name]
        args += ["--logfile", str(Path(self.dir.name) / "redis.log")]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):  # bounded: 10 s
            assert self.proc.poll() is None, "redis-server exited"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("redis-server did not answer PING")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def persistent_redis():
    if not Path(REDIS_BIN).exists():
        pytest.skip("redis-server not installed")
    server = PersistentRedis()
    server.start()
    yield server
    server.stop()
    server.dir.cleanup()


async def test_redis_restart_mid_job_does_not_fail_it(persistent_redis):
    restarts: list[float] = []

    async def restart_then_wait(delay: float) -> None:
        """The seam between a failed write and its retry: Redis comes back here."""
        restarts.append(delay)
        if len(restarts) == 1:
            await asyncio.to_thread(persistent_redis.start)

    store = RedisJobStore.from_url(persistent_redis.url, ttl_s=60, sleep=restart_then_wait)
    try:
        job, _ = await submit(store, owner="alice")
        await store.heartbeat("w1", lease_s=60)
        assert (await store.claim("w1", timeout_s=1)).job.id == job.id
        persistent_redis.stop()  # the pooled connection is now dead
        assert await store.progress(job.id, "w1", pages_done=1, pages_total=2) is False
        assert restarts == [store.retry_base_s]
        # The job, its lease and its owner survived the restart; the result lands.
        result = {"pages": [{"content": "a"}, {"content": "b"}]}
        assert await store.finish(job.id, "w1", status=JobStatus.SUCCEEDED, result=result)
        done = await store.get(job.id)
        assert done.status is JobStatus.SUCCEEDED and done.result == result
        assert done.pages_done == 1 and done.owner == "alice"
    finally:
        await store.close()


async def test_redis_write_retries_are_bounded(persistent_redis):
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    store = RedisJobStore.from_url(
        persistent_redis.url, ttl_s=60, write_retries=5, retry_cap_s=1.0, sleep=record
    )
    try:
        job, _ = await submit(store)
        await store.claim("w1", timeout_s=1)
        persistent_redis.stop()  # and it stays down
        with pytest.raises(RedisConnectionError):
            await store.finish(job.id, "w1", status=JobStatus.SUCCEEDED, result={})
        assert delays == [0.2, 0.4, 0.8, 1.0, 1.0]
    finally:
        await store.close()


async def wait_status(client, job_id: str, statuses: set[str], headers: dict) -> dict:
    end = time.monotonic() + 10
    while True:
        body = (await client.get(f"{JOBS}/{job_id}", headers=headers)).json()
        if body["status"] in statuses:
            return body
        assert time.monotonic() < end, f"job stuck in {body['status']}: {body}"
        await asyncio.sleep(0.02)


async def test_api_answers_job_quota_exceeded_per_key(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-alice-0123456789\nkey-bob-0123456789\n")
    alice = {"Authorization": "Bearer key-alice-0123456789"}
    bob = {"Authorization": "Bearer key-bob-0123456789"}
    settings = make_settings(api_keys_file=keys, max_queued_jobs=10, max_queued_jobs_per_key=1)
    async with serving(settings) as (_app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        running = (await client.post(JOBS, headers=alice, **upload(png_bytes(), "a.png"))).json()
        await asyncio.to_thread(engine.entered.wait, 5)
        await wait_status(client, running["id"], {"running"}, headers=alice)
        queued = await client.post(JOBS, headers=alice, **upload(png_bytes(), "b.png"))
        assert queued.status_code == 202
        over = await client.post(JOBS, headers=alice, **upload(png_bytes(), "c.png"))
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "job_quota_exceeded"
        assert float(over.headers["retry-after"]) > 0
        assert (await client.post(JOBS, headers=bob, **upload(png_bytes(), "d.png"))).is_success
        engine.gate.set()
        await wait_status(client, queued.json()["id"], {"succeeded"}, headers=alice)
