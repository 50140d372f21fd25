"""What ``status.capacity`` reads of one runtime pod's ``/metrics`` (pure: text in, numbers
out), and the arithmetic of readings: sums over pods, differences over time.

Why its own reading, not the canary analysis' counters: capacity asks other questions (how
many pages arrive, at which tiers, how long each holds a decode slot, how much memory the pod
needs), so it keeps other series. The names are the contract with the runtime
(``docparser_pages_total``, ``docparser_vision_tokens_total``, ``docparser_output_tokens_total``,
``docparser_tier_pages_total{tier,choice}``, ``docparser_page_service_seconds{tier}``,
``docparser_stage_duration_seconds{stage="queue"}``, ``docparser_decode_slots``,
``docparser_memory_bytes{kind}``). Counters are per pod since it started; gauges are read as
they are now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

_SCALARS = {
    "docparser_pages_total": "pages",
    "docparser_vision_tokens_total": "vision_tokens",
    "docparser_output_tokens_total": "output_tokens",
}


def _frozen(values: Mapping[int, float]) -> tuple[tuple[int, float], ...]:
    return tuple(sorted(values.items()))


@dataclass(frozen=True)
class CapacityCounters:
    """One pod's (or several pods' summed) capacity series. Counters: ``pages`` ..
    ``queue_wait`` (cumulative buckets of the request queue wait); gauges: ``slots``,
    ``memory_peak``, ``memory_limit`` (the largest pod's when summed)."""

    pages: float = 0.0
    vision_tokens: float = 0.0
    output_tokens: float = 0.0
    auto_pages: tuple[tuple[int, float], ...] = ()  # tier -> pages `auto` chose it for
    service_seconds: tuple[tuple[int, float], ...] = ()  # tier -> seconds pages held a slot
    service_pages: tuple[tuple[int, float], ...] = ()  # tier -> pages timed
    queue_wait: tuple[tuple[float, float], ...] = ()  # (le, cumulative requests)
    slots: float = 0.0
    memory_peak: float = 0.0
    memory_limit: float = 0.0

    def minus(self, earlier: CapacityCounters) -> CapacityCounters | None:
        """The counters' growth since ``earlier`` (the gauges as now); None when a counter went
        down (the pod restarted: its interval cannot be measured)."""
        out_pages = self.pages - earlier.pages
        scalars = (
            out_pages,
            self.vision_tokens - earlier.vision_tokens,
            self.output_tokens - earlier.output_tokens,
        )
        maps = []
        for now, then in (
            (self.auto_pages, earlier.auto_pages),
            (self.service_seconds, earlier.service_seconds),
            (self.service_pages, earlier.service_pages),
        ):
            before = dict(then)
            maps.append({k: v - before.get(k, 0.0) for k, v in now})
        before_q = dict(earlier.queue_wait)
        queue = {le: n - before_q.get(le, 0.0) for le, n in self.queue_wait}
        values = [*scalars, *queue.values()] + [v for m in maps for v in m.values()]
        if any(v < 0 for v in values):
            return None
        return CapacityCounters(
            scalars[0],
            scalars[1],
            scalars[2],
            auto_pages=_frozen(maps[0]),
            service_seconds=_frozen(maps[1]),
            service_pages=_frozen(maps[2]),
            queue_wait=tuple(sorted(queue.items())),
            slots=self.slots,
            memory_peak=self.memory_peak,
            memory_limit=self.memory_limit,
        )


def parse(text: str) -> CapacityCounters:
    """One pod's capacity series from its exposition text; raises ValueError on a malformed
    one."""
    scalars: dict[str, float] = defaultdict(float)
    auto: dict[int, float] = defaultdict(float)
    seconds: dict[int, float] = defaultdict(float)
    timed: dict[int, float] = defaultdict(float)
    queue: dict[float, float] = defaultdict(float)
    gauges: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if name in _SCALARS:
                scalars[_SCALARS[name]] += sample.value
            elif name == "docparser_tier_pages_total" and labels.get("choice") == "auto":
                auto[int(labels["tier"])] += sample.value
            elif name == "docparser_page_service_seconds_sum":
                seconds[int(labels["tier"])] += sample.value
            elif name == "docparser_page_service_seconds_count":
                timed[int(labels["tier"])] += sample.value
            elif (
                name == "docparser_stage_duration_seconds_bucket" and labels.get("stage") == "queue"
            ):
                queue[float(labels["le"])] += sample.value
            elif name == "docparser_decode_slots":
                gauges["slots"] = max(gauges["slots"], sample.value)
            elif name == "docparser_memory_bytes" and labels.get("kind") in ("peak", "limit"):
                key = f"memory_{labels['kind']}"
                gauges[key] = max(gauges[key], sample.value)
    return CapacityCounters(
        pages=scalars["pages"],
        vision_tokens=scalars["vision_tokens"],
        output_tokens=scalars["output_tokens"],
        auto_pages=_frozen(auto),
        service_seconds=_frozen(seconds),
        service_pages=_frozen(timed),
        queue_wait=tuple(sorted(queue.items())),
        slots=gauges["slots"],
        memory_peak=gauges["memory_peak"],
        memory_limit=gauges["memory_limit"],
    )


def add(readings: Iterable[CapacityCounters]) -> CapacityCounters:
    """Counters summed over pods (or intervals); each gauge the largest."""
    scalars = [0.0, 0.0, 0.0]
    maps: list[dict[int, float]] = [defaultdict(float) for _ in range(3)]
    queue: dict[float, float] = defaultdict(float)
    gauges = [0.0, 0.0, 0.0]
    for r in readings:
        for i, v in enumerate((r.pages, r.vision_tokens, r.output_tokens)):
            scalars[i] += v
        for m, pairs in zip(maps, (r.auto_pages, r.service_seconds, r.service_pages), strict=True):
            for k, v in pairs:
                m[k] += v
        for le, n in r.queue_wait:
            queue[le] += n
        for i, v in enumerate((r.slots, r.memory_peak, r.memory_limit)):
            gauges[i] = max(gauges[i], v)
    return CapacityCounters(
        scalars[0],
        scalars[1],
        scalars[2],
        auto_pages=_frozen(maps[0]),
        service_seconds=_frozen(maps[1]),
        service_pages=_frozen(maps[2]),
        queue_wait=tuple(sorted(queue.items())),
        slots=gauges[0],
        memory_peak=gauges[1],
        memory_limit=gauges[2],
    )
