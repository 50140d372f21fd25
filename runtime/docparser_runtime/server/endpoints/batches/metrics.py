"""``docparser_batch_*``: the DocParser's batch backlog as gauges on every pod with Redis.

The operator scales the batch pool (``spec.batch``) on ``docparser_batch_pages_queued`` and
writes ``status.batch`` from these, reading the stable pods' (and the front's) ``/metrics``:
they share the Redis the batches live in, so the backlog is readable while the pool is at zero
(batches/backlog.py says why this design). Every pod reports the same figures; a reader takes
the largest, never the sum. A pod whose Redis is unreachable keeps its last values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Gauge

from docparser_runtime.batches.backlog import BatchBacklog, key_prefix, read_backlog

log = logging.getLogger("docparser.batches")
REFRESH_S = 2.0

# gauge name -> (help, the BatchBacklog field)
GAUGES: dict[str, tuple[str, str]] = {
    "docparser_batch_in_progress": ("Unfinished batches (validating..cancelling).", "in_progress"),
    "docparser_batch_lines_queued": (
        "Lines of unfinished batches not yet recorded (waiting or held by a worker).",
        "lines_queued",
    ),
    "docparser_batch_lines_running": ("Batch lines held by a worker now.", "lines_running"),
    "docparser_batch_pages_queued": (
        "Estimated pages of the lines queued (lines x pages per line done so far, >= 1).",
        "pages_queued",
    ),
    "docparser_batch_pages_done": ("Pages recorded in unfinished batches.", "pages_done"),
    "docparser_batch_pages_recorded": (
        "Pages recorded by every batch of this DocParser so far (only grows; per minute: "
        "its rate).",
        "pages_total",
    ),
}  # fmt: skip


class BatchMetrics:
    """The gauges in the app's registry, refreshed from Redis every ``REFRESH_S``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.gauges = {
            field: Gauge(name, doc, registry=registry) for name, (doc, field) in GAUGES.items()
        }

    def set(self, backlog: BatchBacklog) -> None:
        for field, gauge in self.gauges.items():
            gauge.set(getattr(backlog, field))

    async def refresh(
        self, redis_url: str, redis_prefix: str, *, every_s: float = REFRESH_S
    ) -> None:
        client = aioredis.Redis.from_url(redis_url, decode_responses=False)
        p = key_prefix(redis_prefix)
        try:
            while True:
                try:
                    self.set(await read_backlog(client, p))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # Redis down or restarting: keep the last values
                    log.debug("batch backlog unreadable (%s)", type(exc).__name__)
                await asyncio.sleep(every_s)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), 3.0)
