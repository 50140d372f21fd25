"""Gateway API HTTPRoute (gateway.networking.k8s.io/v1) for ``router: gateway``.

One backend per revision Service, weighted by the rollout planner: the canary revision gets
the effective canary weight (0 until its pods are Ready, then no more than Ready pods can
carry), the stable side the rest in proportion to each stable revision's Ready pods. Weights
are percents and add up to 100 once anything is Ready; before that the spec's stable revision
holds all the weight (nothing can serve yet). A DocParser that scales to zero lists its front
``<name>-front`` too: all the weight while no runtime pod is Ready (at zero, waking), 0 once one
is (the switch waits for the Ready pod: make-before-break). Timeouts are long: a document
request can decode for minutes.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta

REQUEST_TIMEOUT = "600s"


def backend_weights(plan: Target) -> dict[str, int]:
    """revision -> weight of every backend the route lists (the spec's revisions always)."""
    weights = {r.revision: r.weight for r in plan.rollout.revisions if r.desired or r.weight > 0}
    if not any(weights.values()):
        stable = plan.role("stable")
        if stable is not None:
            weights[stable.revision] = 100
    return weights


def render_httproute(plan: Target) -> dict[str, Any]:
    traffic = plan.resource.spec.traffic
    gateway = traffic.gateway_ref
    assert gateway is not None  # CRD rule: router gateway needs gatewayRef
    parent: dict[str, Any] = {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": gateway.name,
    }
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    weights = backend_weights(plan)
    if plan.to_front:  # at zero or waking: every request to the front (render/front.py)
        weights = dict.fromkeys(weights, 0)
    backends = [
        {"name": naming.revision_name(plan.name, rev), "port": naming.HTTP_PORT, "weight": w}
        for rev, w in weights.items()
    ]
    if plan.scales_to_zero:
        share = 100 if plan.to_front else 0
        backends.append(
            {"name": naming.front(plan.name), "port": naming.HTTP_PORT, "weight": share}
        )
    spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": backends,
                "timeouts": {"request": REQUEST_TIMEOUT},
            }
        ],
    }
    if traffic.hostnames:
        spec = {"hostnames": list(traffic.hostnames), **spec}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": object_meta(plan, naming.httproute(plan.name), TRACK_SHARED),
        "spec": spec,
    }
