"""Which answered requests a stable pod mirrors: a percentage, then this pod's page budget.

WHY a token bucket of pages, not of requests: the canary's GPU cost follows pages (one
300-page PDF is one request), and the spec bounds that cost per minute. The operator divides
the DocParser's budget among the stable pods (``maxPagesPerMinute`` is this pod's share);
the bucket holds one minute of it, refills continuously, and a request whose pages do not fit
is dropped whole (reason ``budget``): a copy is compared whole or not at all.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable


class PageBudget:
    """Pages per minute with a burst of one minute's worth. Not thread-safe: the event
    loop is its only caller."""

    def __init__(self, per_minute: float = 0.0, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.per_minute = per_minute
        self.tokens = per_minute
        self._updated = clock()

    def set_rate(self, per_minute: float) -> None:
        """A new rate (a changed config): the tokens held stay, capped at the new burst; a
        bucket that had no rate (the shadow was off) starts full."""
        self._refill()
        self.tokens = per_minute if self.per_minute <= 0 else min(self.tokens, per_minute)
        self.per_minute = per_minute

    def _refill(self) -> None:
        now = self._clock()
        refill = (now - self._updated) * self.per_minute / 60
        self.tokens = min(self.per_minute, self.tokens + refill)
        self._updated = now

    def take(self, pages: int) -> bool:
        """Spend ``pages`` now, or nothing and False."""
        self._refill()
        if pages > self.tokens:
            return False
        self.tokens -= pages
        return True

    def give_back(self, pages: int) -> None:
        """Pages taken for a copy that was then dropped before it was sent."""
        self.tokens = min(self.per_minute, self.tokens + pages)


def sampled(percent: float, draw: Callable[[], float] = random.random) -> bool:
    """True for ``percent`` of the calls (0..100)."""
    return percent >= 100 or (percent > 0 and draw() * 100 < percent)
