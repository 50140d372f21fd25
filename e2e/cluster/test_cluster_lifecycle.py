"""Scenarios 5 and 6 on real pods: deleting a DocParser removes every child and the pods
drain; pvc:// weights are verified where they lie, by serve (right sha256 serves, wrong never
becomes Ready and the DocParser says why). And the operator itself: its leader is killed.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from cluster_settle import settled_start
from cluster_support import (
    conditions,
    docparser,
    owned_children,
    page_png,
    parse,
    record,
    serving_url,
    wait_for,
    wait_ready,
    weights_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_delete_removes_every_child_and_pods_drain(cluster, namespace):
    weights = weights_volume(cluster, namespace, ("v1",))
    name = "gone"
    cluster.apply(
        docparser(name, namespace, cluster.runtime_image, weights=weights["v1"], replicas=2)
    )
    wait_ready(cluster, namespace, name, timeout=300)
    settled_start(cluster, namespace, name, docparser=name, replicas=2)
    assert owned_children(cluster, namespace, name)
    pods = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
    grace = pods[0]["spec"]["terminationGracePeriodSeconds"]
    start = time.monotonic()
    cluster.kubectl("-n", namespace, "delete", "dp", name, "--wait=false")

    # While they go, pods are Terminating (preStop runs), never killed at once.
    def terminating() -> bool:
        live = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
        return not live or all(p["metadata"].get("deletionTimestamp") for p in live)

    wait_for(cluster, namespace, "pods marked for deletion", terminating, 60, interval=0.5)
    wait_for(
        cluster,
        namespace,
        "every child gone",
        lambda: not owned_children(cluster, namespace, name),
        grace + 60,
        interval=1,
    )
    took = time.monotonic() - start
    record("delete", f"DocParser with 2 pods: every child gone after {took:.0f}s (grace {grace}s)")
    assert cluster.kubectl("-n", namespace, "get", "dp", "-o", "name").strip() == ""


def test_mounted_weights_are_verified_against_the_sha256(cluster, namespace):
    weights = weights_volume(cluster, namespace, ("v1",))
    good = weights["v1"]
    cluster.apply(docparser("good", namespace, cluster.runtime_image, weights=good))
    wrong = type(good)(good.version, good.uri, "0" * 64)
    cluster.apply(docparser("wrong", namespace, cluster.runtime_image, weights=wrong))

    obj = wait_ready(cluster, namespace, "good", timeout=300)
    assert obj["status"]["stable"]["version"] == "v1"
    reply = parse(serving_url(cluster, namespace, "good"), page_png())
    assert reply.status_code == 200 and reply.json()["model"]["version"] == "v1", reply.text

    def says_why() -> dict | None:
        dp = cluster.get("docparser", "wrong", namespace)
        ready = conditions(dp).get("Ready") or {}
        degraded = conditions(dp).get("Degraded") or {}
        return (
            dp
            if degraded.get("reason") == "WeightsChecksumMismatch" and ready.get("status") != "True"
            else None
        )

    dp = wait_for(cluster, namespace, "the wrong sha256 reported", says_why, 180)
    degraded = conditions(dp)["Degraded"]
    record(
        "weights",
        f"wrong sha256: Degraded={degraded['status']} {degraded['reason']}: "
        f"{degraded['message'][:160]}",
    )
    pods = cluster.items("pods", namespace, "app.kubernetes.io/instance=wrong")
    assert pods and not any(
        c.get("ready") for p in pods for c in (p.get("status") or {}).get("containerStatuses") or []
    )


def test_killing_the_leading_operator_hands_over_to_the_standby(cluster, namespace):
    """The chart runs 2 operator replicas on one Lease: force-kill the leader's pod mid-rollout
    (a new DocParser's Deployment created, no pod Ready) and the rollout still completes, driven
    by the replica that took the Lease."""
    ns = os.environ.get("DOCPARSER_E2E_OPERATOR_NAMESPACE", "docparser-system")
    leases = json.loads(
        cluster.kubectl("-n", ns, "get", "leases", "-o", "json", check=False) or "{}"
    )
    lease = next(
        (x for x in leases.get("items", []) if x["metadata"]["name"] == "docparser-operator"), None
    )
    if lease is None:
        pytest.skip(f"no docparser-operator Lease in {ns}: the operator runs without election")
    holder = lease["spec"]["holderIdentity"]
    leader_pod = holder.rsplit("_", 1)[0]
    start = time.monotonic()
    # Mid-rollout: the leader has created the revision's Deployment, no pod is Ready yet.
    cluster.apply(docparser("after", namespace, cluster.runtime_image))
    wait_for(
        cluster,
        namespace,
        "the rollout started",
        lambda: cluster.items("deployments", namespace, "app.kubernetes.io/instance=after"),
        60,
        interval=0.2,
    )
    cluster.kubectl("-n", ns, "delete", "pod", leader_pod, "--grace-period=0", "--force")
    wait_ready(cluster, namespace, "after", timeout=240)
    took = time.monotonic() - start
    new_holder = cluster.get("lease", "docparser-operator", ns)["spec"]["holderIdentity"]
    assert not new_holder.startswith(leader_pod + "_"), (holder, new_holder)
    record(
        "leader election",
        f"leader pod killed mid-rollout: the DocParser Ready {took:.0f}s after the apply "
        f"(Lease {holder} -> {new_holder})",
    )
