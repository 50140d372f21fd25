"""Prometheus metrics of the operator itself: reconcile time and errors per DocParser, API
requests by verb, each DocParser's rollout state, so an alert can fire on a rollout that
is stuck or a DocParser that is not Ready, and the pods whose /metrics a reading left out.

WHY its own registry, held in the operator's state (kopf's memo): two operator runs in one
process (tests) never share counters, and nothing is a mutable module global.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from docparser_operator.api.status_models import DocParserStatus
from docparser_operator.kube.client import KubeClient

PREFIX = "docparser_operator"
SKIP_REASONS = ("not_owned", "deadline", "error")  # docparser_operator_pod_metrics_skipped_total


class _ApiRequests(Collector):
    """The client's own request counts, read at scrape time (one source of truth)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            f"{PREFIX}_api_requests", "Kubernetes API requests sent by reconciles", labels=["verb"]
        )
        for verb, count in sorted(self.client.counts.items()):
            family.add_metric([verb], count)
        yield family


def _condition(status: DocParserStatus, ctype: str) -> bool:
    return any(c.type == ctype and c.status == "True" for c in status.conditions)


@dataclass
class OperatorMetrics:
    """Created before leader election, so a standby replica serves /metrics too (its
    reconcile series are simply absent) and a scrape never finds it down."""

    registry: CollectorRegistry
    reconcile_seconds: Histogram
    reconcile_errors: Counter
    ready: Gauge
    progressing: Gauge
    degraded: Gauge
    canary_weight: Gauge
    pod_metrics_skipped: Counter
    server: Any = None  # the /metrics HTTP server while serving
    client: KubeClient | None = None

    @classmethod
    def create(cls) -> OperatorMetrics:
        registry = CollectorRegistry()
        per_dp = ["namespace", "name"]
        metrics = cls(
            registry=registry,
            reconcile_seconds=Histogram(
                f"{PREFIX}_reconcile_seconds",
                "Time of one reconcile pass",
                per_dp,
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                registry=registry,
            ),
            reconcile_errors=Counter(
                f"{PREFIX}_reconcile_errors",
                "Reconcile passes that failed (API errors), by HTTP status",
                [*per_dp, "status"],
                registry=registry,
            ),
            ready=Gauge(
                f"{PREFIX}_docparser_ready", "1 when Ready=True", per_dp, registry=registry
            ),
            progressing=Gauge(
                f"{PREFIX}_docparser_progressing",
                "1 while a spec-driven rollout is under way (alert when it stays 1)",
                per_dp,
                registry=registry,
            ),
            degraded=Gauge(
                f"{PREFIX}_docparser_degraded", "1 when Degraded=True", per_dp, registry=registry
            ),
            canary_weight=Gauge(
                f"{PREFIX}_canary_weight_percent",
                "Share of traffic the canary carries now (status.canary.weight)",
                per_dp,
                registry=registry,
            ),
            pod_metrics_skipped=Counter(
                f"{PREFIX}_pod_metrics_skipped",
                "Pods whose /metrics a reading left out: not_owned (labelled as a DocParser's "
                "but not made by its ReplicaSets: never dialled), deadline (not read within the "
                "reading's deadline), error (unreachable, refused, not an exposition)",
                ["reason"],
                registry=registry,
            ),
        )
        for reason in SKIP_REASONS:  # every reason exported from the start, at 0
            metrics.pod_metrics_skipped.labels(reason)
        return metrics

    def attach(self, client: KubeClient) -> None:
        """Count this client's API requests (once: a restarted kopf run reuses the client)."""
        if self.client is None:
            self.client = client
            self.registry.register(_ApiRequests(client))

    def reconciled(
        self, namespace: str, name: str, status: DocParserStatus, seconds: float
    ) -> None:
        self.reconcile_seconds.labels(namespace, name).observe(seconds)
        self.ready.labels(namespace, name).set(int(_condition(status, "Ready")))
        self.progressing.labels(namespace, name).set(int(_condition(status, "Progressing")))
        self.degraded.labels(namespace, name).set(int(_condition(status, "Degraded")))
        weight = (status.canary.weight if status.canary is not None else None) or 0
        self.canary_weight.labels(namespace, name).set(weight)

    def skipped_pods(self, reason: str, pods: int) -> None:
        """A reading of pods' /metrics left ``pods`` out, for ``reason`` (providers/pods.py's
        ``Skipped``)."""
        self.pod_metrics_skipped.labels(reason).inc(pods)

    def failed(self, namespace: str, name: str, status_code: int, seconds: float) -> None:
        self.reconcile_seconds.labels(namespace, name).observe(seconds)
        self.reconcile_errors.labels(namespace, name, str(status_code)).inc()

    @property
    def serving(self) -> bool:
        return self.server is not None

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        if self.server is None:
            self.server, _thread = start_http_server(port, address, registry=self.registry)

    def close(self) -> None:
        """Stop serving (an operator run that ends; the process may start another)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
