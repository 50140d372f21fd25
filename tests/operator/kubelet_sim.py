"""A background stand-in for the kubelet (and, on the emulator, the Deployment controller).

No backend of the operator suite runs a scheduler or kubelet, so pods never become Ready by
themselves. ``Kubelet`` plays that part for one namespace while a test drives a rollout:
every pod of a DocParser's revisions turns Ready ``ready_after`` seconds after it first
appears, except pods of revisions in ``never_ready`` (a broken version). Where the cluster
runs the real Deployment and ReplicaSet controllers it only writes pod statuses; on the
emulator it also creates and deletes the pods a Deployment asks for (unready ones first) and
writes the Deployment's status, as those controllers would.

Everything goes through the cluster's public API (the test client), like the real kubelet.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from docparser_operator.api.kinds import KNOWN_KINDS
from kube_cluster import Cluster, pod_status
from ticker import Ticker

DEPLOY, POD = KNOWN_KINDS["Deployment"], KNOWN_KINDS["Pod"]
REVISION = "docparser.io/revision"


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
    ) -> None:
        """``pod_ip``: revision -> the address its pods report (a real process listening
        there stands in for them: the canary analysis reads their /metrics)."""
        self.pod_ip = pod_ip if pod_ip is not None else {}
        self.cluster = cluster
        self.ready_after = ready_after
        self.never_ready = never_ready or set()  # revisions whose pods never pass readiness
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
            ready = 0
            revision = dep["spec"]["template"]["metadata"]["labels"].get(REVISION, "")
            for pod in pods:
                uid = pod["metadata"]["uid"]
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
                    status = pod_status(state)
                    if ip:
                        status["podIP"] = ip
                    with contextlib.suppress(Exception):  # deleted meanwhile
                        self.cluster.client.patch_status(
                            POD, self.cluster.namespace, pod["metadata"]["name"], status
                        )
                        self._written[uid] = written
            if not self.cluster.has_controllers:
                self._write_deployment_status(dep, len(pods), ready)

    def _reconcile_pods(self, dep: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict]:
        """The ReplicaSet controller's part on the emulator: as many pods as replicas."""
        want = dep["spec"].get("replicas", 1)
        template = dep["spec"]["template"]
        while len(pods) < want:
            self._serial += 1
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{dep['metadata']['name']}-{self._serial}",
                    "namespace": self.cluster.namespace,
                    "labels": dict(template["metadata"]["labels"]),
                },
                "spec": template["spec"],
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
