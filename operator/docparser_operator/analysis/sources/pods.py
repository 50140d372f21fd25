"""The canary analysis' metric source: the runtime pods' own ``/metrics`` (no Prometheus).

Each track's Ready pods are read over HTTP at ``<podIP>:8000/metrics`` and their counters are
summed (analysis.TrackCounters): API requests (``docparser_requests_total`` on ``/v1/``
routes; probes and ``/metrics`` do not count), those answered 5xx, the total-stage latency
histogram, pages parsed and the pages of each output-quality outcome (truncated, empty,
steered by the repetition guard). A pod that does not answer makes the whole sample unusable
(None): a window is judged on every pod of both tracks or not at all.

The address is the kubelet's ``status.podIP`` of a pod labelled with the revision, so whoever
may create pods in the DocParser's namespace picks it: the request goes through the guarded
client (fetch.py) with the pods' rule (an IP literal on the runtime's port, never a metadata
or link-local address), is bounded in time and size, and nothing it returns reaches status.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from docparser_operator.analysis.counters import OUTCOMES, TrackCounters
from docparser_operator.analysis.sources.base import SourceUnavailable, TrackQuery
from docparser_operator.analysis.sources.fetch import Fetcher
from docparser_operator.api import naming

Fetch = Callable[[str], str]  # URL -> body; raises on any failure
SCRAPE_TIMEOUT_S = 2.0
SCRAPE_MAX_BYTES = 4 * 1024 * 1024  # a runtime's exposition is tens of KiB
UNREADABLE = (
    f"cannot read every Ready pod's /metrics (port {naming.HTTP_PORT}); with "
    "traffic.allowFrom, admit the operator's namespace"
)


_OUTCOME_SERIES = {f"docparser_pages_{name}_total": name for name in OUTCOMES}


def parse_counters(text: str) -> TrackCounters:
    """One pod's counters from its exposition text (pure)."""
    requests = errors = pages = 0.0
    buckets: dict[float, float] = defaultdict(float)
    outcomes: dict[str, float] = dict.fromkeys(OUTCOMES, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "docparser_requests_total" and labels.get("route", "").startswith(
                "/v1/"
            ):
                requests += sample.value
                if labels.get("status", "").startswith("5"):
                    errors += sample.value
            elif (
                sample.name == "docparser_stage_duration_seconds_bucket"
                and labels.get("stage") == "total"
            ):
                buckets[float(labels["le"])] += sample.value
            elif sample.name == "docparser_pages_total":
                pages += sample.value
            elif sample.name in _OUTCOME_SERIES:
                outcomes[_OUTCOME_SERIES[sample.name]] += sample.value
    return TrackCounters(
        requests, errors, tuple(sorted(buckets.items())), pages, tuple(outcomes.items())
    )


def add(counters: Iterable[TrackCounters]) -> TrackCounters:
    requests = errors = pages = 0.0
    buckets: dict[float, float] = defaultdict(float)
    outcomes: dict[str, float] = dict.fromkeys(OUTCOMES, 0.0)
    for c in counters:
        requests += c.requests
        errors += c.errors
        pages += c.pages
        for le, count in c.latency:
            buckets[le] += count
        for name, n in c.outcomes:
            outcomes[name] = outcomes.get(name, 0.0) + n
    return TrackCounters(
        requests, errors, tuple(sorted(buckets.items())), pages, tuple(outcomes.items())
    )


def guarded(fetcher: Fetcher) -> Fetch:
    """A scrape through the guarded client: 2xx only, bounded, UTF-8."""

    def fetch(url: str) -> str:
        return (
            fetcher.get(url, timeout_s=SCRAPE_TIMEOUT_S, max_bytes=SCRAPE_MAX_BYTES).ok().decode()
        )

    return fetch


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("podIP")) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def scrape_track(pods: Iterable[Mapping[str, Any]], fetch: Fetch) -> TrackCounters | None:
    """The summed counters of these pods' Ready ones; None when one cannot be read."""
    counters = []
    for pod in pods:
        if not _ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        url = f"http://{pod['status']['podIP']}:{naming.HTTP_PORT}/metrics"
        try:
            counters.append(parse_counters(fetch(url)))
        except Exception:  # unreachable, timed out, not our exposition: no sample this time
            return None
    return add(counters)


@dataclass(frozen=True)
class PodMetrics:
    """The ``MetricSource`` of the pods' own ``/metrics``: counters since each pod started."""

    fetch: Fetch

    @property
    def cumulative(self) -> bool:
        return True

    def refusal(self) -> str | None:
        return None  # the operator builds these URLs; the client's pod rule guards each one

    def measure(self, query: TrackQuery) -> TrackCounters:
        counters = scrape_track(query.pods, self.fetch)
        if counters is None:  # most often a NetworkPolicy keeps the operator out
            raise SourceUnavailable(UNREADABLE)
        return counters
