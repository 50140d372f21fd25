"""Log records that can repeat without bound are let through once per interval.

Why: when the process runs out of file descriptors, asyncio's accept loop logs
"socket.accept() out of system resource" with a traceback on every retry: measured 88,000
records (32 MB) in 10 s with 200 idle connections against a limit of 96 descriptors, enough
to fill a node's disk or the log pipeline while the server is already in trouble. The first
record of a kind passes (as one line, without the traceback); the next passes after
``interval_s`` and says how many were dropped in between.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

# Loggers whose records may repeat at the rate of a tight loop.
NOISY_LOGGERS = ("asyncio",)


class RepeatLimiter(logging.Filter):
    """At most one record per (logger, first line of the message) every ``interval_s``."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (passed at, dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        first_line = str(record.msg).split("\n", 1)[0]
        key = (record.name, first_line[:200])
        now = self.clock()
        passed_at, dropped = self._last.get(key, (float("-inf"), 0))
        if now - passed_at < self.interval_s:
            self._last[key] = (passed_at, dropped + 1)
            return False
        self._last[key] = (now, 0)
        message = record.getMessage().split("\n", 1)[0]
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message}: {record.exc_info[1]}"
        if dropped:
            message += f" ({dropped} more like this in the last {self.interval_s:g} s, not logged)"
        record.msg, record.args = message, None
        record.exc_info, record.exc_text = None, None
        return True


def install(interval_s: float = 60.0) -> None:
    """Limit the noisy loggers of this process (idempotent)."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatLimiter) for f in logger.filters):
            logger.addFilter(RepeatLimiter(interval_s))
