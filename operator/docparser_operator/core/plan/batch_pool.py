"""The batch pool's size and ``status.batch`` (pure): readings in, a size and a section out.

Where the backlog comes from, and why: every runtime pod with the DocParser's Redis exports
the batch backlog it reads there (``docparser_batch_*``, runtime batches/backlog.py), and the
operator reads the stable pods' and the front's ``/metrics`` through the bounded, parallel,
owned-pod reader it uses for scale to zero (analysis/batch_reading.py). The stable pods (at
``replicas.min: 0``, the front) are there whatever the pool's size, so the backlog is read
while the pool is at zero. The alternative, an HPA on an external metric, needs a metrics
adapter and Prometheus in every cluster, and an HPA cannot scale to or from zero without the
alpha HPAScaleToZero gate; the operator already reads these pods every few seconds.

The size: ``ceil(pagesQueued / pagesPerReplica)`` within ``replicas.min..max``, and at least
one pod while a batch is unfinished (a batch must be validated and finalized by some worker:
with ``backfill: false`` no stable pod runs one). Up at once, down only when every reading
for ``cooldown_s`` asked for less (then to the largest size those readings asked for): a
backlog that dips between two lines does not stop pods that take minutes to load. A pass
without a reading keeps the size the pool has.

The figures of ``status.batch`` are rounded to two significant digits (pages per minute over
the last ``RATE_WINDOW_S``), so a batch in progress writes status when a figure moves by a
step, and a DocParser at rest (no batch, the pool at its minimum) writes nothing.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from docparser_operator.analysis.batch_reading import BatchReading
from docparser_operator.api import naming
from docparser_operator.api.batch_spec import BatchPoolStatus, BatchSpec
from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.core.plan.children import Observed, owned_by

RATE_WINDOW_S = 300.0  # pages per minute over the last five minutes of readings
RATE_MIN_SPAN_S = 20.0  # readings closer than this give no rate yet
COOLDOWN_S = 120.0  # the default wait before the pool shrinks


@dataclass
class PoolSeen:
    """What the operator read of one DocParser's batches lately (one process's memory: a
    restart begins a new cooldown, never ends one early)."""

    read_at: float | None = None
    reading: BatchReading | None = None
    error: str = ""
    # (time, size asked for) of the readings since the size they ask for fell below the pool's
    lower: list[tuple[float, int]] = field(default_factory=list[tuple[float, int]])
    samples: deque[tuple[float, float]] = field(default_factory=deque[tuple[float, float]])

    def due(self, now: float, poll_s: float) -> bool:
        return self.read_at is None or now - self.read_at >= poll_s

    def record(self, reading: BatchReading, now: float) -> None:
        self.read_at, self.reading, self.error = now, reading, ""
        if self.samples and reading.pages_total < self.samples[-1][1]:
            self.samples.clear()  # the running total went back (a Redis that lost its data)
        self.samples.append((now, reading.pages_total))
        while self.samples and now - self.samples[0][0] > RATE_WINDOW_S:
            self.samples.popleft()

    def failed(self, error: str, now: float) -> None:
        self.read_at, self.reading, self.error = now, None, error

    def pages_per_minute(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, p0), (t1, p1) = self.samples[0], self.samples[-1]
        return None if t1 - t0 < RATE_MIN_SPAN_S else (p1 - p0) * 60.0 / (t1 - t0)


@dataclass
class PoolMemory:
    """Every DocParser's ``PoolSeen`` (kept in the operator's state)."""

    seen: dict[str, PoolSeen] = field(default_factory=dict[str, PoolSeen])

    def of(self, uid: str) -> PoolSeen:
        return self.seen.setdefault(uid, PoolSeen())

    def forget(self, uid: str) -> None:
        self.seen.pop(uid, None)


@dataclass(frozen=True)
class PoolStep:
    """The pool's decision of one pass."""

    replicas: int  # the pool Deployment's size after this pass
    reason: str  # why, in words (Events)
    status: BatchPoolStatus  # status.batch
    next_read_s: float  # a pass is due then (the next reading)
    problem: str = ""  # why the backlog could not be read (the size stays)


def need(spec: BatchSpec, reading: BatchReading) -> int:
    """The size the backlog asks for, within the pool's bounds."""
    pods = math.ceil(reading.pages_queued / spec.pages_per_replica)
    if reading.in_progress > 0:
        pods = max(pods, 1)
    return max(spec.replicas.min, min(spec.replicas.max, pods))


