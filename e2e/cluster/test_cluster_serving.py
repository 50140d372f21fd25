"""Scenarios 1 and 2 on real pods: a DocParser becomes Ready and parses through its Service;
a canary on `router: service` gets the share of requests its status says.
"""

from __future__ import annotations

import collections

import httpx
import pytest
import yaml
from cluster_load import Load
from cluster_support import (
    REPO,
    conditions,
    docparser,
    page_png,
    parse,
    record,
    serving_url,
    wait_for,
    wait_ready,
    weights_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_example_becomes_ready_and_parses_through_its_cluster_ip(cluster, namespace):
    """examples/rapidocr-minimal.yaml with our image: kubectl apply, wait Ready, parse."""
    manifest = yaml.safe_load((REPO / "examples" / "rapidocr-minimal.yaml").read_text())
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"]["runtime"] = {"image": cluster.runtime_image}
    manifest["spec"]["resources"] = {"cpu": "100m", "memory": "1536Mi"}
    cluster.apply(manifest)
    name = manifest["metadata"]["name"]
    cluster.kubectl(
        "-n",
        namespace,
        "wait",
        f"dp/{name}",
        "--for=condition=Ready",
        "--timeout=240s",
        timeout=260,
    )
    obj = wait_ready(cluster, namespace, name)
    assert obj["status"]["endpoint"].startswith(f"http://{name}.{namespace}.svc")
    assert obj["status"]["stable"]["readyReplicas"] >= 1
    assert conditions(obj)["Degraded"]["status"] == "False"

    reply = parse(serving_url(cluster, namespace, name), page_png())
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert "4711" in body["content"] and "1280" in body["content"]
    assert body["model"]["engine"] == "rapidocr"

    # The runtime runs under tini (the image's ENTRYPOINT): the pod must not replace it.
    pod = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")[0]
    container = pod["spec"]["containers"][0]
    assert "command" not in container, container.get("command")
    ps = cluster.kubectl(
        "-n",
        namespace,
        "exec",
        pod["metadata"]["name"],
        "-c",
        container["name"],
        "--",
        "cat",
        "/proc/1/cmdline",
    )
    assert ps.split("\0")[0].endswith("tini"), ps


def test_service_router_canary_gets_the_share_in_status(cluster, namespace):
    """4 pods, canary weight 25 -> 3 stable + 1 canary; count answering versions."""
    weights = weights_volume(cluster, namespace, ("v1", "v2"))
    name = "split"
    cluster.apply(
        docparser(
            name,
            namespace,
            cluster.runtime_image,
            weights=weights["v1"],
            canary=weights["v2"],
            canary_weight=25,
            replicas=4,
        )
    )
    obj = wait_ready(cluster, namespace, name, timeout=360)
    status_weight = obj["status"]["canary"]["weight"]
    assert status_weight == 25, obj["status"]

    def all_endpoints_ready() -> bool:
        slices = cluster.items("endpointslices", namespace, f"kubernetes.io/service-name={name}")
        ready = [
            e
            for s in slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
        ]
        return len(ready) == 4

    wait_for(cluster, namespace, "4 ready endpoints behind the Service", all_endpoints_ready, 60)
    url = serving_url(cluster, namespace, name)
    # The slices list the 4th endpoint before the host's kube-proxy routes to it (its
    # minSyncPeriod, seconds on a loaded node) and the 300 answers below take 2-3 s: a canary
    # missing from the rules then reads as a share far below 25 %. It is in them once it
    # has answered through the ClusterIP.
    seen: set[str] = set()

    def canary_routed() -> bool:
        try:
            reply = parse(url, page_png(("Total 12",)), timeout=10)
        except httpx.HTTPError:
            return False
        if reply.status_code == 200:
            seen.add(reply.json()["model"]["version"])
        return {"v1", "v2"} <= seen

    wait_for(cluster, namespace, "both versions answering", canary_routed, 60, interval=0.2)
    with Load(url, page_png(("Total 12",)), clients=4, max_requests=300, max_seconds=240) as load:
        wait_for(
            cluster, namespace, "300 answers", lambda: len(load.samples) >= 300, 240, interval=0.5
        )
    assert not load.failed, f"{load.failures()}\n{cluster.explain(namespace)}"
    counts = collections.Counter(s.version for s in load.samples)
    share = 100 * counts["v2"] / len(load.samples)
    record(
        "canary split (router: service)",
        f"status weight {status_weight}%, measured {share:.1f}% of {len(load.samples)} answers "
        f"from the canary ({dict(counts)})",
    )
    # Binomial spread at n=300, p=0.25 is 2.5 points: 10 points is four standard deviations.
    assert abs(share - status_weight) <= 10, (share, status_weight, counts)
