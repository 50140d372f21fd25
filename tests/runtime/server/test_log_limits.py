"""``RepeatLimiter``: a record that repeats in a tight loop passes once per interval."""

from __future__ import annotations

import logging

from docparser_runtime.server.ops.log_limits import RepeatLimiter


def record(msg: str, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc else None
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None, exc_info)


def test_repeats_pass_once_per_interval_and_say_what_was_dropped() -> None:
    now = [0.0]
    limiter = RepeatLimiter(60, clock=lambda: now[0])
    msg = "socket.accept() out of system resource\nsocket: <fd=6>"
    first = record(msg, OSError(24, "Too many open files"))
    assert limiter.filter(first)
    assert first.getMessage() == (
        "socket.accept() out of system resource: [Errno 24] Too many open files"
    )
    assert first.exc_info is None  # one line, no traceback
    assert not any(limiter.filter(record(msg)) for _ in range(1000))
    assert limiter.filter(record("another message"))  # other messages are not held back
    now[0] = 61
    later = record(msg)
    assert limiter.filter(later)
    assert "1000 more like this in the last 60 s" in later.getMessage()
