"""Rendered children on a real kube-apiserver: schemas, server-side-apply ownership, GC.

WHY against the real server: whether a Deployment, HPA, PDB or HTTPRoute is valid, who owns a
field after two managers applied it, and what the garbage collector deletes are decided by the
API server and the controllers, not by the operator; only the real ones can confirm the design.
The operator's own I/O (docparser_operator.kube.client.KubeClient, field manager
"docparser-operator", force=True) and renderers (render_all) are the code under test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane.harness import ControlPlane
from controlplane.kubeapi import KubeApi, KubeApiError
from crd_objects import BASE_SPEC, SHA_B, docparser, path, with_changes
from docparser_operator.api.kinds import DOCPARSER, ref_for
from docparser_operator.api.naming import FIELD_MANAGER
from docparser_operator.cli.main import render_resource
from docparser_operator.kube.client import KubeClient
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

pytestmark = pytest.mark.realcluster

OTHER_MANAGER = "kubectl"  # what `kubectl apply --server-side` uses


@pytest.fixture
def operator_client(real_apiserver: ControlPlane) -> Iterator[KubeClient]:
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(
        config_file=str(real_apiserver.kubeconfig), client_configuration=cfg
    )
    yield KubeClient(cfg)


def create_and_render(api: KubeApi, namespace: str, name: str, spec: dict) -> list[dict]:
    """Create the DocParser on the server, then render its children from the live object."""
    live = api.create(path(namespace), docparser(name, spec))
    return render_resource(live)


def object_path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return ref_for(obj).path(meta.get("namespace"), meta["name"])


def manager_fields(obj: dict[str, Any], manager: str) -> str:
    """The managedFields (as JSON text) a manager holds, to check who owns what."""
    entries = [m for m in (obj["metadata"].get("managedFields") or []) if m["manager"] == manager]
    return json.dumps([m.get("fieldsV1", {}) for m in entries])


SPECS = {
    "service-router": with_changes(replicas={"min": 2, "max": 2}),
    "gateway-canary-autoscaled": with_changes(
        replicas={"min": 2, "max": 6},
        traffic={"router": "gateway", "gatewayRef": {"name": "web", "namespace": "infra"}},
        canary={
            "weights": {**BASE_SPEC["weights"], "version": "2026-03-01", "sha256": SHA_B},
            "weight": 10,
        },
        auth={"apiKeySecretRef": {"name": "ocr-keys"}},
    ),
    "rapidocr-cpu": {"engine": "rapidocr", "runtime": {"image": "registry.example/rt:0.1"}},
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_every_rendered_child_is_accepted_and_reapply_is_a_no_op(
    real_api: KubeApi, real_namespace: str, operator_client: KubeClient, case: str
) -> None:
    children = create_and_render(real_api, real_namespace, case, SPECS[case])
    owner_uid = real_api.get(path(real_namespace, case))["metadata"]["uid"]
    applied = [operator_client.apply(child) for child in children]

    kinds = {c["kind"] for c in children}
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= kinds
    for child, live in zip(children, applied, strict=True):
        assert live["kind"] == child["kind"]
        assert live["metadata"]["ownerReferences"][0]["uid"] == owner_uid
        assert FIELD_MANAGER in {m["manager"] for m in live["metadata"]["managedFields"]}

    # Re-apply what a resync renders: the server must record no change (no new resourceVersion,
    # no new managedFields time). Deployments are also written by the deployment controller
    # (status), so for them only the operator's own managedFields entry is compared.
    live = real_api.get(path(real_namespace, case))
    for child in render_resource(live):
        before = real_api.get(object_path(child))
        after = operator_client.apply(child)
        assert operator_entry(after) == operator_entry(before), child["metadata"]["name"]
        if child["kind"] != "Deployment":
            assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def operator_entry(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in obj["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER]


def test_conflicting_field_manager_is_overridden_and_other_fields_kept(
    real_api: KubeApi, real_namespace: str, operator_client: KubeClient
) -> None:
    children = create_and_render(real_api, real_namespace, "owned", SPECS["service-router"])
    deployment = next(c for c in children if c["kind"] == "Deployment")
    operator_client.apply(deployment)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    theirs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment["metadata"]["name"], "annotations": {"team": "ocr"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": container["name"], "image": "registry.example/hotfix:9"}
                    ]
                }
            }
        },
    }
    target = object_path(deployment)

    # A second manager may not silently take a field the operator applied...
    with pytest.raises(KubeApiError) as conflict:
        real_api.apply(target, theirs, field_manager=OTHER_MANAGER)
    assert conflict.value.status_code == 409
    assert f'conflict with "{FIELD_MANAGER}"' in conflict.value.body["message"]
    assert ".image" in conflict.value.body["message"]

    # ...but can force it, and then owns it.
    forced = real_api.apply(target, theirs, field_manager=OTHER_MANAGER, force=True)
    assert (
        forced["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/hotfix:9"
    )
    assert '"f:image"' in manager_fields(forced, OTHER_MANAGER)

    # The operator's next reconcile (force apply) takes its field back and leaves the rest alone.
    restored = operator_client.apply(deployment)
    assert restored["spec"]["template"]["spec"]["containers"][0]["image"] == container["image"]
    assert restored["metadata"]["annotations"]["team"] == "ocr"
    assert '"f:image"' in manager_fields(restored, FIELD_MANAGER)
    assert '"f:image"' not in manager_fields(restored, OTHER_MANAGER)


def test_autoscaler_owned_size_survives_a_gitops_reapply(
    real_api: KubeApi, real_namespace: str
) -> None:
    """The one HPA writes the DocParser's size through /scale as its own field manager; a
    GitOps tool re-applying the manifest (which never names replicas.desired) leaves it."""
    spec = with_changes(replicas={"min": 1, "max": 4})
    children = create_and_render(real_api, real_namespace, "auto", spec)
    (hpa,) = [c for c in children if c["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "name": "auto",
    }
    dp_path = f"/apis/docparser.io/v1alpha1/namespaces/{real_namespace}/docparsers/auto"
    manifest = {
        "apiVersion": "docparser.io/v1alpha1",
        "kind": "DocParser",
        "metadata": {"name": "auto", "namespace": real_namespace},
        "spec": spec,
    }
    real_api.apply(dp_path, manifest, field_manager="argocd-controller")
    real_api.request(  # what the HPA controller does
        "PATCH",
        f"{dp_path}/scale",
        {"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
        params={"fieldManager": "horizontal-pod-autoscaler"},
    )
    again = real_api.apply(dp_path, manifest, field_manager="argocd-controller")
    assert again["spec"]["replicas"]["desired"] == 3


def test_garbage_collector_removes_children_of_a_deleted_docparser(
    real_apiserver: ControlPlane,
    real_api: KubeApi,
    real_namespace: str,
    operator_client: KubeClient,
) -> None:
    if not real_apiserver.controller_manager:
        pytest.skip("kube-controller-manager not built: no garbage collector on this control plane")
    children = create_and_render(real_api, real_namespace, "gc", SPECS["service-router"])
    for child in children:
        operator_client.apply(child)
    deployment = next(c for c in children if c["kind"] == "Deployment")

    # The deployment controller runs: the Deployment gets a ReplicaSet it owns.
    replicasets = real_api.wait_for(
        "a ReplicaSet of the Deployment",
        lambda: real_api.get(f"/apis/apps/v1/namespaces/{real_namespace}/replicasets")["items"],
        timeout=30,
    )
    assert (
        replicasets[0]["metadata"]["ownerReferences"][0]["name"] == deployment["metadata"]["name"]
    )

    real_api.delete(path(real_namespace, "gc"))
    deadline = time.monotonic() + 60
    remaining = children
    while remaining and time.monotonic() < deadline:
        remaining = [
            c
            for c in children
            if operator_client.get(ref_for(c), real_namespace, c["metadata"]["name"])
        ]
        time.sleep(0.2)
    assert not remaining, [c["metadata"]["name"] for c in remaining]
    assert operator_client.get(DOCPARSER, real_namespace, "gc") is None


RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/{}"


def grant_user(api: KubeApi, namespace: str, name: str, rules: list[dict]) -> None:
    """A Role with ``rules`` bound to the harness's unprivileged user in ``namespace``."""
    api.create(RBAC.format(namespace, "roles"), {"apiVersion": "rbac.authorization.k8s.io/v1",
               "kind": "Role", "metadata": {"name": name}, "rules": rules})  # fmt: skip
    api.create(
        RBAC.format(namespace, "rolebindings"),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": ControlPlane.USER_NAME}],
        },
    )


