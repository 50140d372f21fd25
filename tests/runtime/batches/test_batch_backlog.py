"""The batch backlog in pages (batches/backlog.py) and the worker's drain and revision, on a
real Redis and real file storage: what the operator's batch pool scales on must count the
lines a dead worker still holds, estimate pages from the lines done, count a validating
batch's lines (no coordinator may run until the pool starts), and a pod that stops mid-line
finishes it (recorded once, with its revision) instead of handing it back."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from docparser_runtime.batches.backlog import BatchBacklog, key_prefix, read_backlog
from docparser_runtime.batches.models import Batch, BatchStatus, FileRecord, new_id
from docparser_runtime.batches.redis_store import RedisBatchStore
from docparser_runtime.batches.storage import BatchStorage
from docparser_runtime.batches.worker import BatchLimits, BatchWorker
from docparser_runtime.server.endpoints.batches.metrics import BatchMetrics
from prometheus_client import CollectorRegistry, generate_latest

pytestmark = pytest.mark.asyncio

ENDPOINT = "/v1/document/parse"
LIMITS = BatchLimits(max_lines=100, max_line_bytes=1 << 20, ttl_s=3600)
PAGES = 3  # pages of every document the runner here parses


def jsonl(count: int) -> bytes:
    lines = [
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": ENDPOINT, "body": {"n": i}})
        for i in range(count)
    ]
    return ("\n".join(lines) + "\n").encode()


class Harness:
    def __init__(self, redis_url: str, root: str) -> None:
        self.store = RedisBatchStore.from_url(redis_url, prefix="bl:")
        self.storage = BatchStorage(root)
        self.delay = 0.0

    async def runner(self, batch: Batch, line) -> dict:
        await asyncio.sleep(self.delay)
        return {"n": line.body["n"], "pages": [{"page": p} for p in range(PAGES)]}

    def worker(self, name: str, **kwargs) -> BatchWorker:
        return BatchWorker(
            self.store,
            self.storage,
            self.runner,
            LIMITS,
            worker_id=name,
            accepting=lambda: True,
            poll_s=0.05,
            revision="rev-a",
            **kwargs,
        )

    async def batch(self, count: int) -> Batch:
        file_id = new_id("file-")
        data = jsonl(count)
        writer = self.storage.writer(file_id, limit=1 << 20, limit_name="LIMIT")
        await writer.write(data)
        ranges = await writer.commit()
        now = int(time.time())
        record = FileRecord(file_id, len(data), now, now + 3600, "in.jsonl", "batch", "k")
        record.lines = len(ranges)
        await self.store.put_file(record)
        batch = Batch(
            new_id("batch_"), ENDPOINT, file_id, "k", BatchStatus.VALIDATING, now, now + 3600
        )
        await self.store.create_batch(batch, limit=0)
        return batch

    async def backlog(self) -> BatchBacklog:
        return await read_backlog(self.store.r, key_prefix("bl:"))


@pytest.fixture
async def harness(redis_url, tmp_path):
    h = Harness(redis_url, f"file://{tmp_path}/store")
    yield h
    await h.store.close()


async def test_backlog_counts_validating_held_and_estimates_pages_from_lines_done(harness):
    assert await harness.backlog() == BatchBacklog()
    batch = await harness.batch(10)
    # validating: nobody has started it; its input file's lines count (one page each)
    assert await harness.backlog() == BatchBacklog(1, 10, 0, 10, 0, 0)
    w = harness.worker("a")
    await w.coordinate()
    for _ in range(4):
        await w.run_line(*await harness.store.claim("a"))
    held = await harness.store.claim("a")  # claimed by a worker that then dies
    assert held is not None
    got = await harness.backlog()
    # 6 lines left (5 waiting + 1 held), each estimated at 3 pages from the 4 done
    assert got == BatchBacklog(1, 6, 1, 6 * PAGES, 4 * PAGES, 4 * PAGES)
    await harness.store.heartbeat("a", 0.05)
    await asyncio.sleep(0.1)
    assert await harness.store.requeue() == 1
    b = harness.worker("b")
    while (claimed := await harness.store.claim("b")) is not None:
        await b.run_line(*claimed)
    await b.coordinate()  # completed: leaves the active set
    assert (await harness.store.get_batch(batch.id)).status is BatchStatus.COMPLETED
    # nothing in progress; the running total keeps every page (pages per minute reads it)
    assert await harness.backlog() == BatchBacklog(0, 0, 0, 0, 0, 10 * PAGES)


async def test_stop_lets_a_claimed_line_finish_and_its_output_names_the_revision(harness):
    harness.delay = 0.5
    batch = await harness.batch(1)
    w = harness.worker("a")
    await w.coordinate()
    await w.start()
    for _ in range(100):  # the claim loop picks the line up
        if (await harness.backlog()).lines_running == 1:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the line was never claimed")
    await w.stop(time.monotonic() + 5.0)  # the drain: the line finishes, nothing requeued
    assert await harness.store.r.llen("bl:batch:queue") == 0
    await harness.worker("b").coordinate()
    done = await harness.store.get_batch(batch.id)
    assert (done.status, done.completed) == (BatchStatus.COMPLETED, 1)
    out = [json.loads(line) async for line in _lines(harness, done.output_file_id)]
    assert [(o["custom_id"], o["revision"]) for o in out] == [("c0", "rev-a")]


async def test_stop_past_the_deadline_hands_the_line_back(harness):
    harness.delay = 5.0
    batch = await harness.batch(1)
    w = harness.worker("a")
    await w.coordinate()
    await w.start()
    for _ in range(100):
        if (await harness.backlog()).lines_running == 1:
            break
        await asyncio.sleep(0.02)
    started = time.monotonic()
    await w.stop(time.monotonic() + 0.2)
    assert time.monotonic() - started < 4.0  # did not wait for the line
    assert await harness.store.r.lrange("bl:batch:queue", 0, -1) == [f"{batch.id}:0".encode()]
    assert not await harness.store.recorded(batch.id, 0)


async def test_gauges_report_the_backlog(harness):
    await harness.batch(7)
    registry = CollectorRegistry()
    BatchMetrics(registry).set(await harness.backlog())
    text = generate_latest(registry).decode()
    assert "docparser_batch_pages_queued 7.0" in text
    assert "docparser_batch_in_progress 1.0" in text


async def _lines(harness: Harness, file_id: str | None):
    assert file_id is not None
    data = b"".join([c async for c in harness.storage.stream(file_id)])
    for line in data.splitlines():
        yield line
