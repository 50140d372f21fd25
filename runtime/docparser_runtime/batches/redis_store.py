"""Batch state in Redis: any replica answers for any file or batch, and runs any line.

Layout under ``<redis_prefix>batch:``: ``file:{id}`` and ``batch:{id}`` (hashes of the
records), ``counts:{id}`` (completed / failed), ``results:{id}`` (line index -> the line's
result, written once with HSETNX: a line run twice, by two workers or again after a pod
died, is recorded once), ``inflight:{id}`` (lines being run), ``by_owner:{key}`` (zset of a
key's batches by creation), ``active_by:{key}`` and ``active`` (sets of batches not yet
finished: the per-key limit and the coordinator's work list), ``queue`` (lines ``id:index``
in order), ``held:{worker}`` / ``lease:{worker}`` / ``workers`` (the reliable-queue pattern
of the job store: a dead worker's lease expires and its lines go back to the queue head),
``lock:{id}`` (one replica validates or finalizes a batch at a time), ``claim:{attempt}``
(the line one claim took, for a minute: a resent claim gets the same line), ``gc`` (zset of
files and finished batches by the time they are deleted).
"""

from __future__ import annotations

import asyncio
import secrets
import time
import zlib
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from ..errors import NotFound, Overloaded
from ..redis_calls import as_text, texts, unreachable_as_unavailable
from . import redis_scripts as scripts
from .models import STAMP, Batch, BatchStatus, FileRecord

ANONYMOUS = "-"  # the owner key of callers without an API key (auth off)
CLAIM_SCAN = 200  # queued lines of stopped batches one claim may drop
# how long a claim's attempt key lives: past redis-py's resends of that one call (seconds)
CLAIM_ATTEMPT_TTL_MS = 60_000


def file_not_found(file_id: str) -> NotFound:
    return NotFound(f"file {file_id!r} not found (unknown id or expired)", code="file_not_found")


def batch_not_found(batch_id: str) -> NotFound:
    return NotFound(f"batch {batch_id!r} not found (unknown id or expired)", code="batch_not_found")


unavailable_when_unreachable = unreachable_as_unavailable(
    "the batch store", "batch_store_unavailable"
)