def user_client(control_plane: ControlPlane) -> KubeClient:
    """The operator's client as the harness's unprivileged user (RBAC decides)."""
    cfg = k8s_client.Configuration()
    cfg.host, cfg.ssl_ca_cert = control_plane.server, control_plane.ca_file
    cfg.api_key = {"authorization": f"Bearer {control_plane.user_token}"}
    return KubeClient(cfg)


@pytest.mark.parametrize("missing", ["PodDisruptionBudget", "HTTPRoute"])
def test_a_missing_permission_is_degraded_forbidden_naming_it(
    real_apiserver: ControlPlane, real_api: KubeApi, real_namespace: str, missing: str
) -> None:
    """With RBAC on, the operator's identity may do everything but write PDBs, or list
    HTTPRoutes (a chart trimmed by hand): the other children are applied, and the status
    says Degraded Forbidden naming the kind, instead of a retry loop."""
    from docparser_operator.controller.reconcile import reconcile

    verbs = ["get", "list", "watch", "create", "patch", "delete", "update"]
    rules = [
        {
            "apiGroups": ["docparser.io"],
            "resources": ["docparsers", "docparsers/status"],
            "verbs": verbs,
        },
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": verbs},
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["services", "pods", "events", "persistentvolumeclaims"],
            "verbs": verbs,
        },
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": verbs},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": verbs},
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"], "verbs": verbs}
        if missing != "HTTPRoute"
        else {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},  # none at all
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": verbs},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": ["policy"],
            "resources": ["poddisruptionbudgets"],
            "verbs": ["get", "list"] if missing == "PodDisruptionBudget" else verbs,
        },
    ]
    grant_user(real_api, real_namespace, "trimmed", rules)
    live = real_api.create(path(real_namespace), docparser("rbac", SPECS["service-router"]))
    outcome = real_api.wait_for(  # the RoleBinding takes a moment to reach the authorizer
        "a pass with the trimmed role",
        lambda: (o := reconcile(user_client(real_apiserver), live)).applied and o,
        timeout=30,
    )
    forbidden = [p for p in outcome.problems if p.reason == "Forbidden"]
    assert forbidden and missing in forbidden[0].message
    assert (
        "Deployment",
        next(k for k in outcome.applied if k[0] == "Deployment")[1],
    ) in outcome.applied
    status = real_api.get(path(real_namespace, "rbac"))["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "Forbidden"


def test_the_operator_names_watches_rbac_denies_before_it_starts(
    real_apiserver: ControlPlane, real_api: KubeApi, real_namespace: str
) -> None:
    """kopf waits for every index's first list before running any handler, and retries a
    forbidden watch for ever: a trimmed ClusterRole would leave the operator silent. The
    start-up check asks the API server (SelfSubjectAccessReview) and names what is denied."""
    from docparser_operator.api.kinds import INDEXED
    from docparser_operator.kube import permissions

    user = user_client(real_apiserver)
    kinds = [(r.group, r.plural) for r in INDEXED]
    denied = permissions.missing(user, kinds, [real_namespace])
    assert {d.resource for d in denied} == {plural for _, plural in kinds}  # not bound yet
    watch_all = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["list", "watch"]}]
    grant_user(real_api, real_namespace, "watcher", watch_all)
    real_api.wait_for(
        "the binding to reach the authorizer",
        lambda: not permissions.missing(user, kinds, [real_namespace]),
        timeout=30,
    )
    denied = permissions.missing(user, kinds, [""])  # bound in one namespace, not cluster-wide
    assert denied and "in all namespaces" in str(denied[0])


