"""The batch backlog in pages, read from Redis by every pod and exported as gauges.

Why every pod, from Redis: the operator sizes the batch pool (``spec.batch``) on this
backlog, and must read it while the pool has no pod at all (scale from zero). The stable pods
(and the front, at ``replicas.min: 0``) share the DocParser's Redis, so each of them reports
the same figures (``docparser_batch_*``; the operator takes the largest, as for the job
queue) and the operator reads them through the ``/metrics`` reader it already has, bounded and
parallel, on the pods of its own ReplicaSets: no Prometheus, no external-metrics adapter and
no Redis credential in the operator.

Pages, not lines: one line is one document of any length, and a GPU's work is its pages. A
line's pages are known once it ran (``count_pages`` adds them to the batch's ``counts``
hash, field ``pages``, and to the DocParser's running total ``batch:pages_total``), so the
pages still queued are estimated as the lines left times the pages per line done so far (at
least one per line: before the first line ran, a line counts as one page).

The lines left are the batch's total less those recorded: lines waiting and lines held by a
worker (also one whose pod died, until its lease expires) both count, so a pool is never
scaled away under lines a dead pod held. A batch still ``validating`` counts its input
file's lines: with ``backfill: false`` no stable pod runs the coordinator that validates it,
and the pool must start for anyone to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ..redis_calls import as_text

MAX_BATCHES = 1000  # active batches one reading looks at (the per-key limit keeps it small)
PAGES_TOTAL = "pages_total"  # the DocParser's pages recorded by every batch, ever


@dataclass(frozen=True)
class BatchBacklog:
    """One reading of the DocParser's batches (the same on every pod)."""

    in_progress: int = 0  # batches not finished (validating to cancelling)
    lines_queued: int = 0  # lines of those batches not yet recorded (waiting or held)
    lines_running: int = 0  # lines held by a worker now
    pages_queued: int = 0  # estimated pages of the lines queued
    pages_done: int = 0  # pages recorded in the batches not finished
    pages_total: int = 0  # pages recorded by every batch so far (only grows)


def pages_of(body: dict[str, Any]) -> int:
    """Pages of one line's reply: ``/v1/document/parse`` lists them; a chat completion is
    one image, one page."""
    pages = body.get("pages")
    return len(pages) if isinstance(pages, list) and pages else 1


def key_prefix(redis_prefix: str) -> str:
    """The batch store's keys under the DocParser's Redis prefix (redis_store.py's layout)."""
    return f"{redis_prefix}batch:"


async def count_pages(r: aioredis.Redis, p: str, batch_id: str, pages: int) -> None:
    """Add a line's pages once its result was recorded (by the call that recorded it: a line
    recorded twice is counted once, as its result is written once). ``p``: ``key_prefix``."""
    async with r.pipeline(transaction=True) as pipe:
        pipe.hincrby(f"{p}counts:{batch_id}", "pages", pages)
        pipe.incrby(f"{p}{PAGES_TOTAL}", pages)
        await pipe.execute()


def _int(raw: Any) -> int:
    try:
        return int(as_text(raw)) if raw is not None else 0
    except ValueError:
        return 0


async def read_backlog(r: aioredis.Redis, p: str) -> BatchBacklog:
    """The backlog now (two or three round trips: the active set, one pipeline over it, the
    input files of batches still validating). ``p``: ``key_prefix``."""
    raw_ids: Any = await r.srandmember(f"{p}active", MAX_BATCHES)  # a list with a count
    ids = [as_text(i) for i in raw_ids or []]
    async with r.pipeline(transaction=False) as pipe:
        pipe.get(f"{p}{PAGES_TOTAL}")
        for batch_id in ids:
            pipe.hmget(f"{p}batch:{batch_id}", ["status", "total", "input_file_id"])
            pipe.hmget(f"{p}counts:{batch_id}", ["completed", "failed", "pages"])
            pipe.get(f"{p}inflight:{batch_id}")
        replies = await pipe.execute()
    total_pages, rest = _int(replies[0]), replies[1:]
    validating: list[str] = []
    queued = running = pages_queued = pages_done = in_progress = 0
    for i in range(len(ids)):
        (status, total, input_file), counts, inflight = rest[3 * i : 3 * i + 3]
        if status is None:
            continue  # collected between the two reads
        in_progress += 1
        completed, failed, pages = (_int(v) for v in counts)
        pages_done += pages
        if as_text(status) == "validating" and input_file is not None:
            validating.append(as_text(input_file))
        if as_text(status) != "in_progress":
            continue
        left = max(0, _int(total) - completed - failed)
        queued += left
        running += max(0, _int(inflight))
        per_line = max(1.0, pages / completed) if completed else 1.0
        pages_queued += math.ceil(left * per_line)
    if validating:
        async with r.pipeline(transaction=False) as pipe:
            for file_id in validating:
                pipe.hget(f"{p}file:{file_id}", "lines")
            lines = sum(_int(v) for v in await pipe.execute())
        queued += lines
        pages_queued += lines
    return BatchBacklog(in_progress, queued, running, pages_queued, pages_done, total_pages)
