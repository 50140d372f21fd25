"""Node drains on the emulator and the real API server (core/plan/drain.py, render/pdb.py).

Nodes here are Node objects without a kubelet; the kubelet stand-in (kubelet_sim.py) plays the
scheduler (a Binding to a schedulable node) and the kubelet (Ready after a delay). On the real
API server the disruption controller keeps the PDB's status and evictions go through the
Eviction API (``pods/<name>/eviction``, what ``kubectl drain`` calls): a refused one is 429. A
pod evicted there keeps its ``deletionTimestamp`` for ever (no kubelet finishes it), as on a
dead node: it must count neither as leaving nor as capacity. The emulator has no Eviction API,
so there the test checks the budget's spec and deletes the pod as the drain would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from docparser_operator.api.kinds import DOCPARSER, KNOWN_KINDS
from docparser_operator.kube.client import ApiError
from dp_helpers import PDB, condition, create, docparser, event_reasons
from gitopscheck.checker import GitOpsCheck
from kube_cluster import Cluster, wait_for
from kubelet_sim import Kubelet
from traffic_sampler import TrafficSampler

NODE, POD, DEPLOY = KNOWN_KINDS["Node"], KNOWN_KINDS["Pod"], KNOWN_KINDS["Deployment"]
STEP = 30.0


class Nodes:
    """Two kubelet-less Nodes of this test; ``schedulable`` is the scheduler's view: nodes
    not cordoned, among the ``open`` ones (a node not open yet is full, as with no free GPU).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        tag = uuid.uuid4().hex[:6]
        self.names = [f"drain-{tag}-a", f"drain-{tag}-b"]
        self.cordoned: set[str] = set()
        self.open = set(self.names)
        for name in self.names:
            cluster.client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    def schedulable(self) -> list[str]:
        return [n for n in self.names if n in self.open and n not in self.cordoned]

    def cordon(self, name: str) -> None:
        """What ``kubectl cordon`` (the first step of ``kubectl drain``) writes."""
        self.cordoned.add(name)
        self.cluster.client.patch(NODE, None, name, {"spec": {"unschedulable": True}})

    def remove(self) -> None:
        for name in self.names:
            node = self.cluster.client.get(NODE, None, name)
            if node is not None:
                self.cluster.client.delete(NODE, None, name, uid=node["metadata"]["uid"])


@pytest.fixture
def nodes(cluster: Cluster) -> Iterator[Nodes]:
    made = Nodes(cluster)
    try:
        yield made
    finally:
        made.remove()


def pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return cluster.list(POD, f"app.kubernetes.io/instance={name},docparser.io/revision")


def live_pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, name) if not p["metadata"].get("deletionTimestamp")]


