"""The operator's own /metrics: reconcile time per DocParser, API requests by verb, and the
state an alert needs (Ready, Progressing, Degraded, canary weight)."""

from __future__ import annotations

import socket
from typing import Any

import httpx
from dp_helpers import CANARY_WEIGHTS, create, dep_name, docparser
from kube_cluster import Cluster, simulate_pods, wait_for
from operator_runner import running_operator
from prometheus_client.parser import text_string_to_metric_families


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict, metric: str, **labels: str) -> float | None:
    return samples.get((metric, tuple(sorted(labels.items()))))


def test_metrics_follow_a_docparser(cluster: Cluster, monkeypatch: Any) -> None:
    port = _free_port()
    monkeypatch.setenv("DOCPARSER_OPERATOR_METRICS_PORT", str(port))
    ns = cluster.namespace
    with running_operator(cluster):
        create(cluster, docparser("inv", canary={"weights": CANARY_WEIGHTS, "weight": 0}))
        wait_for(
            "a reconcile counted",
            lambda: (
                (
                    _value(
                        _samples(port),
                        "docparser_operator_reconcile_seconds_count",
                        namespace=ns,
                        name="inv",
                    )
                    or 0
                )
                > 0
            ),
        )
        samples = _samples(port)
        assert _value(samples, "docparser_operator_docparser_ready", namespace=ns, name="inv") == 0
        # it reads through watches (no GET needed) and writes with server-side apply (PATCH)
        assert (_value(samples, "docparser_operator_api_requests_total", verb="PATCH") or 0) > 0
        wait_for("the stable deployment", lambda: dep_name(cluster, "inv"))
        simulate_pods(cluster, dep_name(cluster, "inv"), "ready")
        wait_for(
            "ready in /metrics",
            lambda: (
                _value(
                    _samples(port), "docparser_operator_docparser_ready", namespace=ns, name="inv"
                )
                == 1
            ),
            timeout=30,
        )
        samples = _samples(port)
        assert (
            _value(samples, "docparser_operator_docparser_degraded", namespace=ns, name="inv") == 0
        )
        assert (
            _value(samples, "docparser_operator_canary_weight_percent", namespace=ns, name="inv")
            == 0
        )  # a dark canary carries nothing
