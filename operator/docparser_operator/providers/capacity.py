"""``status.capacity``'s sources: the runtime pods' own ``/metrics``, or PromQL.

The pods are read as scale to zero and the canary analysis read them (pods.read_pods: the
DocParser's own ReplicaSets' Ready pods only, all at once under one deadline, through the
guarded client with the pods' rule). A pod that does not answer makes the reading unusable
(core/status/capacity_window.py then starts a new interval: a window is measured on every
pod or not at all).

With ``spec.capacity.prometheus`` one query per measure gives the whole window (Prometheus
keeps the history): ``increase()`` over the window for the counters, the busiest minute as
``max_over_time`` of the one-minute rate every 15 s, summed over every revision of the DocParser
(``namespace`` and ``revision`` labels as for the analysis). The URL is the author's, so it
is fetched only under the operator's allow-list (``DOCPARSER_OPERATOR_PROMETHEUS_URLS``), and
a failure is reported in reason codes only (prometheus.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docparser_operator.analysis.capacity_reading import CapacityCounters, parse
from docparser_operator.api import naming
from docparser_operator.api.analysis_spec import PrometheusSource
from docparser_operator.providers import prometheus
from docparser_operator.providers.base import SourceUnavailable
from docparser_operator.providers.fetch import Fetcher, Resolve, system_resolve
from docparser_operator.providers.pods import UNREADABLE, Fetch, ReadLimits, read_pods
from docparser_operator.providers.pods import guarded as guarded_fetch
from docparser_operator.providers.urls import AllowList

PROMETHEUS_SETTING = "DOCPARSER_OPERATOR_PROMETHEUS_URLS"
WHERE = "spec.capacity.prometheus.url"


def selector(source: PrometheusSource, namespace: str, revisions: Sequence[str], **kw: str) -> str:
    """The matchers of every series of these revisions (DNS labels and hex: no quoting beyond
    PromQL's string syntax, which json.dumps gives)."""
    parts = [
        f"{source.namespace_label}={json.dumps(namespace)}",
        f"{source.revision_label}=~{json.dumps('|'.join(sorted(revisions)))}",
        *(f"{k}={json.dumps(v)}" for k, v in kw.items()),
    ]
    return "{" + ",".join(parts) + "}"


def queries(
    source: PrometheusSource, namespace: str, revisions: Sequence[str], seconds: int
) -> dict[str, str]:
    """name -> PromQL for the window (pure)."""

    def sel(**kw: str) -> str:
        return selector(source, namespace, revisions, **kw)

    def increase(metric: str, by: str = "", **kw: str) -> str:
        group = f" by ({by})" if by else ""
        return f"sum{group}(increase({metric}{sel(**kw)}[{seconds}s]))"

    return {
        "pages": increase("docparser_pages_total"),
        "vision_tokens": increase("docparser_vision_tokens_total"),
        "output_tokens": increase("docparser_output_tokens_total"),
        "auto_pages": increase("docparser_tier_pages_total", "tier", choice="auto"),
        "service_seconds": increase("docparser_page_service_seconds_sum", "tier"),
        "service_pages": increase("docparser_page_service_seconds_count", "tier"),
        "queue_wait": increase("docparser_stage_duration_seconds_bucket", "le", stage="queue"),
        "peak": f"max_over_time(sum(rate(docparser_pages_total{sel()}[1m]))[{seconds}s:15s])",
        "slots": f"max(docparser_decode_slots{sel()})",
        "pods": f"count(docparser_decode_slots{sel()})",
        "memory_peak": f"max(max_over_time(docparser_memory_bytes{sel(kind='peak')}[{seconds}s]))",
        "memory_limit": f"max(docparser_memory_bytes{sel(kind='limit')})",
    }


@dataclass(frozen=True)
class Window:
    """A window's counters as Prometheus summed them (``pods``: series at its end)."""

    counters: CapacityCounters
    peak_pages_per_s: float
    pods: int


def window(
    source: PrometheusSource,
    namespace: str,
    revisions: Sequence[str],
    seconds: int,
    fetcher: Fetcher,
) -> Window:
    """The window from PromQL; raises SourceUnavailable (reason codes only)."""
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for name, promql in queries(source, namespace, revisions, max(seconds, 1)).items():
            rows[name] = prometheus._instant(source, promql, fetcher)
    except prometheus.PrometheusUnavailable as exc:
        message = str(exc).replace("spec.canary.analysis.prometheus.url", WHERE)
        raise SourceUnavailable(f"cannot query Prometheus: {message}") from None

    def total(name: str) -> float:
        return sum(v for _, v in rows[name])

    def by(name: str, label: str) -> tuple[tuple[int, float], ...]:
        return tuple(
            sorted((int(m[label]), v) for m, v in rows[name] if m.get(label, "").isdigit())
        )

    counters = CapacityCounters(
        pages=total("pages"),
        vision_tokens=total("vision_tokens"),
        output_tokens=total("output_tokens"),
        auto_pages=by("auto_pages", "tier"),
        service_seconds=by("service_seconds", "tier"),
        service_pages=by("service_pages", "tier"),
        queue_wait=tuple(sorted((float(m["le"]), v) for m, v in rows["queue_wait"] if "le" in m)),
        slots=total("slots"),
        memory_peak=total("memory_peak"),
        memory_limit=total("memory_limit"),
    )
    return Window(counters, total("peak"), round(total("pods")))


def _unread(reason: str, pods: int) -> None:
    """No metric to count skips in (tests, the CLI)."""


@dataclass(frozen=True)
class CapacitySource:
    """What ``status.capacity`` may read: the pods (guarded, bounded) and allowed PromQL."""

    fetch: Fetch
    to_prometheus: Fetcher
    limits: ReadLimits = field(default_factory=ReadLimits)

    def read_pods(self, pods: Iterable[Mapping[str, Any]]) -> dict[str, CapacityCounters]:
        """Each Ready pod's capacity series; raises SourceUnavailable when one is not read."""
        found: dict[str, CapacityCounters] = {}
        for name, reading in read_pods(pods, self.fetch, parse, self.limits):
            if reading is None:
                raise SourceUnavailable(UNREADABLE)
            found[name] = reading
        return found

    def refusal(self, source: PrometheusSource, namespace: str) -> str | None:
        """Why the spec's Prometheus may not be read (its field and the rule), or None."""
        reason = self.to_prometheus.scoped(namespace).refusal(source.url)
        return None if reason is None else f"{WHERE}: {reason}"

    def query(
        self, source: PrometheusSource, namespace: str, revisions: Sequence[str], seconds: int
    ) -> Window:
        return window(source, namespace, revisions, seconds, self.to_prometheus.scoped(namespace))


def guarded(
    prometheus_urls: Sequence[str],
    resolve: Resolve = system_resolve,
    limits: ReadLimits | None = None,
) -> CapacitySource:
    """The production source: pods on their IP and the runtime's port only, PromQL only under
    ``prometheus_urls`` (as the analysis' sources: sources.guarded)."""
    to_pods = Fetcher(AllowList.pods(naming.HTTP_PORT), resolve)
    to_prometheus = Fetcher(AllowList.of(prometheus_urls, PROMETHEUS_SETTING), resolve)
    return CapacitySource(
        guarded_fetch(to_pods), to_prometheus, limits or ReadLimits(skipped=_unread)
    )
