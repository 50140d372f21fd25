"""The batch worker on a real Redis and real file storage (tmp dir through fsspec): each
line recorded exactly once (a line claimed twice, a worker that died holding lines), the
output assembled in line order, cancel and expiry keep what ran, a file that cannot be read
fails the batch at validating with its errors listed, and collection of expired files.

The line runner here answers from the line's body: what is under test is the queue, the
records and the assembly; the parse path runs in test_batches_api.py through a real server.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis
from docparser_runtime.batches.models import Batch, BatchStatus, FileRecord, new_id
from docparser_runtime.batches.redis_store import RedisBatchStore
from docparser_runtime.batches.storage import BatchStorage
from docparser_runtime.batches.worker import BatchLimits, BatchWorker

pytestmark = pytest.mark.asyncio

ENDPOINT = "/v1/document/parse"
LIMITS = BatchLimits(max_lines=100, max_line_bytes=1 << 20, ttl_s=3600)


def jsonl(count: int) -> bytes:
    lines = [
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": ENDPOINT, "body": {"n": i}})
        for i in range(count)
    ]
    return ("\n".join(lines) + "\n").encode()


class Harness:
    def __init__(self, redis_url: str, root: str) -> None:
        self.store = RedisBatchStore.from_url(redis_url, prefix="t:")
        self.storage = BatchStorage(root)
        self.calls: list[int] = []

    async def runner(self, batch: Batch, line) -> dict:
        self.calls.append(line.body["n"])
        if line.body["n"] == 1:
            from docparser_runtime.errors import InvalidInput

            raise InvalidInput("line one is bad", code="bad_line")
        return {"n": line.body["n"]}

    def worker(self, name: str, **kwargs) -> BatchWorker:
        return BatchWorker(
            self.store,
            self.storage,
            self.runner,
            LIMITS,
            worker_id=name,
            accepting=lambda: True,
            poll_s=0.05,
            **kwargs,
        )

    async def upload(self, data: bytes, owner: str = "key-a") -> FileRecord:
        file_id = new_id("file-")
        writer = self.storage.writer(file_id, limit=1 << 20, limit_name="LIMIT")
        await writer.write(data)
        ranges = await writer.commit()
        now = int(time.time())
        record = FileRecord(file_id, len(data), now, now + 3600, "in.jsonl", "batch", owner)
        record.lines = len(ranges)
        await self.store.put_file(record)
        return record

    async def batch(self, record: FileRecord, *, expires_in: int = 3600) -> Batch:
        now = int(time.time())
        batch = Batch(
            new_id("batch_"),
            ENDPOINT,
            record.id,
            record.owner,
            BatchStatus.VALIDATING,
            now,
            now + expires_in,
        )
        await self.store.create_batch(batch, limit=0)
        return batch

    async def output(self, file_id: str | None) -> list[dict]:
        if file_id is None:
            return []
        data = b"".join([c async for c in self.storage.stream(file_id)])
        return [json.loads(line) for line in data.splitlines()]


@pytest.fixture
async def harness(redis_url, tmp_path):
    h = Harness(redis_url, f"file://{tmp_path}/store")
    yield h
    await h.store.close()


async def drain_lines(worker: BatchWorker, limit: int = 50) -> int:
    for ran in range(limit):
        claimed = await worker.store.claim(worker.worker_id)
        if claimed is None:
            return ran
        await worker.run_line(*claimed)
    raise AssertionError("the queue did not empty")


async def test_a_line_claimed_twice_is_recorded_once_and_output_in_line_order(harness):
    a, b = harness.worker("a"), harness.worker("b")
    batch = await harness.batch(await harness.upload(jsonl(3)))
    await a.coordinate()  # validating -> in_progress, 3 lines queued
    assert (await harness.store.get_batch(batch.id)).status is BatchStatus.IN_PROGRESS
    first = await harness.store.claim("a")
    assert first == (batch.id, 0)
    await a._result(batch, 0)  # a runs line 0 but "dies" before recording it
    await harness.store.heartbeat("a", 0.05)
    await asyncio.sleep(0.1)
    assert await harness.store.requeue() == 1  # its lease expired: line 0 back at the head
    assert await drain_lines(b) == 3
    # the first claimer comes back and records late: nothing changes
    await a.run_line(batch.id, 0)
    assert not await harness.store.record(batch.id, 0, ok=True, line="{}")
    await a.coordinate()
    done = await harness.store.get_batch(batch.id)
    assert done.status is BatchStatus.COMPLETED
    assert (done.total, done.completed, done.failed) == (3, 2, 1)
    out = await harness.output(done.output_file_id)
    assert [o["custom_id"] for o in out] == ["c0", "c2"]
    assert [o["response"]["body"]["n"] for o in out] == [0, 2]
    err = await harness.output(done.error_file_id)
    assert err == [
        {
            "id": err[0]["id"],
            "custom_id": "c1",
            "response": None,
            "error": {"code": "bad_line", "message": "line one is bad"},
        }
    ]


async def test_two_workers_racing_over_the_queue_write_each_line_once(harness):
    batch = await harness.batch(await harness.upload(jsonl(20)))
    workers = [harness.worker(f"w{i}") for i in range(3)]
    await workers[0].coordinate()
    # the same line handed out twice (a re-queue while its first worker still runs)
    await harness.store.r.lpush("t:batch:queue", f"{batch.id}:5", f"{batch.id}:7")
    await asyncio.gather(*(drain_lines(w) for w in workers))
    await workers[1].coordinate()
    done = await harness.store.get_batch(batch.id)
    assert done.status is BatchStatus.COMPLETED and done.completed + done.failed == 20
    out = await harness.output(done.output_file_id)
    assert [o["custom_id"] for o in out] == [f"c{i}" for i in range(20) if i != 1]


async def test_cancel_keeps_what_ran_and_lists_the_rest_as_cancelled(harness):
    w = harness.worker("a")
    batch = await harness.batch(await harness.upload(jsonl(5)))
    await w.coordinate()
    claimed = await harness.store.claim("a")
    await w.run_line(*claimed)
    assert await harness.store.cancel(await harness.store.get_batch(batch.id))
    assert await harness.store.claim("a") is None  # the queued lines of a cancelled batch drop
    await w.coordinate()
    done = await harness.store.get_batch(batch.id)
    assert done.status is BatchStatus.CANCELLED
    assert done.stamps["cancelling_at"] <= done.stamps["cancelled_at"]
    assert [o["custom_id"] for o in await harness.output(done.output_file_id)] == ["c0"]
    codes = [e["error"]["code"] for e in await harness.output(done.error_file_id)]
    assert codes == ["batch_cancelled"] * 4
    names = [e["custom_id"] for e in await harness.output(done.error_file_id)]
    assert names == ["c1", "c2", "c3", "c4"]
    assert not await harness.store.cancel(done)  # finished: nothing to cancel


async def test_an_expired_batch_keeps_its_partial_output(harness):
    w = harness.worker("a")
    batch = await harness.batch(await harness.upload(jsonl(3)), expires_in=1)
    await w.coordinate()
    await w.run_line(*await harness.store.claim("a"))
    await asyncio.sleep(1.1)
    await w.coordinate()
    done = await harness.store.get_batch(batch.id)
    assert done.status is BatchStatus.EXPIRED and done.stamps["expired_at"]
    assert [o["custom_id"] for o in await harness.output(done.output_file_id)] == ["c0"]
    assert len(await harness.output(done.error_file_id)) == 2


async def test_an_unreadable_file_fails_the_batch_at_validating_with_its_errors(harness):
    w = harness.worker("a")
    empty = await harness.batch(await harness.upload(b"\n \n"))
    record = await harness.upload(jsonl(2))
    gone = await harness.batch(record)
    await harness.store.delete_file(record.id)
    await w.coordinate()
    for batch, code in ((empty, "empty_file"), (gone, "file_not_found")):
        failed = await harness.store.get_batch(batch.id)
        assert failed.status is BatchStatus.FAILED
        public = failed.to_public()
        assert public["errors"]["object"] == "list"
        assert public["errors"]["data"][0]["code"] == code
    assert harness.calls == []


async def test_a_worker_that_is_not_accepting_claims_nothing(harness):
    batch = await harness.batch(await harness.upload(jsonl(2)))
    leaving = BatchWorker(
        harness.store,
        harness.storage,
        harness.runner,
        LIMITS,
        worker_id="leaving",
        accepting=lambda: False,
        poll_s=0.05,
    )
    await leaving.coordinate()
    await leaving.start()
    try:
        await asyncio.sleep(0.5)
    finally:
        await leaving.stop()
    assert harness.calls == []
    assert await harness.store.r.llen("t:batch:queue") == 2
    assert (await harness.store.get_batch(batch.id)).status is BatchStatus.IN_PROGRESS


async def test_expired_files_and_finished_batches_are_collected(harness):
    w = harness.worker("a")
    record = await harness.upload(jsonl(1))
    batch = await harness.batch(record)
    await w.coordinate()
    await drain_lines(w)
    await w.coordinate()
    done = await harness.store.get_batch(batch.id)
    assert await harness.storage.exists(done.output_file_id)
    later = int(time.time()) + 2 * LIMITS.ttl_s
    members = await harness.store.due(later)
    assert f"file:{record.id}" in members and f"batch:{batch.id}" in members
    await harness.store.r.zadd("t:batch:gc", {m: 0 for m in members})  # their time is up
    assert await w.collect() == len(members)
    assert not await harness.storage.exists(record.id)
    assert not await harness.storage.exists(done.output_file_id)
    with pytest.raises(Exception, match="not found"):
        await harness.store.get_batch(batch.id)


class ReplyDropper:
    """A TCP proxy to Redis that forwards the first CLAIM script call after ``arm()`` and
    then closes the client's connection instead of passing the reply on: the script ran,
    its reply is lost, and redis-py retries the call on a new connection by itself."""

    def __init__(self, port: int, marker: bytes) -> None:
        self.port, self.marker = port, marker
        self.armed = False
        self.dropped = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter):
        u_reader, u_writer = await asyncio.open_connection("127.0.0.1", self.port)
        drop = asyncio.Event()

        async def upstream() -> None:
            while data := await c_reader.read(65536):
                if self.armed and self.marker in data:
                    self.armed = False
                    drop.set()
                u_writer.write(data)
                await u_writer.drain()

        async def downstream() -> None:
            while data := await u_reader.read(65536):
                if drop.is_set():  # the script ran on Redis; its reply never arrives
                    self.dropped += 1
                    return
                c_writer.write(data)
                await c_writer.drain()

        pumps = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (c_writer, u_writer):
                writer.close()


async def test_a_claim_whose_reply_is_lost_and_retried_by_redis_py_loses_no_line(
    redis_server, redis_url, tmp_path, caplog
):
    """WHY: redis-py retries a call whose connection dropped; a CLAIM that ran but whose
    reply was lost must not claim a second line, leaving the first held under the live
    worker's lease (never reaped, never run: the batch would never finish)."""
    from docparser_runtime.batches import redis_scripts

    direct = RedisBatchStore.from_url(redis_url, prefix="t:")
    sha = await direct.r.script_load(redis_scripts.CLAIM)  # EVALSHA hits: no NOSCRIPT turn
    proxy = ReplyDropper(redis_server.port, sha if isinstance(sha, bytes) else sha.encode())
    async with proxy as port:
        h = Harness(redis_url, f"file://{tmp_path}/store")
        await h.store.close()
        # redis-py's constructor default: a call whose connection dropped is sent again
        # (``from_url`` in redis-py 8 does not retry; the store must not depend on which)
        h.store = RedisBatchStore(aioredis.Redis(host="127.0.0.1", port=port), prefix="t:")
        assert h.store.r.get_retry().get_retries() > 0
        try:
            batch = await h.batch(await h.upload(jsonl(5)))
            worker = h.worker("w1", lease_s=2.0)
            await worker.coordinate()  # validating -> in_progress, 5 lines queued
            proxy.armed = True
            await worker.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                done = await direct.get_batch(batch.id)
                if done.status is BatchStatus.COMPLETED:
                    break
                await asyncio.sleep(0.1)
            await worker.stop()
            assert proxy.dropped == 1
            # redis-py's resend got the same line: no error reached the worker's hand-back
            assert "claiming a batch line failed" not in caplog.text
            assert done.status is BatchStatus.COMPLETED, (done.status, done.completed, done.failed)
            lines = await h.output(done.output_file_id) + await h.output(done.error_file_id)
            assert sorted(line["custom_id"] for line in lines) == [f"c{i}" for i in range(5)]
        finally:
            await h.store.close()
            await direct.close()


