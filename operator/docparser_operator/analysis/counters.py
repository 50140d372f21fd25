"""Per-track counters of a canary analysis window (pure): what scrape.py sums from the pods'
``/metrics`` and prometheus.py reads from PromQL, differenced over a window and read back as
rates and a latency quantile by analysis.evaluate.

Kept apart from the walk (analysis.py) so that both metric sources depend on this small leaf,
not on the planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from docparser_operator.api.status_models import AnalysisCheck

# Output-quality outcomes per page (the runtime's docparser_pages_<name>_total counters):
# the check's name in status, and the CanaryAnalysis field holding its threshold.
OUTCOMES: dict[str, tuple[str, str]] = {
    "truncated": ("truncatedRate", "max_truncated_rate_increase"),
    "empty": ("emptyRate", "max_empty_rate_increase"),
    "repetition_guarded": ("repetitionRate", "max_repetition_rate_increase"),
}


@dataclass(frozen=True)
class TrackCounters:
    """Cumulative counters of one track's pods, summed (scrape.py)."""

    requests: float = 0.0
    errors: float = 0.0
    latency: tuple[tuple[float, float], ...] = ()  # (upper bound, cumulative count)
    pages: float = 0.0
    outcomes: tuple[tuple[str, float], ...] = ()  # (OUTCOMES name, pages with it)

    def minus(self, earlier: TrackCounters) -> TrackCounters | None:
        """The window's share; None when a counter went down (a pod left or restarted), so
        the window cannot be measured and starts again."""
        scalars = (self.requests - earlier.requests, self.errors - earlier.errors)
        pages = self.pages - earlier.pages
        if min(*scalars, pages) < 0:
            return None
        before = dict(earlier.latency)
        buckets = []
        for le, count in self.latency:
            delta = count - before.get(le, 0.0)
            if delta < 0:
                return None
            buckets.append((le, delta))
        was = dict(earlier.outcomes)
        outcomes = tuple((name, n - was.get(name, 0.0)) for name, n in self.outcomes)
        if any(n < 0 for _, n in outcomes):
            return None
        return TrackCounters(*scalars, tuple(buckets), pages, outcomes)

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def page_rate(self, outcome: str) -> float:
        """Share of this window's pages with ``outcome`` (0 without pages)."""
        return dict(self.outcomes).get(outcome, 0.0) / self.pages if self.pages else 0.0

    @property
    def timed(self) -> float:
        """Requests in the latency histogram (its +Inf bucket)."""
        return max((count for _, count in self.latency), default=0.0)

    def quantile(self, q: float) -> float:
        """Like PromQL's histogram_quantile: linear within the bucket holding rank q."""
        return histogram_quantile(self.latency, q)


def histogram_quantile(cumulative: tuple[tuple[float, float], ...], q: float) -> float:
    """PromQL's histogram_quantile over (upper bound, cumulative count) buckets: linear
    within the bucket holding rank q; the highest finite bound past it."""
    buckets = sorted(cumulative)
    if not buckets or buckets[-1][1] <= 0:
        return 0.0
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower  # the highest finite bound, as Prometheus does
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


@dataclass(frozen=True)
class Check:
    """One check of a window or a gate, as status reports it."""

    name: str
    value: float
    threshold: float
    ok: bool
    canary: float | None = None
    stable: float | None = None
    quantile: float | None = None  # latency or CER: the quantile compared

    def to_status(self) -> AnalysisCheck:
        """One of ``status.canary.analysis.checks``: the measured figures to four places, the
        threshold as the spec says it."""
        return AnalysisCheck(
            name=self.name,
            value=round(self.value, 4),
            threshold=self.threshold,
            ok=self.ok,
            canary=_four(self.canary),
            stable=_four(self.stable),
            quantile=_four(self.quantile),
        )


def _four(number: float | None) -> float | None:
    return None if number is None else round(number, 4)


P99 = 0.99


def supported_quantile(samples: float, q: float = P99) -> float:
    """The highest quantile up to ``q`` that ``samples`` requests can support: min(q, 1 - 1/n).

    The p99 of fewer than 100 requests is their slowest one; with a window of 50, one cold
    first request (a new pod loading its model) would decide the latency verdict alone. At
    1 - 1/n the compared figure sits below the slowest request, so one outlier never fails
    a canary on its own and two still can. From 100 timed requests on it is ``q`` itself.
    """
    if samples < 2:
        return 0.5
    return min(q, 1.0 - 1.0 / samples)