def ready_pod(cluster: Cluster, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        dp = cluster.get(DOCPARSER, name) or {}
        if condition(cluster, name, "Ready").get("status") != "True":
            return None
        ours = [p for p in live_pods(cluster, name) if p["spec"].get("nodeName")]
        return ours[0] if len(ours) == 1 and (dp.get("status") or {}).get("replicas") else None

    return wait_for("one Ready pod on a node", probe, timeout=STEP)


def replicas(cluster: Cluster, name: str) -> int:
    (dep,) = [d for d in cluster.list(DEPLOY, f"app.kubernetes.io/instance={name}")]
    return int(dep["spec"]["replicas"])


def budget(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((cluster.get(PDB, name) or {}).get("spec") or {})


def drains(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return list(((cluster.get(DOCPARSER, name) or {}).get("status") or {}).get("drains") or [])


def evict(cluster: Cluster, pod: dict[str, Any]) -> bool:
    """The Eviction API (real API server), or a plain delete where there is none (emulator).
    False: refused by the disruption budget (429)."""
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    if not cluster.has_controllers:
        cluster.client.delete(POD, cluster.namespace, name, uid=uid)
        return True
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": cluster.namespace},
    }
    try:
        cluster.client.request("POST", POD.path(cluster.namespace, name, "eviction"), body=eviction)
    except ApiError as exc:
        if exc.status == 429:
            return False
        raise
    return True


def test_a_drain_replaces_the_only_pod_before_the_budget_lets_it_go(
    cluster: Cluster,
    operator: Any,
    nodes: Nodes,
    gitops_check_optional: GitOpsCheck | None,
) -> None:
    """replicas 1, maxSurge 1: cordon -> a replacement, Unschedulable while the other node is
    full (Degraded DrainBlocked in the scheduler's words; the eviction refused) -> the node
    frees up -> the replacement Ready -> the eviction allowed -> back to 1 pod, never without
    a Ready one, and the evicted pod, stuck terminating, uses no surge and is no capacity."""
    first, other = nodes.names
    nodes.open = {first}  # the other node is full until the test frees it
    with Kubelet(cluster, ready_after=0.5, nodes=nodes.schedulable):
        create(cluster, docparser("dr"))
        old = ready_pod(cluster, "dr")
        assert old["spec"]["nodeName"] == first
        wait_for("the budget holds", lambda: budget(cluster, "dr").get("minAvailable") == 1)
        assert "maxUnavailable" not in budget(cluster, "dr")
        with TrafficSampler(
            cluster, "dr", floor=1, interval=0.1, gitops=gitops_check_optional
        ) as sampler:
            nodes.cordon(old["spec"]["nodeName"])
            wait_for("a replacement", lambda: replicas(cluster, "dr") == 2, timeout=STEP)
            (entry,) = wait_for(
                "the replacement Unschedulable: the drain Blocked",
                lambda: [d for d in drains(cluster, "dr") if d.get("phase") == "Blocked"],
                timeout=STEP,
            )
            assert entry["node"] == first and entry["pods"] == 1
            degraded = condition(cluster, "dr", "Degraded")
            assert degraded["reason"] == "DrainBlocked", degraded
            assert "cannot be scheduled: 0/2 nodes are available" in degraded["message"]
            if cluster.has_controllers:
                assert not evict(cluster, old)  # no Ready replacement: 429
            nodes.open.add(other)  # a GPU frees up (an autoscaler's node): it proceeds
            wait_for(
                "the replacement Ready",
                lambda: [d.get("phase") for d in drains(cluster, "dr")] == ["Evictable"],
                timeout=STEP,
            )
            # the operator's part is done (a cordon without a drain leaves nothing Progressing)
            assert condition(cluster, "dr", "Progressing")["status"] == "False"
            wait_for("the eviction", lambda: evict(cluster, old), timeout=STEP, interval=0.5)
            wait_for("back to its size", lambda: replicas(cluster, "dr") == 1, timeout=STEP)
            wait_for("the drain over", lambda: not drains(cluster, "dr"), timeout=STEP)
            wait_for(
                "Progressing ends",
                lambda: condition(cluster, "dr", "Progressing").get("status") == "False",
                timeout=STEP,
            )
        assert not sampler.violations, sampler.report()
        assert len(sampler.samples) >= 5, sampler.report()
        if cluster.has_controllers:  # the evicted pod stays terminating: no kubelet ends it
            stuck = [
                p for p in pods(cluster, "dr") if p["metadata"]["uid"] == old["metadata"]["uid"]
            ]
            assert stuck and stuck[0]["metadata"].get("deletionTimestamp")
            assert replicas(cluster, "dr") == 1  # it took no surge and no capacity
        left = wait_for(
            "one pod left", lambda: (p := live_pods(cluster, "dr")) and len(p) == 1 and p
        )
        assert left[0]["spec"]["nodeName"] != old["spec"]["nodeName"]
        assert {"DrainStarted", "DrainBlocked", "DrainReplaced"} <= event_reasons(cluster, "dr")


def test_without_room_the_eviction_waits_for_the_deadline_then_proceeds(
    cluster: Cluster, operator: Any, nodes: Nodes, gitops_check_optional: GitOpsCheck | None
) -> None:
    """maxSurge 0: no replacement may start, so the budget holds with Degraded DrainBlocked
    naming the node, until drainTimeoutSeconds; then it relaxes, the drain evicts, and status
    and an Event name the capacity lost."""
    with Kubelet(cluster, ready_after=0.5, nodes=nodes.schedulable):
        create(cluster, docparser("blk", rollout={"maxSurge": 0, "drainTimeoutSeconds": 6}))
        old = ready_pod(cluster, "blk")
        node = old["spec"]["nodeName"]
        nodes.cordon(node)
        wait_for(
            "DrainBlocked",
            lambda: condition(cluster, "blk", "Degraded").get("reason") == "DrainBlocked",
            timeout=STEP,
        )
        degraded = condition(cluster, "blk", "Degraded")
        assert node in degraded["message"] and "maxSurge is 0" in degraded["message"]
        assert [d["phase"] for d in drains(cluster, "blk")] == ["Blocked"]  # same status write
        assert replicas(cluster, "blk") == 1 and budget(cluster, "blk")["minAvailable"] == 1
        assert condition(cluster, "blk", "Stalled").get("status") == "False"  # advisory
        if gitops_check_optional is not None:  # it serves at its size: nothing to wait for
            verdict = gitops_check_optional.verdict(cluster.get(DOCPARSER, "blk"))
            assert verdict == ("Current", "Healthy"), verdict
        if cluster.has_controllers:
            assert not evict(cluster, old)
        wait_for(
            "the deadline",
            lambda: budget(cluster, "blk").get("minAvailable") == 0,  # none Ready elsewhere
            timeout=STEP,
        )
        wait_for(
            "status names the deadline",
            lambda: [d["phase"] for d in drains(cluster, "blk")] == ["DeadlineExceeded"],
            timeout=STEP,
        )
        assert "capacity lost 1 pod(s)" in condition(cluster, "blk", "Degraded")["message"]
        wait_for("its Event", lambda: "DrainDeadlineExceeded" in event_reasons(cluster, "blk"))
        wait_for("the eviction", lambda: evict(cluster, old), timeout=STEP, interval=0.5)
        wait_for("the drain over", lambda: not drains(cluster, "blk"), timeout=STEP)
        wait_for(
            "the budget holds again",
            lambda: budget(cluster, "blk").get("minAvailable") == 1,
            timeout=STEP,
        )
        ready_pod(cluster, "blk")  # replaced on the other node once the old one went


def test_a_replacement_no_node_can_take_does_not_hold_the_drain_past_its_deadline(
    cluster: Cluster, operator: Any, nodes: Nodes
) -> None:
    """maxSurge 1 and the other node full: the replacement stays Pending, which the disruption
    controller counts as an expected pod. Past drainTimeoutSeconds the budget must still let
    the drained node's pod go (it once said maxUnavailable 1: 2 expected, 1 healthy, 1 must
    stay -> no eviction, the drain blocked for ever on the 3-node cluster)."""
    first, _other = nodes.names
    nodes.open = {first}  # the other node stays full throughout
    with Kubelet(cluster, ready_after=0.5, nodes=nodes.schedulable):
        create(cluster, docparser("full", rollout={"drainTimeoutSeconds": 6}))
        old = ready_pod(cluster, "full")
        nodes.cordon(old["spec"]["nodeName"])
        wait_for("a replacement", lambda: replicas(cluster, "full") == 2, timeout=STEP)
        wait_for(
            "the drain Blocked",
            lambda: [d.get("phase") for d in drains(cluster, "full")] == ["Blocked"],
            timeout=STEP,
        )
        if cluster.has_controllers:
            assert not evict(cluster, old)  # within the deadline: held
        wait_for(
            "the deadline",
            lambda: [d.get("phase") for d in drains(cluster, "full")] == ["DeadlineExceeded"],
            timeout=STEP,
        )
        assert budget(cluster, "full").get("minAvailable") == 0  # nothing Ready elsewhere
        wait_for("the eviction", lambda: evict(cluster, old), timeout=STEP, interval=0.5)
