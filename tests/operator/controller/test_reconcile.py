"""children.py's pure helpers, then single reconcile passes against the `cluster` fixture."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.api.naming import FIELD_MANAGER
from docparser_operator.cli.main import render_resource
from docparser_operator.controller.credential import CredentialMemory
from docparser_operator.controller.reconcile import reconcile as reconcile_pass
from docparser_operator.core.plan.children import (
    HASH_ANNOTATION,
    Observed,
    needs_apply,
    owned_by,
    prepare,
)
from docparser_operator.core.status.transition_events import events_for
from docparser_operator.kube.client import KubeClient
from dp_helpers import CANARY_WEIGHTS, GATEWAY, decide_on, docparser, owner, revision_in
from kube_cluster import Cluster, client_for

DEPLOY, SERVICE, ROUTE = KNOWN_KINDS["Deployment"], KNOWN_KINDS["Service"], KNOWN_KINDS["HTTPRoute"]
UID = "0b7d3c5e-0000-4000-8000-000000000001"


# As in one operator run: each DocParser's internal token Secret is created once (by uid).
RUN = CredentialMemory()


def reconcile(api: KubeClient, resource: dict[str, Any], **kwargs: Any) -> Any:
    return reconcile_pass(api, resource, credentials=RUN, **kwargs)


def live_resource(name: str = "inv", **spec: Any) -> dict[str, Any]:
    dp = docparser(name, **spec)
    dp["metadata"].update(namespace="ocr", uid=UID, generation=1)
    return dp


def test_prepare_stamps_ownership() -> None:
    dp = live_resource(replicas={"min": 1, "max": 4})
    for child in prepare(render_resource(dp), owner(dp)):
        meta = child["metadata"]
        assert owned_by(child, UID)
        assert meta["ownerReferences"][0]["blockOwnerDeletion"] is True
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "docparser-operator"
        assert meta["labels"]["app.kubernetes.io/instance"] == "inv"
        assert len(meta["annotations"][HASH_ANNOTATION]) == 16


def test_owned_by_checks_the_uid_not_the_labels() -> None:
    other = {"metadata": {"ownerReferences": [{"uid": "someone-else", "controller": True}]}}
    not_controller = {"metadata": {"ownerReferences": [{"uid": UID, "controller": False}]}}
    assert not owned_by(other, UID) and not owned_by(not_controller, UID)
    assert not owned_by({"metadata": {"labels": {"app.kubernetes.io/instance": "inv"}}}, UID)


def _as_live(want: dict[str, Any]) -> dict[str, Any]:
    live = copy.deepcopy(want)
    live["metadata"]["managedFields"] = [{"manager": FIELD_MANAGER, "operation": "Apply"}]
    live["metadata"]["resourceVersion"] = "7"
    live.setdefault("status", {})["observedGeneration"] = 1
    return live


def test_needs_apply() -> None:
    dp = live_resource()
    want = next(c for c in prepare(render_resource(dp), owner(dp)) if c["kind"] == "Deployment")
    live = _as_live(want)
    assert needs_apply(want, None)
    assert not needs_apply(want, live)
    live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    assert needs_apply(want, live)  # drift on a field we set
    live = _as_live(want)
    live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/x"
    assert not needs_apply(want, live)  # a server default we never set
    live = _as_live(want)
    live["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    assert needs_apply(want, live)  # our manager lost its fields
    live = _as_live(want)
    live["metadata"]["annotations"][HASH_ANNOTATION] = "0" * 16
    assert needs_apply(want, live)  # desired set changed (e.g. a field to release)


def test_quantities_returned_as_strings_are_equal() -> None:
    dp = live_resource()
    want = next(c for c in prepare(render_resource(dp), owner(dp)) if c["kind"] == "Deployment")
    live = _as_live(want)
    limits = live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits.update({k: str(v) for k, v in limits.items()})
    assert not needs_apply(want, live)


def operator_client(cluster: Cluster) -> KubeClient:
    return client_for(cluster.kubeconfig, user_agent="docparser-operator/test")


def create(cluster: Cluster, dp: dict[str, Any]) -> dict[str, Any]:
    dp = copy.deepcopy(dp)
    dp["metadata"]["namespace"] = cluster.namespace
    return cluster.client.apply(dp, manager="gitops")


def unowned_service(cluster: Cluster, name: str, *, port: int) -> dict[str, Any]:
    """A Service with the labels of DocParser inv's children and no owner reference."""
    labels = {
        "app.kubernetes.io/managed-by": "docparser-operator",
        "app.kubernetes.io/instance": "inv",
    }
    return cluster.client.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": cluster.namespace, "labels": labels},
            "spec": {"ports": [{"port": port}]},
        }
    )


