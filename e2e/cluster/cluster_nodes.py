"""What the multi-node scenarios share: the nodes, pods per node, and a small HTTP workload.

WHY a busybox workload: the network scenarios test nodes, routes and kube-proxy, not the
runtime; the local cluster's pause image is a static busybox (already on every node), whose
`httpd` answers in milliseconds with the pod's name, so every answer says which pod (and so
which node) served it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest
from cluster_load import Background
from cluster_settle import host_nat_rules
from cluster_support import REPO, Target, wait_for

ZONE = "topology.kubernetes.io/zone"
GPU = "nvidia.com/gpu"
BUSYBOX = "docker.io/docparser/pause:local"  # the local cluster's pause image (busybox-static)


def ready_nodes(target: Target) -> list[dict[str, Any]]:
    nodes = json.loads(target.kubectl("get", "nodes", "-o", "json"))["items"]
    return [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]


def require_nodes(target: Target, count: int) -> list[dict[str, Any]]:
    """The Ready nodes, or a skip that says how to get enough of them."""
    nodes = ready_nodes(target)
    if len(nodes) < count:
        pytest.skip(
            f"needs {count} Ready nodes, the cluster has {len(nodes)} "
            "(make cluster-down && make cluster-up NODES=3)"
        )
    return nodes


def host_nat_destinations() -> set[str]:
    """The pod IPs the host's Service rules (kube-proxy's iptables nat table) send new
    connections to now: what this host's ClusterIP clients get, read from the kernel."""
    return set(re.findall(r"--to-destination ([0-9.]+):[0-9]+", host_nat_rules()))


def wait_host_rules_without(target: Target, namespace: str, ips: set[str]) -> None:
    """Until no Service rule of the host sends a new connection to ``ips`` (a dead node's
    pods). WHY the kernel's rules: the EndpointSlice drops an endpoint seconds before the host's
    kube-proxy rewrites its rules on a loaded machine, and its sync metrics say when it synced,
    not what it had received by then (a wait on them passed once with the dead pod still in
    the rules, and the next connections found no route to its host)."""
    wait_for(
        target,
        namespace,
        f"the host's Service rules without {sorted(ips)}",
        lambda: not (host_nat_destinations() & ips),
        60,
        interval=0.2,
    )


DELETED = re.compile(r"(\d+) flow entries have been deleted")


def forget_host_flows_to(ips: set[str]) -> int:
    """Delete the host's conntrack entries whose replies would come from ``ips`` (a dead node's
    pods); returns how many. Call it once the host's rules no longer send to them.

    WHY: a connection the host made to a dead pod leaves its conntrack entry behind, DNAT
    included (SYN_SENT, unreplied: 120 s; a ReadTimeout's FIN_WAIT: 120 s), and kube-proxy
    deletes such entries for UDP only (kubernetes/kubernetes#101607). The host picks source
    ports for one destination from an offset it moves every few seconds, so within those
    120 s a new connection to the same ClusterIP can get a source port an entry still holds:
    its SYN matches the entry and goes to the dead pod, whatever the rules say now. Measured
    here: 30 source ports whose connections hit a dead pod failed again, all 30, after its
    endpoint had left the rules (100 fresh ports and the other 70 worked; the same 30 worked
    once these entries were deleted), and the leader-node loss saw 2 such ConnectTimeouts in
    its window after the endpoint had left. The pod is powered off, so these flows can never
    complete: deleting them drops no live connection, and the window then measures what it
    is about, new connections through the host's current rules."""
    deleted = 0
    for ip in sorted(ips):
        out = subprocess.run(
            ["conntrack", "-D", "--reply-src", ip], capture_output=True, text=True, timeout=30
        )  # fmt: skip
        said = DELETED.search(out.stderr)  # exit 1 when none matched: read the count instead
        if said is None:
            raise AssertionError(f"conntrack -D --reply-src {ip}: {out.stderr.strip()}")
        deleted += int(said[1])
    return deleted


