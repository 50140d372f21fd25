"""The cluster as users run it: several nodes in zones, pod networking across them.

Every node advertises its zone and 2 GPUs; pods spread one per node answer from the host by
pod IP and through their Service's ClusterIP, and from every node's pods to every other
node's pods and to the ClusterIP (so routes, CNI bridges and each node's kube-proxy work).
"""

from __future__ import annotations

import time

import httpx
import pytest
from cluster_nodes import (
    GPU,
    ZONE,
    EchoLoad,
    echo_deployment,
    forget_host_flows_to,
    node_ctl,
    require_nodes,
    wait_host_rules_without,
)
from cluster_settle import settled_start
from cluster_support import record, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _answers(ip: str) -> bool:
    try:
        return httpx.get(f"http://{ip}/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_nodes_are_ready_in_distinct_zones_with_two_gpus_each(cluster):
    nodes = require_nodes(cluster, 3)
    zones = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE) for n in nodes}
    assert len(set(zones.values())) == len(nodes), zones
    assert all(zone and zone.startswith("zone-") for zone in zones.values()), zones
    for node in nodes:
        assert node["status"]["capacity"].get(GPU) == "2", node["status"]["capacity"]
    addresses = [
        a["address"] for n in nodes for a in n["status"]["addresses"] if a["type"] == "InternalIP"
    ]
    assert len(set(addresses)) == len(nodes), addresses  # each node has its own IP


def test_pods_on_every_node_answer_across_nodes_and_through_the_cluster_ip(cluster, namespace):
    nodes = require_nodes(cluster, 3)
    if not cluster.local:
        pytest.skip("uses the local cluster's busybox pause image")
    started = time.monotonic()
    cluster.apply(*echo_deployment("echo", namespace, len(nodes)))

    def spread_and_ready():
        pods = cluster.items("pods", namespace, "app=echo")
        ready = [
            p
            for p in pods
            if p["status"].get("podIP")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
        ]
        hosts = {p["spec"].get("nodeName") for p in ready}
        return ready if len(ready) == len(nodes) and len(hosts) == len(nodes) else None

    pods = wait_for(cluster, namespace, "one Ready echo pod per node", spread_and_ready, 120)
    settled_start(cluster, namespace, "echo", replicas=len(nodes))
    ready_s = time.monotonic() - started
    svc = cluster.get("service", "echo", namespace)["spec"]["clusterIP"]
    names = {p["metadata"]["name"] for p in pods}

    # From the host: each pod by its IP (routes to every node's pod range) ...
    for pod in pods:
        reply = httpx.get(f"http://{pod['status']['podIP']}:8080/", timeout=5)
        assert reply.text.strip() == pod["metadata"]["name"], pod["spec"]["nodeName"]
    # ... and through the ClusterIP (the host's kube-proxy), until every pod has answered;
    # busybox pods are Ready in 2 s, sooner than a kube-proxy may have synced the new Service.
    wait_for(cluster, namespace, "the ClusterIP answering", lambda: _answers(svc), 30, 0.5)
    # Bounded by 30 s, not only by a count: the last pod's endpoint reaches the host's rules up to a
    # sync period after it was Ready, and 200 requests can take less than that.
    seen: set[str] = set()
    until = time.monotonic() + 30
    for _ in range(5000):
        if seen == names or time.monotonic() > until:
            break
        seen.add(httpx.get(f"http://{svc}/", timeout=5).text.strip())
    assert seen == names, f"only {sorted(seen)} of {sorted(names)} answered through {svc}"

    # From each node's pod: every other pod by IP, and the ClusterIP (that node's kube-proxy).
    for pod in pods:
        name = pod["metadata"]["name"]
        for other in pods:
            answer = cluster.kubectl(
                "-n",
                namespace,
                "exec",
                name,
                "--",
                "/bin/busybox",
                "wget",  # no -T: Debian's static busybox wget crashes on it (exit 139)
                "-q",
                "-O",
                "-",
                f"http://{other['status']['podIP']}:8080/",
            )
            assert answer.strip() == other["metadata"]["name"], (name, other["spec"]["nodeName"])
        wget = ("-n", namespace, "exec", name, "--", "/bin/busybox", "wget", "-q", "-O", "-")
        through = wait_for(
            cluster,
            namespace,
            f"the ClusterIP from {pod['spec']['nodeName']} (its kube-proxy synced)",
            lambda w=wget: cluster.kubectl(*w, f"http://{svc}/", check=False).strip(),
            30,
            0.5,
        )
        assert through in names, (name, through)
    record(
        "nodes",
        f"{len(nodes)} nodes: one echo pod per node Ready in {ready_s:.1f}s; "
        f"{len(pods) ** 2} pod-to-pod and {len(pods)} pod-to-ClusterIP checks passed",
    )