def test_second_pass_makes_zero_writes(cluster: Cluster) -> None:
    api = operator_client(cluster)
    dp = create(
        cluster, docparser("inv", traffic=GATEWAY, canary={"weights": CANARY_WEIGHTS, "weight": 10})
    )
    first = reconcile(api, dp)
    kinds = sorted(k for k, _ in first.applied)
    assert kinds == sorted(
        [
            "Deployment",
            "Deployment",
            "Service",  # the stable revision's backend
            "Service",  # the canary revision's backend
            "Service",  # <name>-canary
            "Service",  # the endpoint
            "PodDisruptionBudget",
            "HTTPRoute",
        ]
    )
    assert first.status_written
    assert_quiescent_passes(cluster, api, "inv")


def assert_quiescent_passes(cluster: Cluster, api: KubeClient, name: str) -> None:
    """What a level-triggered pass may write once its children exist, and then nothing.

    On a real cluster the Deployment and ReplicaSet controllers react to our applies (status,
    pods) on their own schedule. Once they have settled, the next pass never re-applies or
    prunes a child; it writes status only when the observed facts moved since the first
    pass (pods now exist), and the pass after it, with nothing new to see, writes nothing."""
    cluster.settle()
    settled = reconcile(api, cluster.get(DOCPARSER, name))
    assert settled.applied == [] and settled.pruned == []
    if not cluster.has_controllers:
        assert not settled.status_written  # nothing reacts on the emulator: already a no-op
    mark = cluster.mark()
    again = reconcile(api, cluster.get(DOCPARSER, name))
    assert again.applied == [] and again.pruned == [] and not again.status_written
    assert cluster.writes_since(mark) == []
    assert events_for(again) == []


def test_prune_only_owned_children(cluster: Cluster) -> None:
    api = operator_client(cluster)
    dp = create(
        cluster, docparser("inv", traffic=GATEWAY, canary={"weights": CANARY_WEIGHTS, "weight": 10})
    )
    reconcile(api, dp)
    canary = f"inv-{revision_in(dp, 'canary')}"
    stray = unowned_service(cluster, "inv-old", port=1)
    spec = copy.deepcopy(dp["spec"])
    del spec["canary"]
    spec["traffic"] = {"router": "service"}
    live = cluster.client.apply(
        {
            **docparser("inv"),
            "metadata": {"name": "inv", "namespace": cluster.namespace},
            "spec": spec,
        },
        manager="gitops",
    )
    outcome = reconcile(api, live)
    stable = f"inv-{revision_in(live)}"
    assert sorted(outcome.pruned) == sorted(
        [
            ("Deployment", canary),  # a canary revision is never kept
            ("HTTPRoute", "inv"),
            ("Service", canary),
            ("Service", stable),  # no revision backends with router service
            ("Service", "inv-canary"),
        ]
    )
    assert cluster.get(DEPLOY, canary) is None and cluster.get(ROUTE, "inv") is None
    assert cluster.get(SERVICE, "inv-old")["metadata"]["uid"] == stray["metadata"]["uid"]
    assert {e.reason for e in events_for(outcome)} >= {"Pruned"}


