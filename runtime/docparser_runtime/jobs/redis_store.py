"""Redis job store: any replica answers for any job, and no accepted job is lost.

Layout (prefix ``docparser:``): ``job:{id}`` hash (the ``Job`` fields), ``input:{id}``
(the uploaded bytes, deleted when the job ends), ``queue:{revision}`` (list; LPUSH new
ids, workers take from the right; ``queue`` for a pod without a revision),
``processing:{worker}`` (list a worker's claimed ids move into with
BLMOVE, the "reliable queue" pattern), ``lease:{worker}`` (renewed by a heartbeat, expires
when the pod dies), ``workers`` (set of workers that may hold jobs), ``idem:{key}``
("fingerprint id"), ``queued_by:{owner}`` (set of an API key's queued job ids: the
per-key quota), ``worker_revision`` / ``revision_seen`` / ``revision_accepted`` (hashes:
each worker's revision, each revision's last heartbeat and last accepted job).

Tracks: a job runs on the revision whose pod accepted it (the canary's jobs on the canary,
stable's on stable; a dark canary gets no production traffic, so it runs no production
job). When a revision has had no live pod for ``orphan_after_s`` (promoted away, rolled
back) while jobs still wait in its queue, they are adopted by the live revision that most
recently accepted a job (the one serving traffic), so no accepted job is stranded. Every
multi-key state change is one Lua script, so concurrent replicas
(and the reaper) never see half an update; the queue limits are checked in the same
script that enqueues.

Worker-side writes (progress, finish, release, heartbeat) retry connection errors with
bounded exponential backoff: a Redis restart or a reset connection must not fail a job
that already ran for minutes. The scripts they run are idempotent for the same worker
(a retried write finds the state it left, or reports that the job moved on).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis

from ..redis_calls import TRANSIENT, ScriptArgs, as_text, unreachable_as_unavailable
from . import redis_scripts as scripts
from .models import Job, JobStatus, new_job_id
from .redis_keys import RedisKeys
from .store import (
    Backlog,
    ClaimedJob,
    JobStore,
    already_finished,
    conflict_for_key,
    not_found,
    queue_full,
    quota_exceeded,
)

log = logging.getLogger(__name__)
unavailable_when_unreachable = unreachable_as_unavailable("the job store", "job_store_unavailable")

T = TypeVar("T")


class RedisJobStore(JobStore):
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ttl_s: int,
        max_attempts: int = 3,
        prefix: str = "docparser:",
        max_queued: int = 0,
        max_queued_per_owner: int = 0,
        write_retries: int = 6,
        retry_base_s: float = 0.2,
        retry_cap_s: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        revision: str = "",
        orphan_after_s: float = 30.0,
    ) -> None:
        """``max_queued`` / ``max_queued_per_owner``: 0 = unlimited. ``write_retries``:
        extra tries of a worker-side write after a connection error, sleeping
        ``retry_base_s * 2**n`` (at most ``retry_cap_s``) in between; the defaults ride
        out about 13 s of outage, less than the default job lease (15 s), after which
        another replica may take the job over anyway. ``sleep`` is the seam tests use
        to act between a failure and its retry."""
        self.r = client
        self.ttl_s = int(ttl_s)
        self.max_attempts = max_attempts
        self.max_queued = max_queued
        self.max_queued_per_owner = max_queued_per_owner
        self.write_retries = write_retries
        self.retry_base_s = retry_base_s
        self.retry_cap_s = retry_cap_s
        self._sleep = sleep
        self.revision = revision
        self.keys = RedisKeys(prefix, revision)
        self.orphan_after_s = orphan_after_s
        self._submit = client.register_script(scripts.SUBMIT)
        self._start = client.register_script(scripts.START)
        self._cancel = client.register_script(scripts.CANCEL)
        self._progress = client.register_script(scripts.PROGRESS)
        self._finish = client.register_script(scripts.FINISH)
        self._release = client.register_script(scripts.RELEASE)
        self._requeue_dead = client.register_script(scripts.REQUEUE_DEAD)
        self._return_unstarted = client.register_script(scripts.RETURN_UNSTARTED)
        self._adopt = client.register_script(scripts.ADOPT)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisJobStore:
        return cls(aioredis.Redis.from_url(url, decode_responses=False), **kwargs)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` again after a connection error, with bounded backoff (the
        connection pool reconnects; redis-py reloads scripts a restart forgot)."""
        for attempt in range(self.write_retries + 1):
            try:
                return await call()
            except TRANSIENT as exc:
                if attempt == self.write_retries:
                    raise
                delay = min(self.retry_base_s * 2**attempt, self.retry_cap_s)
                log.warning(
                    "job store %s failed (%s); retry %d/%d in %.1fs",
                    what,
                    type(exc).__name__,
                    attempt + 1,
                    self.write_retries,
                    delay,
                )
                await self._sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    # interface -------------------------------------------------------------------
    @unavailable_when_unreachable
    async def submit(
        self,
        *,
        data: bytes,
        params: dict[str, Any],
        fingerprint: str,
        idempotency_key: str | None = None,
        owner: str | None = None,
        pages_estimate: int = 1,
    ) -> tuple[Job, bool]:
        job = Job(
            id=new_job_id(),
            params=dict(params),
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            owner=owner,
            revision=self.revision,
            pages_estimate=max(int(pages_estimate), 1),
        )
        owner_set = self.keys.owner_prefix + (owner or "")
        keys = [self.keys.job(job.id), self.keys.input(job.id), self.keys.queue, owner_set]
        if idempotency_key is not None:
            keys.append(self.keys.idem(idempotency_key))
        flat = [x for kv in job.to_fields().items() for x in kv]
        per_owner = self.max_queued_per_owner if owner else 0
        args: ScriptArgs = [job.id, fingerprint, self.ttl_s, self.keys.job(""), data]
        args += [self.max_queued, per_owner, *flat]
        outcome, job_id = await self._submit(keys=keys, args=args)
        if outcome == b"conflict":
            raise conflict_for_key(idempotency_key or "")
        if outcome == b"full":
            raise queue_full(int(job_id))
        if outcome == b"quota":
            raise quota_exceeded(int(job_id))
        if outcome == b"existing":
            return await self.get(as_text(job_id)), False
        # Marks this revision as serving traffic: it adopts orphaned jobs (reap).
        await self.r.hset(self.keys.revision_accepted, self.revision, repr(time.time()))
        return job, True

    @unavailable_when_unreachable
    async def get(self, job_id: str) -> Job:
        raw = await self.r.hgetall(self.keys.job(job_id))
        if not raw:
            raise not_found(job_id)
        return Job.from_fields({as_text(k): as_text(v) for k, v in raw.items()})

    @unavailable_when_unreachable
    async def queue_position(self, job_id: str) -> int | None:
        raw = await self.r.hget(self.keys.job(job_id), "revision")
        queue = self.keys.queue_for(as_text(raw) if raw else "")
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.lpos(queue, job_id)
            pipe.llen(queue)
            index, length = await pipe.execute()
        return None if index is None else length - 1 - index

    @unavailable_when_unreachable
    async def queue_depth(self) -> int:
        return await self.r.llen(self.keys.queue)

    @unavailable_when_unreachable
    async def queued_total(self) -> int:
        """Every revision's queue Redis knows of (seen or accepting), and ours."""
        seen = await self.r.hkeys(self.keys.revision_seen)
        accepted = await self.r.hkeys(self.keys.revision_accepted)
        revisions = {as_text(r) for r in (*seen, *accepted)} | {self.revision}
        return sum([int(await self.r.llen(self.keys.queue_for(r))) for r in sorted(revisions)])

    # Queued jobs whose page estimates are summed exactly; past it, the rest are counted
    # at the sampled mean (the metric refreshes every few seconds on every pod).
    BACKLOG_SAMPLE = 1000

    @unavailable_when_unreachable
    async def backlog(self) -> Backlog:
        ids = await self.r.lrange(self.keys.queue, 0, self.BACKLOG_SAMPLE - 1)
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.llen(self.keys.queue)
            for raw in ids:
                pipe.hget(self.keys.job(as_text(raw)), "pages_estimate")
            pipe.hgetall(self.keys.worker_revision)
            depth, *estimates, owners = await pipe.execute()
        sampled = [int(e or 1) for e in estimates]
        pages = sum(sampled)
        if depth > len(sampled) and sampled:
            pages += round((depth - len(sampled)) * pages / len(sampled))
        mine = [w.decode() for w, rev in owners.items() if rev.decode() == self.revision]
        # EXISTS with several keys counts those present: the live leases of this revision.
        alive = await self.r.exists(*(self.keys.lease(w) for w in mine)) if mine else 0
        return Backlog(jobs=int(depth), pages=int(pages), workers=max(int(alive), 1))

    @unavailable_when_unreachable
    async def cancel(self, job_id: str) -> Job:
        keys = [self.keys.job(job_id), self.keys.input(job_id)]
        args: ScriptArgs = [job_id, time.time(), self.ttl_s]
        args += [self.keys.owner_prefix, self.keys.queue_base]
        outcome = await self._cancel(keys=keys, args=args)
        if outcome == b"missing":
            raise not_found(job_id)
        job = await self.get(job_id)
        if outcome in (b"succeeded", b"failed"):
            raise already_finished(job)
        return job

    async def claim(self, worker_id: str, *, timeout_s: float) -> ClaimedJob | None:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            raw = await self.r.blmove(
                self.keys.queue,
                self.keys.processing(worker_id),
                max(left, 0.01),  # type: ignore[arg-type]  # BLMOVE takes fractional seconds
                "RIGHT",
                "LEFT",
            )
            if raw is None:
                return None
            job_id = as_text(raw)
            keys = [self.keys.job(job_id), self.keys.processing(worker_id)]
            args: ScriptArgs = [job_id, worker_id, time.time(), self.keys.owner_prefix]
            if not await self._start(keys=keys, args=args):
                continue  # cancelled (or expired) between the move and the start
            data = await self.r.get(self.keys.input(job_id))
            job = await self.get(job_id)
            if data is None:  # cannot happen unless someone deleted keys by hand
                await self.finish(
                    job_id,
                    worker_id,
                    status=JobStatus.FAILED,
                    error={"code": "internal_error", "message": "job input is missing"},
                )
                continue
            return ClaimedJob(job=job, data=data if isinstance(data, bytes) else data.encode())

    async def progress(
        self, job_id: str, worker_id: str, *, pages_done: int, pages_total: int
    ) -> bool:
        args: ScriptArgs = [worker_id, time.time(), pages_done, pages_total]
        return bool(
            await self._retrying(
                "progress", lambda: self._progress(keys=[self.keys.job(job_id)], args=args)
            )
        )

    async def finish(
        self,
        job_id: str,
        worker_id: str,
        *,
        status: JobStatus,
        result: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> bool:
        payload = (
            "" if result is None else json.dumps(result),
            "" if error is None else json.dumps(error),
        )

        async def write() -> bool:
            raw = await self.r.hget(self.keys.job(job_id), "idempotency_key")
            keys = [self.keys.job(job_id), self.keys.processing(worker_id), self.keys.input(job_id)]
            if raw:
                keys.append(self.keys.idem(as_text(raw)))
            args: ScriptArgs = [job_id, worker_id, time.time(), self.ttl_s, str(status), *payload]
            return bool(await self._finish(keys=keys, args=args))

        return await self._retrying("finish", write)

    async def release(self, job_id: str, worker_id: str) -> None:
        keys = [self.keys.job(job_id), self.keys.processing(worker_id)]
        args: ScriptArgs = [job_id, worker_id, time.time()]
        args += [self.keys.owner_prefix, self.keys.queue_base]
        await self._retrying("release", lambda: self._release(keys=keys, args=args))

    async def heartbeat(self, worker_id: str, *, lease_s: float) -> None:
        async def beat() -> None:
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.set(self.keys.lease(worker_id), b"1", px=max(int(lease_s * 1000), 1))
                pipe.sadd(self.keys.workers, worker_id)
                pipe.hset(self.keys.worker_revision, worker_id, self.revision)
                pipe.hset(self.keys.revision_seen, self.revision, repr(time.time()))
                await pipe.execute()

        await self._retrying("heartbeat", beat)

    async def reap(self) -> int:
        requeued = 0
        for raw in await self.r.smembers(self.keys.workers):
            requeued += max(await self._requeue_worker(as_text(raw)), 0)
        return requeued + await self._adopt_orphans()

    async def _adopt_orphans(self) -> int:
        """Move the queued jobs of revisions with no live pod to this pod's revision,
        when this revision is the adopter: among live revisions, the one that accepted a
        job most recently (serving traffic; a dark canary never does), then by name."""
        async with self.r.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.revision_seen)
            pipe.hgetall(self.keys.revision_accepted)
            seen, accepted = await pipe.execute()
        now = time.time()
        seen_at = {k.decode(): float(v) for k, v in seen.items()}
        accepted_at = {k.decode(): float(v) for k, v in accepted.items()}
        live = {rev for rev, t in seen_at.items() if now - t <= self.orphan_after_s}
        if not live:
            return 0
        adopter = max(live, key=lambda rev: (accepted_at.get(rev, 0.0), rev))
        if adopter != self.revision:
            return 0
        adopted = 0
        for rev in (set(seen_at) | set(accepted_at)) - live:
            moved = int(
                await self._adopt(
                    keys=[self.keys.queue_for(rev), self.keys.queue],
                    args=[self.keys.job(""), self.revision, time.time()],
                )
            )
            if moved:
                log.warning("revision %r has no live pod: adopted its %d queued jobs", rev, moved)
            adopted += moved
            # Forget a revision once its queue is empty and it accepted nothing lately.
            if now - accepted_at.get(rev, 0.0) > self.orphan_after_s:
                async with self.r.pipeline(transaction=False) as pipe:
                    pipe.hdel(self.keys.revision_seen, rev)
                    pipe.hdel(self.keys.revision_accepted, rev)
                    await pipe.execute()
        return adopted

    async def _requeue_worker(self, worker_id: str) -> int:
        keys = [self.keys.lease(worker_id), self.keys.processing(worker_id), self.keys.workers]
        error = json.dumps(
            {
                "code": "worker_lost",
                "message": f"the replica running this job died {self.max_attempts} times; "
                "the input may crash the engine",
            }
        )
        args: ScriptArgs = [
            worker_id,
            self.keys.job(""),
            self.keys.input(""),
            time.time(),
            self.ttl_s,
            self.max_attempts,
            error,
            self.keys.owner_prefix,
            self.keys.queue_base,
        ]
        outcome = int(await self._requeue_dead(keys=keys, args=args))
        if outcome >= 0:  # the worker is gone for good: forget its revision
            await self.r.hdel(self.keys.worker_revision, worker_id)
        return outcome

    async def return_unstarted(self, worker_id: str) -> int:
        keys = [self.keys.processing(worker_id)]
        args = [self.keys.job(""), self.keys.queue_base]
        return int(await self._return_unstarted(keys=keys, args=args))

    async def deregister(self, worker_id: str) -> None:
        await self.r.delete(self.keys.lease(worker_id))
        await self._requeue_worker(worker_id)

    async def ping(self) -> None:
        await self.r.ping()

    async def close(self) -> None:
        await self.r.aclose()
