"""The operator (kopf KopfRunner) against the `cluster` fixture: the issue's scenarios."""

from __future__ import annotations

import copy
from typing import Any

from docparser_operator.apply import DOCPARSER, KNOWN_KINDS
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
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = cluster.namespace
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
