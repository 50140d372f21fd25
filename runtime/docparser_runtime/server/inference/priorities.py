"""Who gets a free decode slot first when slots are short.

Someone waits on a synchronous request or a stream (its connection is open, its client
times out), nobody on an async job until it is polled, and mirrored or background work
only measures. Lower values go first; the continuous scheduler ages a waiting page to
``INTERACTIVE`` after ``priority_max_wait_s`` so a job is never starved.
"""

from __future__ import annotations

from enum import IntEnum


class Priority(IntEnum):
    INTERACTIVE = 0  # synchronous requests and streams
    JOB = 1  # async jobs (/v1/jobs)
    BACKGROUND = 2  # mirrored traffic, warm-ups, anything nobody waits on
