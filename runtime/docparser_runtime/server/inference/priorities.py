"""Who gets a free decode slot first when slots are short.

Someone waits on a synchronous request or a stream (its connection is open, its client
times out), nobody on an async job until it is polled, and mirrored or background work
only measures. Lower values go first; the continuous scheduler ages a waiting page to
``INTERACTIVE`` after ``priority_max_wait_s`` so a job is never starved. Batch lines
are not aged: their client comes back within a 24 h window, and thousands of them must
never overtake a waiting request; the batch runner lifts a batch close to its window's
end to ``JOB`` instead (``DOCPARSER_BATCH_URGENT_S``).
"""

from __future__ import annotations

from enum import IntEnum


class Priority(IntEnum):
    INTERACTIVE = 0  # synchronous requests and streams
    JOB = 1  # async jobs (/v1/jobs)
    BACKGROUND = 2  # mirrored traffic, warm-ups, anything nobody waits on
    BATCH = 3  # /v1/batches lines: last, and never aged (a 24h window, not a waiting client)


def is_batch(priority: int) -> bool:
    return priority >= Priority.BATCH


def static_order(priority: int, enqueued: float) -> tuple[bool, float]:
    """The static micro-batcher's order (server/inference/batcher.py): first come, first
    served, except that batch lines wait behind every other page. Requests, jobs and
    background pages keep their arrival order there (that batcher has no aging, so ranking a
    job below a request could starve it); a batch line close to its window's end is already
    submitted at ``JOB``. A static batch runs until its longest page ends, so batch lines never
    share an engine call with other pages either: a request would wait for a batch page's
    whole output."""
    return is_batch(priority), enqueued
