"""A background stand-in for the kubelet (and, on the emulator, the Deployment controller).

No backend of the operator suite runs a scheduler or kubelet, so pods never become Ready by
themselves. ``Kubelet`` plays that part for one namespace while a test drives a rollout:
every pod of a DocParser's revisions turns Ready ``ready_after`` seconds after it first
appears, except pods of revisions in ``never_ready`` (a broken version). Where the cluster
runs the real Deployment and ReplicaSet controllers it only writes pod statuses; on the
emulator it also creates the ReplicaSet of a Deployment's template, creates and deletes the
pods it asks for (unready ones first; each controlled by that ReplicaSet, by uid) and writes
the Deployment's status, as those controllers would.

With ``nodes`` it also plays the scheduler for node drains: each unbound pod is placed on the
schedulable node holding fewest of its Deployment's pods (a ``Binding``, as kube-scheduler
writes it; on the emulator the pod's ``nodeName``), and only bound pods turn Ready,
``ready_after`` seconds after their binding. A pod no node can take stays Pending with the
scheduler's ``PodScheduled=False`` / ``Unschedulable`` condition, as with every GPU taken.

Everything goes through the cluster's public API (the test client), like the real kubelet.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster, pod_status
from ticker import Ticker

DEPLOY, POD, RS = KNOWN_KINDS["Deployment"], KNOWN_KINDS["Pod"], KNOWN_KINDS["ReplicaSet"]
REVISION = "docparser.io/revision"


# What kube-scheduler writes on a pod no node can take (diagnose.py reads this condition).
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/2 nodes are available: 1 node(s) were unschedulable, "
            "1 Insufficient nvidia.com/gpu.",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


def _selector(dep: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(dep["spec"]["selector"]["matchLabels"].items()))


def _is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Kubelet(Ticker):
    def __init__(
        self,
        cluster: Cluster,
        *,
        ready_after: float = 0.5,
        never_ready: set[str] | None = None,
        interval: float = 0.2,
        pod_ip: dict[str, str] | None = None,
        nodes: Callable[[], list[str]] | None = None,
    ) -> None:
        """``pod_ip``: revision -> the address its pods report (a real process listening
        there stands in for them: the canary analysis reads their /metrics)."""
        self.pod_ip = pod_ip if pod_ip is not None else {}
        self.cluster = cluster
        self.ready_after = ready_after
        self.never_ready = never_ready or set()  # revisions whose pods never pass readiness
        self.nodes = nodes  # the schedulable nodes now (None: pods need no node)
        super().__init__("kubelet-sim", interval)
        self._seen: dict[str, float] = {}  # pod uid -> first seen (monotonic)
        self._written: dict[str, str] = {}  # pod uid -> state written
        self._serial = 0

    def tick(self) -> None:
        for dep in self.cluster.list(DEPLOY, "app.kubernetes.io/managed-by=docparser-operator"):
            pods = [
                p
                for p in self.cluster.list(POD, _selector(dep))
                if not p["metadata"].get("deletionTimestamp")
            ]
            if not self.cluster.has_controllers:
                pods = self._reconcile_pods(dep, pods)
            if self.nodes is not None:
                pods = [self._bind(p, pods) for p in pods]
            ready = 0
            revision = dep["spec"]["template"]["metadata"]["labels"].get(REVISION, "")
            for pod in pods:
                uid = pod["metadata"]["uid"]
                if self.nodes is not None and not pod["spec"].get("nodeName"):
                    state, ok = "unschedulable", False  # kube-scheduler's verdict, below
                else:  # Ready ``ready_after`` seconds after its node took it
                    first = self._seen.setdefault(uid, time.monotonic())
                    ok = (
                        revision not in self.never_ready
                        and time.monotonic() - first >= self.ready_after
                    )
                    state = "ready" if ok else "loading"
                ready += ok
                ip = self.pod_ip.get(revision)
                written = f"{state}@{ip}"
                if self._written.get(uid) != written:
                    status = pod_status(state) if state != "unschedulable" else UNSCHEDULABLE
                    if ip:
                        status["podIP"] = ip
                    with contextlib.suppress(Exception):  # deleted meanwhile
                        self.cluster.client.patch_status(
                            POD, self.cluster.namespace, pod["metadata"]["name"], status
                        )
                        self._written[uid] = written
            if not self.cluster.has_controllers:
                self._write_deployment_status(dep, len(pods), ready)

    def _place(self, pods: list[dict[str, Any]]) -> str | None:
        """The schedulable node with fewest of these pods (None: nowhere to go)."""
        if self.nodes is None:
            return None
        load = {n: 0 for n in self.nodes()}
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if node in load:
                load[node] += 1
        return min(load, key=lambda n: (load[n], n)) if load else None

    def _bind(self, pod: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
        """kube-scheduler's write: a Binding of an unbound pod to a node (on the emulator, which
        serves no binding subresource, the pod's nodeName)."""
        if pod["spec"].get("nodeName"):
            return pod
        node = self._place(pods)
        if node is None:
            return pod
        name = pod["metadata"]["name"]
        pod["spec"]["nodeName"] = node
        if not self.cluster.has_controllers:
            self.cluster.client.patch(
                POD, self.cluster.namespace, name, {"spec": {"nodeName": node}}
            )
            return pod
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.cluster.client.request(
            "POST", POD.path(self.cluster.namespace, name, "binding"), body=binding
        )
        return pod

    def _replica_set(self, dep: dict[str, Any]) -> dict[str, Any]:
        """The Deployment controller's part on the emulator: the ReplicaSet of its current
        template (``<deployment>-<pod-template-hash>``), controlled by the Deployment's uid
        (the operator reads the /metrics of such pods only: core/plan/children.readable_pods)."""
        template = dep["spec"]["template"]
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        name = f"{dep['metadata']['name']}-{digest}"
        found = self.cluster.get(RS, name)
        if found is not None:
            return found
        labels = {**template["metadata"]["labels"], "pod-template-hash": digest}
        owner = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": dep["metadata"]["name"],
            "uid": dep["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.cluster.namespace,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {
                "replicas": dep["spec"].get("replicas", 1),
                "selector": {"matchLabels": labels},
                "template": {**template, "metadata": {**template["metadata"], "labels": labels}},
            },
        }
        return self.cluster.client.create(rs)

    def _reconcile_pods(self, dep: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict]:
        """The ReplicaSet controller's part on the emulator: as many pods as replicas, each
        controlled by the ReplicaSet of the Deployment's template."""
        want = dep["spec"].get("replicas", 1)
        template = dep["spec"]["template"]
        while len(pods) < want:
            rs = self._replica_set(dep)
            self._serial += 1
            owner = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": rs["metadata"]["name"],
                "uid": rs["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{dep['metadata']['name']}-{self._serial}",
                    "namespace": self.cluster.namespace,
                    "labels": dict(rs["metadata"]["labels"]),
                    "ownerReferences": [owner],
                },
                "spec": dict(template["spec"]),
            }
            pods.append(self.cluster.client.create(pod))
        if len(pods) > want:
            pods.sort(key=lambda p: (_is_ready(p), -self._seen.get(p["metadata"]["uid"], 0)))
            for pod in pods[: len(pods) - want]:
                self.cluster.client.delete(
                    POD, self.cluster.namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"]
                )
            pods = pods[len(pods) - want :]
        return pods

    def _write_deployment_status(self, dep: dict[str, Any], pods: int, ready: int) -> None:
        status = {
            "observedGeneration": dep["metadata"].get("generation", 1),
            "replicas": pods,
            "updatedReplicas": pods,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        current = dep.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            with contextlib.suppress(Exception):
                self.cluster.client.patch_status(
                    DEPLOY, self.cluster.namespace, dep["metadata"]["name"], status
                )
