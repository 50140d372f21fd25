"""The canary analysis' metric source: the runtime pods' own ``/metrics`` (no Prometheus).

Each track's Ready pods are read over HTTP at ``<podIP>:8000/metrics`` and their counters are
summed (analysis.TrackCounters; the stable pods' shadow counters the same way,
analysis.shadow.ShadowCounters): API requests (``docparser_requests_total`` on ``/v1/``
routes; probes and ``/metrics`` do not count), those answered 5xx, the total-stage latency
histogram, pages parsed and the pages of each output-quality outcome (truncated, empty,
steered by the repetition guard). A pod that does not answer makes the whole sample unusable
(None): a window is judged on every pod of both tracks or not at all.

The address is the kubelet's ``status.podIP``, so whoever may create pods in the DocParser's
namespace could pick it. Hence: only the pods of the DocParser's own ReplicaSets are handed
here (core/plan/children.readable_pods checks the ownerReferences uids), and every request goes
through the guarded client (fetch.py) with the pods' rule (an IP literal on the runtime's
port, never a metadata or link-local address), bounded in time and size; nothing it returns
reaches status.

One reading of many pods (``read_pods``, also scale to zero's, activity.py) dials them in
parallel (at most ``READ_WORKERS`` at once) under one deadline for the whole reading
(``ReadLimits.deadline_s``, the operator's ``DOCPARSER_OPERATOR_POD_METRICS_DEADLINE_S``):
one after another, 2 s each, forty slow pods held a reading, and the scale-to-zero readings
of every other DocParser queued behind it, for 80 s. A pod not read in time, or that fails,
is counted by reason (``ReadLimits.skipped``: the operator's
``docparser_operator_pod_metrics_skipped_total``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from docparser_operator.analysis import shadow_score as shadow
from docparser_operator.analysis.counters import OUTCOMES, TrackCounters
from docparser_operator.analysis.shadow_score import ShadowCounters
from docparser_operator.api import naming
from docparser_operator.providers.base import ShadowQuery, SourceUnavailable, TrackQuery
from docparser_operator.providers.fetch import Fetcher

Fetch = Callable[[str], str]  # URL -> body; raises on any failure
Skipped = Callable[[str, int], None]  # (reason, pods): a reading left these pods out
SCRAPE_TIMEOUT_S = 2.0  # one pod's exchange (the guarded client's wall-time bound)
READ_DEADLINE_S = 5.0  # one reading of all of a DocParser's pods (the settings' default)
READ_WORKERS = 16  # pods dialled at once
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


_SHADOW_SCALARS = {
    "docparser_shadow_mirrored_pages_total": "mirrored",
    "docparser_shadow_pages_compared_total": "compared",
    "docparser_shadow_structure_disagreements_total": "structure",
}


def parse_shadow(text: str, stable_revision: str, canary_revision: str) -> ShadowCounters:
    """One stable pod's shadow counters for this revision pair (pure). Series of another
    pair (an earlier canary, before the pod re-read its configuration) are left out; the
    drop counters may carry no revision labels (then they count)."""
    scalars = dict.fromkeys(("mirrored", "compared", "structure"), 0.0)
    truncated = {"stable": 0.0, "canary": 0.0}
    cer: dict[float, float] = defaultdict(float)
    dropped: dict[str, float] = dict.fromkeys(shadow.DROP_REASONS, 0.0)
    pair = {"stable_revision": stable_revision, "canary_revision": canary_revision}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, name = sample.labels, sample.name
            if not name.startswith("docparser_shadow_"):
                continue
            if any(labels.get(k, v) != v for k, v in pair.items()):
                continue
            if name in _SHADOW_SCALARS:
                scalars[_SHADOW_SCALARS[name]] += sample.value
            elif name == "docparser_shadow_page_cer_bucket":
                cer[float(labels["le"])] += sample.value
            elif name == "docparser_shadow_dropped_total":
                reason = labels.get("reason", "error")
                dropped[reason] = dropped.get(reason, 0.0) + sample.value
            elif name == "docparser_shadow_flagged_pages_total" and (
                labels.get("flag") == "truncated" and labels.get("side") in truncated
            ):
                truncated[labels["side"]] += sample.value
    return ShadowCounters(
        **scalars,
        cer=tuple(sorted(cer.items())),
        stable_truncated=truncated["stable"],
        canary_truncated=truncated["canary"],
        dropped=tuple(sorted(dropped.items())),
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


def ready_address(pod: Mapping[str, Any]) -> str | None:
    """``<podIP>:8000`` of a Ready pod that is not going away, else None."""
    if not _ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return f"{pod['status']['podIP']}:{naming.HTTP_PORT}"


def _uncounted(reason: str, pods: int) -> None:
    """No metric to count skips in (tests, the CLI)."""


@dataclass(frozen=True)
class ReadLimits:
    """How one reading of a DocParser's pods is bounded, and where its skips are counted."""

    deadline_s: float = READ_DEADLINE_S
    workers: int = READ_WORKERS
    skipped: Skipped = field(default=_uncounted)


