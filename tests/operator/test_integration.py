"""The operator (kopf KopfRunner) against the `cluster` fixture: the issue's scenarios."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from conftest import running_operator
from docparser_operator.apply import DOCPARSER, KNOWN_KINDS
from docparser_operator.render import render_all
from kube_cluster import Cluster, simulate_pods, wait_for

DEPLOY = KNOWN_KINDS["Deployment"]
SERVICE = KNOWN_KINDS["Service"]
HPA = KNOWN_KINDS["HorizontalPodAutoscaler"]
PDB = KNOWN_KINDS["PodDisruptionBudget"]
ROUTE = KNOWN_KINDS["HTTPRoute"]
SHA_A = "a" * 64
SHA_B = "b" * 64
SHA_C = "c" * 64


def docparser(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "engine": "deepseek-ocr2",
        "weights": {"uri": "s3://models/deepseek-ocr-2", "version": "2026-01-27", "sha256": SHA_A},
        "tier": 2,
        "replicas": {"min": 1, "max": 1},
        "resources": {"gpu": 1, "gpuMemory": "80Gi"},
        "runtime": {"image": "ghcr.io/example/docparser-runtime:0.1.0"},
        "traffic": {"router": "service"},
    }
    base.update(spec)
    return {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": name},
        "spec": base,
    }


def create(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """Create as a user would: DocParsers by server-side apply (a GitOps tool's manager, so a
    later apply without a field removes it), other objects with a plain POST."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = cluster.namespace
    if obj["kind"] == "DocParser":
        return cluster.client.apply(obj, manager="gitops")
    return cluster.client.create(obj)


def set_spec(cluster: Cluster, name: str, spec: dict[str, Any]) -> None:
    """Replace the whole spec, as `kubectl apply` of an edited manifest (or a git revert) does."""
    cluster.client.apply(
        {
            "apiVersion": "docparser.io/v1alpha1",
            "kind": "DocParser",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": spec,
        },
        manager="gitops",
    )


def condition(cluster: Cluster, name: str, ctype: str) -> dict[str, Any]:
    obj = cluster.get(DOCPARSER, name) or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), {})