def test_node_failure_recovers_on_the_remaining_nodes(cluster, namespace):
    """A node holding one of 3 pods dies (cable, daemons and pods killed at once) under paced
    load through the ClusterIP. Measured: the requests that fail (connections to the dead
    node's pod until kube-proxy drops its endpoint, which waits for the node controller to
    mark the node not Ready) and the time until a replacement runs on a live node."""
    require_nodes(cluster, 3)
    if not cluster.local:
        pytest.skip("fails a node through the local cluster's supervisor")
    cluster.apply(*echo_deployment("echo", namespace, 3, spread="ScheduleAnyway", evict_after_s=2))

    def pods(ready_only=True):
        found = []
        for p in cluster.items("pods", namespace, "app=echo"):
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
            if (ready or not ready_only) and not p["metadata"].get("deletionTimestamp"):
                found.append(p)
        return found

    wait_for(cluster, namespace, "3 Ready echo pods", lambda: len(pods()) == 3, 120)
    settled_start(cluster, namespace, "echo", replicas=3)
    host_node = "docparser-node"  # node 0 shares the host's namespace: it cannot be failed
    victim = next(
        (p["spec"]["nodeName"] for p in pods() if p["spec"]["nodeName"] != host_node), None
    )
    if victim is None:
        pytest.skip("every echo pod landed on node 0, which cannot be failed")
    dead_ips = {p["status"]["podIP"] for p in pods() if p["spec"]["nodeName"] == victim}
    svc = cluster.get("service", "echo", namespace)["spec"]["clusterIP"]
    try:
        with EchoLoad(f"http://{svc}/") as load:
            wait_for(cluster, namespace, "answers", lambda: len(load.samples) >= 20, 30)
            failed_at = time.monotonic()
            node_ctl("node-stop", victim)
            not_ready = wait_for(
                cluster,
                namespace,
                f"{victim} not Ready",
                lambda: cluster.kubectl(
                    "get", "node", victim, "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                ).strip() != "True" and time.monotonic(),
                120,
            )  # fmt: skip
            replaced = wait_for(
                cluster,
                namespace,
                "3 Ready pods on live nodes",
                lambda: (
                    len([p for p in pods() if p["spec"]["nodeName"] != victim]) == 3
                    and time.monotonic()
                ),
                180,
            )

            def dead_endpoints():
                slices = cluster.items(
                    "endpointslices", namespace, "kubernetes.io/service-name=echo"
                )
                return [
                    e
                    for s in slices
                    for e in s.get("endpoints") or []
                    if e.get("nodeName") == victim
                    and (e.get("conditions") or {}).get("ready") is not False
                ]

            # Until the dead pod's endpoint is gone (the node controller marks it not Ready)
            # and the host's kube-proxy has dropped it from its rules (the ones this client's
            # connections take), connections to it are the unavoidable part; from then on
            # nothing may fail.
            wait_for(
                cluster,
                namespace,
                "no endpoint on the dead node",
                lambda: not dead_endpoints(),
                120,
            )
            wait_host_rules_without(cluster, namespace, dead_ips)
            stale_flows = forget_host_flows_to(dead_ips)  # a reused source port follows them
            quiet_from = time.monotonic()
            wait_for(
                cluster,
                namespace,
                "answers after",
                lambda: load.samples[-1][0] > quiet_from + 5,
                30,
            )
        failures = load.failures(failed_at)
        last_failure = max((f[0] for f in failures), default=failed_at)
        assert not load.failures(quiet_from), load.failures(quiet_from)[:5]
        total = len([s for s in load.samples if s[0] >= failed_at])
        record(
            "node failure",
            f"{victim} lost under {1 / load.pace_s:.0f} req/s: NotReady after "
            f"{not_ready - failed_at:.0f}s, last failed request {last_failure - failed_at:.0f}s "
            f"after the loss, {len(failures)} of {total} requests failed "
            f"({sorted({f[2] for f in failures})}), 3 Ready pods on live nodes after "
            f"{replaced - failed_at:.0f}s; {stale_flows} host flows to the dead pod deleted",
        )
    finally:
        node_ctl("node-start", victim)
