"""A drain keeps its deadline even when the job store stops answering.

The pod's grace period is sized from the drain deadline; a replica whose Redis hangs (a
network partition, a paused primary) must still leave shortly after it, not wait on a reply
until the kubelet kills it. Here the store is a real redis-server stopped with SIGSTOP: its
socket stays open and nothing answers, which is what a partition looks like to a client."""

from __future__ import annotations

import asyncio
import signal

import pytest
from docparser_runtime.jobs.models import request_fingerprint
from docparser_runtime.jobs.redis_store import RedisJobStore
from docparser_runtime.jobs.worker import JobWorker
from redis_server import RedisServer

pytestmark = pytest.mark.redis

PARAMS = {"tier": 0, "mode": "markdown", "max_new_tokens": 64, "pages": None}


async def test_a_drain_ends_near_its_deadline_while_redis_does_not_answer() -> None:
    with RedisServer() as server:
        store = RedisJobStore.from_url(server.url, ttl_s=60)
        running = asyncio.Event()

        async def runner(data, params, progress):  # a job longer than the drain
            running.set()
            await asyncio.sleep(600)
            return {}

        worker = JobWorker(store, runner, poll_s=0.2, cleanup_s=0.5)
        await worker.start()
        await store.submit(
            data=b"doc",
            params=PARAMS,
            fingerprint=request_fingerprint(b"doc", PARAMS),
            idempotency_key=None,
        )
        await asyncio.wait_for(running.wait(), 10)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            loop = asyncio.get_running_loop()
            began = loop.time()
            # Unbounded, the first store call of the drain waits forever.
            await asyncio.wait_for(worker.drain(1.0), 60)
            took = loop.time() - began
        finally:
            server.proc.send_signal(signal.SIGCONT)
        # 1 s for the job, then at most 0.5 s for each of four store steps; a wide margin
        # for a busy machine, far below "never".
        assert took < 15, took
        assert worker.running_jobs == 0
        await store.close()