def test_a_squatter_the_watch_has_not_delivered_is_never_taken_over(cluster: Cluster) -> None:
    """A Service created a moment before its DocParser may not be in the operator's
    watch-fed view yet. The pass that plans to create that child must report the conflict
    and leave the object alone, not force-apply over it (which would adopt it)."""
    api = operator_client(cluster)
    squatter = unowned_service(cluster, "inv", port=9999)
    dp = create(cluster, docparser("inv"))
    outcome = reconcile(api, dp, observer=LaggingObserver(api))
    assert ("Service", "inv") in outcome.conflicts
    assert ("Service", "inv") not in outcome.applied
    assert "ChildConflict" in [p.reason for p in outcome.problems]
    live = cluster.get(SERVICE, "inv")
    assert live["metadata"]["resourceVersion"] == squatter["metadata"]["resourceVersion"]
    assert not live["metadata"].get("ownerReferences")
    assert ("Deployment", f"inv-{revision_in(dp)}") in outcome.applied  # the rest goes on
    degraded = next(c for c in outcome.status.to_wire()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ChildConflict" and "Service inv" in degraded["message"]


def test_a_new_docparsers_children_are_created_without_a_read_before(cluster: Cluster) -> None:
    """The first pass of a new DocParser, from a watch view that holds none of its children,
    creates each with one apply that only creates (kube/client.apply_new): no GET of the
    children named after the DocParser, nor of the shadow ConfigMap (read by name)."""
    from docparser_operator.kube.observer import IndexedObserver

    api = operator_client(cluster)
    canary = {"weights": CANARY_WEIGHTS, "weight": 0, "shadow": {"percent": 10}}
    dp = create(cluster, docparser("inv", traffic=GATEWAY, canary=canary))
    mark = cluster.mark()
    outcome = reconcile(api, dp, observer=IndexedObserver({}, client=api))
    sent = cluster.requests_since(mark)
    assert [r.path for r in sent if r.method == "GET"] == []
    named = {("Service", "inv"), ("PodDisruptionBudget", "inv"), ("HTTPRoute", "inv")}
    assert named | {("ConfigMap", "inv-shadow")} <= set(outcome.applied)
    applies = [r for r in sent if r.method == "PATCH" and not r.path.endswith("/status")]
    assert len(applies) == len(outcome.applied)
    shadow = cluster.get(KNOWN_KINDS["ConfigMap"], "inv-shadow")
    assert shadow is not None and owned_by(shadow, dp["metadata"]["uid"])
    managers = {(m["manager"], m["operation"]) for m in shadow["metadata"]["managedFields"]}
    assert managers == {(FIELD_MANAGER, "Apply")}  # as a plain apply leaves it


def test_a_child_of_ours_the_view_lacks_is_applied_after_one_read(cluster: Cluster) -> None:
    """A pass whose view lacks children it made (retried before the watch delivered them):
    the apply that only creates finds each (409), one read shows it ours, and it is applied
    as usual: no conflict, and the pass sends one GET per such child."""
    api = operator_client(cluster)
    dp = create(cluster, docparser("inv"))
    reconcile(api, dp)
    mark = cluster.mark()
    outcome = reconcile(api, cluster.get(DOCPARSER, "inv"), observer=LaggingObserver(api))
    assert not outcome.conflicts
    assert {("Service", "inv"), ("PodDisruptionBudget", "inv")} <= set(outcome.applied)
    gets = [r.path for r in cluster.requests_since(mark) if r.method == "GET"]
    assert sorted(p.rsplit("/", 2)[-2] for p in gets) == sorted(
        ["poddisruptionbudgets", "services"]  # no shadow: no ConfigMap (render/shadow.py)
    )


def test_a_config_map_squatter_is_left_alone_by_a_new_docparser(cluster: Cluster) -> None:
    """Someone's ConfigMap named like the shadow's, there before the DocParser: the first pass
    (which does not read it first) of one with a shadow reports the conflict and leaves it as
    it was. One without a shadow renders no ConfigMap, so it neither reads nor writes it."""
    from docparser_operator.kube.observer import IndexedObserver

    api = operator_client(cluster)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.json": "{}"}}
    squatter, other = (
        cluster.client.create({**body, "metadata": {"name": n, "namespace": cluster.namespace}})
        for n in ("inv-shadow", "plain-shadow")
    )
    plain = create(cluster, docparser("plain"))
    mark = cluster.mark()
    outcome = reconcile(api, plain, observer=IndexedObserver({}, client=api))
    assert not outcome.conflicts
    assert [r for r in cluster.requests_since(mark) if "/configmaps" in r.path] == []
    untouched = cluster.get(KNOWN_KINDS["ConfigMap"], "plain-shadow")
    assert untouched["metadata"]["resourceVersion"] == other["metadata"]["resourceVersion"]
    canary = {"weights": CANARY_WEIGHTS, "weight": 0, "shadow": {"percent": 10}}
    dp = create(cluster, docparser("inv", canary=canary))
    outcome = reconcile(api, dp, observer=IndexedObserver({}, client=api))
    assert ("ConfigMap", "inv-shadow") in outcome.conflicts
    assert ("ConfigMap", "inv-shadow") not in outcome.applied
    live = cluster.get(KNOWN_KINDS["ConfigMap"], "inv-shadow")
    assert live["metadata"]["resourceVersion"] == squatter["metadata"]["resourceVersion"]
    assert not live["metadata"].get("ownerReferences")
    assert ("Service", "inv") in outcome.applied  # the rest goes on


@dataclass
class LaggingObserver:
    """A watch-fed view that has not delivered anything yet: no children, no pods."""

    client: KubeClient

    def __call__(self, namespace: str, name: str, *, new: bool = False) -> Observed:
        return Observed({}, [])

    def remember(self, *_: Any) -> None:
        """Nothing: every pass of this observer sees the same empty view."""


def test_delete_precondition_spares_a_same_named_newcomer(cluster: Cluster) -> None:
    api = operator_client(cluster)
    svc = cluster.client.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "x", "namespace": cluster.namespace},
            "spec": {"ports": [{"port": 1}]},
        }
    )
    assert api.delete(SERVICE, cluster.namespace, "x", uid="not-" + svc["metadata"]["uid"]) is False
    assert cluster.get(SERVICE, "x") is not None
    assert api.delete(SERVICE, cluster.namespace, "x", uid=svc["metadata"]["uid"]) is True


