"""The live capacity window (``spec.capacity``): readings of the runtime pods kept between
passes, and the figures they add up to over the window (pure: the readings are handed in).

Why readings every ``poll_s`` and not one per window: the pods' counters say what happened
since each pod started, so one reading cannot tell the peak minute from the average, nor a
pod that restarted from one that was idle. Each reading is differenced per pod against the
one before (a pod first seen, or one whose counter went down, started within the interval:
all it counts is its growth), and the interval's growth is kept with its length, so the
window's figures are sums over the intervals inside it and its peak is the busiest interval
(a minute apart at the default ``DOCPARSER_OPERATOR_CAPACITY_POLL_INTERVAL_S``). Only the
last window of intervals is kept: memory is bounded by window / poll per DocParser.

A Prometheus source (``spec.capacity.prometheus``) keeps the history itself: one query per
window gives the same ``Figures`` (providers/capacity.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from docparser_operator.analysis.capacity_reading import CapacityCounters, add
from docparser_operator.analysis.counters import histogram_quantile

MAX_INTERVALS = 10_000  # a bound whatever window / poll a spec asks for


def window_seconds(window: str) -> int:
    """Seconds of a window such as ``90s``, ``15m`` or ``1h`` (the CRD's pattern)."""
    unit = {"s": 1, "m": 60, "h": 3600}[window[-1]]
    return int(window[:-1]) * unit


@dataclass(frozen=True)
class Interval:
    """The pods' growth between two readings (gauges as at its end)."""

    end: float  # unix time
    seconds: float
    counters: CapacityCounters
    pods: int  # pods read at its end


@dataclass
class CapacitySeen:
    """One DocParser's readings: each pod's last (and when it was read), and the intervals
    of the last window."""

    pods: dict[str, tuple[CapacityCounters, float]] = field(
        default_factory=dict[str, tuple[CapacityCounters, float]]
    )
    at: float | None = None  # unix time of the last reading
    began: float | None = None  # of the first reading the intervals continue from
    intervals: list[Interval] = field(default_factory=list[Interval])

    def due(self, at: float, poll_s: float) -> bool:
        return self.at is None or at - self.at >= poll_s

    def next_in(self, at: float, poll_s: float) -> float:
        return 0.0 if self.at is None else max(0.0, self.at + poll_s - at)

    def record(self, readings: Mapping[str, CapacityCounters], at: float, window_s: float) -> None:
        """A reading of every Ready pod at ``at``. A pod read before grew by the difference;
        one first seen since the last reading (it became Ready, or restarted: a counter went
        down) grew by all it counts, which it served since it started, within the interval
        at the poll's pace. The first reading is the baseline."""
        if self.at is None or at <= self.at:
            self.began = at if self.at is None else self.began
        else:
            grown = []
            for pod, now in readings.items():
                before = self.pods.get(pod)
                delta = now.minus(before[0]) if before is not None else None
                grown.append(delta if delta is not None else now)
            gauges = add(readings.values())
            summed = replace(
                add(grown),
                slots=gauges.slots,
                memory_peak=gauges.memory_peak,
                memory_limit=gauges.memory_limit,
            )
            self.intervals.append(Interval(at, at - self.at, summed, len(readings)))
        # pods not read now (not Ready a moment) are kept for a window: differenced on return
        kept = {p: seen for p, seen in self.pods.items() if seen[1] > at - window_s}
        self.pods = {**kept, **{p: (c, at) for p, c in readings.items()}}
        self.at = at
        self.intervals = [i for i in self.intervals if i.end > at - window_s][-MAX_INTERVALS:]

    def lost(self) -> None:
        """A reading failed: the next one starts a new interval (what passed is unknown)."""
        self.pods, self.at = {}, None

    def covered(self, at: float, window_s: float) -> bool:
        """Whether unbroken readings have gone on for a whole window (a failed reading starts
        them again), so the intervals kept span it."""
        return bool(self.intervals) and self.began is not None and at - self.began >= window_s


@dataclass
class CapacityMemory:
    """Every DocParser's readings (uid -> CapacitySeen), kept by the operator run."""

    seen: dict[str, CapacitySeen] = field(default_factory=dict[str, CapacitySeen])

    def of(self, uid: str) -> CapacitySeen:
        return self.seen.setdefault(uid, CapacitySeen())

    def forget(self, uid: str) -> None:
        self.seen.pop(uid, None)


@dataclass(frozen=True)
class Figures:
    """What the window measured (unrounded; core/status/capacity_status.py rounds and reports)."""

    seconds: float
    counters: CapacityCounters  # growth over the window (gauges: the largest pod's now)
    peak_pages_per_s: float
    pods: int

    @property
    def pages_per_s(self) -> float:
        return self.counters.pages / self.seconds if self.seconds > 0 else 0.0

    def per_page(self, total: float) -> float:
        return total / self.counters.pages if self.counters.pages else 0.0

    @property
    def seconds_per_page(self) -> float:
        """Mean seconds a page held a decode slot, over the tiers as served."""
        timed = sum(n for _, n in self.counters.service_pages)
        return sum(s for _, s in self.counters.service_seconds) / timed if timed else 0.0

    def tier_seconds(self) -> dict[int, float]:
        timed = dict(self.counters.service_pages)
        return {t: s / timed[t] for t, s in self.counters.service_seconds if timed.get(t)}

    @property
    def queue_wait_p95(self) -> float:
        return histogram_quantile(self.counters.queue_wait, 0.95)


def figures(seen: CapacitySeen) -> Figures | None:
    """The window's figures from the kept intervals (None before any)."""
    if not seen.intervals:
        return None
    last = seen.intervals[-1]
    total = add(i.counters for i in seen.intervals)
    total = replace(
        total,
        slots=last.counters.slots,
        memory_peak=max(i.counters.memory_peak for i in seen.intervals),
        memory_limit=last.counters.memory_limit,
    )
    peak = max((i.counters.pages / i.seconds for i in seen.intervals if i.seconds > 0), default=0.0)
    seconds = sum(i.seconds for i in seen.intervals)
    return Figures(seconds, total, peak, last.pods)


def significant(value: float, digits: int = 2) -> float:
    """``value`` to ``digits`` significant digits: what status shows, so a figure's noise
    below that never changes status (no write at rest)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    return float(f"{value:.{digits}g}")