def test_create_reconciles_children_and_status(cluster: Cluster, operator: Any) -> None:
    dp = create(cluster, docparser("inv"))
    uid = dp["metadata"]["uid"]
    dep = wait_for("stable deployment", lambda: cluster.get(DEPLOY, "inv-stable"))
    wait_for("services", lambda: cluster.get(SERVICE, "inv") and cluster.get(SERVICE, "inv-stable"))
    wait_for("pdb", lambda: cluster.get(PDB, "inv"))
    for obj in (dep, cluster.get(SERVICE, "inv"), cluster.get(PDB, "inv")):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["controller"] and ref["blockOwnerDeletion"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "docparser-operator"
    wait_for(
        "progressing", lambda: condition(cluster, "inv", "Progressing").get("status") == "True"
    )
    assert condition(cluster, "inv", "Ready")["status"] == "False"
    simulate_pods(cluster, "inv-stable", "ready")
    ready = wait_for(
        "ready",
        lambda: (
            condition(cluster, "inv", "Ready").get("status") == "True"
            and condition(cluster, "inv", "Ready")
        ),
    )
    assert ready["reason"] == "Loaded"
    status = cluster.get(DOCPARSER, "inv")["status"]
    assert status["observedGeneration"] == dp["metadata"].get("generation", 1)
    assert status["endpoint"] == f"http://inv.{cluster.namespace}.svc:8000"
    assert status["stable"] == {"version": "2026-01-27", "readyReplicas": 1}
    assert condition(cluster, "inv", "Progressing")["status"] == "False"
    assert condition(cluster, "inv", "Degraded")["status"] == "False"


GATEWAY = {"router": "gateway", "gatewayRef": {"name": "web", "namespace": "infra"}}
CANARY_WEIGHTS = {
    "uri": "s3://models/deepseek-ocr-2-next",
    "version": "2026-03-01",
    "sha256": SHA_B,
}
EVENT = KNOWN_KINDS["Event"]


def spec_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return copy.deepcopy(cluster.get(DOCPARSER, name)["spec"])


def covers(live: Any, want: Any) -> bool:
    """``live`` holds every value of ``want`` (the server may add defaults)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(covers(live.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(map(covers, live, want))
    return live == want or (
        isinstance(live, str) and not isinstance(want, bool) and live == str(want)
    )


def converged(cluster: Cluster, name: str) -> bool:
    """Every child the renderer wants for the live spec is live with those values, and the
    set of children labelled for this instance is exactly that set."""
    dp = cluster.get(DOCPARSER, name)
    if dp is None or (dp.get("status") or {}).get("observedGeneration") != dp["metadata"].get(
        "generation", 1
    ):
        return False
    canary = cluster.get(DEPLOY, f"{name}-canary")
    ready = bool(canary and (canary.get("status") or {}).get("readyReplicas"))
    wanted = render_all(dp, canary_ready=ready)
    for child in wanted:
        live = cluster.get(KNOWN_KINDS[child["kind"]], child["metadata"]["name"])
        if live is None or not covers(live["spec"], child["spec"]):
            return False
    selector = f"app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=docparser-operator"
    live_keys = {
        (kind, o["metadata"]["name"])
        for kind in (
            "Deployment",
            "Service",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "HTTPRoute",
        )
        for o in cluster.list(KNOWN_KINDS[kind], selector)
        if any(
            r.get("uid") == dp["metadata"]["uid"]
            for r in o["metadata"].get("ownerReferences") or []
        )
    }
    return live_keys == {(c["kind"], c["metadata"]["name"]) for c in wanted}


def route_weights(cluster: Cluster, name: str) -> dict[str, int]:
    route = cluster.get(ROUTE, name) or {"spec": {"rules": [{"backendRefs": []}]}}
    return {b["name"]: b.get("weight", 1) for b in route["spec"]["rules"][0]["backendRefs"]}


def event_reasons(cluster: Cluster, name: str) -> set[str]:
    return {
        e["reason"]
        for e in cluster.list(EVENT)
        if e.get("involvedObject", {}).get("name") == name
        and e.get("source", {}).get("component") == "docparser-operator"
    }


def test_spec_changes_converge(cluster: Cluster, operator: Any) -> None:
    create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2}))
    wait_for("converged", lambda: converged(cluster, "inv"))
    simulate_pods(cluster, "inv-stable", "ready")
    before = cluster.get(DEPLOY, "inv-stable")

    spec = spec_of(cluster, "inv")
    spec["tier"] = 6
    set_spec(cluster, "inv", spec)
    wait_for("tier converged", lambda: converged(cluster, "inv"))
    after = cluster.get(DEPLOY, "inv-stable")
    assert after["metadata"]["generation"] > before["metadata"]["generation"]

    spec["weights"] = {**spec["weights"], "version": "2026-02-02", "sha256": SHA_C}
    set_spec(cluster, "inv", spec)
    wait_for("weights converged", lambda: converged(cluster, "inv"))
    dep = cluster.get(DEPLOY, "inv-stable")
    assert dep["metadata"]["labels"]["docparser.io/version"] == "2026-02-02"
    simulate_pods(cluster, "inv-stable", "ready")

    spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 10}
    set_spec(cluster, "inv", spec)
    wait_for("canary deployment", lambda: cluster.get(DEPLOY, "inv-canary"))
    wait_for("converged with canary", lambda: converged(cluster, "inv"))
    assert route_weights(cluster, "inv") == {"inv-stable": 100, "inv-canary": 0}  # not Ready yet
    simulate_pods(cluster, "inv-canary", "ready")
    wait_for(
        "10% routed", lambda: route_weights(cluster, "inv") == {"inv-stable": 90, "inv-canary": 10}
    )
    wait_for(
        "status weight",
        lambda: cluster.get(DOCPARSER, "inv")["status"].get("canary", {}).get("weight") == 10,
    )

    spec["canary"]["weight"] = 30
    set_spec(cluster, "inv", spec)
    wait_for(
        "30% routed", lambda: route_weights(cluster, "inv") == {"inv-stable": 70, "inv-canary": 30}
    )
    wait_for("converged at 30%", lambda: converged(cluster, "inv"))
    status = cluster.get(DOCPARSER, "inv")["status"]
    assert status["canary"] == {
        "version": "2026-03-01",
        "weight": 30,
        "readyReplicas": status["canary"]["readyReplicas"],
    }
    wait_for(
        "events", lambda: {"RolloutStarted", "CanaryWeightChanged"} <= event_reasons(cluster, "inv")
    )


def test_remove_canary_and_change_router_prune(cluster: Cluster, operator: Any) -> None:
    create(
        cluster, docparser("inv", traffic=GATEWAY, canary={"weights": CANARY_WEIGHTS, "weight": 50})
    )
    wait_for("canary deployment", lambda: cluster.get(DEPLOY, "inv-canary"))
    simulate_pods(cluster, "inv-stable", "ready")
    simulate_pods(cluster, "inv-canary", "ready")
    wait_for(
        "50% routed", lambda: route_weights(cluster, "inv") == {"inv-stable": 50, "inv-canary": 50}
    )

    spec = spec_of(cluster, "inv")
    del spec["canary"]
    set_spec(cluster, "inv", spec)
    wait_for(
        "canary pruned",
        lambda: (
            cluster.get(DEPLOY, "inv-canary") is None and cluster.get(SERVICE, "inv-canary") is None
        ),
    )
    wait_for("100% stable", lambda: route_weights(cluster, "inv") == {"inv-stable": 100})
    wait_for("converged", lambda: converged(cluster, "inv"))
    assert "canary" not in cluster.get(DOCPARSER, "inv")["status"]
    assert "Pruned" in wait_for("pruned event", lambda: event_reasons(cluster, "inv"))

    spec["traffic"] = {"router": "service"}
    set_spec(cluster, "inv", spec)
    wait_for("route pruned", lambda: cluster.get(ROUTE, "inv") is None)
    wait_for("converged on service router", lambda: converged(cluster, "inv"))


def test_gitops_revert_restores_previous_state(cluster: Cluster, operator: Any) -> None:
    create(cluster, docparser("inv", traffic=GATEWAY))
    wait_for("converged A", lambda: converged(cluster, "inv"))
    spec_a = spec_of(cluster, "inv")
    template_a = copy.deepcopy(cluster.get(DEPLOY, "inv-stable")["spec"]["template"])

    spec_b = copy.deepcopy(spec_a)
    spec_b["tier"] = 6
    spec_b["weights"] = {**spec_a["weights"], "version": "2026-09-09", "sha256": SHA_C}
    spec_b["canary"] = {"weights": CANARY_WEIGHTS, "weight": 20}
    set_spec(cluster, "inv", spec_b)
    wait_for("converged B", lambda: cluster.get(DEPLOY, "inv-canary") and converged(cluster, "inv"))
    assert cluster.get(DEPLOY, "inv-stable")["spec"]["template"] != template_a

    set_spec(cluster, "inv", spec_a)  # git revert
    wait_for("canary gone", lambda: cluster.get(DEPLOY, "inv-canary") is None)
    wait_for("converged A again", lambda: converged(cluster, "inv"))
    assert covers(cluster.get(DEPLOY, "inv-stable")["spec"]["template"], template_a)
    assert (
        cluster.get(DOCPARSER, "inv")["status"]["stable"]["version"] == spec_a["weights"]["version"]
    )


def test_delete_leaves_children_to_garbage_collection(cluster: Cluster, operator: Any) -> None:
    dp = create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 1, "max": 3}))
    wait_for("converged", lambda: converged(cluster, "inv"))
    assert not dp["metadata"].get("finalizers")
    children = [
        cluster.get(DEPLOY, "inv-stable"),
        cluster.get(HPA, "inv-stable"),
        cluster.get(ROUTE, "inv"),
    ]
    for child in children:
        assert child["metadata"]["ownerReferences"][0]["uid"] == dp["metadata"]["uid"]
    assert not cluster.get(DOCPARSER, "inv")["metadata"].get("finalizers")  # none added
    cluster.client.delete(DOCPARSER, cluster.namespace, "inv", uid=dp["metadata"]["uid"])
    wait_for("docparser gone at once", lambda: cluster.get(DOCPARSER, "inv") is None, timeout=5)
    if cluster.has_garbage_collector:
        wait_for(
            "children collected",
            lambda: not cluster.list(DEPLOY) and cluster.get(ROUTE, "inv") is None,
            timeout=30,
        )


def test_restart_mid_reconcile_converges(cluster: Cluster) -> None:
    with running_operator(cluster):
        create(cluster, docparser("inv", traffic=GATEWAY))
        wait_for("first child", lambda: cluster.get(DEPLOY, "inv-stable"), interval=0.01)
    # operator stopped, maybe half-way; the spec moves on while it is down
    spec = spec_of(cluster, "inv")
    spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 10}
    spec["tier"] = 4
    set_spec(cluster, "inv", spec)
    with running_operator(cluster):
        wait_for("converged after restart", lambda: converged(cluster, "inv"))
        assert cluster.get(DEPLOY, "inv-canary") is not None


def _quiet(cluster: Cluster, seconds: float = 1.5, timeout: float = 20) -> None:
    """Wait until nobody but the test has written for ``seconds``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mark = cluster.mark()
        time.sleep(seconds)
        if not cluster.writes_since(mark):
            return
    raise AssertionError("the operator never stopped writing")


def _resyncs_since(cluster: Cluster, mark: int, name: str) -> int:
    """Reconcile passes seen since ``mark`` (each lists the instance's Deployments once)."""
    return sum(
        1
        for r in cluster.requests_since(mark)
        if r.method == "GET"
        and r.path.endswith("/deployments")
        and f"app.kubernetes.io/instance={name}" in r.query.get("labelSelector", "")
    )


def test_noop_resync_performs_zero_writes(cluster: Cluster, operator: Any) -> None:
    create(
        cluster,
        docparser(
            "inv",
            traffic=GATEWAY,
            replicas={"min": 2, "max": 4},
            canary={"weights": CANARY_WEIGHTS, "weight": 10},
        ),
    )
    wait_for("canary", lambda: cluster.get(DEPLOY, "inv-canary"))
    simulate_pods(cluster, "inv-stable", "ready")
    simulate_pods(cluster, "inv-canary", "ready")
    wait_for("ready", lambda: condition(cluster, "inv", "Ready").get("status") == "True")
    wait_for("converged", lambda: converged(cluster, "inv"))
    _quiet(cluster)
    mark = cluster.mark()
    wait_for("3 resyncs", lambda: _resyncs_since(cluster, mark, "inv") >= 3, timeout=15)
    assert cluster.writes_since(mark) == []


def test_objects_not_owned_are_never_touched(cluster: Cluster, operator: Any) -> None:
    ours = {
        "app.kubernetes.io/managed-by": "docparser-operator",
        "app.kubernetes.io/instance": "inv",
    }
    squatter = create(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "inv", "labels": ours},
            "spec": {"ports": [{"port": 9999}]},
        },
    )
    stray = create(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "inv-legacy", "labels": ours},
            "spec": {"ports": [{"port": 9998}]},
        },
    )
    mark = cluster.mark()
    create(cluster, docparser("inv"))
    wait_for("stable deployment", lambda: cluster.get(DEPLOY, "inv-stable"))
    degraded = wait_for(
        "conflict reported",
        lambda: (
            condition(cluster, "inv", "Degraded").get("reason") == "ChildConflict"
            and condition(cluster, "inv", "Degraded")
        ),
    )
    assert "Service inv" in degraded["message"]
    _quiet(cluster)
    for original in (squatter, stray):
        live = cluster.get(SERVICE, original["metadata"]["name"])
        assert live["metadata"]["resourceVersion"] == original["metadata"]["resourceVersion"]
        assert not live["metadata"].get("ownerReferences")
    touched = [
        r
        for r in cluster.writes_since(mark)
        if r.path.endswith(("/services/inv", "/services/inv-legacy"))
    ]
    assert touched == []


