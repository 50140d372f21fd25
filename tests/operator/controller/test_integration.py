"""The operator (kopf KopfRunner) against the `cluster` fixture: the issue's scenarios."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from dp_helpers import (
    CANARY_WEIGHTS,
    DEPLOY,
    GATEWAY,
    HPA,
    PDB,
    ROUTE,
    SERVICE,
    SHA_C,
    condition,
    converged,
    covers,
    create,
    dep_name,
    docparser,
    event_reasons,
    quiet,
    revision,
    role_deployment,
    route_weights,
    scale_to,
    set_spec,
    spec_of,
)
from gateway_sim import GatewayController
from kube_cluster import Cluster, simulate_pods, wait_for
from kubelet_sim import Kubelet
from operator_runner import OperatorRun, running_operator


def test_create_reconciles_children_and_status(cluster: Cluster, operator: Any) -> None:
    dp = create(cluster, docparser("inv"))
    uid = dp["metadata"]["uid"]
    dep = wait_for("stable deployment", lambda: role_deployment(cluster, "inv"))
    wait_for("endpoint service", lambda: cluster.get(SERVICE, "inv"))
    wait_for("pdb", lambda: cluster.get(PDB, "inv"))
    for obj in (dep, cluster.get(SERVICE, "inv"), cluster.get(PDB, "inv")):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["controller"] and ref["blockOwnerDeletion"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "docparser-operator"
    wait_for(
        "progressing", lambda: condition(cluster, "inv", "Progressing").get("status") == "True"
    )
    assert condition(cluster, "inv", "Ready")["status"] == "False"
    simulate_pods(cluster, dep_name(cluster, "inv"), "ready")
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
    # set by the pass that first saw a Ready pod behind traffic: the one that made it Ready
    assert status["stable"].pop("servedSince") == ready["lastTransitionTime"]
    assert status["stable"] == {
        "version": "2026-01-27",
        "revision": dep["metadata"]["labels"]["docparser.io/revision"],
        "readyReplicas": 1,
    }
    assert condition(cluster, "inv", "Progressing")["status"] == "False"
    assert condition(cluster, "inv", "Degraded")["status"] == "False"


def test_spec_changes_converge(cluster: Cluster, operator: Any) -> None:
    """Every pod-shaping change is a new revision that takes over once Ready; the previous one
    stays scaled to 0 (one kept for a rollback), and the canary weight follows the spec."""
    with Kubelet(cluster, ready_after=0.2):
        create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 2, "max": 2}))
        wait_for("converged", lambda: converged(cluster, "inv"))
        first = dep_name(cluster, "inv")

        spec = spec_of(cluster, "inv")
        spec["tier"] = 6
        set_spec(cluster, "inv", spec)
        wait_for("tier converged", lambda: converged(cluster, "inv"))
        second = dep_name(cluster, "inv")
        assert second != first and cluster.get(DEPLOY, first)["spec"]["replicas"] == 0

        spec["weights"] = {**spec["weights"], "version": "2026-02-02", "sha256": SHA_C}
        set_spec(cluster, "inv", spec)
        wait_for("weights converged", lambda: converged(cluster, "inv"))
        dep = role_deployment(cluster, "inv")
        assert dep["metadata"]["labels"]["docparser.io/version"] == "2026-02-02"
        wait_for("oldest revision pruned", lambda: cluster.get(DEPLOY, first) is None)
        assert cluster.get(DEPLOY, second)["spec"]["replicas"] == 0  # the newest one is kept

        spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 10}
        set_spec(cluster, "inv", spec)
        wait_for(
            "10% routed", lambda: route_weights(cluster, "inv") == {"stable": 90, "canary": 10}
        )
        wait_for(
            "status weight",
            lambda: cluster.get(DOCPARSER, "inv")["status"].get("canary", {}).get("weight") == 10,
        )

        spec["canary"]["weight"] = 30
        set_spec(cluster, "inv", spec)
        wait_for(
            "30% routed", lambda: route_weights(cluster, "inv") == {"stable": 70, "canary": 30}
        )
        wait_for("converged at 30%", lambda: converged(cluster, "inv"))
        status = cluster.get(DOCPARSER, "inv")["status"]
        assert status["canary"] == {
            "version": "2026-03-01",
            "revision": revision(cluster, "inv", "canary"),
            "weight": 30,
            "requestedWeight": 30,
            "readyReplicas": status["canary"]["readyReplicas"],
        }
        wait_for(
            "events",
            lambda: {"RolloutStarted", "CanaryWeightChanged"} <= event_reasons(cluster, "inv"),
        )


def test_remove_canary_and_change_router_prune(cluster: Cluster, operator: Any) -> None:
    create(
        cluster, docparser("inv", traffic=GATEWAY, canary={"weights": CANARY_WEIGHTS, "weight": 50})
    )
    wait_for("canary deployment", lambda: role_deployment(cluster, "inv", "canary"))
    simulate_pods(cluster, dep_name(cluster, "inv"), "ready")
    simulate_pods(cluster, dep_name(cluster, "inv", "canary"), "ready")
    wait_for("50% routed", lambda: route_weights(cluster, "inv") == {"stable": 50, "canary": 50})

    spec = spec_of(cluster, "inv")
    canary = dep_name(cluster, "inv", "canary")
    del spec["canary"]
    set_spec(cluster, "inv", spec)
    wait_for(
        "canary pruned",
        lambda: cluster.get(DEPLOY, canary) is None and cluster.get(SERVICE, "inv-canary") is None,
    )
    wait_for("100% stable", lambda: route_weights(cluster, "inv") == {"stable": 100})
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
    template_a = copy.deepcopy(role_deployment(cluster, "inv")["spec"]["template"])

    spec_b = copy.deepcopy(spec_a)
    spec_b["tier"] = 6
    spec_b["weights"] = {**spec_a["weights"], "version": "2026-09-09", "sha256": SHA_C}
    spec_b["canary"] = {"weights": CANARY_WEIGHTS, "weight": 20}
    set_spec(cluster, "inv", spec_b)
    wait_for(
        "converged B",
        lambda: role_deployment(cluster, "inv", "canary") and converged(cluster, "inv"),
    )
    assert role_deployment(cluster, "inv")["spec"]["template"] != template_a
    canary = dep_name(cluster, "inv", "canary")

    set_spec(cluster, "inv", spec_a)  # git revert
    wait_for("canary gone", lambda: cluster.get(DEPLOY, canary) is None)
    wait_for("converged A again", lambda: converged(cluster, "inv"))
    assert covers(role_deployment(cluster, "inv")["spec"]["template"], template_a)
    assert (
        cluster.get(DOCPARSER, "inv")["status"]["stable"]["version"] == spec_a["weights"]["version"]
    )


def test_delete_leaves_children_to_garbage_collection(cluster: Cluster, operator: Any) -> None:
    dp = create(cluster, docparser("inv", traffic=GATEWAY, replicas={"min": 1, "max": 3}))
    wait_for("converged", lambda: converged(cluster, "inv"))
    assert not dp["metadata"].get("finalizers")
    children = [
        role_deployment(cluster, "inv"),
        cluster.get(HPA, "inv"),
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
        wait_for("first child", lambda: role_deployment(cluster, "inv"), interval=0.01)
    # operator stopped, maybe half-way; the spec moves on while it is down
    spec = spec_of(cluster, "inv")
    spec["canary"] = {"weights": CANARY_WEIGHTS, "weight": 10}
    spec["tier"] = 4
    set_spec(cluster, "inv", spec)
    with running_operator(cluster), GatewayController(cluster):
        wait_for("converged after restart", lambda: converged(cluster, "inv"))
        assert role_deployment(cluster, "inv", "canary") is not None


def test_noop_resync_performs_zero_writes(cluster: Cluster, operator: OperatorRun) -> None:
    create(
        cluster,
        docparser(
            "inv",
            traffic=GATEWAY,
            replicas={"min": 2, "max": 4},
            canary={"weights": CANARY_WEIGHTS, "weight": 10},
        ),
    )
    wait_for("canary", lambda: role_deployment(cluster, "inv", "canary"))
    simulate_pods(cluster, dep_name(cluster, "inv"), "ready")
    simulate_pods(cluster, dep_name(cluster, "inv", "canary"), "ready")
    wait_for("ready", lambda: condition(cluster, "inv", "Ready").get("status") == "True")
    wait_for("converged", lambda: converged(cluster, "inv"))
    quiet(cluster)
    mark, passes = cluster.mark(), operator.reconciles(cluster.namespace, "inv")
    wait_for("3 resyncs", lambda: operator.reconciles(cluster.namespace, "inv") >= passes + 3)
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
    wait_for("stable deployment", lambda: role_deployment(cluster, "inv"))
    degraded = wait_for(
        "conflict reported",
        lambda: (
            condition(cluster, "inv", "Degraded").get("reason") == "ChildConflict"
            and condition(cluster, "inv", "Degraded")
        ),
    )
    assert "Service inv" in degraded["message"]
    quiet(cluster)
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


def test_one_hpa_sizes_the_docparser_without_a_fight(
    cluster: Cluster, operator: OperatorRun
) -> None:
    """The HPA writes the DocParser's size (scale subresource); the operator sizes the
    revision from it and never writes that field back, so nothing fights."""
    create(cluster, docparser("inv", replicas={"min": 1, "max": 4}))
    hpa = wait_for("hpa", lambda: cluster.get(HPA, "inv"))
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "DocParser"
    wait_for("converged", lambda: converged(cluster, "inv"))
    scale_to(cluster, "inv", 3)  # as the HPA controller does
    wait_for("3 replicas", lambda: (role_deployment(cluster, "inv") or {})["spec"]["replicas"] == 3)
    quiet(cluster)
    mark, passes = cluster.mark(), operator.reconciles(cluster.namespace, "inv")
    wait_for("2 resyncs", lambda: operator.reconciles(cluster.namespace, "inv") >= passes + 2)
    assert role_deployment(cluster, "inv")["spec"]["replicas"] == 3
    assert cluster.writes_since(mark) == []
    assert spec_of(cluster, "inv")["replicas"]["desired"] == 3  # the operator never wrote spec


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
    quiet(cluster)  # stable: no retry storm


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
    quiet(cluster)
    assert role_deployment(cluster, "inv") is None


def test_switching_to_autoscaling_keeps_current_replicas(cluster: Cluster, operator: Any) -> None:
    create(cluster, docparser("inv", replicas={"min": 3, "max": 3}))
    wait_for(
        "3 replicas",
        lambda: (role_deployment(cluster, "inv") or {}).get("spec", {}).get("replicas") == 3,
    )
    spec = spec_of(cluster, "inv")
    spec["replicas"] = {"min": 3, "max": 6}
    set_spec(cluster, "inv", spec)
    wait_for("hpa", lambda: cluster.get(HPA, "inv"))
    wait_for("converged", lambda: converged(cluster, "inv"))
    dep = role_deployment(cluster, "inv")
    assert dep["spec"]["replicas"] == 3  # never dropped to the default of 1


def test_a_child_deleted_by_hand_returns_at_once(cluster: Cluster, monkeypatch: Any) -> None:
    """With a resync far away (10 minutes), a deleted Service or PDB comes back because the
    operator watches its children's deletion, not because a timer fired."""
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INTERVAL_S", "600")
    monkeypatch.setenv("DOCPARSER_OPERATOR_RESYNC_INITIAL_DELAY_S", "600")
    with running_operator(cluster):
        create(cluster, docparser("inv"))
        for ref in (SERVICE, PDB):
            first = wait_for(f"{ref.kind}", lambda ref=ref: cluster.get(ref, "inv"))
            cluster.client.delete(ref, cluster.namespace, "inv", uid=first["metadata"]["uid"])
            again = wait_for(
                f"{ref.kind} recreated",
                lambda ref=ref, first=first: (
                    (obj := cluster.get(ref, "inv"))
                    and obj["metadata"]["uid"] != first["metadata"]["uid"]
                    and obj
                ),
                timeout=30,
            )
            assert again["metadata"]["ownerReferences"][0]["kind"] == "DocParser"


def test_allow_from_renders_a_network_policy_and_removing_it_prunes_it(
    cluster: Cluster, operator: Any
) -> None:
    policy_ref = KNOWN_KINDS["NetworkPolicy"]
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}}]
    create(cluster, docparser("inv", traffic={"router": "service", "allowFrom": peers}))
    policy = wait_for("network policy", lambda: cluster.get(policy_ref, "inv"))
    own = {"podSelector": {"matchLabels": policy["spec"]["podSelector"]["matchLabels"]}}
    assert policy["spec"]["ingress"][0]["from"] == [*peers, own]  # and the shadow's copies
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "DocParser"
    spec = spec_of(cluster, "inv")
    del spec["traffic"]["allowFrom"]
    set_spec(cluster, "inv", spec)
    wait_for("policy pruned", lambda: cluster.get(policy_ref, "inv") is None)