T = TypeVar("T")


def read_pods(
    pods: Iterable[Mapping[str, Any]],
    fetch: Fetch,
    parse: Callable[[str], T],
    limits: ReadLimits,
) -> list[tuple[str, T | None]]:
    """(pod name, parsed ``/metrics``) of every Ready pod, None for one not read: it failed
    or was not parsed (``error``), or had not answered when the reading's deadline came
    (``deadline``; such a request still ends within its own ``SCRAPE_TIMEOUT_S``, on a
    thread nobody waits for). Returns within ``limits.deadline_s`` however the pods answer."""
    targets: list[tuple[str, str]] = []
    for pod in pods:
        address = ready_address(pod)
        if address is not None:
            name = str((pod.get("metadata") or {}).get("name") or address)
            targets.append((name, f"http://{address}/metrics"))
    if not targets:
        return []

    def one(url: str) -> T:
        return parse(fetch(url))

    pool = ThreadPoolExecutor(min(limits.workers, len(targets)), "pod-metrics")
    try:
        futures = [pool.submit(one, url) for _, url in targets]
        done, _late = wait(futures, timeout=limits.deadline_s)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    found: list[tuple[str, T | None]] = []
    skips = {"deadline": 0, "error": 0}
    for (name, _url), future in zip(targets, futures, strict=True):
        if future not in done:
            skips["deadline"] += 1
            found.append((name, None))
        elif future.exception() is not None:  # unreachable, timed out, not our exposition
            skips["error"] += 1
            found.append((name, None))
        else:
            found.append((name, future.result()))
    for reason, count in skips.items():
        if count:
            limits.skipped(reason, count)
    return found


def _all(found: list[tuple[str, T | None]]) -> list[T] | None:
    """Every pod's reading, or None when one is missing (a window is judged on every pod)."""
    values = [value for _, value in found]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def scrape_track(
    pods: Iterable[Mapping[str, Any]], fetch: Fetch, limits: ReadLimits | None = None
) -> TrackCounters | None:
    """The summed counters of these pods' Ready ones; None when one cannot be read."""
    counters = _all(read_pods(pods, fetch, parse_counters, limits or ReadLimits()))
    return None if counters is None else add(counters)


def scrape_shadow(
    query: ShadowQuery, fetch: Fetch, limits: ReadLimits | None = None
) -> ShadowCounters | None:
    """The stable pods' shadow counters, summed; None when one cannot be read."""

    def parse(text: str) -> ShadowCounters:
        return parse_shadow(text, query.stable_revision, query.canary_revision)

    counters = _all(read_pods(query.pods, fetch, parse, limits or ReadLimits()))
    return None if counters is None else shadow.add(counters)


@dataclass(frozen=True)
class PodMetrics:
    """The ``MetricSource`` of the pods' own ``/metrics``: counters since each pod started."""

    fetch: Fetch
    limits: ReadLimits = field(default_factory=ReadLimits)

    @property
    def cumulative(self) -> bool:
        return True

    def refusal(self) -> str | None:
        return None  # the operator builds these URLs; the client's pod rule guards each one

    def measure(self, query: TrackQuery) -> TrackCounters:
        counters = scrape_track(query.pods, self.fetch, self.limits)
        if counters is None:  # most often a NetworkPolicy keeps the operator out
            raise SourceUnavailable(UNREADABLE)
        return counters

    def measure_shadow(self, query: ShadowQuery) -> ShadowCounters:
        counters = scrape_shadow(query, self.fetch, self.limits)
        if counters is None:
            raise SourceUnavailable(UNREADABLE)
        return counters
