"""Drains and node losses under load: what test_cluster_drains.py drives and what it samples.

- `drain()` is `kubectl drain --ignore-daemonsets --delete-emptydir-data`, the command a node
  upgrade runs: the Eviction API, a 429 from a PodDisruptionBudget retried every 5 s by kubectl
  itself, and a wait until every evicted pod is gone. Its output says how often the budget
  held an eviction back.
- `ClusterSampler` records, every `interval` seconds while a transition runs, the Ready
  endpoints behind the Service the load goes through, the DocParser's pods per node (Ready,
  Pending and why, Terminating), the cordoned nodes and the DocParser's conditions: the moment
  a drain left no Ready capacity behind traffic is in it, and so is what status said then.
- `figure()` keeps each scenario's measured figures as one JSON line, which
  bench/cluster_drains.py prints as a table (docs/benchmarks.md).

WHY the kubernetes client for the sampler and kubectl for the drain: a sample is three list
requests every half second for minutes, which a kubectl process per sample would spend the
2-core node's CPU on; the drain is one command, run exactly as an operator of the cluster runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from cluster_load import Background, Load
from cluster_support import Target, record, wait_for
from kubernetes import client as k8s
from kubernetes import config as k8s_config

HOST_NODE = "docparser-node"  # node 0 shares the host's namespace: it can be drained, not failed
OPERATOR_NAMESPACE = "docparser-system"
LEASE = "docparser-operator"
FIGURES = Path(tempfile.gettempdir()) / "docparser-e2e-drain-figures.jsonl"
PDB_RETRY = re.compile(r"error when evicting pods/\"([^\"]+)\".*will retry after")


@dataclass(frozen=True)
class DrainResult:
    node: str
    seconds: float
    returncode: int
    output: str

    @property
    def held(self) -> dict[str, int]:
        """Pod -> how many times kubectl's eviction of it was refused (429) and retried."""
        counts: dict[str, int] = {}
        for pod in PDB_RETRY.findall(self.output):
            counts[pod] = counts.get(pod, 0) + 1
        return counts


def drain(target: Target, node: str, timeout_s: int) -> DrainResult:
    """Cordon and drain `node` as an upgrade does; returns when kubectl does (done or timed out)."""
    start = time.monotonic()
    result = subprocess.run(
        [
            target.kubectl_bin,
            "--kubeconfig",
            str(target.kubeconfig),
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            f"--timeout={timeout_s}s",
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s + 60,
    )
    return DrainResult(
        node, time.monotonic() - start, result.returncode, result.stdout + result.stderr
    )


def uncordon(target: Target, *nodes: str) -> None:
    for node in nodes:
        target.kubectl("uncordon", node, check=False)


def figure(scenario: str, **values: Any) -> None:
    """One scenario's figures: a readable line (record) and a JSON line for the bench table."""
    record(scenario, ", ".join(f"{k} {v}" for k, v in values.items()))
    with FIGURES.open("a") as f:
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        f.write(json.dumps({"at": when, "scenario": scenario, **values}) + "\n")


# -- what the cluster looks like, sampled -----------------------------------------------------


@dataclass(frozen=True)
class PodView:
    name: str
    node: str | None
    ready: bool
    phase: str
    unschedulable: str | None  # the scheduler's message while it places the pod nowhere
    terminating: bool


@dataclass(frozen=True)
class Snapshot:
    at: float  # seconds since the sampler began
    ready_endpoints: int
    pods: tuple[PodView, ...]
    cordoned: tuple[str, ...]
    conditions: dict[str, tuple[str, str, str]]  # type -> (status, reason, message)

    def ready_per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pod in self.pods:
            if pod.ready and pod.node and not pod.terminating:
                counts[pod.node] = counts.get(pod.node, 0) + 1
        return counts

    def condition(self, kind: str) -> str:
        status, reason, message = self.conditions.get(kind, ("", "", ""))
        return f"{kind}={status} {reason}: {message[:120]}" if status else f"{kind} absent"

    def line(self) -> str:
        pending = sum(1 for p in self.pods if p.unschedulable)
        return (
            f"+{self.at:.1f}s endpoints {self.ready_endpoints} ready/node {self.ready_per_node()} "
            f"unschedulable {pending} cordoned {list(self.cordoned)} "
            f"{self.condition('Ready')}; {self.condition('Degraded')}"
        )


def api_client(target: Target) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=str(target.kubeconfig))


