"""A real Gateway API controller (Envoy Gateway) judges the HTTPRoutes the operator renders.

One DocParser with `router: gateway` is pointed at parents the controller accepts or refuses
for different reasons; each time the DocParser must say what the controller said, in its
words (Degraded RouteNotAccepted with the controller's reason and message), and be Degraded
no longer once a parent accepts the route again. No Envoy runs (see docs/operations.md), so
nothing is sent through the Gateway: only its verdicts are tested here.
"""

from __future__ import annotations

import time
import uuid

import pytest
from cluster_gateway import (
    CONTROLLER,
    GATEWAY,
    GATEWAY_NAMESPACE,
    condition,
    gateway_with_listener,
    require_envoy_gateway,
    route_parents,
)
from cluster_support import conditions, docparser, record, wait_for, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _routed(name: str, namespace: str, image: str, ref: dict[str, str], hosts=()) -> dict:
    manifest = docparser(name, namespace, image)
    manifest["spec"]["traffic"] = {"router": "gateway", "gatewayRef": ref}
    if hosts:
        manifest["spec"]["traffic"]["hostnames"] = list(hosts)
    return manifest


def _verdict(cluster, namespace: str, name: str):
    """(route generation, the controller's parent entry) once it judged this generation."""
    route = cluster.get("httproute", name, namespace)
    for parent in route_parents(route):
        accepted = condition(parent, "Accepted")
        if accepted.get("observedGeneration") == route["metadata"]["generation"]:
            return route, parent
    return None


def test_the_controller_judges_our_route_and_the_docparser_says_so(cluster, namespace):
    require_envoy_gateway(cluster)
    other = f"e2e-gw-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", other)
    try:
        cluster.apply(
            *gateway_with_listener("same-only", other, allowed="Same"),
            *gateway_with_listener("docs-only", other, hostname="docs.example.com"),
        )
        web = {"name": GATEWAY, "namespace": GATEWAY_NAMESPACE}
        name = "routed"
        cluster.apply(_routed(name, namespace, cluster.runtime_image, web))

        # Accepted by the real controller: Ready, not Degraded, its observedGeneration current.
        _, parent = wait_for(
            cluster,
            namespace,
            "the controller's verdict",
            lambda: _verdict(cluster, namespace, name),
            120,
        )
        assert parent["controllerName"] == CONTROLLER
        assert condition(parent, "Accepted")["status"] == "True", parent
        assert condition(parent, "ResolvedRefs")["status"] == "True", parent
        obj = wait_ready(cluster, namespace, name, timeout=300)
        assert conditions(obj)["Degraded"]["status"] == "False", conditions(obj)

        refusals = {
            "a listener that does not exist": (
                {**web, "sectionName": "nope"},
                (),
            ),
            "a listener that admits routes of its own namespace only": (
                {"name": "same-only", "namespace": other},
                (),
            ),
            "a listener for another hostname": (
                {"name": "docs-only", "namespace": other},
                ("parse.example.org",),
            ),
        }
        timings = {}
        for what, (ref, hosts) in refusals.items():
            start = time.monotonic()
            cluster.apply(_routed(name, namespace, cluster.runtime_image, ref, hosts))

            def refused():
                found = _verdict(cluster, namespace, name)
                if not found or condition(found[1], "Accepted").get("status") != "False":
                    return None
                degraded = conditions(cluster.get("docparser", name, namespace))["Degraded"]
                return (found[1], degraded) if degraded["reason"] == "RouteNotAccepted" else None

            parent, degraded = wait_for(cluster, namespace, f"{what}: refused", refused, 90)
            timings[what] = time.monotonic() - start
            said = condition(parent, "Accepted")
            # The controller's own words, carried to the DocParser.
            assert said["reason"] in degraded["message"], (said, degraded)
            assert said["message"][:60] in degraded["message"], (said, degraded)
            record("gateway verdicts", f"{what}: {said['reason']}: {said['message']}")

        # Back to an accepting parent: Degraded clears.
        cluster.apply(_routed(name, namespace, cluster.runtime_image, web))
        wait_for(
            cluster,
            namespace,
            "accepted again, not Degraded",
            lambda: (
                conditions(cluster.get("docparser", name, namespace))["Degraded"]["status"]
                == "False"
            ),
            90,
        )
        record(
            "gateway verdicts",
            "patch to DocParser Degraded: "
            + ", ".join(f"{what} {seconds:.1f}s" for what, seconds in timings.items()),
        )
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
