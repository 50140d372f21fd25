"""The one HorizontalPodAutoscaler (autoscaling/v2) of a DocParser, present when min < max.

It scales the DocParser itself through its scale subresource (``spec.replicas.desired``), over
the pods of every revision (``status.selector``); the operator splits that size between the
stable and canary revisions by the weight. So one autoscaler decides the size and the split
never drifts with load, as Argo Rollouts sizes a canary from the Rollout's replicas.

Metrics: ``queue`` scales on the runtime gauge ``docparser_outstanding_pages`` (decoded pages
queued or being inferred: a 300-page PDF is 300 units, not one request), ``backlog`` on
``docparser_backlog_pages`` (those pages plus the pod's share of its revision's queued job
pages, so queued async jobs scale out too) and ``inflight`` on
``docparser_outstanding_requests``, all as Pods metrics averaged per pod (they need a
custom-metrics adapter such as prometheus-adapter); ``latency`` on
``docparser_estimated_wait_seconds`` (the queue wait a page can expect: queued pages times
the measured seconds per page of their tiers, over the decode slots), its target the
``targetSeconds`` as a quantity in milliseconds; ``cpu`` is Resource CPU utilization.
Behaviour: scale up at once (a queue of GPU work only grows), scale down slowly, one pod per
five minutes after ``scaleDownStabilizationSeconds`` of low load: GPU pods are slow to start.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.models import Autoscaling
from docparser_operator.api.naming import API_VERSION, KIND
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta

POD_METRICS = {
    "queue": "docparser_outstanding_pages",
    "backlog": "docparser_backlog_pages",
    "inflight": "docparser_outstanding_requests",
    "latency": "docparser_estimated_wait_seconds",
}


def seconds_quantity(seconds: float) -> str:
    """``seconds`` as a canonical Kubernetes quantity: whole seconds bare, else millis
    (2 -> "2", 2.5 -> "2500m"), so the live object reads back as rendered."""
    millis = max(1, round(seconds * 1000))
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _metric(autoscaling: Autoscaling) -> dict[str, Any]:
    if autoscaling.metric == "cpu":
        return {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": autoscaling.target},
            },
        }
    value = str(autoscaling.target)
    if autoscaling.metric == "latency" and autoscaling.target_seconds is not None:
        value = seconds_quantity(autoscaling.target_seconds)
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": POD_METRICS[autoscaling.metric]},
            "target": {"type": "AverageValue", "averageValue": value},
        },
    }


def render_hpa(plan: Target) -> dict[str, Any]:
    autoscaling = plan.resource.spec.autoscaling
    replicas = plan.resource.spec.replicas
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": object_meta(plan, naming.hpa(plan.name), "shared"),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": plan.name},
            "minReplicas": replicas.floor,  # 0 is the idle decision's (core/plan/idle.py)
            "maxReplicas": replicas.max,
            "metrics": [_metric(autoscaling)],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "selectPolicy": "Max",
                    "policies": [
                        {"type": "Pods", "value": 2, "periodSeconds": 60},
                        {"type": "Percent", "value": 100, "periodSeconds": 60},
                    ],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": autoscaling.scale_down_stabilization_seconds,
                    "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                },
            },
        },
    }
