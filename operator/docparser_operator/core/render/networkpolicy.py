"""NetworkPolicy over all runtime pods of one DocParser (only with ``traffic.allowFrom``).

The runtime serves documents and metrics on one port; ``allowFrom`` (NetworkPolicyPeer
objects: the Gateway's namespace, the clients' namespaces, Prometheus) are the only sources
that reach it. Egress is left open: pods fetch weights from object stores and talk to Redis,
whose addresses the operator does not know. The kubelet's probes come from the node, which
NetworkPolicy implementations allow.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import TRACK_SHARED, pod_selector
from docparser_operator.core.render.meta import object_meta
from docparser_operator.core.render.target import Target


def render_network_policy(plan: Target) -> dict[str, Any]:
    peers = plan.resource.spec.traffic.allow_from or []
    ingress: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": naming.HTTP_PORT}]}
    if peers:
        ingress["from"] = [dict(peer) for peer in peers]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(plan, naming.network_policy(plan.name), TRACK_SHARED),
        "spec": {
            "podSelector": {"matchLabels": pod_selector(plan.name)},
            "policyTypes": ["Ingress"],
            # allowFrom: [] allows no source at all (the port is closed to everyone)
            "ingress": [ingress] if peers else [],
        },
    }
