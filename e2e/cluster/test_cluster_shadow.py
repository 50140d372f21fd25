"""The shadow canary on real pods: a dark canary is judged on the live documents stable's pods
answer while it serves no one, and a release that reads worse is rolled back before any
client reaches it, under paced load with no request lost.

The regressing release is the same runtime with the test-only fault
``DOCPARSER_TEST_DROP_LINE_EVERY`` in its own environment (``canary.runtime.env``): it drops
one line in two of every page, which only a comparison of the two outputs can see (it
answers 200, as fast as stable). The result cache is off, so each request is a parse stable's
pods can copy. The shadow configuration reaches the running stable pods through the mounted
ConfigMap (no restart), so the scenario also shows how long the kubelet takes to deliver it.
"""

from __future__ import annotations

import time

import pytest
from cluster_load import Load
from cluster_support import (
    docparser,
    page_png,
    record,
    serving_url,
    wait_for,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

SHADOW = {"percent": 100, "maxPagesPerMinute": 600}
ANALYSIS = {
    "steps": [{"weight": 50}],
    "intervalSeconds": 5,
    "minRequests": 5,
    "maxLatencyRatio": 20,  # a 2-core node: see test_cluster_canary_analysis.py
    "minShadowPages": 20,
}
NO_CACHE = {"name": "DOCPARSER_CACHE_MAX_BYTES", "value": "0"}


def test_a_dark_canary_that_reads_worse_is_rolled_back_before_any_traffic(cluster, namespace):
    name = "shadowed"
    stable = docparser(name, namespace, cluster.runtime_image, replicas=2)
    stable["spec"]["pod"] = {"env": [NO_CACHE]}
    cluster.apply(stable)
    wait_ready(cluster, namespace, name, timeout=300)
    url = serving_url(cluster, namespace, name)
    release = docparser(name, namespace, cluster.runtime_image, replicas=2)
    release["spec"]["pod"] = {"env": [NO_CACHE]}
    fault = {"name": "DOCPARSER_TEST_DROP_LINE_EVERY", "value": "2"}
    release["spec"]["canary"] = {
        "runtime": {"env": [fault]},
        "shadow": SHADOW,
        "analysis": ANALYSIS,
    }
    document = page_png(("Invoice number 4711", "Delivery 2026-12-02", "Total due 1280 EUR"))
    weights: list[int] = []
    with Load(url, document, clients=2, pace_s=0.25, max_requests=5000, max_seconds=300) as load:
        began = time.monotonic()
        cluster.apply(release)

        def verdict():
            canary = (cluster.get("docparser", name, namespace).get("status") or {}).get(
                "canary"
            ) or {}
            walk = canary.get("analysis") or {}
            if walk.get("phase") in (None, "Verifying", "Shadowing"):
                weights.append(int(canary.get("weight") or 0))  # routed before the verdict
                return None
            return canary

        done = wait_for(cluster, namespace, "the shadow gate's verdict", verdict, 240, interval=1)
        took = time.monotonic() - began
    walk, figures = done["analysis"], done["shadow"]
    assert (walk["phase"], walk["reason"]) == ("Failed", "ShadowRegression"), walk
    assert weights and set(weights) == {0}, weights  # dark: no client reached the canary
    assert not load.ran_out, load.report("the load ended before the verdict")
    assert not load.failed, f"{load.failures()}\n{cluster.explain(namespace)}"
    assert figures["pagesCompared"] >= 20 and figures["cer"] > 0.02, figures
    status = cluster.get("docparser", name, namespace)["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ShadowRegression", degraded
    record("shadow canary", f"regressing release rolled back {took:.0f} s after it was applied")
    record("shadow canary", f"Degraded ShadowRegression: {degraded['message']}")
    record("shadow canary", f"status.canary.shadow: {figures}")
    record("shadow canary", load.report("stable under load while the shadow ran"))
