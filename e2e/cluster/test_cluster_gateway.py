"""A real Gateway API controller (Envoy Gateway) judges the HTTPRoutes the operator renders.

One DocParser with `router: gateway` is pointed at parents the controller accepts or refuses
for different reasons; each time the DocParser must say what the controller said, in its
words (Degraded RouteNotAccepted with the controller's reason and message), and be Degraded
no longer once a parent accepts the route again. No Envoy runs (see docs/operations.md), so
nothing is sent through the Gateway: only its verdicts are tested here.
"""

from __future__ import annotations

import copy
import time
import uuid

import pytest
from cluster_gateway import (
    CONTROLLER,
    GATEWAY,
    GATEWAY_NAMESPACE,
    condition,
    gateway_with_listener,
    ir_weights,
    latest_ir,
    require_envoy_gateway,
    route_parents,
)
from cluster_settle import settled_start
from cluster_support import (
    conditions,
    docparser,
    record,
    wait_for,
    wait_ready,
    weights_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _routed(name: str, namespace: str, image: str, ref: dict[str, str], hosts=()) -> dict:
    manifest = docparser(name, namespace, image)
    manifest["spec"]["traffic"] = {"router": "gateway", "gatewayRef": ref}
    if hosts:
        manifest["spec"]["traffic"]["hostnames"] = list(hosts)
    return manifest


def _verdict(cluster, namespace: str, name: str):
    """(route generation, the controller's parent entry) once it judged this generation; None
    before that, and before the operator has rendered the route at all."""
    route = cluster.find("httproute", name, namespace)
    if route is None:
        return None
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

        # Ready waits for the real verdict: no sample is Ready before the controller accepted.
        early = []

        def accepted_then_ready():
            obj = cluster.get("docparser", name, namespace)
            found = _verdict(cluster, namespace, name)
            ready = conditions(obj).get("Ready", {}).get("status") == "True"
            if ready and not (found and condition(found[1], "Accepted")["status"] == "True"):
                early.append(conditions(obj)["Ready"])
            return found if ready and found else None

        _, parent = wait_for(
            cluster, namespace, "the verdict, then Ready", accepted_then_ready, 300, interval=0.5
        )
        assert early == [], f"Ready before the controller accepted the route: {early}"
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

        # A Gateway that does not exist: nobody answers, so the operator says so itself.
        start = time.monotonic()
        cluster.apply(
            _routed(name, namespace, cluster.runtime_image, {"name": "missing", "namespace": other})
        )
        degraded = wait_for(
            cluster,
            namespace,
            "RouteNotJudged",
            lambda: (
                (d := conditions(cluster.get("docparser", name, namespace))["Degraded"])["reason"]
                == "RouteNotJudged"
                and d
            ),
            120,
        )
        timings["a Gateway that does not exist (RouteNotJudged)"] = time.monotonic() - start
        assert f"Gateway {other}/missing may not exist" in degraded["message"], degraded
        entries = route_parents(cluster.get("httproute", name, namespace))
        assert not [p for p in entries if p["parentRef"]["name"] == "missing"], entries
        record("gateway verdicts", f"entries of earlier parents left: {len(entries)}")
        ready = conditions(cluster.get("docparser", name, namespace))["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "AwaitingRouteVerdict"), ready
        record("gateway verdicts", f"no such Gateway: {degraded['message']}")

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


def _our_weights(route: dict) -> dict[str, int]:
    """The split the operator rendered (backends with weight 0 carry nothing)."""
    refs = route["spec"]["rules"][0]["backendRefs"]
    return {r["name"]: r["weight"] for r in refs if r.get("weight", 1) > 0}


def test_the_controllers_weights_follow_ours_through_a_canary_walk(cluster, namespace):
    """stable v1 -> canary v2 at 50 % -> canary removed: at every sample, the split Envoy
    Gateway computed for its data plane (its xDS IR) equals the route's weights once it has
    judged that route generation, and it has judged every generation within 15 s."""
    require_envoy_gateway(cluster)
    weights = weights_volume(cluster, namespace, ("v1", "v2"))
    web = {"name": GATEWAY, "namespace": GATEWAY_NAMESPACE}
    name = "split"
    v1 = docparser(name, namespace, cluster.runtime_image, weights=weights["v1"])
    v1["spec"]["traffic"] = {"router": "gateway", "gatewayRef": web}
    canary = docparser(
        name, namespace, cluster.runtime_image, weights=weights["v1"], canary=weights["v2"],
        canary_weight=50,
    )  # fmt: skip
    canary["spec"]["traffic"] = copy.deepcopy(v1["spec"]["traffic"])
    cluster.apply(v1)
    wait_ready(cluster, namespace, name, timeout=300)
    settled_start(cluster, namespace, name, docparser=name, replicas=1)
    samples = []
    # Each step settles only with its own split on the route: two backends at 50 %, then one
    # (a status read between the apply and the operator's first pass must not end a step).
    for what, manifest, backends in (("canary v2 at 50%", canary, 2), ("canary removed", v1, 1)):
        cluster.apply(manifest)
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            route = cluster.get("httproute", name, namespace)
            generation = route["metadata"]["generation"]
            ours = _our_weights(route)
            found = _verdict(cluster, namespace, name)
            theirs = ir_weights(latest_ir(cluster), route)
            served = {k: v for k, v in theirs.items() if v > 0}
            samples.append((what, generation, ours, served, found is not None))
            if found is not None and served != ours:
                # judged, yet another split: allow the IR log a moment to catch up, then fail.
                # The route is read again too: the operator may have written its next split
                # meanwhile (a canary pod Ready seconds later), and the controller follows that.
                settle = time.monotonic() + 15
                while time.monotonic() < settle and served != ours:
                    time.sleep(1)
                    route = cluster.get("httproute", name, namespace)
                    generation = route["metadata"]["generation"]
                    ours = _our_weights(route)
                    theirs = ir_weights(latest_ir(cluster), route)
                    served = {k: v for k, v in theirs.items() if v > 0}
                    samples.append((what, generation, ours, served, True))
                assert served == ours, (what, generation, ours, theirs)
            obj = cluster.get("docparser", name, namespace)
            status = obj.get("status") or {}
            conds = conditions(obj)
            done = (
                status.get("observedGeneration") == obj["metadata"]["generation"]
                and conds.get("Ready", {}).get("status") == "True"
                and conds.get("Progressing", {}).get("status") != "True"
            )
            split = len([w for w in ours.values() if w > 0]) == backends
            if done and split and found is not None and served == ours:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"{what}: not settled\n{cluster.explain(namespace)}")
    generations = sorted({g for _, g, *_ in samples})
    splits = sorted({str(s[2]) for s in samples})
    # The walk did change the split. The samples of the settle loop count too: the operator's
    # 50/50 may first be read there (a CI run saw only the 100/0 splits when they were not).
    assert len(splits) >= 2, splits
    record(
        "gateway weights",
        f"{len(samples)} samples over route generations {generations}: Envoy Gateway's split "
        f"equalled ours at every judged sample; splits {splits}",
    )
