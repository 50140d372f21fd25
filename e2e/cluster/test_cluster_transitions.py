"""Scenarios 3 and 4 on real pods: changes under continuous load lose no request, and a
rollout with maxSurge 0 on a node whose GPUs are all taken completes.
"""

from __future__ import annotations

import collections
import time

import pytest
from cluster_load import EndpointSampler, Load
from cluster_nodes import fill_gpus
from cluster_settle import settled_start
from cluster_support import (
    docparser,
    page_png,
    record,
    serving_url,
    wait_for,
    wait_ready,
    weights_volume,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _revisions(cluster, namespace: str, name: str) -> dict[str, int]:
    """Deployment name -> replicas, for the report."""
    return {
        d["metadata"]["name"]: d["spec"].get("replicas", 0)
        for d in cluster.items("deployments", namespace, f"app.kubernetes.io/instance={name}")
    }


def test_setting_change_promotion_and_revert_lose_no_request(cluster, namespace):
    """Bounded load (3 clients) through the Service for the whole walk:
    v1 -> runtime setting change -> canary v2 at 50% -> promote v2 -> git revert to v1."""
    weights = weights_volume(cluster, namespace, ("v1", "v2"))
    name = "walk"
    v1 = docparser(name, namespace, cluster.runtime_image, weights=weights["v1"], replicas=2)
    cluster.apply(v1)
    wait_ready(cluster, namespace, name, timeout=300)
    url = serving_url(cluster, namespace, name)
    steps = {
        "runtime setting change (maxBatchSize 8 -> 4)": docparser(
            name,
            namespace,
            cluster.runtime_image,
            weights=weights["v1"],
            replicas=2,
            max_batch_size=4,
        ),
        "canary v2 at 50%": docparser(
            name,
            namespace,
            cluster.runtime_image,
            weights=weights["v1"],
            replicas=2,
            max_batch_size=4,
            canary=weights["v2"],
            canary_weight=50,
        ),
        "promotion (v2 into spec.weights, canary removed)": docparser(
            name,
            namespace,
            cluster.runtime_image,
            weights=weights["v2"],
            replicas=2,
            max_batch_size=4,
        ),
        "git revert to v1": v1,
    }
    timings = {}
    with Load(
        url, page_png(("Total 12",)), clients=3, max_requests=150_000, max_seconds=900
    ) as load:
        wait_for(
            cluster, namespace, "first answers", lambda: len(load.samples) >= 10, 60, interval=0.5
        )
        for what, manifest in steps.items():
            start, before = time.monotonic(), len(load.samples)
            cluster.apply(manifest)
            # The operator must have seen the change before "Ready" means anything.
            generation = cluster.get("docparser", name, namespace)["metadata"]["generation"]
            wait_for(
                cluster,
                namespace,
                f"{what}: observed",
                lambda g=generation: (
                    cluster.get("docparser", name, namespace)["status"].get("observedGeneration")
                    == g
                ),
                60,
                interval=0.5,
            )
            wait_ready(cluster, namespace, name, timeout=420)
            timings[what] = (
                time.monotonic() - start,
                len(load.samples) - before,
                _revisions(cluster, namespace, name),
            )

        # After the walk: the answers of requests that began once it ended say which version
        # serves now. The pass that scales the last v2 pod away also writes Ready (nothing is
        # left to wait for in its plan), and that pod answers through its 10 s preStop sleep
        # until the host's kube-proxy drops it (seconds on a loaded node): count from when
        # no v2 pod exists any more.
        def only_v1_pods() -> bool:
            pods = cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
            return all(p["metadata"]["labels"].get("docparser.io/version") == "v1" for p in pods)

        wait_for(cluster, namespace, "the v2 pods gone", only_v1_pods, 120)
        settled = time.monotonic()
        wait_for(
            cluster,
            namespace,
            "answers after the walk",
            lambda: sum(s.started >= settled for s in load.samples) >= 20,
            60,
            interval=0.5,
        )
    for what, (seconds, requests, deployments) in timings.items():
        record(
            "transitions under load",
            f"{what}: {seconds:.0f}s, {requests} requests, deployments {deployments}",
        )
    record("transitions under load", load.report("whole walk"))
    assert len(load.samples) >= 100, load.report("too little load to mean anything")
    assert not load.ran_out, load.report(f"the load ended before the walk did: {timings}")
    assert not load.failed, f"{load.failures()}; {timings}\n{cluster.explain(namespace)}"
    # The walk ends on v1 again, and v2 answered while it was live.
    assert "v2" in {s.version for s in load.samples}
    after = collections.Counter(s.version for s in load.samples if s.started >= settled)
    assert set(after) == {"v1"}, after


def test_max_surge_zero_rolls_out_on_a_full_node(cluster, namespace):
    """2 replicas x 1 GPU take 2 GPUs and, on several nodes, busybox pods take the others: a
    new version can only roll pod by pod (maxSurge 0), and it must complete with a Ready
    endpoint behind the Service at every sampled moment (every half second)."""
    weights = weights_volume(cluster, namespace, ("v1", "v2"))
    name = "full"
    manifest = docparser(
        name,
        namespace,
        cluster.runtime_image,
        weights=weights["v1"],
        replicas=2,
        gpu=1,
        max_surge=0,
    )
    cluster.apply(manifest)
    wait_ready(cluster, namespace, name, timeout=300)
    # On several nodes, the other GPUs are taken too: a surge pod would stay Pending.
    hogs = fill_gpus(cluster, namespace, leave=0) if cluster.local else 0
    if hogs:

        def hogs_running() -> bool:
            found = cluster.items("pods", namespace, "app=gpu-hog")
            return len([p for p in found if p["status"].get("phase") == "Running"]) == hogs

        wait_for(cluster, namespace, f"{hogs} GPU-holding pods Running", hogs_running, 120)
    settled_start(cluster, namespace, name, docparser=name, replicas=2)
    start = time.monotonic()
    with EndpointSampler(cluster, namespace, name) as sampler:
        cluster.apply(
            docparser(
                name,
                namespace,
                cluster.runtime_image,
                weights=weights["v2"],
                replicas=2,
                gpu=1,
                max_surge=0,
            )
        )
        obj = wait_ready(cluster, namespace, name, timeout=420)
    assert sampler.samples and min(sampler.samples) >= 1, sampler.samples
    assert obj["status"]["stable"]["version"] == "v2"
    assert obj["status"]["stable"]["readyReplicas"] == 2
    pods = [
        p
        for p in cluster.items("pods", namespace, f"app.kubernetes.io/instance={name}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    versions = {p["metadata"]["labels"].get("docparser.io/version") for p in pods}
    assert versions == {"v2"}, versions
    record(
        "maxSurge 0 on a full node",
        f"v1 -> v2 with every GPU taken ({hogs} by other pods): {time.monotonic() - start:.0f}s, "
        f"{len(sampler.samples)} samples, fewest Ready endpoints {min(sampler.samples)}",
    )