def test_weight_change_event() -> None:
    from docparser_operator.api.status_models import DocParserStatus
    from docparser_operator.core.status.outcome import Outcome

    old = {"canary": {"version": "v2", "weight": 10, "readyReplicas": 1}}
    new = {"canary": {"version": "v2", "weight": 30, "readyReplicas": 1}}
    typed = DocParserStatus.model_validate
    (event,) = events_for(Outcome(name="inv", previous_status=typed(old), status=typed(new)))
    assert (event.type, event.reason, event.message) == (
        "Normal",
        "CanaryWeightChanged",
        "canary traffic 10% -> 30%",
    )


def test_missing_gateway_api_is_degraded_not_fatal(cluster: Cluster) -> None:
    if cluster.emulator is None:
        pytest.skip("needs an API server without the Gateway API CRDs (the emulator can hide them)")
    cluster.emulator.missing.add("gateway.networking.k8s.io/v1/httproutes")
    api = operator_client(cluster)
    dp = create(cluster, docparser("inv", traffic=GATEWAY))
    outcome = reconcile(api, dp)
    assert [p.reason for p in outcome.problems] == ["MissingAPI"]
    assert ("Deployment", f"inv-{revision_in(dp)}") in outcome.applied
    degraded = next(c for c in outcome.status.to_wire()["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "MissingAPI")
    assert "HTTPRoute" in degraded["message"]


def test_rapidocr_without_weights_reconciles_and_settles(cluster: Cluster) -> None:
    api = operator_client(cluster)
    dp = docparser("cpu", engine="rapidocr", resources={"gpu": 0})
    del dp["spec"]["weights"]
    live = create(cluster, dp)
    first = reconcile(api, live)
    assert first.problems == [] and ("Deployment", f"cpu-{revision_in(live)}") in first.applied
    assert "version" not in first.status.to_wire()["stable"]
    assert_quiescent_passes(cluster, api, "cpu")


def test_switch_to_the_gateway_routes_there_before_the_service_narrows() -> None:
    """Pure: `router: service` with a live 50 % canary, then `router: gateway`. The endpoint
    Service narrows to the stable revision in the same pass that creates the HTTPRoute; the
    route is written first, so the canary's pods never stand outside every entry point."""
    from docparser_operator.core.plan.children import Observed

    spec = {"replicas": {"min": 2, "max": 2}, "canary": {"weights": CANARY_WEIGHTS, "weight": 50}}
    before = live_resource(**spec)
    live: dict[tuple[str, str], dict[str, Any]] = {}
    for child in prepare(render_resource(before), owner(before)):
        obj = _as_live(child)
        if obj["kind"] == "Deployment":
            obj["status"]["readyReplicas"] = obj["spec"]["replicas"]
        live[(obj["kind"], obj["metadata"]["name"])] = obj
    after = live_resource(**spec, traffic=GATEWAY)
    actions = decide_on(after, Observed(live, []), previous_weight=50).actions
    order = [a.key for a in actions if a.verb == "apply"]
    assert ("HTTPRoute", "inv") in order and ("Service", "inv") in order, order
    assert order.index(("HTTPRoute", "inv")) < order.index(("Service", "inv")), order
