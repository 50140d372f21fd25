"""The real Gateway API controller's view of our routes: Envoy Gateway on the local cluster.

WHY its logs for weights: Envoy Gateway translates Gateways and routes into an xDS IR (one
destination setting per backendRef, with its weight and Ready endpoints) and serves it to
Envoy; no Envoy runs here (no image can be pulled), so its config dump is not reachable, but
the controller logs every IR it publishes at debug level (the local cluster turns that on).
The latest IR for Gateway `gateway-system/web` is what an Envoy would have been sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cluster_support import Target

CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
EG_NAMESPACE = "envoy-gateway-system"
GATEWAY_CLASS, GATEWAY_NAMESPACE, GATEWAY = "envoy-gateway", "gateway-system", "web"
ZERO_PROXY = "no-data-plane"


def require_envoy_gateway(target: Target) -> None:
    """Skip (with the build hint) unless Envoy Gateway runs and accepted the Gateway `web`."""
    out = target.kubectl(
        "-n",
        GATEWAY_NAMESPACE,
        "get",
        "gateway",
        GATEWAY,
        "-o",
        "jsonpath={.status.conditions[?(@.type=='Accepted')].status}",
        check=False,
    )
    if out.strip() != "True":
        pytest.skip(
            f"no Gateway API controller accepted Gateway {GATEWAY_NAMESPACE}/{GATEWAY} "
            "(Envoy Gateway not built: `bash scripts/build-envoy-gateway.sh`, then "
            "`make cluster-up`)"
        )


def gateway_with_listener(
    name: str, namespace: str, *, allowed: str = "All", hostname: str | None = None
) -> list[dict[str, Any]]:
    """A Gateway of Envoy Gateway's class in `namespace` (no data plane, as `web`)."""
    listener: dict[str, Any] = {
        "name": "http",
        "port": 80,
        "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": allowed}},
    }
    if hostname:
        listener["hostname"] = hostname
    return [
        {
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyProxy",
            "metadata": {"name": ZERO_PROXY, "namespace": namespace},
            "spec": {
                "provider": {
                    "type": "Kubernetes",
                    "kubernetes": {"envoyDeployment": {"replicas": 0}},
                }
            },
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "gatewayClassName": GATEWAY_CLASS,
                "infrastructure": {
                    "parametersRef": {
                        "group": "gateway.envoyproxy.io",
                        "kind": "EnvoyProxy",
                        "name": ZERO_PROXY,
                    }
                },
                "listeners": [listener],
            },
        },
    ]


def route_parents(route: dict[str, Any]) -> list[dict[str, Any]]:
    """The controller's entries in the route's status (ours alone: another's are not read)."""
    return [
        p
        for p in (route.get("status") or {}).get("parents") or []
        if p.get("controllerName") == CONTROLLER
    ]


def condition(parent: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in parent.get("conditions") or [] if c["type"] == kind), {})


def latest_ir(target: Target, gateway: str = f"{GATEWAY_NAMESPACE}/{GATEWAY}") -> dict[str, Any]:
    """The last xDS IR the controller published for `gateway` (from its debug log)."""
    logs = target.kubectl(
        "-n", EG_NAMESPACE, "logs", "deployment/envoy-gateway", "--tail=400", timeout=30
    )
    latest: dict[str, Any] = {}
    for line in logs.splitlines():
        if '"xds-ir"' not in line:
            continue
        # zap's console encoding: time, level, logger, caller, message (the IR), context
        parts = line.split("\t")
        try:
            context = json.loads(parts[-1])
            if context.get("xds-ir") == gateway and len(parts) >= 6:
                latest = json.loads(parts[4])
        except (json.JSONDecodeError, AttributeError):
            continue
    return latest


def ir_weights(ir: dict[str, Any], route: dict[str, Any]) -> dict[str, int]:
    """backend Service -> the weight the controller gives it, for our route's first rule.

    Envoy Gateway names each destination setting `.../backend/<index>` after the backendRef
    it came from and leaves weight-0 backends out; a backend with no Ready endpoints keeps
    its weight with an empty endpoint list (its share would answer 503), so it is reported as
    weight 0 here: what the data plane could actually serve."""
    ns, name = route["metadata"]["namespace"], route["metadata"]["name"]
    refs = route["spec"]["rules"][0]["backendRefs"]
    for listener in ir.get("http") or []:
        for r in listener.get("routes") or []:
            if not r["name"].startswith(f"httproute/{ns}/{name}/rule/0/"):
                continue
            weights: dict[str, int] = {}
            for setting in (r.get("destination") or {}).get("settings") or []:
                index = int(setting["name"].rsplit("/", 1)[-1])
                served = setting.get("weight", 0) if setting.get("endpoints") else 0
                weights[refs[index]["name"]] = served
            return weights  # every hostname's copy of the rule has the same split
    return {}
