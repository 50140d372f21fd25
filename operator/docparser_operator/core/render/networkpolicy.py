"""NetworkPolicy over all runtime pods of one DocParser (only with ``traffic.allowFrom``).

The runtime serves documents and metrics on one port; ``allowFrom`` (NetworkPolicyPeer
objects: the Gateway's namespace, the clients' namespaces, Prometheus) and the DocParser's
own runtime pods (the shadow canary's mirror, stable pod to canary pod) are the only sources
that reach it. Egress is left open: pods fetch weights from object stores and talk to Redis,
whose addresses the operator does not know. The kubelet's probes come from the node, which
NetworkPolicy implementations allow. A DocParser that scales to zero has its front under the
same policy (clients reach it at zero), and the front is one more source of the runtime pods
(it hands held requests over to ``<name>-serving``). The batch pool's pods (``spec.batch``)
listen on the same port with the same API, so the policy covers them too; they are no source.
"""

from __future__ import annotations

from typing import Any

from docparser_operator.api import naming
from docparser_operator.api.labels import (
    APP_NAME,
    BATCH_APP_NAME,
    FRONT_APP_NAME,
    LABEL_INSTANCE,
    LABEL_NAME,
    TRACK_SHARED,
    front_selector,
    pod_selector,
)
from docparser_operator.core.plan.target import Target
from docparser_operator.core.render.meta import object_meta


def render_network_policy(plan: Target) -> dict[str, Any]:
    # The DocParser's own pods always: the shadow's mirror goes from stable's pods to the
    # canary's (a podSelector peer is this namespace only; the internal token guards the path).
    own = {"podSelector": {"matchLabels": pod_selector(plan.name)}}
    peers = [dict(peer) for peer in plan.resource.spec.traffic.allow_from or []] + [own]
    selector: dict[str, Any] = {"matchLabels": pod_selector(plan.name)}
    names = [APP_NAME]
    if plan.scales_to_zero:
        peers.append({"podSelector": {"matchLabels": front_selector(plan.name)}})
        names.append(FRONT_APP_NAME)
    if plan.resource.spec.batch is not None:
        names.append(BATCH_APP_NAME)
    if len(names) > 1:
        selector = {
            "matchLabels": {LABEL_INSTANCE: plan.name},
            "matchExpressions": [{"key": LABEL_NAME, "operator": "In", "values": names}],
        }
    ingress: dict[str, Any] = {
        "from": peers,
        "ports": [{"protocol": "TCP", "port": naming.HTTP_PORT}],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(plan, naming.network_policy(plan.name), TRACK_SHARED),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            # allowFrom: [] allows no source but the DocParser's own pods
            "ingress": [ingress],
        },
    }