async def test_stop_ends_a_loop_that_swallowed_its_cancel(harness, monkeypatch):
    """A client's own timeout racing a cancel can turn the CancelledError into a timeout it
    retries (the suite once hung 300 s in stop() and again in the loop's teardown): stop()
    cancels again until every loop has ended."""
    w = harness.worker("stubborn", lease_s=0.6)  # a heartbeat every 0.2 s
    seen = []
    entered = asyncio.Event()

    async def heartbeat(worker_id, lease_s):
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("swallowed")  # the first cancel is lost, as in the race
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("ended")
            raise

    await w.start()
    monkeypatch.setattr(harness.store, "heartbeat", heartbeat)
    await asyncio.wait_for(entered.wait(), 10)
    await asyncio.wait_for(w.stop(), 30)
    assert seen == ["swallowed", "ended"]


async def test_a_lock_left_by_an_outage_holds_back_no_batch_of_its_own_holder(harness):
    """Redis went away between the coordinator's lock and its unlock (the AOF kept the lock,
    for its TTL: twice the lease). Every line was done, but the batch waited out the TTL before
    it finished. The holder now takes back its own lock; another replica still cannot take it,
    and cannot release it."""
    a, b = harness.worker("a", lease_s=60), harness.worker("b", lease_s=60)
    batch = await harness.batch(await harness.upload(jsonl(4)))
    await a.coordinate()
    assert await drain_lines(a) == 4
    assert await harness.store.lock(batch.id, "a", 120)  # the pass the outage cut short
    await b.coordinate()  # another replica's pass: the lock is a's
    assert (await harness.store.get_batch(batch.id)).status is BatchStatus.IN_PROGRESS
    await harness.store.unlock(batch.id, "b")  # not b's to release
    assert not await harness.store.lock(batch.id, "b", 120)
    await a.coordinate()  # at once, not 120 s later
    done = await harness.store.get_batch(batch.id)
    assert done.status is BatchStatus.COMPLETED and done.completed + done.failed == 4
    assert await harness.store.lock(batch.id, "b", 120)  # released after the pass
