"""Gateway API HTTPRoute (gateway.networking.k8s.io/v1) for ``router: gateway``.

Backends are the per-track Services weighted ``100 - w`` (stable) and ``w`` (canary), where
``w`` is the effective weight: 0 while the canary is not Ready. Without a canary there is one
stable backend. Timeouts are long: a document request can decode for minutes.
"""

from __future__ import annotations

from docparser_operator import naming
from docparser_operator.labels import TRACK_SHARED
from docparser_operator.render.meta import object_meta
from docparser_operator.render.plan import Plan

REQUEST_TIMEOUT = "600s"


def render_httproute(plan: Plan) -> dict:
    traffic = plan.resource.spec.traffic
    gateway = traffic.gateway_ref
    assert gateway is not None  # CRD rule: router gateway needs gatewayRef
    parent: dict = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    backends = [
        {
            "name": naming.track_service(plan.name, tp.track),
            "port": naming.HTTP_PORT,
            "weight": plan.canary_weight if tp.track == "canary" else 100 - plan.canary_weight,
        }
        for tp in plan.tracks
    ]
    spec: dict = {
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
