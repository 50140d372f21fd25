"""HPA renderer: autoscaling/v2 per track with an open range, metric mapping, slow scale-down."""

from __future__ import annotations

import pytest
from docparser_operator.render import render_all
from golden import CASES, Case, check_golden, of_kind

GATEWAY = Case("deepseek-gateway-canary")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case: Case) -> None:
    check_golden(case, "HorizontalPodAutoscaler")


def _hpas(resource: dict) -> dict[str, dict]:
    return {
        h["metadata"]["name"]: h for h in of_kind(render_all(resource), "HorizontalPodAutoscaler")
    }


def test_no_hpa_when_min_equals_max() -> None:
    assert _hpas(Case("deepseek-service-router").resource()) == {}
    assert _hpas(Case("rapidocr-minimal").resource()) == {}


def test_range_is_split_between_tracks() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["replicas"] = {"min": 4, "max": 20}
    resource["spec"]["canary"]["weight"] = 25
    hpas = _hpas(resource)
    assert (
        hpas["invoices-stable"]["spec"]["minReplicas"],
        hpas["invoices-stable"]["spec"]["maxReplicas"],
    ) == (3, 15)
    assert (
        hpas["invoices-canary"]["spec"]["minReplicas"],
        hpas["invoices-canary"]["spec"]["maxReplicas"],
    ) == (1, 5)
    assert hpas["invoices-canary"]["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "invoices-canary",
    }


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
        ("inflight", _pods("docparser_outstanding_requests")),
        ("cpu", CPU),
    ],
)
def test_metric_mapping(metric: str, expected: dict) -> None:
    resource = GATEWAY.resource()
    resource["spec"]["autoscaling"] = {"metric": metric, "target": 7}
    assert _hpas(resource)["invoices-stable"]["spec"]["metrics"] == [expected]


def test_metric_names_exist_in_the_runtime() -> None:
    """The HPA scales on gauges the runtime really exports (names are API)."""
    pytest.importorskip("prometheus_client")
    from docparser_operator.render.hpa import POD_METRICS
    from docparser_runtime.server.metrics import Metrics

    exported = {m.name for m in Metrics().registry.collect()}
    assert set(POD_METRICS.values()) <= exported


def test_scale_down_is_slow_and_configurable() -> None:
    resource = GATEWAY.resource()
    resource["spec"]["autoscaling"]["scaleDownStabilizationSeconds"] = 900
    behavior = _hpas(resource)["invoices-stable"]["spec"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 900
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