class RedisBatchStore:
    def __init__(self, client: aioredis.Redis, *, prefix: str = "docparser:") -> None:
        self.r = client
        self.p = f"{prefix}batch:"
        self._create = client.register_script(scripts.CREATE)
        self._transition = client.register_script(scripts.TRANSITION)
        self._start = client.register_script(scripts.START)
        self._claim = client.register_script(scripts.CLAIM)
        self._ack = client.register_script(scripts.ACK)
        self._record = client.register_script(scripts.RECORD)
        self._requeue = client.register_script(scripts.REQUEUE)
        self._lock = client.register_script(scripts.LOCK)
        self._unlock = client.register_script(scripts.UNLOCK)

    @classmethod
    def from_url(cls, url: str, *, prefix: str) -> RedisBatchStore:
        return cls(aioredis.Redis.from_url(url, decode_responses=False), prefix=prefix)

    def _owner(self, owner: str) -> str:
        return owner or ANONYMOUS

    # files ---------------------------------------------------------------------------
    @unavailable_when_unreachable
    async def put_file(self, record: FileRecord) -> None:
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(f"{self.p}file:{record.id}", mapping=record.to_redis())  # type: ignore[arg-type]
            pipe.zadd(f"{self.p}gc", {f"file:{record.id}": record.expires_at})
            await pipe.execute()

    @unavailable_when_unreachable
    async def get_file(self, file_id: str, owner: str) -> FileRecord:
        """The file, or 404 also when another API key owns it (no existence oracle)."""
        raw = texts(await self.r.hgetall(f"{self.p}file:{file_id}"))
        if not raw or raw.get("owner", "") != owner:
            raise file_not_found(file_id)
        return FileRecord.from_redis(raw)

    @unavailable_when_unreachable
    async def delete_file(self, file_id: str) -> None:
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(f"{self.p}file:{file_id}")
            pipe.zrem(f"{self.p}gc", f"file:{file_id}")
            await pipe.execute()

    # batches -------------------------------------------------------------------------
    @unavailable_when_unreachable
    async def create_batch(self, batch: Batch, *, limit: int) -> None:
        owner = self._owner(batch.owner)
        keys = [
            f"{self.p}batch:{batch.id}",
            f"{self.p}by_owner:{owner}",
            f"{self.p}active_by:{owner}",
            f"{self.p}active",
        ]
        args: list[Any] = [limit, batch.id, batch.created_at]
        for k, v in batch.to_redis().items():
            args += [k, v]
        if not await self._create(keys=keys, args=args):
            raise Overloaded(
                f"this API key already has {limit} batches in progress "
                "(DOCPARSER_BATCH_MAX_ACTIVE_PER_KEY); wait for one to finish or cancel one",
                retry_after_s=60.0,
                code="batch_limit_exceeded",
            )

    @unavailable_when_unreachable
    async def get_batch(self, batch_id: str, owner: str | None = None) -> Batch:
        """The batch (``owner`` given: 404 also when another API key created it)."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.hgetall(f"{self.p}batch:{batch_id}")
            pipe.hgetall(f"{self.p}counts:{batch_id}")
            raw, counts = await pipe.execute()
        record = texts(raw)
        if not record or (owner is not None and record.get("owner", "") != owner):
            raise batch_not_found(batch_id)
        return Batch.from_redis(record, texts(counts))

    @unavailable_when_unreachable
    async def list_batches(
        self, owner: str, *, after: str | None, limit: int
    ) -> tuple[list[Batch], bool]:
        """The key's batches, newest first, those after ``after``; and whether more follow."""
        key = f"{self.p}by_owner:{self._owner(owner)}"
        start = 0
        if after:
            rank = await self.r.zrevrank(key, after)
            if rank is None:
                raise batch_not_found(after)
            start = int(rank) + 1  # type: ignore[arg-type]  # an int without WITHSCORE
        found: list[bytes] = await self.r.zrevrange(key, start, start + limit)  # type: ignore[assignment]
        ids = [as_text(i) for i in found]
        batches = []
        for batch_id in ids[:limit]:
            try:
                batches.append(await self.get_batch(batch_id))
            except NotFound:  # collected between the two reads
                continue
        return batches, len(ids) > limit

    async def transition(
        self,
        batch: Batch,
        to: BatchStatus,
        *,
        from_: tuple[BatchStatus, ...],
        gc_at: int = 0,
        **fields: str,
    ) -> bool:
        """Move the batch to ``to`` when it is in one of ``from_`` (atomic); a finished
        batch leaves the active sets and is collected at ``gc_at``."""
        owner = self._owner(batch.owner)
        keys = [
            f"{self.p}batch:{batch.id}",
            f"{self.p}active_by:{owner}",
            f"{self.p}active",
            f"{self.p}gc",
        ]
        args: list[Any] = [",".join(from_), str(to), STAMP[to], int(time.time())]
        args += ["1" if to.terminal else "0", gc_at, batch.id]
        for k, v in fields.items():
            args += [k, v]
        return bool(await self._transition(keys=keys, args=args))

    @unavailable_when_unreachable
    async def cancel(self, batch: Batch) -> bool:
        """Validating or running -> cancelling (the coordinator writes what ran)."""
        running = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)
        return await self.transition(batch, BatchStatus.CANCELLING, from_=running)

    async def start(self, batch_id: str, total: int) -> bool:
        keys = [f"{self.p}batch:{batch_id}", f"{self.p}queue"]
        return bool(await self._start(keys=keys, args=[batch_id, total, int(time.time())]))

    async def active_ids(self) -> list[str]:
        return [as_text(i) for i in await self.r.smembers(f"{self.p}active")]

    async def lock(self, batch_id: str, holder: str, ttl_s: float) -> bool:
        """The batch's lock for ``holder``: free, or already its own (scripts.LOCK)."""
        key, ttl_ms = f"{self.p}lock:{batch_id}", max(int(ttl_s * 1000), 1)
        return bool(await self._lock(keys=[key], args=[holder, ttl_ms]))

    async def extend_lock(self, batch_id: str, ttl_s: float) -> None:
        await self.r.pexpire(f"{self.p}lock:{batch_id}", max(int(ttl_s * 1000), 1))

    async def unlock(self, batch_id: str, holder: str) -> None:
        await self._unlock(keys=[f"{self.p}lock:{batch_id}"], args=[holder])

    # lines ---------------------------------------------------------------------------
    async def claim(self, worker_id: str) -> tuple[str, int] | None:
        """The next line, under a key of its own per attempt, so redis-py's own resend of
        a claim whose reply was lost returns the same line (scripts.CLAIM)."""
        attempt = f"{self.p}claim:{secrets.token_hex(12)}"
        keys = [f"{self.p}queue", f"{self.p}held:{worker_id}", f"{self.p}workers", attempt]
        args: list[Any] = [worker_id, self.p, CLAIM_SCAN, CLAIM_ATTEMPT_TTL_MS]
        item = await self._claim(keys=keys, args=args)
        if not item:
            return None
        batch_id, _, index = as_text(item).rpartition(":")
        return batch_id, int(index)

    async def ack(self, worker_id: str, batch_id: str, index: int) -> None:
        await self._ack(keys=[f"{self.p}held:{worker_id}"], args=[f"{batch_id}:{index}", self.p])

    async def record(self, batch_id: str, index: int, *, ok: bool, line: str) -> bool:
        """Write the line's result unless one is there; True when this call wrote it."""
        value = (b"1" if ok else b"0") + zlib.compress(line.encode(), 1)
        keys = [
            f"{self.p}results:{batch_id}",
            f"{self.p}counts:{batch_id}",
            f"{self.p}batch:{batch_id}",
        ]
        counter = "completed" if ok else "failed"
        return bool(await self._record(keys=keys, args=[index, value, counter]))

    async def recorded(self, batch_id: str, index: int) -> bool:
        return bool(await self.r.hexists(f"{self.p}results:{batch_id}", str(index)))

    async def results(self, batch_id: str, start: int, stop: int) -> list[tuple[bool, str] | None]:
        """Lines ``start..stop-1``: (ok, the output or error line), None where none ran."""
        fields = [str(i) for i in range(start, stop)]
        raw: list[bytes | None] = await self.r.hmget(  # type: ignore[assignment]
            f"{self.p}results:{batch_id}", fields
        )
        return [
            None if v is None else (v[:1] == b"1", zlib.decompress(v[1:]).decode()) for v in raw
        ]

    async def inflight(self, batch_id: str) -> int:
        return int(await self.r.get(f"{self.p}inflight:{batch_id}") or 0)

    async def heartbeat(self, worker_id: str, lease_s: float) -> None:
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.set(f"{self.p}lease:{worker_id}", "1", px=max(int(lease_s * 1000), 1))
            pipe.sadd(f"{self.p}workers", worker_id)
            await pipe.execute()

    async def requeue(self, worker_id: str = "") -> int:
        """Lines of workers whose lease expired (``worker_id``: this one's) back to the head."""
        keys = [f"{self.p}workers", f"{self.p}queue"]
        return int(await self._requeue(keys=keys, args=[self.p, worker_id]))

    async def hand_back(self, worker_id: str, period_s: float, stop: Callable[[], bool]) -> None:
        """This worker's held lines back to the queue head, retried every ``period_s`` until
        Redis answers (or ``stop()``). WHY: a claim whose reply, or a record whose write, was
        lost to a Redis outage leaves a line held that no one runs, under a lease the live
        worker keeps renewing, so the reaper never frees it and the batch never finishes."""
        while True:
            try:
                await self.requeue(worker_id)
                return
            except Exception:
                if stop():
                    return
                await asyncio.sleep(period_s)

    # collection ----------------------------------------------------------------------
    async def due(self, now: int, limit: int = 100) -> list[str]:
        """``file:{id}`` / ``batch:{id}`` whose time is up."""
        members: list[bytes] = await self.r.zrangebyscore(  # type: ignore[assignment]
            f"{self.p}gc", 0, now, start=0, num=limit
        )
        return [as_text(m) for m in members]

    async def forget_batch(self, batch: Batch) -> None:
        owner = self._owner(batch.owner)
        async with self.r.pipeline(transaction=True) as pipe:
            for kind in ("batch", "counts", "results", "inflight", "lock"):
                pipe.delete(f"{self.p}{kind}:{batch.id}")
            pipe.zrem(f"{self.p}by_owner:{owner}", batch.id)
            pipe.zrem(f"{self.p}gc", f"batch:{batch.id}")
            await pipe.execute()

    async def drop_results(self, batch_id: str) -> None:
        await self.r.delete(f"{self.p}results:{batch_id}")

    async def forget(self, member: str) -> None:
        await self.r.zrem(f"{self.p}gc", member)

    async def ping(self) -> None:
        await self.r.ping()

    async def close(self) -> None:
        await self.r.aclose()
