"""The canary analysis' metric source: the runtime pods' own ``/metrics`` (no Prometheus).

Each track's Ready pods are read over HTTP at ``<podIP>:8000/metrics`` and their counters are
summed (analysis.TrackCounters): API requests (``docparser_requests_total`` on ``/v1/``
routes; probes and ``/metrics`` do not count), those answered 5xx, and the total-stage latency
histogram. A pod that does not answer makes the whole sample unusable (None): a window is
judged on every pod of both tracks or not at all.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from docparser_operator import naming
from docparser_operator.analysis import TrackCounters

Fetch = Callable[[str], str]  # URL -> body; raises on any failure
SCRAPE_TIMEOUT_S = 2.0


def parse_counters(text: str) -> TrackCounters:
    """One pod's counters from its exposition text (pure)."""
    requests = errors = 0.0
    buckets: dict[float, float] = defaultdict(float)
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
    return TrackCounters(requests, errors, tuple(sorted(buckets.items())))


def add(counters: Iterable[TrackCounters]) -> TrackCounters:
    requests = errors = 0.0
    buckets: dict[float, float] = defaultdict(float)
    for c in counters:
        requests += c.requests
        errors += c.errors
        for le, count in c.latency:
            buckets[le] += count
    return TrackCounters(requests, errors, tuple(sorted(buckets.items())))


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
        body: bytes = reply.read()
    return body.decode()


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("podIP")) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def scrape_track(
    pods: Iterable[Mapping[str, Any]], fetch: Fetch = _http_get
) -> TrackCounters | None:
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
