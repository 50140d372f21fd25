"""The queue wait a new page can expect: ``docparser_estimated_wait_seconds`` (issue 36).

WHY: ``autoscaling.metric: latency`` promises a p95 queue wait (``targetSeconds``), and
queued pages alone do not say how long they take: a tier-6 page holds a decode slot far
longer than a tier-0 page, and a slow engine longer than a fast one. So each scheduler keeps
the *measured* seconds a page of each tier holds a slot (from ``started`` to ``finished``:
one engine call for the static micro-batcher, the page's time in the running batch for the
continuous one) and the estimate is

    sum over queued pages of seconds_per_page(tier)  /  decode slots

(slots: ``max_batch_size``, which pages run side by side in both schedulers). The HPA
averages the gauge over pods, so ``targetSeconds`` is the wait it keeps pods at.

Seconds per page are an exponentially weighted mean (``ALPHA`` per page) so the estimate
follows a change of workload within tens of pages without jumping at one long page. Before
a tier is measured it borrows the mean of every measured page (tiers differ less than
engines do), and before any page at all it uses ``PRIOR_PAGE_S``: a guess, but one that
makes a queue of pages read as waiting (a zero would scale nothing up at a cold start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

ALPHA = 0.2  # weight of the newest page in the mean
PRIOR_PAGE_S = 2.0  # seconds a page holds a slot before any measurement (a GPU page's order)


class WaitEstimator:
    """Seconds per page per tier, measured, and the queue wait they add up to."""

    def __init__(
        self,
        slots: int,
        *,
        prior_s: float = PRIOR_PAGE_S,
        alpha: float = ALPHA,
        record: Callable[[int, float], None] | None = None,
    ):
        """``record``: also told every measurement (the runtime's service-time histogram,
        which status.capacity reads)."""
        self.slots = max(1, slots)
        self.record = record
        self.prior_s = prior_s
        self.alpha = alpha
        self._per_tier: dict[int, float] = {}
        self._overall: float | None = None

    def observe(self, tier: int, seconds: float) -> None:
        """A page of ``tier`` held a slot for ``seconds`` (negative clock steps count as 0)."""
        seconds = max(0.0, seconds)
        if self.record is not None:
            self.record(tier, seconds)
        before = self._per_tier.get(tier)
        self._per_tier[tier] = seconds if before is None else _mix(before, seconds, self.alpha)
        last = self._overall
        self._overall = seconds if last is None else _mix(last, seconds, self.alpha)

    def seconds_per_page(self, tier: int) -> float:
        """The measured mean of ``tier``; unmeasured: all pages' mean, or the prior."""
        if tier in self._per_tier:
            return self._per_tier[tier]
        return self.prior_s if self._overall is None else self._overall

    def estimate(self, queued_tiers: Iterable[int]) -> float:
        """Seconds until the last of these queued pages gets a slot, all slots serving."""
        return sum(self.seconds_per_page(tier) for tier in queued_tiers) / self.slots


def _mix(mean: float, sample: float, alpha: float) -> float:
    return (1 - alpha) * mean + alpha * sample