def test_hpa_owns_replicas_without_a_fight(cluster: Cluster, operator: Any) -> None:
    create(cluster, docparser("inv", replicas={"min": 1, "max": 4}))
    wait_for("hpa", lambda: cluster.get(HPA, "inv-stable"))
    wait_for("converged", lambda: converged(cluster, "inv"))
    dep = cluster.get(DEPLOY, "inv-stable")
    ours = [m for m in dep["metadata"]["managedFields"] if m["manager"] == "docparser-operator"]
    assert ours and all("f:replicas" not in m["fieldsV1"].get("f:spec", {}) for m in ours)
    # the HPA scales the Deployment (as the HPA controller does, via another field manager)
    cluster.client.request(
        "PATCH",
        DEPLOY.path(cluster.namespace, "inv-stable"),
        body={"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )
    _quiet(cluster)
    mark = cluster.mark()
    wait_for("2 resyncs", lambda: _resyncs_since(cluster, mark, "inv") >= 2, timeout=15)
    assert cluster.get(DEPLOY, "inv-stable")["spec"]["replicas"] == 3
    assert cluster.writes_since(mark) == []


def test_insufficient_gpu_memory_is_degraded_not_a_crash_loop(
    cluster: Cluster, operator: Any
) -> None:
    create(cluster, docparser("inv", tier=6, resources={"gpu": 1, "gpuMemory": "8Gi"}))
    degraded = wait_for(
        "degraded",
        lambda: (
            condition(cluster, "inv", "Degraded").get("status") == "True"
            and condition(cluster, "inv", "Degraded")
        ),
    )
    assert degraded["reason"] == "InsufficientGPUMemory"
    assert condition(cluster, "inv", "Stalled")["status"] == "True"  # kstatus: Failed
    wait_for("warning event", lambda: "InsufficientGPUMemory" in event_reasons(cluster, "inv"))
    _quiet(cluster)  # stable: no retry storm


def test_invalid_spec_is_degraded_with_an_event(cluster: Cluster, operator: Any) -> None:
    if cluster.backend != "emulator":
        pytest.skip("a real API server rejects this spec at admission (CRD schema + CEL)")
    bad = docparser("inv")
    del bad["spec"]["weights"]
    create(cluster, bad)
    degraded = wait_for(
        "degraded",
        lambda: (
            condition(cluster, "inv", "Degraded").get("reason") == "SpecInvalid"
            and condition(cluster, "inv", "Degraded")
        ),
    )
    assert "weights" in degraded["message"]
    assert condition(cluster, "inv", "Ready")["status"] == "False"
    wait_for("warning event", lambda: "SpecInvalid" in event_reasons(cluster, "inv"))
    _quiet(cluster)
    assert cluster.get(DEPLOY, "inv-stable") is None


def test_switching_to_autoscaling_keeps_current_replicas(cluster: Cluster, operator: Any) -> None:
    create(cluster, docparser("inv", replicas={"min": 3, "max": 3}))
    wait_for(
        "3 replicas",
        lambda: (cluster.get(DEPLOY, "inv-stable") or {}).get("spec", {}).get("replicas") == 3,
    )
    spec = spec_of(cluster, "inv")
    spec["replicas"] = {"min": 3, "max": 6}
    set_spec(cluster, "inv", spec)
    wait_for("hpa", lambda: cluster.get(HPA, "inv-stable"))
    wait_for("converged", lambda: converged(cluster, "inv"))
    dep = cluster.get(DEPLOY, "inv-stable")
    assert dep["spec"]["replicas"] == 3  # never dropped to the default of 1
    ours = [m for m in dep["metadata"]["managedFields"] if m["manager"] == "docparser-operator"]
    assert all("f:replicas" not in m["fieldsV1"].get("f:spec", {}) for m in ours)