def node_ctl(action: str, node: str, timeout: float = 180) -> str:
    """`localcluster node-stop|node-start NODE` through the local cluster's supervisor."""
    out = subprocess.run(
        [sys.executable, "-m", "controlplane.localcluster", action, node, "--timeout", "150"],
        cwd=REPO / "hack",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise AssertionError(f"{action} {node}: {out.stdout}{out.stderr}")
    return out.stdout.strip()


@dataclass
class EchoLoad(Background):
    """One paced client (a new connection per request, 2 s timeout) against `url`, bounded in
    count and time; records (start, ok, answered-by) for every request."""

    url: str
    pace_s: float = 0.05
    max_requests: int = 6000
    max_seconds: float = 300
    samples: list[tuple[float, bool, str]] = field(default_factory=list)
    join_s: ClassVar[float] = 10.0

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=2, limits=limits) as http:
            while not self._stop.is_set() and len(self.samples) < self.max_requests:
                if time.monotonic() > deadline:
                    return
                start = time.monotonic()
                try:
                    text = http.get(self.url).text.strip()
                    self.samples.append((start, True, text))
                except httpx.HTTPError as err:
                    self.samples.append((start, False, type(err).__name__))
                self._stop.wait(max(0.0, self.pace_s - (time.monotonic() - start)))

    def failures(self, since: float = 0.0) -> list[tuple[float, bool, str]]:
        return [s for s in self.samples if not s[1] and s[0] >= since]


def echo_deployment(
    name: str,
    namespace: str,
    replicas: int,
    *,
    spread: str = "DoNotSchedule",
    evict_after_s: int | None = None,
) -> list[dict[str, Any]]:
    """`replicas` busybox httpd pods spread over nodes (`spread`: whenUnsatisfiable), and a
    Service. `evict_after_s`: how long the pods stay bound to an unreachable or not-ready node
    (the default is Kubernetes' 300 s)."""
    labels = {"app": name}
    script = (
        "mkdir -p /www && /bin/busybox hostname > /www/index.html && "
        "exec /bin/busybox httpd -f -p 8080 -h /www"
    )
    pod_extra: dict[str, Any] = {}
    if evict_after_s is not None:
        pod_extra["tolerations"] = [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": evict_after_s,
            }
            for taint in ("unreachable", "not-ready")
        ]
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **pod_extra,
                        "terminationGracePeriodSeconds": 1,
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": spread,
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        "containers": [
                            {
                                "name": "httpd",
                                "image": BUSYBOX,
                                "imagePullPolicy": "Never",
                                "command": ["/bin/busybox", "sh", "-c", script],
                                "ports": [{"containerPort": 8080}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/", "port": 8080},
                                    "periodSeconds": 1,
                                },
                                "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]


def fill_gpus(target: Target, namespace: str, leave: int) -> int:
    """Busybox pods taking all but `leave` of the cluster's free GPUs (1 each), so a scenario
    written for "the node's GPUs are all taken" keeps that meaning on several nodes. Returns
    how many it placed (0 when the cluster has no more than `leave` free). Pods already
    leaving (an earlier scenario's namespace, deleted without waiting) count as free: their
    GPUs are back within their grace period, and counting them as taken left a GPU free for
    the replacement a "no room" scenario must not get, depending on which scenario ran before.
    The hogs wait Pending for those GPUs; the callers wait until every hog runs."""
    nodes = ready_nodes(target)
    total = sum(int(n["status"].get("allocatable", {}).get(GPU, "0")) for n in nodes)
    used = 0
    for pod in json.loads(target.kubectl("get", "pods", "-A", "-o", "json"))["items"]:
        if pod["status"].get("phase") in ("Succeeded", "Failed") or pod["metadata"].get(
            "deletionTimestamp"
        ):
            continue
        for ctr in pod["spec"]["containers"]:
            used += int((ctr.get("resources") or {}).get("limits", {}).get(GPU, "0"))
    count = max(0, total - used - leave)
    if count:
        target.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "gpu-hog", "namespace": namespace},
                "spec": {
                    "replicas": count,
                    "selector": {"matchLabels": {"app": "gpu-hog"}},
                    "template": {
                        "metadata": {"labels": {"app": "gpu-hog"}},
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "containers": [
                                {
                                    "name": "hog",
                                    "image": BUSYBOX,
                                    "imagePullPolicy": "Never",
                                    "resources": {"limits": {GPU: "1"}},
                                }
                            ],
                        },
                    },
                },
            }
        )
    return count