def _raw(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A list/get through the client without its model classes (a plain dict, cheaply)."""
    response = call(*args, _preload_content=False, _request_timeout=10, **kwargs)
    parsed: dict[str, Any] = json.loads(response.data)
    return parsed


def pod_view(pod: dict[str, Any]) -> PodView:
    """What the scenarios ask of a pod: where, Ready, why Pending, leaving."""
    status = pod.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    scheduled = conds.get("PodScheduled") or {}
    return PodView(
        pod["metadata"]["name"],
        pod["spec"].get("nodeName"),
        (conds.get("Ready") or {}).get("status") == "True",
        status.get("phase", ""),
        (scheduled.get("message") or "Unschedulable")
        if scheduled.get("reason") == "Unschedulable"
        else None,
        bool(pod["metadata"].get("deletionTimestamp")),
    )


@dataclass
class ClusterSampler(Background):
    """Snapshots of one DocParser (and the Service its traffic goes through) every `interval`
    seconds until stopped; bounded in count. A sample the API server did not answer is skipped
    (counted in `missed`): an outage of the sampler is not an outage of the Service."""

    target: Target
    namespace: str
    name: str
    interval: float = 0.5
    max_samples: int = 2400
    samples: list[Snapshot] = field(default_factory=list)
    missed: int = 0
    began: float = 0.0  # time.monotonic() of the first sample's start

    def snapshot(self, api: k8s.ApiClient) -> Snapshot:
        core, discovery = k8s.CoreV1Api(api), k8s.DiscoveryV1Api(api)
        custom = k8s.CustomObjectsApi(api)
        slices = _raw(
            discovery.list_namespaced_endpoint_slice,
            self.namespace,
            label_selector=f"kubernetes.io/service-name={self.name}",
        )
        pods = _raw(
            core.list_namespaced_pod,
            self.namespace,
            label_selector=f"app.kubernetes.io/instance={self.name}",
        )
        nodes = _raw(core.list_node)
        dp = _raw(
            custom.get_namespaced_custom_object,
            "docparser.io",
            "v1alpha1",
            self.namespace,
            "docparsers",
            self.name,
        )
        return Snapshot(
            time.monotonic() - self.began,
            sum(
                1
                for s in slices["items"]
                for e in s.get("endpoints") or []
                if (e.get("conditions") or {}).get("ready")
            ),
            tuple(pod_view(p) for p in pods["items"]),
            tuple(n["metadata"]["name"] for n in nodes["items"] if n["spec"].get("unschedulable")),
            {
                c["type"]: (c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                for c in (dp.get("status") or {}).get("conditions") or []
            },
        )

    def _run(self) -> None:
        with api_client(self.target) as api:
            while not self._stop.is_set() and len(self.samples) < self.max_samples:
                try:
                    self.samples.append(self.snapshot(api))
                except Exception:  # a missed sample is counted, not fatal
                    self.missed += 1
                self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self.began = time.monotonic()
        return super().__enter__()

    @property
    def fewest_ready(self) -> int:
        return min((s.ready_endpoints for s in self.samples), default=0)

    def between(self, start: float, end: float) -> list[Snapshot]:
        """The samples taken between two time.monotonic() readings."""
        return [s for s in self.samples if start <= self.began + s.at <= end]

    def first(self, predicate: Any) -> Snapshot | None:
        return next((s for s in self.samples if predicate(s)), None)

    def story(self, limit: int = 40) -> str:
        """The samples where something changed, for an assertion message."""
        lines, last = [], ""
        for s in self.samples:
            line = s.line()
            key = line.split(" ", 1)[1]
            if key != last:
                lines.append(line)
                last = key
        return "\n".join(lines[-limit:]) + f"\n({len(self.samples)} samples, {self.missed} missed)"


# -- the operator's leader ----------------------------------------------------------------------


def leader(target: Target) -> tuple[str, str, str | None]:
    """(Lease holder, its pod, that pod's node) of the operator's Lease."""
    lease = target.get("lease", LEASE, OPERATOR_NAMESPACE)
    holder = lease["spec"].get("holderIdentity") or ""
    pod = holder.rsplit("_", 1)[0]
    found = json.loads(
        target.kubectl("-n", OPERATOR_NAMESPACE, "get", "pod", pod, "-o", "json", check=False)
        or "{}"
    )
    return holder, pod, (found.get("spec") or {}).get("nodeName")


def _standby_nodes(target: Target, leader_pod: str) -> set[str]:
    """The nodes of the operator's other running pods (the standbys the Lease can go to)."""
    pods = json.loads(
        target.kubectl("-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "json", check=False)
        or '{"items": []}'
    )["items"]
    return {
        p["spec"].get("nodeName") or ""
        for p in pods
        if p["metadata"]["name"] != leader_pod
        and p["metadata"]["name"].startswith(LEASE)
        and not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") == "Running"
    }


def leader_on_a_failable_node(target: Target) -> tuple[str, str, bool]:
    """(Lease holder, its node, whether node 0 was cordoned on the way), the node not node 0
    (which cannot be failed). When the leader runs there, its pod is deleted so a standby
    takes the Lease; node 0 is cordoned for that only when no standby runs on another node
    (so the replacement pod starts elsewhere), because a cordon makes the operator replace the
    DocParser's pods on node 0 and the scenario then waits for that churn to end. At most
    three times."""
    cordoned = False
    for _ in range(3):
        holder, pod, node = leader(target)
        if node and node != HOST_NODE:
            return holder, node, cordoned
        cordon = not (_standby_nodes(target, pod) - {HOST_NODE, ""})
        if cordon:
            target.kubectl("cordon", HOST_NODE)
            cordoned = True
        try:
            target.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", pod, "--wait=false")
            wait_for(
                target,
                OPERATOR_NAMESPACE,
                "the Lease taken by another operator pod",
                lambda h=holder: (now := leader(target))[0] != h and now[2] is not None,
                90,
            )
        finally:
            if cordon:
                uncordon(target, HOST_NODE)
    raise AssertionError(f"the operator's leader stays on {HOST_NODE}: {leader(target)}")


def endpoints_on(target: Target, namespace: str, service: str, node: str) -> list[dict[str, Any]]:
    """Endpoints of `service` on `node` that still count as ready (or are not yet judged)."""
    slices = target.items("endpointslices", namespace, f"kubernetes.io/service-name={service}")
    return [
        e
        for s in slices
        for e in s.get("endpoints") or []
        if e.get("nodeName") == node and (e.get("conditions") or {}).get("ready") is not False
    ]


def unreachable_toleration_s(pod: dict[str, Any]) -> int:
    """How long `pod` stays bound to an unreachable node: its toleration, or 300 s (what the
    API server's DefaultTolerationSeconds adds when nothing sets one)."""
    for toleration in pod["spec"].get("tolerations") or []:
        if toleration.get("key") == "node.kubernetes.io/unreachable":
            return int(toleration.get("tolerationSeconds", 300))
    return 300


def assert_served(load: Load, sampler: ClusterSampler, replicas: int, what: str) -> None:
    """No failed request, and never fewer Ready endpoints than replicas behind the traffic."""
    assert sampler.samples, f"{what}: no sample of the cluster ({sampler.missed} missed)"
    assert not load.failed, f"{what}: {load.failures()}\n{sampler.story()}"
    assert sampler.fewest_ready >= replicas, (
        f"{what}: {sampler.fewest_ready} Ready endpoints at the worst moment, "
        f"{replicas} wanted\n{sampler.story()}"
    )


def one_pod_node(pods: list[PodView]) -> str:
    """A node holding exactly one of `pods` (the drain of "one of 3 pods")."""
    counts: dict[str, int] = {}
    for pod in pods:
        counts[pod.node or ""] = counts.get(pod.node or "", 0) + 1
    return next(node for node, count in sorted(counts.items()) if count == 1)