def two_digits(value: float) -> float:
    """``value`` to two significant digits (12345 -> 12000, 0.1234 -> 0.12)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    digits = 1 - math.floor(math.log10(abs(value)))
    return round(value, digits)


def decide_pool(
    spec: BatchSpec,
    seen: PoolSeen,
    live: int | None,
    *,
    now: float,
    cooldown_s: float = COOLDOWN_S,
) -> tuple[int, str]:
    """(size, reason). ``live``: the pool Deployment's size now (None: not created yet)."""
    have = spec.replicas.min if live is None else live
    bounded = max(spec.replicas.min, min(spec.replicas.max, have))
    reading = seen.reading
    if reading is None:
        seen.lower.clear()
        return bounded, "the backlog is unreadable: the pool keeps its size"
    want = need(spec, reading)
    backlog = f"{reading.pages_queued} page(s) queued in {reading.in_progress} batch(es)"
    if want >= bounded:
        seen.lower.clear()
        return want, f"{backlog}: {want} pod(s)"
    seen.lower.append((now, want))
    if now - seen.lower[0][0] < cooldown_s:
        return bounded, f"{backlog}: {bounded} pod(s) until {cooldown_s:.0f}s of less"
    size = max(w for _, w in seen.lower)
    seen.lower.clear()
    return size, f"{backlog} for {cooldown_s:.0f}s: {size} pod(s)"


def pool_status(
    size: int,
    ready: int,
    seen: PoolSeen,
    previous: BatchPoolStatus | None,
    *,
    scaled_at: str | None,
) -> BatchPoolStatus:
    """``status.batch``: the figures of the last reading (those in status while none could
    be read), rounded; ``scaled_at``: this pass changed the pool's size then."""
    before = previous if previous is not None else BatchPoolStatus()
    reading = seen.reading
    last = scaled_at or before.last_scale_time or None
    if reading is None:
        return BatchPoolStatus(
            replicas=size,
            ready_replicas=ready,
            batches_in_progress=before.batches_in_progress,
            pages_queued=before.pages_queued,
            pages_done=before.pages_done,
            pages_per_minute=before.pages_per_minute,
            eta_minutes=before.eta_minutes,
            last_scale_time=last,
        )
    rate = seen.pages_per_minute() if reading.in_progress else 0.0
    eta = None
    if rate and reading.pages_queued:
        eta = int(two_digits(math.ceil(reading.pages_queued / rate)))
    return BatchPoolStatus(
        replicas=size,
        ready_replicas=ready,
        batches_in_progress=reading.in_progress,
        pages_queued=int(two_digits(reading.pages_queued)),
        pages_done=int(two_digits(reading.pages_done)),
        pages_per_minute=two_digits(rate or 0.0),
        eta_minutes=eta,
        last_scale_time=last,
    )


def kept_size(
    spec: BatchSpec | None, observed: Observed, name: str, uid: str, decided: int | None
) -> int:
    """The pool's size a pass renders: ``decided`` by this pass's reading, else the live
    pool's within the bounds (a pass without the pool's reading never resizes it), else
    ``replicas.min``; 0 without ``spec.batch``."""
    if spec is None:
        return 0
    if decided is not None:
        return decided
    live = observed.children.get(("Deployment", naming.batch_pool(name)))
    if live is None or not owned_by(live, uid):
        return spec.replicas.min
    have = int((live.get("spec") or {}).get("replicas") or 0)
    return max(spec.replicas.min, min(spec.replicas.max, have))


def batch_events(old: DocParserStatus, new: DocParserStatus) -> list[tuple[str, str]]:
    """(reason, message) of the Event a pass deserves: the pool's size changed (from status:
    a transition only, so a pass at rest posts nothing)."""
    before, after = old.batch, new.batch
    if before is None or after is None or before.replicas == after.replicas:
        return []
    queued, batches = after.pages_queued or 0, after.batches_in_progress or 0
    message = (
        f"batch pool scaled from {before.replicas or 0} to {after.replicas or 0} "
        f"pod(s): {queued} page(s) queued in {batches} batch(es)"
    )
    return [("BatchPoolScaled", message)]
