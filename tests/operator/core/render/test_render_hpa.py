"""HPA renderer: one autoscaling/v2 HPA on the DocParser itself, metric mapping, slow scale-down."""

from __future__ import annotations

import pytest
from docparser_operator.cli.main import render_resource
from golden import CASES, Case, check_golden, of_kind

GATEWAY = Case("deepseek-gateway-canary")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "HorizontalPodAutoscaler")


def _hpas(resource: dict) -> dict[str, dict]:
    return {
        h["metadata"]["name"]: h
        for h in of_kind(render_resource(resource), "HorizontalPodAutoscaler")
    }


def test_no_hpa_when_min_equals_max() -> None:
    assert _hpas(Case("deepseek-service-router").resource()) == {}
    assert _hpas(Case("rapidocr-minimal").resource()) == {}


def test_one_hpa_scales_the_docparser_not_a_track() -> None:
    """One autoscaler decides the size through the DocParser's scale subresource; the canary's
    share follows from the weight, so load never changes the split."""
    resource = GATEWAY.resource()
    resource["spec"]["replicas"] = {"min": 4, "max": 20}
    resource["spec"]["canary"]["weight"] = 25
    (hpa,) = _hpas(resource).values()
    assert hpa["metadata"]["name"] == "invoices"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (4, 20)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "name": "invoices",
    }
    deployments = of_kind(render_resource(resource), "Deployment")
    assert sorted(d["spec"]["replicas"] for d in deployments) == [1, 3]  # 4 split 75/25
    resource["spec"]["replicas"]["desired"] = 12  # what the HPA writes through /scale
    deployments = of_kind(render_resource(resource), "Deployment")
    assert sorted(d["spec"]["replicas"] for d in deployments) == [3, 9]
    resource["spec"]["replicas"]["desired"] = 99  # clamped to max
    assert (
        sum(d["spec"]["replicas"] for d in of_kind(render_resource(resource), "Deployment")) == 20
    )


def _pods(name: str) -> dict:
    target = {"type": "AverageValue", "averageValue": "7"}
    return {"type": "Pods", "pods": {"metric": {"name": name}, "target": target}}


CPU = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 7}},
}


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("queue", _pods("docparser_outstanding_pages")),
        ("backlog", _pods("docparser_backlog_pages")),
        ("inflight", _pods("docparser_outstanding_requests")),
        ("cpu", CPU),
    ],
)
def test_metric_mapping(metric: str, expected: dict) -> None:
    resource = GATEWAY.resource()
    resource["spec"]["autoscaling"] = {"metric": metric, "target": 7}
    assert _hpas(resource)["invoices"]["spec"]["metrics"] == [expected]


@pytest.mark.parametrize(
    ("seconds", "quantity"), [(30, "30"), (2.5, "2500m"), (0.001, "1m"), (3600, "3600")]
)
def test_latency_keeps_the_estimated_wait_at_target_seconds(seconds: float, quantity: str) -> None:
    """``latency`` is a Pods metric like the others, its AverageValue the promised wait as a
    canonical quantity (milliseconds when not whole), so the live HPA reads back as rendered."""
    resource = GATEWAY.resource()
    resource["spec"]["autoscaling"] = {"metric": "latency", "targetSeconds": seconds}
    target = {"type": "AverageValue", "averageValue": quantity}
    metric = {"name": "docparser_estimated_wait_seconds"}
    expected = {"type": "Pods", "pods": {"metric": metric, "target": target}}
    assert _hpas(resource)["invoices"]["spec"]["metrics"] == [expected]


def test_metric_names_exist_in_the_runtime() -> None:
    """The HPA scales on gauges the runtime really exports (names are API)."""
    pytest.importorskip("prometheus_client")
    from docparser_operator.core.render.hpa import POD_METRICS
    from docparser_runtime.server.ops.metrics import Metrics

    exported = {m.name for m in Metrics().registry.collect()}
    assert set(POD_METRICS.values()) <= exported


def test_scale_down_is_slow_and_configurable() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["autoscaling"]["scaleDownStabilizationSeconds"] = 900
    behavior = _hpas(resource)["invoices"]["spec"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 900
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