def test_without_node_reads_drains_get_pdb_only_protection(
    real_apiserver: ControlPlane, real_api: KubeApi, real_namespace: str
) -> None:
    """An operator limited to a namespace, with no cluster-scope read of nodes: the start-up
    check (SelfSubjectAccessReview) says so, its passes render the budget that cannot hold a
    drain for ever (maxUnavailable 1, kube/nodes.py); once nodes may be listed (the chart's
    -discovery ClusterRole), the budget holds evictions for replacements (minAvailable)."""
    from docparser_operator.controller.reconcile import reconcile
    from docparser_operator.kube.nodes import CordonedNodes

    verbs = ["get", "list", "watch", "create", "patch", "delete", "update"]
    groups = ["docparser.io", "apps", "", "policy", "autoscaling", "batch", "networking.k8s.io"]
    grant_user(real_api, real_namespace, "ns-only", [
        {"apiGroups": groups, "resources": ["*"], "verbs": verbs},
    ])  # fmt: skip
    user = user_client(real_apiserver)
    nodes = CordonedNodes(user)
    assert nodes.start() is False and nodes() is None
    live = real_api.create(path(real_namespace), docparser("pdb", SPECS["service-router"]))
    real_api.wait_for(
        "a pass with the namespaced role",
        lambda: reconcile(user_client(real_apiserver), live).applied,
        timeout=30,
    )
    pdb = real_api.get(f"/apis/policy/v1/namespaces/{real_namespace}/poddisruptionbudgets/pdb")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]

    role = f"nodes-{real_namespace}"
    cluster_rbac = "/apis/rbac.authorization.k8s.io/v1/"
    rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    real_api.create(cluster_rbac + "clusterroles", {"metadata": {"name": role}, "rules": [rule]})
    real_api.create(
        cluster_rbac + "clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "User", "name": ControlPlane.USER_NAME}],
        },
    )
    try:
        real_api.wait_for("nodes readable", lambda: CordonedNodes(user).start(), timeout=30)
        live = real_api.get(path(real_namespace, "pdb"))
        reconcile(user_client(real_apiserver), live)
        pdb = real_api.get(f"/apis/policy/v1/namespaces/{real_namespace}/poddisruptionbudgets/pdb")
        assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]  # size
    finally:
        real_api.delete(cluster_rbac + f"clusterrolebindings/{role}")
        real_api.delete(cluster_rbac + f"clusterroles/{role}")
