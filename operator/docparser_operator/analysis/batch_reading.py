"""The batch backlog read from a pod's ``/metrics`` (pure: text in, numbers out).

The names are the contract with the runtime (server/endpoints/batches/metrics.py): every pod
with the DocParser's Redis reports the same shared figures, so a reading of several pods takes
the largest of each (a pod whose Redis read lagged reports less, never more), never the sum.
core/plan/batch_pool.py sizes the batch pool and writes ``status.batch`` from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# series -> the BatchReading field it feeds
SERIES = {
    "docparser_batch_in_progress": "in_progress",
    "docparser_batch_lines_queued": "lines_queued",
    "docparser_batch_lines_running": "lines_running",
    "docparser_batch_pages_queued": "pages_queued",
    "docparser_batch_pages_done": "pages_done",
    "docparser_batch_pages_recorded": "pages_total",
}


@dataclass(frozen=True)
class BatchReading:
    """The DocParser's batches as its pods report them."""

    in_progress: int = 0  # batches not finished
    lines_queued: int = 0  # lines not yet recorded (waiting or held)
    lines_running: int = 0
    pages_queued: int = 0  # estimated
    pages_done: int = 0  # in the batches not finished
    pages_total: float = 0.0  # recorded by every batch so far (only grows)
    pods: int = 0  # pods that reported the figures


def parse(text: str) -> BatchReading | None:
    """One pod's figures; None for a pod that reports none (a runtime without Redis, or one
    from before the batch gauges). Raises ValueError on a malformed exposition."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SERIES:
                values[SERIES[sample.name]] = sample.value
    if not values:
        return None
    ints = {k: round(v) for k, v in values.items() if k != "pages_total"}
    return BatchReading(**ints, pages_total=values.get("pages_total", 0.0), pods=1)


def combine(readings: Iterable[BatchReading]) -> BatchReading | None:
    """The largest of each figure over the pods that reported (None: none did)."""
    found = list(readings)
    if not found:
        return None
    return BatchReading(
        in_progress=max(r.in_progress for r in found),
        lines_queued=max(r.lines_queued for r in found),
        lines_running=max(r.lines_running for r in found),
        pages_queued=max(r.pages_queued for r in found),
        pages_done=max(r.pages_done for r in found),
        pages_total=max(r.pages_total for r in found),
        pods=len(found),
    )
